// Shape and dtype rules of the network ops (normalizations, embedding, dropout,
// attention, padding, resampling, losses, lstm_sequence). Parameters (weights, biases, running
// statistics) are cast to the accumulation dtype: float32 for 16-bit inputs.
#include <algorithm>
#include <cmath>

#include "core/shape_util.h"
#include "ops/op_table.h"

namespace kiln::ops {
namespace {

// float32 for the 16-bit floats and float32, float64 for float64.
DType accumulation_dtype(DType t) { return t == kFloat64 ? kFloat64 : kFloat32; }

void require_floating(const ShapeCtx& ctx, size_t i) {
  const DType t = ctx.input(i).dtype();
  if (!is_floating(t)) {
    throw DTypeError(detail::str_cat(ctx.name(), ": ", ctx.schema.inputs[i].name,
                                     " must be a floating tensor, got ", t));
  }
}

// An optional parameter input: floating, of exactly the given shape, cast to
// the accumulation dtype of the op's first input.
void check_param(ShapeCtx& ctx, size_t i, const Shape& expected) {
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
int64_t channels_of(const ShapeCtx& ctx) {
  require_floating(ctx, 0);
  const Tensor& x = ctx.input(0);
  if (x.dim() < 2) {
    throw ShapeError(
        detail::str_cat(ctx.name(), ": expected an input of shape [N, C, ...], got ", x.sizes()));
  }
  return x.size(1);
}

}  // namespace

void infer_batch_norm(ShapeCtx& ctx) {
  const int64_t c = channels_of(ctx);
  for (size_t i = 1; i < 5; ++i) check_param(ctx, i, {c});
  const bool training = ctx.attrs.b(0);
  const Tensor& x = ctx.input(0);
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

void infer_batch_norm_eval(ShapeCtx& ctx) {
  const int64_t c = channels_of(ctx);
  if (!(ctx.has_input(3) && ctx.has_input(4))) {
    throw ValueError("batch_norm_eval: running_mean and running_var are required");
  }
  for (size_t i = 1; i < 5; ++i) check_param(ctx, i, {c});
  const Tensor& x = ctx.input(0);
  if (ctx.has_input(5)) {
    const Tensor& r = ctx.input(5);
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

void infer_layer_norm(ShapeCtx& ctx) {
  require_floating(ctx, 0);
  const Tensor& x = ctx.input(0);
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
  check_param(ctx, 1, normalized);
  check_param(ctx, 2, normalized);
  ctx.add_output(x.sizes(), x.dtype(), ctx.common_device());
}

void infer_group_norm(ShapeCtx& ctx) {
  const int64_t c = channels_of(ctx);
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

void infer_embedding(ShapeCtx& ctx) {
  const Tensor& weight = ctx.input(0);
  const Tensor& indices = ctx.input(1);
  if (weight.dim() != 2) {
    throw ShapeError(
        detail::str_cat("embedding: weight must have shape [V, D], got ", weight.sizes()));
  }
  if (indices.dtype() != kInt64 && indices.dtype() != kInt32) {
    throw DTypeError(
        detail::str_cat("embedding: indices must be int32 or int64, got ", indices.dtype()));
  }
  const int64_t v = weight.size(0);
  if (ctx.attrs.has(0)) {
    const int64_t padding_idx = ctx.attrs.i(0);
    if (padding_idx < -v || padding_idx >= v) {
      throw IndexError(detail::str_cat("embedding: padding_idx ", padding_idx,
                                       " is out of range for ", v, " embeddings"));
    }
    if (padding_idx < 0) ctx.attrs[0] = padding_idx + v;
  }
  Shape out = indices.sizes();
  out.push_back(weight.size(1));
  ctx.add_output(out, weight.dtype(), ctx.common_device());
}

void infer_dropout(ShapeCtx& ctx) {
  require_floating(ctx, 0);
  const double p = ctx.attrs.f(0);
  if (!(p >= 0 && p <= 1)) {
    throw ValueError(detail::str_cat("dropout: probability p must be in [0, 1], got ", p));
  }
  ctx.add_output(ctx.input(0).sizes(), ctx.input(0).dtype(), ctx.common_device());
}

void infer_sdpa(ShapeCtx& ctx) {
  constexpr std::string_view op = "scaled_dot_product_attention";
  const Tensor &q = ctx.input(0), &k = ctx.input(1), &v = ctx.input(2);
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
  const int64_t l = q.size(q.dim() - 2), e = q.size(q.dim() - 1);
  const int64_t s = k.size(k.dim() - 2);
  if (k.size(k.dim() - 1) != e || v.size(v.dim() - 2) != s) {
    throw ShapeError(detail::str_cat(op, ": expected key [..., S, ", e, "] and value [..., S, Ev]",
                                     " for query ", q.sizes(), ", got key ", k.sizes(),
                                     " and value ", v.sizes()));
  }
  auto batch_of = [](const Tensor& t) { return Shape(t.sizes().begin(), t.sizes().end() - 2); };
  Shape batch = broadcast_pair(broadcast_pair(batch_of(q), batch_of(k), op), batch_of(v), op);
  if (ctx.has_input(3)) {
    const Tensor& mask = ctx.input(3);
    if (ctx.attrs.b(0))
      throw ValueError(detail::str_cat(op, ": is_causal and attn_mask are exclusive"));
    if (mask.dtype() != kBool && !is_floating(mask.dtype())) {
      throw DTypeError(
          detail::str_cat(op, ": attn_mask must be bool or floating, got ", mask.dtype()));
    }
    Shape scores = batch;
    scores.push_back(l);
    scores.push_back(s);
    Shape full;
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
  // An empty head dim gives zero scores (a uniform softmax), not 0 * inf.
  if (!ctx.attrs.has(1))
    ctx.attrs[1] = 1.0 / std::sqrt(static_cast<double>(std::max<int64_t>(e, 1)));
  Shape out = batch;
  out.push_back(l);
  out.push_back(v.size(v.dim() - 1));
  ctx.add_output(out, q.dtype(), ctx.common_device());
}

void infer_pad(ShapeCtx& ctx) {
  const Tensor& x = ctx.input(0);
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
  Shape out = x.sizes();
  for (int64_t k = 0; k < npad / 2; ++k) {
    const int64_t d = x.dim() - 1 - k;
    const int64_t before = pad[2 * k], after = pad[2 * k + 1], size = x.size(d);
    if (mode == "reflect" && (before >= size || after >= size)) {
      throw ValueError(detail::str_cat("pad: reflect padding ", pad, " must be less than dim ", d,
                                       " of input ", x.sizes()));
    }
    if (mode == "replicate" && size == 0 && (before > 0 || after > 0)) {
      throw ValueError(
          detail::str_cat("pad: replicate cannot pad the empty dim ", d, " of input ", x.sizes()));
    }
    out[d] = size + before + after;
    if (out[d] < 0) {
      throw ShapeError(detail::str_cat("pad: pad ", pad, " crops dim ", d, " of input ", x.sizes(),
                                       " to a negative size"));
    }
  }
  ctx.add_output(out, x.dtype(), ctx.common_device());
}

void infer_interpolate(ShapeCtx& ctx) {
  const Tensor& x = ctx.input(0);
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
  if (static_cast<int64_t>(size.size()) != x.dim() - 2) {
    throw ShapeError(detail::str_cat("interpolate: size ", size, " must have one entry per ",
                                     "spatial dim of input ", x.sizes()));
  }
  Shape out = x.sizes();
  for (size_t i = 0; i < size.size(); ++i) {
    if (size[i] <= 0 || x.size(static_cast<int64_t>(i) + 2) <= 0) {
      throw ShapeError(detail::str_cat("interpolate: input ", x.sizes(), " and size ", size,
                                       " must have positive spatial sizes"));
    }
    out[i + 2] = size[i];
  }
  ctx.add_output(out, x.dtype(), ctx.common_device());
}

void infer_nll_loss(ShapeCtx& ctx) {
  require_floating(ctx, 0);
  const Tensor& x = ctx.input(0);
  const Tensor& target = ctx.input(1);
  if (target.dtype() != kInt64) {
    throw DTypeError(detail::str_cat("nll_loss: target must be int64, got ", target.dtype()));
  }
  if (x.dim() < 1) throw ShapeError("nll_loss: input must have at least 1 dim, got a 0-dim tensor");
  Shape expected = x.sizes();
  expected.erase(expected.begin() + (x.dim() == 1 ? 0 : 1));
  if (target.sizes() != expected) {
    throw ShapeError(detail::str_cat("nll_loss: target ", target.sizes(), " does not match input ",
                                     x.sizes(), " (expected ", expected, ")"));
  }
  const int64_t c = x.size(x.dim() == 1 ? 0 : 1);
  check_param(ctx, 2, {c});
  const std::string& reduction = ctx.attrs.str(1);
  if (reduction != "none" && reduction != "mean" && reduction != "sum") {
    throw ValueError(detail::str_cat("nll_loss: reduction must be 'none', 'mean' or 'sum', got '",
                                     reduction, "'"));
  }
  ctx.add_output(reduction == "none" ? target.sizes() : Shape{}, x.dtype(), ctx.common_device());
}

}  // namespace kiln::ops

namespace kiln::ops {
namespace {

// lstm_sequence: tensor k of the flat list must have exactly shape expected.
void check_lstm_tensor(const ShapeCtx& ctx, size_t k, const char* what, int64_t layer,
                       const Shape& expected) {
  const Tensor& t = ctx.input(k);
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

void infer_lstm_cell(ShapeCtx& ctx) {
  const Tensor &xg = ctx.input(0), &hg = ctx.input(1), &cx = ctx.input(2);
  for (size_t i = 0; i < 3; ++i) require_floating(ctx, i);
  if (hg.dtype() != xg.dtype() || cx.dtype() != xg.dtype()) {
    throw DTypeError(detail::str_cat("lstm_cell: input_gates, hidden_gates and cx must have one "
                                     "dtype, got ", xg.dtype(), ", ", hg.dtype(), " and ",
                                     cx.dtype()));
  }
  Shape gates = cx.sizes();
  if (cx.dim() < 1 || cx.dim() > 2 || cx.size(-1) < 1) {
    throw ShapeError(detail::str_cat("lstm_cell: cx must be [B, H] or [H] with H >= 1, got ",
                                     cx.sizes()));
  }
  gates.back() *= 4;
  if (xg.sizes() != gates || hg.sizes() != gates) {
    throw ShapeError(detail::str_cat("lstm_cell: input_gates and hidden_gates must be ", gates,
                                     " for cx ", cx.sizes(), ", got ", xg.sizes(), " and ",
                                     hg.sizes()));
  }
  const Device device = ctx.common_device();
  ctx.add_output(cx.sizes(), cx.dtype(), device);
  ctx.add_output(cx.sizes(), cx.dtype(), device);
}

void infer_lstm_step(ShapeCtx& ctx) {
  const char* names[] = {"input", "hx", "cx", "weight_ih", "weight_hh", "bias_ih", "bias_hh"};
  const Tensor& x = ctx.input(0);
  for (size_t i = 0; i < ctx.inputs.size(); ++i) {
    const Tensor& t = ctx.input(i);
    if (!t.defined()) {
      if (i < 5) throw ValueError(detail::str_cat("lstm_step: ", names[i], " is an undefined tensor"));
      continue;
    }
    require_floating(ctx, i);
    if (t.dtype() != x.dtype()) {
      throw DTypeError(detail::str_cat("lstm_step: every tensor must have input's dtype ", x.dtype(), "; ",
                                       names[i], " is ", t.dtype()));
    }
  }
  const Tensor& hx = ctx.input(1);
  if (x.dim() != 2 || hx.dim() != 2 || hx.size(1) < 1) {
    throw ShapeError(detail::str_cat("lstm_step: input must be [B, I] and hx [B, H] with H >= 1, got ", x.sizes(),
                                     " and ", hx.sizes()));
  }
  const int64_t batch = x.size(0), in = x.size(1), hidden = hx.size(1);
  const auto expect = [&](size_t i, const Shape& shape) {
    const Tensor& t = ctx.input(i);
    if (t.defined() && t.sizes() != shape) {
      throw ShapeError(detail::str_cat("lstm_step: ", names[i], " must be ", shape, " for input ", x.sizes(),
                                       " and hx ", hx.sizes(), ", got ", t.sizes()));
    }
  };
  expect(1, {batch, hidden});
  expect(2, {batch, hidden});
  expect(3, {4 * hidden, in});
  expect(4, {4 * hidden, hidden});
  if (ctx.inputs.size() > 5) expect(5, {4 * hidden});
  if (ctx.inputs.size() > 6) expect(6, {4 * hidden});
  const Device device = ctx.common_device();
  ctx.add_output({batch, hidden}, x.dtype(), device);
  ctx.add_output({batch, hidden}, x.dtype(), device);
}

void infer_lstm_sequence(ShapeCtx& ctx) {
  const int64_t layers = ctx.attrs.i(0);
  const bool has_biases = ctx.attrs.b(1);
  if (layers < 1) {
    throw ValueError(detail::str_cat("lstm_sequence: num_layers must be at least 1, got ", layers));
  }
  const size_t per_layer = has_biases ? 4 : 2;
  const size_t expected_count = 3 + static_cast<size_t>(layers) * per_layer;
  if (ctx.inputs.size() != expected_count) {
    throw ValueError(detail::str_cat("lstm_sequence: expected ", expected_count, " tensors for ",
                                     layers, " layers", has_biases ? " with" : " without",
                                     " biases, got ", ctx.inputs.size()));
  }
  for (size_t k = 0; k < ctx.inputs.size(); ++k) {
    if (!ctx.input(k).defined()) {
      throw ValueError(detail::str_cat("lstm_sequence: tensor ", k, " of the list is undefined"));
    }
  }
  const Tensor& x = ctx.input(0);
  if (x.dim() != 3 || x.size(0) < 1 || x.size(1) < 1) {
    throw ShapeError(detail::str_cat(
        "lstm_sequence: expected an input [T, B, I] with T and B at least 1, got ", x.sizes()));
  }
  const Tensor& w_hh0 = ctx.input(4);
  if (w_hh0.dim() != 2 || w_hh0.size(1) < 1) {
    throw ShapeError(detail::str_cat("lstm_sequence: weight_hh of layer 0 must be [4H, H], got ",
                                     w_hh0.sizes()));
  }
  const int64_t steps = x.size(0), batch = x.size(1), hidden = w_hh0.size(1);
  check_lstm_tensor(ctx, 0, "input", 0, x.sizes());
  check_lstm_tensor(ctx, 1, "h0", 0, {layers, batch, hidden});
  check_lstm_tensor(ctx, 2, "c0", 0, {layers, batch, hidden});
  for (int64_t l = 0; l < layers; ++l) {
    const size_t k = 3 + static_cast<size_t>(l) * per_layer;
    check_lstm_tensor(ctx, k, "weight_ih", l, {4 * hidden, l == 0 ? x.size(2) : hidden});
    check_lstm_tensor(ctx, k + 1, "weight_hh", l, {4 * hidden, hidden});
    if (!has_biases) continue;
    check_lstm_tensor(ctx, k + 2, "bias_ih", l, {4 * hidden});
    check_lstm_tensor(ctx, k + 3, "bias_hh", l, {4 * hidden});
  }
  const Device device = ctx.common_device();
  ctx.add_output({steps, batch, hidden}, kFloat32, device);
  ctx.add_output({layers, batch, hidden}, kFloat32, device);
  ctx.add_output({layers, batch, hidden}, kFloat32, device);
}

}  // namespace kiln::ops
