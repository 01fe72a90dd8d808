// Shape and dtype rules of the network ops (normalizations, embedding, dropout,
// attention, padding, resampling, losses, lstm_sequence). Parameters (weights, biases, running
// statistics) are cast to the accumulation dtype: float32 for 16-bit inputs. Each rule is a
// template over the context (ShapeCtx or SymShapeCtx, op_table.h), instantiated at the end.
#include <algorithm>
#include <cmath>

#include "core/checked_size.h"
#include "core/shape_util.h"
#include "core/symbolic.h"
#include "ops/op_table.h"

namespace kiln::ops {
namespace {

// floor(size * scale) as PyTorch computes it (in double). On a symbolic size
// the scale must be p / 2^k (k <= 20): then it is (size * p) // 2^k, equal to
// the double's floor for every size below 2^32.
int64_t scaled_size(int64_t size, double scale) {
  return size_from_double(std::floor(static_cast<double>(size) * scale), "interpolate",
                          detail::str_cat("size ", size, " times scale_factor ", scale));
}
SymInt scaled_size(const SymInt& size, double scale) {
  if (!size.is_symbolic()) return scaled_size(size.hint(), scale);
  for (int k = 0; k <= 20; ++k) {
    const double p = std::ldexp(scale, k);
    if (p == std::floor(p) && p < 4294967296.0)
      return size * SymInt(static_cast<int64_t>(p)) / SymInt(int64_t{1} << k);
  }
  throw ShapeError(detail::str_cat("interpolate: scale_factor ", scale,
                                   " is not a multiple of 2^-20, so its sizes cannot be symbolic"));
}

// float32 for the 16-bit floats and float32, float64 for float64.
DType accumulation_dtype(DType t) { return t == kFloat64 ? kFloat64 : kFloat32; }

template <class Ctx>
void require_floating(const Ctx& ctx, size_t i) {
  const DType t = ctx.input(i).dtype();
  if (!is_floating(t)) {
    throw DTypeError(detail::str_cat(ctx.name(), ": ", ctx.schema.inputs[i].name,
                                     " must be a floating tensor, got ", t));
  }
}

// An optional parameter input: floating, of exactly the given shape, cast to
// the accumulation dtype of the op's first input.
template <class Ctx>
void check_param(Ctx& ctx, size_t i, const typename Ctx::Sizes& expected) {
  if (!ctx.has_input(i)) return;
  require_floating(ctx, i);
  if (ctx.input(i).sizes() != expected) {
    throw ShapeError(detail::str_cat(ctx.name(), ": ", ctx.schema.inputs[i].name,
                                     " must have shape ", expected, ", got ",
                                     ctx.input(i).sizes()));
  }
  ctx.cast_input(i, accumulation_dtype(ctx.input(0).dtype()));
}

// Input [N, C, ...] of a normalization over channels: at least 2 dims, floating.
template <class Ctx>
typename Ctx::Int channels_of(const Ctx& ctx) {
  require_floating(ctx, 0);
  const auto& x = ctx.input(0);
  if (x.dim() < 2) {
    throw ShapeError(
        detail::str_cat(ctx.name(), ": expected an input of shape [N, C, ...], got ", x.sizes()));
  }
  return x.size(1);
}

}  // namespace

template <class Ctx>
void infer_batch_norm(Ctx& ctx) {
  const typename Ctx::Int c = channels_of(ctx);
  for (size_t i = 1; i < 5; ++i) check_param(ctx, i, {c});
  const bool training = ctx.attrs.b(0);
  const auto& x = ctx.input(0);
  if (training && x.numel() == c && c > 0) {
    throw ValueError(detail::str_cat(
        "batch_norm: expected more than 1 value per channel when training, got input ", x.sizes()));
  }
  if (!training && !(ctx.has_input(3) && ctx.has_input(4))) {
    throw ValueError("batch_norm: running_mean and running_var are required in eval mode");
  }
  const Device device = ctx.common_device();
  const DType acc = accumulation_dtype(x.dtype());
  ctx.add_output(x.sizes(), x.dtype(), device);
  ctx.add_output({c}, acc, device);
  ctx.add_output({c}, acc, device);
}

template <class Ctx>
void infer_batch_norm_eval(Ctx& ctx) {
  const typename Ctx::Int c = channels_of(ctx);
  if (!(ctx.has_input(3) && ctx.has_input(4))) {
    throw ValueError("batch_norm_eval: running_mean and running_var are required");
  }
  for (size_t i = 1; i < 5; ++i) check_param(ctx, i, {c});
  const auto& x = ctx.input(0);
  if (ctx.has_input(5)) {
    const auto& r = ctx.input(5);
    if (r.sizes() != x.sizes()) {
      throw ShapeError(detail::str_cat("batch_norm_eval: residual must have input's shape ",
                                       x.sizes(), ", got ", r.sizes()));
    }
    if (r.dtype() != x.dtype()) {
      throw DTypeError(detail::str_cat("batch_norm_eval: residual must have input's dtype ",
                                       x.dtype(), ", got ", r.dtype()));
    }
  }
  ctx.add_output(x.sizes(), x.dtype(), ctx.common_device());
}

template <class Ctx>
void infer_layer_norm(Ctx& ctx) {
  require_floating(ctx, 0);
  const auto& x = ctx.input(0);
  const Shape& normalized = ctx.attrs.ints(0);
  if (normalized.empty()) {
    throw ShapeError("layer_norm: normalized_shape must have at least one dim");
  }
  const int64_t k = static_cast<int64_t>(normalized.size());
  bool matches = k <= x.dim();
  for (int64_t d = 0; matches && d < k; ++d) {
    matches = x.size(x.dim() - k + d) == normalized[d];
  }
  if (!matches) {
    throw ShapeError(detail::str_cat("layer_norm: normalized_shape ", normalized,
                                     " does not match the trailing dims of input ", x.sizes()));
  }
  // The parameters' shape as sizes of the context's kind (check_param compares sizes).
  const typename Ctx::Sizes param_shape(normalized.begin(), normalized.end());
  check_param(ctx, 1, param_shape);
  check_param(ctx, 2, param_shape);
  ctx.add_output(x.sizes(), x.dtype(), ctx.common_device());
}

template <class Ctx>
void infer_group_norm(Ctx& ctx) {
  const typename Ctx::Int c = channels_of(ctx);
  const int64_t groups = ctx.attrs.i(0);
  if (groups <= 0) {
    throw ValueError(detail::str_cat("group_norm: num_groups must be positive, got ", groups));
  }
  if (c % groups != 0) {
    throw ShapeError(detail::str_cat("group_norm: ", c, " channels are not divisible into ", groups,
                                     " groups (input ", ctx.input(0).sizes(), ")"));
  }
  check_param(ctx, 1, {c});
  check_param(ctx, 2, {c});
  ctx.add_output(ctx.input(0).sizes(), ctx.input(0).dtype(), ctx.common_device());
}

template <class Ctx>
void infer_embedding(Ctx& ctx) {
  const auto& weight = ctx.input(0);
  const auto& indices = ctx.input(1);
  if (weight.dim() != 2) {
    throw ShapeError(
        detail::str_cat("embedding: weight must have shape [V, D], got ", weight.sizes()));
  }
  if (indices.dtype() != kInt64 && indices.dtype() != kInt32) {
    throw DTypeError(
        detail::str_cat("embedding: indices must be int32 or int64, got ", indices.dtype()));
  }
  const typename Ctx::Int v = weight.size(0);
  if (ctx.attrs.has(0)) {
    const int64_t padding_idx = ctx.attrs.i(0);
    if (padding_idx < -v || padding_idx >= v) {
      throw IndexError(detail::str_cat("embedding: padding_idx ", padding_idx,
                                       " is out of range for ", v, " embeddings"));
    }
    // The canonical index only tells the kernel which row to skip; it does not decide the
    // output shape, and symbolic mode does not keep attributes, so the hint is enough.
    if (padding_idx < 0) ctx.attrs[0] = padding_idx + sym::hint_of(v);
  }
  typename Ctx::Sizes out = indices.sizes();
  out.push_back(weight.size(1));
  ctx.add_output(out, weight.dtype(), ctx.common_device());
}

template <class Ctx>
void infer_dropout(Ctx& ctx) {
  require_floating(ctx, 0);
  const double p = ctx.attrs.f(0);
  if (!(p >= 0 && p <= 1)) {
    throw ValueError(detail::str_cat("dropout: probability p must be in [0, 1], got ", p));
  }
  ctx.add_output(ctx.input(0).sizes(), ctx.input(0).dtype(), ctx.common_device());
}

template <class Ctx>
void infer_sdpa(Ctx& ctx) {
  constexpr std::string_view op = "scaled_dot_product_attention";
  const auto &q = ctx.input(0), &k = ctx.input(1), &v = ctx.input(2);
  for (size_t i = 0; i < 3; ++i) {
    require_floating(ctx, i);
    if (ctx.input(i).dim() < 2) {
      throw ShapeError(detail::str_cat(op, ": ", ctx.schema.inputs[i].name,
                                       " must have at least 2 dims, got ", ctx.input(i).sizes()));
    }
  }
  if (k.dtype() != q.dtype() || v.dtype() != q.dtype()) {
    throw DTypeError(detail::str_cat(op, ": query, key and value must have one dtype, got ",
                                     q.dtype(), ", ", k.dtype(), " and ", v.dtype()));
  }
  const typename Ctx::Int l = q.size(q.dim() - 2), e = q.size(q.dim() - 1);
  const typename Ctx::Int s = k.size(k.dim() - 2);
  if (k.size(k.dim() - 1) != e || v.size(v.dim() - 2) != s) {
    throw ShapeError(detail::str_cat(op, ": expected key [..., S, ", e, "] and value [..., S, Ev]",
                                     " for query ", q.sizes(), ", got key ", k.sizes(),
                                     " and value ", v.sizes()));
  }
  auto batch_of = [](const auto& t) {
    return typename Ctx::Sizes(t.sizes().begin(), t.sizes().end() - 2);
  };
  typename Ctx::Sizes batch =
      broadcast_pair(broadcast_pair(batch_of(q), batch_of(k), op), batch_of(v), op);
  if (ctx.has_input(3)) {
    const auto& mask = ctx.input(3);
    if (ctx.attrs.b(0))
      throw ValueError(detail::str_cat(op, ": is_causal and attn_mask are exclusive"));
    if (mask.dtype() != kBool && !is_floating(mask.dtype())) {
      throw DTypeError(
          detail::str_cat(op, ": attn_mask must be bool or floating, got ", mask.dtype()));
    }
    typename Ctx::Sizes scores = batch;
    scores.push_back(l);
    scores.push_back(s);
    typename Ctx::Sizes full;
    try {
      full = broadcast_pair(scores, mask.sizes(), op);
    } catch (const ShapeError&) {
      full.clear();  // reported below with the mask named
    }
    if (full.empty() || full[full.size() - 2] != l || full.back() != s) {
      throw ShapeError(detail::str_cat(op, ": attn_mask ", mask.sizes(),
                                       " does not broadcast to the scores [..., ", l, ", ", s,
                                       "]"));
    }
    batch.assign(full.begin(), full.end() - 2);
    if (mask.dtype() != kBool) ctx.cast_input(3, accumulation_dtype(q.dtype()));
  }
  // An empty head dim gives zero scores (a uniform softmax), not 0 * inf. The scale only
  // changes what the kernel computes, not the output shape, and symbolic mode does not keep
  // attributes, so the hint of E is enough (no guard on it).
  if (!ctx.attrs.has(1))
    ctx.attrs[1] = 1.0 / std::sqrt(static_cast<double>(std::max<int64_t>(sym::hint_of(e), 1)));
  typename Ctx::Sizes out = batch;
  out.push_back(l);
  out.push_back(v.size(v.dim() - 1));
  ctx.add_output(out, q.dtype(), ctx.common_device());
}

template <class Ctx>
void infer_pad(Ctx& ctx) {
  const auto& x = ctx.input(0);
  const auto& pad = ctx.attrs.ints(0);
  const std::string& mode = ctx.attrs.str(1);
  if (mode != "constant" && mode != "reflect" && mode != "replicate") {
    throw ValueError(detail::str_cat(
        "pad: mode must be 'constant', 'reflect' or 'replicate', got '", mode, "'"));
  }
  const int64_t npad = static_cast<int64_t>(pad.size());
  if (npad % 2 != 0 || npad > 2 * x.dim()) {
    throw ValueError(detail::str_cat("pad: pad ", pad, " must have an even length of at most ",
                                     2 * x.dim(), " for input ", x.sizes()));
  }
  typename Ctx::Sizes out = x.sizes();
  for (int64_t k = 0; k < npad / 2; ++k) {
    const int64_t d = x.dim() - 1 - k;
    const int64_t before = pad[2 * k], after = pad[2 * k + 1];
    const typename Ctx::Int size = x.size(d);
    if (mode == "reflect" && (before >= size || after >= size)) {
      throw ValueError(detail::str_cat("pad: reflect padding ", pad, " must be less than dim ", d,
                                       " of input ", x.sizes()));
    }
    if (mode == "replicate" && size == 0 && (before > 0 || after > 0)) {
      throw ValueError(
          detail::str_cat("pad: replicate cannot pad the empty dim ", d, " of input ", x.sizes()));
    }
    using Int = typename Ctx::Int;
    out[d] = size_add(size_add(size, Int(before), "pad"), Int(after), "pad");
    if (out[d] < 0) {
      throw ShapeError(detail::str_cat("pad: pad ", pad, " crops dim ", d, " of input ", x.sizes(),
                                       " to a negative size"));
    }
  }
  ctx.add_output(out, x.dtype(), ctx.common_device());
}

template <class Ctx>
void infer_interpolate(Ctx& ctx) {
  const auto& x = ctx.input(0);
  const auto& size = ctx.attrs.ints(0);
  const std::string& mode = ctx.attrs.str(1);
  if (mode != "nearest" && mode != "bilinear") {
    throw ValueError(
        detail::str_cat("interpolate: mode must be 'nearest' or 'bilinear', got '", mode, "'"));
  }
  if (mode == "nearest" && ctx.attrs.b(2)) {
    throw ValueError("interpolate: align_corners can only be set with mode 'bilinear'");
  }
  const bool bilinear = mode == "bilinear";
  if (bilinear ? x.dim() != 4 : (x.dim() < 3 || x.dim() > 5)) {
    throw ShapeError(detail::str_cat("interpolate: mode '", mode, "' expects ",
                                     bilinear ? "a 4-D" : "a 3-D to 5-D", " input, got ",
                                     x.sizes()));
  }
  if (bilinear) require_floating(ctx, 0);
  if (size.empty() && ctx.attrs.has(3) && x.dim() > 2) {
    typename Ctx::Sizes out = x.sizes();
    for (int64_t d = 2; d < x.dim(); ++d) {
      out[d] = scaled_size(x.sizes()[d], ctx.attrs.f(3));
      if (out[d] <= 0) {
        throw ShapeError(detail::str_cat("interpolate: input ", x.sizes(), " and scale_factor ",
                                         ctx.attrs.f(3), " give an empty output"));
      }
    }
    ctx.add_output(out, x.dtype(), ctx.common_device());
    return;
  }
  if (static_cast<int64_t>(size.size()) != x.dim() - 2) {
    throw ShapeError(detail::str_cat("interpolate: size ", size, " must have one entry per ",
                                     "spatial dim of input ", x.sizes()));
  }
  typename Ctx::Sizes out = x.sizes();
  for (size_t i = 0; i < size.size(); ++i) {
    if (size[i] <= 0 || x.size(static_cast<int64_t>(i) + 2) <= 0) {
      throw ShapeError(detail::str_cat("interpolate: input ", x.sizes(), " and size ", size,
                                       " must have positive spatial sizes"));
    }
    out[i + 2] = size[i];
  }
  ctx.add_output(out, x.dtype(), ctx.common_device());
}

template <class Ctx>
void infer_nll_loss(Ctx& ctx) {
  require_floating(ctx, 0);
  const auto& x = ctx.input(0);
  const auto& target = ctx.input(1);
  if (target.dtype() != kInt64) {
    throw DTypeError(detail::str_cat("nll_loss: target must be int64, got ", target.dtype()));
  }
  if (x.dim() < 1) throw ShapeError("nll_loss: input must have at least 1 dim, got a 0-dim tensor");
  typename Ctx::Sizes expected = x.sizes();
  expected.erase(expected.begin() + (x.dim() == 1 ? 0 : 1));
  if (target.sizes() != expected) {
    throw ShapeError(detail::str_cat("nll_loss: target ", target.sizes(), " does not match input ",
                                     x.sizes(), " (expected ", expected, ")"));
  }
  const typename Ctx::Int c = x.size(x.dim() == 1 ? 0 : 1);
  check_param(ctx, 2, {c});
  const std::string& reduction = ctx.attrs.str(1);
  if (reduction != "none" && reduction != "mean" && reduction != "sum") {
    throw ValueError(detail::str_cat("nll_loss: reduction must be 'none', 'mean' or 'sum', got '",
                                     reduction, "'"));
  }
  ctx.add_output(reduction == "none" ? target.sizes() : typename Ctx::Sizes{}, x.dtype(),
                 ctx.common_device());
}

}  // namespace kiln::ops

namespace kiln::ops {
namespace {

// lstm_sequence: tensor k of the flat list must have exactly shape expected.
template <class Ctx>
void check_lstm_tensor(const Ctx& ctx, size_t k, const char* what, int64_t layer,
                       const typename Ctx::Sizes& expected) {
  const auto& t = ctx.input(k);
  if (t.dtype() != kFloat32) {
    throw DTypeError(detail::str_cat("lstm_sequence: ", what, " of layer ", layer,
                                     " must be float32, got ", t.dtype()));
  }
  if (t.sizes() != expected) {
    throw ShapeError(detail::str_cat("lstm_sequence: ", what, " of layer ", layer,
                                     " must have shape ", expected, ", got ", t.sizes()));
  }
}

}  // namespace

template <class Ctx>
void infer_lstm_cell(Ctx& ctx) {
  const auto &xg = ctx.input(0), &hg = ctx.input(1), &cx = ctx.input(2);
  for (size_t i = 0; i < 3; ++i) require_floating(ctx, i);
  if (hg.dtype() != xg.dtype() || cx.dtype() != xg.dtype()) {
    throw DTypeError(detail::str_cat("lstm_cell: input_gates, hidden_gates and cx must have one "
                                     "dtype, got ", xg.dtype(), ", ", hg.dtype(), " and ",
                                     cx.dtype()));
  }
  typename Ctx::Sizes gates = cx.sizes();
  if (cx.dim() < 1 || cx.dim() > 2 || cx.size(-1) < 1) {
    throw ShapeError(detail::str_cat("lstm_cell: cx must be [B, H] or [H] with H >= 1, got ",
                                     cx.sizes()));
  }
  gates.back() = size_mul(gates.back(), typename Ctx::Int(4), "lstm_cell");
  if (xg.sizes() != gates || hg.sizes() != gates) {
    throw ShapeError(detail::str_cat("lstm_cell: input_gates and hidden_gates must be ", gates,
                                     " for cx ", cx.sizes(), ", got ", xg.sizes(), " and ",
                                     hg.sizes()));
  }
  const Device device = ctx.common_device();
  ctx.add_output(cx.sizes(), cx.dtype(), device);
  ctx.add_output(cx.sizes(), cx.dtype(), device);
}

template <class Ctx>
void infer_lstm_step(Ctx& ctx) {
  const char* names[] = {"input", "hx", "cx", "weight_ih", "weight_hh", "bias_ih", "bias_hh"};
  const auto& x = ctx.input(0);
  for (size_t i = 0; i < ctx.inputs.size(); ++i) {
    const auto& t = ctx.input(i);
    if (!t.defined()) {
      if (i < 5) {
        throw ValueError(detail::str_cat("lstm_step: ", names[i], " is an undefined tensor"));
      }
      continue;
    }
    require_floating(ctx, i);
    if (t.dtype() != x.dtype()) {
      throw DTypeError(detail::str_cat("lstm_step: every tensor must have input's dtype ",
                                       x.dtype(), "; ", names[i], " is ", t.dtype()));
    }
  }
  const auto& hx = ctx.input(1);
  if (x.dim() != 2 || hx.dim() != 2 || hx.size(1) < 1) {
    throw ShapeError(
        detail::str_cat("lstm_step: input must be [B, I] and hx [B, H] with H >= 1, got ",
                        x.sizes(), " and ", hx.sizes()));
  }
  const typename Ctx::Int batch = x.size(0), in = x.size(1), hidden = hx.size(1);
  const typename Ctx::Int gates = size_mul(typename Ctx::Int(4), hidden, "lstm_step");
  const auto expect = [&](size_t i, const typename Ctx::Sizes& shape) {
    const auto& t = ctx.input(i);
    if (t.defined() && t.sizes() != shape) {
      throw ShapeError(detail::str_cat("lstm_step: ", names[i], " must be ", shape, " for input ",
                                       x.sizes(), " and hx ", hx.sizes(), ", got ", t.sizes()));
    }
  };
  expect(1, {batch, hidden});
  expect(2, {batch, hidden});
  expect(3, {gates, in});
  expect(4, {gates, hidden});
  if (ctx.inputs.size() > 5) expect(5, {gates});
  if (ctx.inputs.size() > 6) expect(6, {gates});
  const Device device = ctx.common_device();
  ctx.add_output({batch, hidden}, x.dtype(), device);
  ctx.add_output({batch, hidden}, x.dtype(), device);
}

template <class Ctx>
void infer_lstm_sequence(Ctx& ctx) {
  const int64_t layers = ctx.attrs.i(0);
  const bool has_biases = ctx.attrs.b(1);
  if (layers < 1) {
    throw ValueError(detail::str_cat("lstm_sequence: num_layers must be at least 1, got ", layers));
  }
  const size_t per_layer = has_biases ? 4 : 2;
  // Compared by division: 3 + layers * per_layer can overflow for a huge layers.
  const size_t count = ctx.inputs.size();
  if (count < 3 || (count - 3) % per_layer != 0 ||
      (count - 3) / per_layer != static_cast<size_t>(layers)) {
    throw ValueError(detail::str_cat("lstm_sequence: expected 3 tensors and ", per_layer,
                                     " per layer for ", layers, " layers",
                                     has_biases ? " with" : " without", " biases, got ", count));
  }
  for (size_t k = 0; k < ctx.inputs.size(); ++k) {
    if (!ctx.input(k).defined()) {
      throw ValueError(detail::str_cat("lstm_sequence: tensor ", k, " of the list is undefined"));
    }
  }
  const auto& x = ctx.input(0);
  if (x.dim() != 3 || x.size(0) < 1 || x.size(1) < 1) {
    throw ShapeError(detail::str_cat(
        "lstm_sequence: expected an input [T, B, I] with T and B at least 1, got ", x.sizes()));
  }
  const auto& w_hh0 = ctx.input(4);
  if (w_hh0.dim() != 2 || w_hh0.size(1) < 1) {
    throw ShapeError(detail::str_cat("lstm_sequence: weight_hh of layer 0 must be [4H, H], got ",
                                     w_hh0.sizes()));
  }
  const typename Ctx::Int steps = x.size(0), batch = x.size(1), hidden = w_hh0.size(1);
  const typename Ctx::Int gates = size_mul(typename Ctx::Int(4), hidden, "lstm_sequence");
  check_lstm_tensor(ctx, 0, "input", 0, x.sizes());
  check_lstm_tensor(ctx, 1, "h0", 0, {layers, batch, hidden});
  check_lstm_tensor(ctx, 2, "c0", 0, {layers, batch, hidden});
  for (int64_t l = 0; l < layers; ++l) {
    const size_t k = 3 + static_cast<size_t>(l) * per_layer;
    check_lstm_tensor(ctx, k, "weight_ih", l, {gates, l == 0 ? x.size(2) : hidden});
    check_lstm_tensor(ctx, k + 1, "weight_hh", l, {gates, hidden});
    if (!has_biases) continue;
    check_lstm_tensor(ctx, k + 2, "bias_ih", l, {gates});
    check_lstm_tensor(ctx, k + 3, "bias_hh", l, {gates});
  }
  const Device device = ctx.common_device();
  ctx.add_output({steps, batch, hidden}, kFloat32, device);
  ctx.add_output({layers, batch, hidden}, kFloat32, device);
  ctx.add_output({layers, batch, hidden}, kFloat32, device);
}

KILN_SHAPE_RULE_INSTANCES(infer_batch_norm)
KILN_SHAPE_RULE_INSTANCES(infer_batch_norm_eval)
KILN_SHAPE_RULE_INSTANCES(infer_layer_norm)
KILN_SHAPE_RULE_INSTANCES(infer_group_norm)
KILN_SHAPE_RULE_INSTANCES(infer_embedding)
KILN_SHAPE_RULE_INSTANCES(infer_dropout)
KILN_SHAPE_RULE_INSTANCES(infer_sdpa)
KILN_SHAPE_RULE_INSTANCES(infer_pad)
KILN_SHAPE_RULE_INSTANCES(infer_interpolate)
KILN_SHAPE_RULE_INSTANCES(infer_nll_loss)
KILN_SHAPE_RULE_INSTANCES(infer_lstm_cell)
KILN_SHAPE_RULE_INSTANCES(infer_lstm_step)
KILN_SHAPE_RULE_INSTANCES(infer_lstm_sequence)

}  // namespace kiln::ops
