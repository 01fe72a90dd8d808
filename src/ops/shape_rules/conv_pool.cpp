// Shape rules of convolution and pooling (PyTorch's output-size formulas).
// The output sizes are computed on Ctx::Int, so that in symbolic mode they stay
// expressions in the input's spatial sizes; the attributes are plain integers.
#include <algorithm>
#include <cmath>

#include "core/checked_size.h"
#include "ops/op_table.h"

namespace kiln::ops {
namespace {

// A list attribute with one entry for all dims becomes one entry per dim.
template <class Ctx>
void expand_list(Ctx& ctx, size_t k, size_t dims, const char* what) {
  auto& v = ctx.attrs.ints(k);
  if (v.size() == 1) v.assign(dims, v[0]);
  if (v.size() != dims) {
    throw ValueError(detail::str_cat(ctx.name(), ": ", what, " must have 1 or ", dims,
                                     " entries, got ", v));
  }
}

template <class Ctx>
void check_positive(const Ctx& ctx, const std::vector<int64_t>& v, const char* what) {
  for (int64_t x : v) {
    KILN_CHECK(x > 0, ValueError, ctx.name(), ": ", what, " must be positive, got ", v);
  }
}

template <class Ctx>
void check_float_input(const Ctx& ctx, const typename Ctx::TensorType& t, const char* what) {
  KILN_CHECK(is_floating(t.dtype()), DTypeError, ctx.name(),
             ": only floating dtypes are supported, ", what, " has dtype ", t.dtype());
}

// Conv padding holds begin pads then end pads; a per-dim list means both sides.
template <class Ctx>
void canonical_conv_padding(Ctx& ctx, size_t dims) {
  auto& p = ctx.attrs.ints(1);
  if (p.size() == 1) p.assign(2 * dims, p[0]);
  if (p.size() == dims) p.insert(p.end(), p.begin(), p.end());
  KILN_CHECK(p.size() == 2 * dims, ValueError, ctx.name(), ": padding must have 1, ", dims,
             " or ", 2 * dims, " entries, got ", p);
  for (int64_t x : p) {
    KILN_CHECK(x >= 0, ValueError, ctx.name(), ": padding must be non-negative, got ", p);
  }
}

template <class Ctx>
void check_conv_tensors(const Ctx& ctx, size_t dims, int64_t groups) {
  const auto& input = ctx.input(0);
  const auto& weight = ctx.input(1);
  const int64_t want = static_cast<int64_t>(dims) + 2;
  KILN_CHECK(input.dim() == want || input.dim() == want - 1, ShapeError, ctx.name(),
             ": expected a ", want - 1, "-D or ", want, "-D input, got shape ", input.sizes());
  KILN_CHECK(weight.dim() == want, ShapeError, ctx.name(), ": expected a ", want,
             "-D weight, got shape ", weight.sizes());
  check_float_input(ctx, input, "input");
  KILN_CHECK(weight.dtype() == input.dtype(), DTypeError, ctx.name(), ": input has dtype ",
             input.dtype(), " but weight has ", weight.dtype());
  for (int64_t d = 2; d < want; ++d) {
    KILN_CHECK(weight.size(d) > 0, ShapeError, ctx.name(),
               ": kernel sizes must be positive, got weight ", weight.sizes());
  }
  const typename Ctx::Int channels = input.size(input.dim() - static_cast<int64_t>(dims) - 1);
  const typename Ctx::Int out_channels = weight.size(0);
  KILN_CHECK(channels % groups == 0, ShapeError, ctx.name(), ": input channels ", channels,
             " are not divisible by groups ", groups, " (input ", input.sizes(), ")");
  KILN_CHECK(out_channels % groups == 0, ShapeError, ctx.name(), ": output channels ", out_channels,
             " are not divisible by groups ", groups, " (weight ", weight.sizes(), ")");
  const typename Ctx::Int expected =
      size_mul(weight.size(1), typename Ctx::Int(groups), ctx.name());
  KILN_CHECK(expected == channels, ShapeError, ctx.name(), ": weight ", weight.sizes(), " expects ",
             expected, " input channels with groups ", groups, ", but input ", input.sizes(),
             " has ", channels);
  if (ctx.has_input(2)) {
    const auto& bias = ctx.input(2);
    KILN_CHECK(bias.dtype() == input.dtype(), DTypeError, ctx.name(), ": input has dtype ",
               input.dtype(), " but bias has ", bias.dtype());
    KILN_CHECK(bias.sizes() == typename Ctx::Sizes{out_channels}, ShapeError, ctx.name(),
               ": bias must have shape [", out_channels, "], got ", bias.sizes());
  }
}

// Pools: [N, C, H, W] or [C, H, W], every non-batch dim non-empty.
template <class Ctx>
void check_pool_input(const Ctx& ctx) {
  const auto& x = ctx.input(0);
  KILN_CHECK(x.dim() == 3 || x.dim() == 4, ShapeError, ctx.name(),
             ": expected a 3-D or 4-D input, got shape ", x.sizes());
  for (int64_t d = x.dim() - 3; d < x.dim(); ++d) {
    KILN_CHECK(x.size(d) > 0, ShapeError, ctx.name(),
               ": expected non-empty channel and spatial dims, got shape ", x.sizes());
  }
  check_float_input(ctx, x, "input");
}

// PyTorch's pooling_output_shape: with ceil_mode the last window must start
// inside the input or its left padding. Int is int64_t or SymInt (the input
// size in); the window attributes are plain integers.
// The attributes are users' numbers: the sums are exact or a ShapeError.
template <class Int>
Int pool_output_size(const Int& in, int64_t kernel, int64_t pad, int64_t stride, int64_t dilation,
                     bool ceil_mode, std::string_view op) {
  const Int extent = size_add(size_mul(Int(dilation), Int(kernel - 1), op), Int(1), op);
  const Int padded = size_add(in, size_mul(Int(2), Int(pad), op), op);
  const Int span = size_add(padded - extent, Int(ceil_mode ? stride - 1 : 0), op);
  const Int floor_div = span >= 0 ? span / stride : -((-span + stride - 1) / stride);
  Int out = floor_div + 1;
  if (ceil_mode && (out - 1) * stride >= in + pad) out -= 1;  // SymInt has no operator--
  return out;
}

template <class Ctx>
typename Ctx::Sizes pool_output_shape(const Ctx& ctx, const typename Ctx::Int& oh,
                                      const typename Ctx::Int& ow) {
  const auto& x = ctx.input(0);
  KILN_CHECK(oh > 0 && ow > 0, ShapeError, ctx.name(), ": output size [", oh, ", ", ow,
             "] is too small for input ", x.sizes(), " with kernel ", ctx.attrs.ints(0));
  typename Ctx::Sizes out(x.sizes().begin(), x.sizes().end() - 2);
  out.push_back(oh);
  out.push_back(ow);
  return out;
}

// kernel_size, stride (empty = kernel_size) and padding of a pool, one entry per dim.
template <class Ctx>
void canonical_pool_window(Ctx& ctx) {
  expand_list(ctx, 0, 2, "kernel_size");
  if (ctx.attrs.ints(1).empty()) ctx.attrs.ints(1) = ctx.attrs.ints(0);
  expand_list(ctx, 1, 2, "stride");
  expand_list(ctx, 2, 2, "padding");
  check_positive(ctx, ctx.attrs.ints(0), "kernel_size");
  check_positive(ctx, ctx.attrs.ints(1), "stride");
  const auto& k = ctx.attrs.ints(0);
  const auto& p = ctx.attrs.ints(2);
  for (size_t d = 0; d < 2; ++d) {
    KILN_CHECK(p[d] >= 0 && p[d] <= k[d] / 2, ValueError, ctx.name(),
               ": padding must be non-negative and at most half the kernel size, got padding ", p,
               " for kernel_size ", k);
  }
}

}  // namespace

// conv1d and conv2d: attributes stride, padding (begins then ends), dilation, groups.
template <class Ctx>
void infer_conv(Ctx& ctx) {
  const size_t dims = ctx.schema.id == OpId::conv1d ? 1 : 2;
  expand_list(ctx, 0, dims, "stride");
  canonical_conv_padding(ctx, dims);
  expand_list(ctx, 2, dims, "dilation");
  check_positive(ctx, ctx.attrs.ints(0), "stride");
  check_positive(ctx, ctx.attrs.ints(2), "dilation");
  const int64_t groups = ctx.attrs.i(3);
  KILN_CHECK(groups > 0, ValueError, ctx.name(), ": groups must be positive, got ", groups);
  check_conv_tensors(ctx, dims, groups);
  const auto& input = ctx.input(0);
  const auto& weight = ctx.input(1);
  const auto& stride = ctx.attrs.ints(0);
  const auto& pad = ctx.attrs.ints(1);
  const auto& dilation = ctx.attrs.ints(2);
  typename Ctx::Sizes out(input.sizes().begin(),
                          input.sizes().end() - static_cast<int64_t>(dims) - 1);
  out.push_back(weight.size(0));
  for (size_t d = 0; d < dims; ++d) {
    const typename Ctx::Int in =
        input.size(input.dim() - static_cast<int64_t>(dims) + static_cast<int64_t>(d));
    using Int = typename Ctx::Int;
    const Int padded =
        size_add(size_add(in, Int(pad[d]), ctx.name()), Int(pad[dims + d]), ctx.name());
    const Int kernel = size_add(
        size_mul(Int(dilation[d]), weight.size(2 + static_cast<int64_t>(d)) - 1, ctx.name()),
        Int(1), ctx.name());
    KILN_CHECK(kernel <= padded, ShapeError, ctx.name(), ": kernel size ", kernel,
               " (dilated) is larger than the padded input size ", padded, " (input ",
               input.sizes(), ", weight ", weight.sizes(), ", padding ", pad, ")");
    out.push_back((padded - kernel) / stride[d] + 1);
  }
  ctx.add_output(std::move(out), input.dtype(), ctx.common_device());
}

// Attributes: kernel_size, stride, padding, dilation, ceil_mode.
template <class Ctx>
void infer_max_pool2d(Ctx& ctx) {
  check_pool_input(ctx);
  canonical_pool_window(ctx);
  expand_list(ctx, 3, 2, "dilation");
  check_positive(ctx, ctx.attrs.ints(3), "dilation");
  const auto& k = ctx.attrs.ints(0);
  const auto& s = ctx.attrs.ints(1);
  const auto& p = ctx.attrs.ints(2);
  const auto& d = ctx.attrs.ints(3);
  const bool ceil = ctx.attrs.b(4);
  const auto& x = ctx.input(0);
  const typename Ctx::Int h = x.size(-2), w = x.size(-1);
  ctx.add_output(
      pool_output_shape(ctx, pool_output_size(h, k[0], p[0], s[0], d[0], ceil, ctx.name()),
                        pool_output_size(w, k[1], p[1], s[1], d[1], ceil, ctx.name())),
      x.dtype(), ctx.common_device());
}

// Attributes: kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override?.
template <class Ctx>
void infer_avg_pool2d(Ctx& ctx) {
  check_pool_input(ctx);
  canonical_pool_window(ctx);
  if (ctx.attrs.has(5)) {
    KILN_CHECK(ctx.attrs.i(5) != 0, ValueError, "avg_pool2d: divisor_override must not be zero");
  }
  const auto& k = ctx.attrs.ints(0);
  const auto& s = ctx.attrs.ints(1);
  const auto& p = ctx.attrs.ints(2);
  const bool ceil = ctx.attrs.b(3);
  const auto& x = ctx.input(0);
  const typename Ctx::Int h = x.size(-2), w = x.size(-1);
  ctx.add_output(pool_output_shape(ctx, pool_output_size(h, k[0], p[0], s[0], 1, ceil, ctx.name()),
                                   pool_output_size(w, k[1], p[1], s[1], 1, ceil, ctx.name())),
                 x.dtype(), ctx.common_device());
}

template <class Ctx>
void infer_adaptive_avg_pool2d(Ctx& ctx) {
  check_pool_input(ctx);
  expand_list(ctx, 0, 2, "output_size");
  const auto& o = ctx.attrs.ints(0);
  KILN_CHECK(o[0] >= 0 && o[1] >= 0, ValueError,
             "adaptive_avg_pool2d: output_size must be non-negative, got ", o);
  const auto& x = ctx.input(0);
  typename Ctx::Sizes out(x.sizes().begin(), x.sizes().end() - 2);
  out.push_back(o[0]);
  out.push_back(o[1]);
  ctx.add_output(std::move(out), x.dtype(), ctx.common_device());
}

KILN_SHAPE_RULE_INSTANCES(infer_conv)
KILN_SHAPE_RULE_INSTANCES(infer_max_pool2d)
KILN_SHAPE_RULE_INSTANCES(infer_avg_pool2d)
KILN_SHAPE_RULE_INSTANCES(infer_adaptive_avg_pool2d)

}  // namespace kiln::ops
