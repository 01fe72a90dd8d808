// The public convolution and pooling functions: PyTorch-style options turned
// into the op table's attributes (padding as begin pads then end pads); and
// those composed of other ops: the transposed convolutions
// (conv_backward_input, the adjoint they are), the 1-D pools (2-D pools over a
// height of 1), adaptive_max_pool2d and pixel (un)shuffle.
#include "kiln/ops/conv.h"

#include <algorithm>

#include "kiln/autograd.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape.h"
#include "ops/api/backward_ops.h"
#include "ops/dispatch.h"

namespace kiln {

using ops::Attrs;
using ops::dispatch1;
using ops::OpId;

namespace {

// One entry per spatial dim; a single entry applies to all of them.
std::vector<int64_t> per_dim(const std::vector<int64_t>& v, size_t dims, const char* op,
                             const char* what) {
  if (v.size() == dims) return v;
  if (v.size() == 1) return std::vector<int64_t>(dims, v[0]);
  throw ValueError(detail::str_cat(op, ": ", what, " must have 1 or ", dims, " entries, got ", v));
}

// Begin pads then end pads. "same" splits the total pad d * (k - 1) with the
// extra element at the end, as PyTorch does.
std::vector<int64_t> conv_padding(const Tensor& weight, const std::vector<int64_t>& padding,
                                  const std::vector<int64_t>& stride,
                                  const std::vector<int64_t>& dilation, const std::string& mode,
                                  size_t dims, const char* op) {
  std::vector<int64_t> pads(2 * dims, 0);
  if (mode.empty()) {
    const auto sym = per_dim(padding, dims, op, "padding");
    for (size_t d = 0; d < dims; ++d) pads[d] = pads[dims + d] = sym[d];
    return pads;
  }
  if (mode == "valid") return pads;
  if (mode != "same") {
    throw ValueError(detail::str_cat(op, ": padding mode must be 'same' or 'valid', got '", mode, "'"));
  }
  for (int64_t s : stride) {
    KILN_CHECK(s == 1, ValueError, op, ": padding='same' is not supported for strided convolutions, got stride ", stride);
  }
  KILN_CHECK(weight.dim() == static_cast<int64_t>(dims) + 2, ShapeError, op, ": weight must be ",
             dims + 2, "-D, got shape ", weight.sizes());
  for (size_t d = 0; d < dims; ++d) {
    const int64_t total = dilation[d] * (weight.size(static_cast<int64_t>(d) + 2) - 1);
    pads[d] = total / 2;
    pads[dims + d] = total - total / 2;
  }
  return pads;
}

Tensor conv_nd(OpId op, const char* name, size_t dims, const Tensor& input, const Tensor& weight,
               const Tensor& bias, const std::vector<int64_t>& stride_in,
               const std::vector<int64_t>& padding, const std::vector<int64_t>& dilation_in,
               int64_t groups, const std::string& mode) {
  const auto stride = per_dim(stride_in, dims, name, "stride");
  const auto dilation = per_dim(dilation_in, dims, name, "dilation");
  auto pads = conv_padding(weight, padding, stride, dilation, mode, dims, name);
  return dispatch1(op, {input, weight, bias}, {stride, std::move(pads), dilation, groups});
}

struct TransposeArgs {
  std::vector<int64_t> stride, padding, output_padding, dilation;
  int64_t groups;
};

Tensor conv_transpose_nd(const char* op, size_t dims, const Tensor& input, const Tensor& weight,
                         const Tensor& bias, const TransposeArgs& a) {
  const int64_t n = static_cast<int64_t>(dims);
  const auto stride = per_dim(a.stride, dims, op, "stride");
  const auto padding = per_dim(a.padding, dims, op, "padding");
  const auto output_padding = per_dim(a.output_padding, dims, op, "output_padding");
  const auto dilation = per_dim(a.dilation, dims, op, "dilation");
  KILN_CHECK(input.dim() == n + 1 || input.dim() == n + 2, ShapeError, op, ": expected a ", n + 1,
             "-D (unbatched) or ", n + 2, "-D input, got shape ", input.sizes());
  KILN_CHECK(weight.dim() == n + 2, ShapeError, op, ": weight must be [C_in, C_out / groups, ",
             n == 1 ? "kW" : "kH, kW", "], got shape ", weight.sizes());
  KILN_CHECK(a.groups > 0, ValueError, op, ": groups must be positive, got ", a.groups);
  const bool batched = input.dim() == n + 2;
  const Tensor x = batched ? input : input.unsqueeze(0);
  const int64_t in_channels = x.size(1);
  KILN_CHECK(weight.size(0) == in_channels && in_channels % a.groups == 0, ShapeError, op,
             ": input has ", in_channels, " channels (shape ", input.sizes(), "), weight ",
             weight.sizes(), " expects ", weight.size(0), " divisible by groups ", a.groups);
  const int64_t out_channels = weight.size(1) * a.groups;
  Shape output_size = {x.size(0), out_channels};
  for (size_t d = 0; d < dims; ++d) {
    KILN_CHECK(stride[d] > 0 && dilation[d] > 0 && padding[d] >= 0, ValueError, op,
               ": stride and dilation must be positive and padding non-negative, got stride ",
               stride, ", padding ", padding, ", dilation ", dilation);
    // Below the stride, so that the convolution of the output gives the input's size back.
    KILN_CHECK(output_padding[d] >= 0 && output_padding[d] < stride[d], ValueError, op,
               ": output_padding must be non-negative and smaller than the stride, got ",
               output_padding, " with stride ", stride);
    const int64_t size = (x.size(2 + static_cast<int64_t>(d)) - 1) * stride[d] - 2 * padding[d] +
                         dilation[d] * (weight.size(2 + static_cast<int64_t>(d)) - 1) +
                         output_padding[d] + 1;
    KILN_CHECK(size > 0, ShapeError, op, ": the output would have size ", size, " in spatial dim ",
               d, " for input ", input.sizes(), " and weight ", weight.sizes());
    output_size.push_back(size);
  }
  KILN_CHECK(!bias.defined() || bias.sizes() == Shape{out_channels}, ShapeError, op,
             ": bias must be [", out_channels, "], got ", bias.defined() ? bias.sizes() : Shape{});
  std::vector<int64_t> pads = padding;  // begin pads, then the same end pads
  pads.insert(pads.end(), padding.begin(), padding.end());
  Tensor y = ops::conv_backward_input(x, weight, output_size, stride, pads, dilation, a.groups);
  if (bias.defined()) {
    Shape channel_shape(dims + 1, 1);
    channel_shape[0] = out_channels;
    // In the convolution's dtype, as a convolution's own bias (under autocast
    // the convolution may run in a lower one).
    y = y + bias.reshape(channel_shape).to(y.dtype());
  }
  return batched ? y : y.squeeze(0);
}

// The maxima of the adaptive cells along one dim: cell i spans
// floor(i * size / cells) to ceil((i + 1) * size / cells).
Tensor adaptive_max_along(const Tensor& x, int64_t dim, int64_t cells) {
  const int64_t size = x.size(dim);
  std::vector<Tensor> maxima;
  maxima.reserve(static_cast<size_t>(cells));
  for (int64_t i = 0; i < cells; ++i) {
    const int64_t begin = i * size / cells;
    const int64_t end = ((i + 1) * size + cells - 1) / cells;
    maxima.push_back(amax(x.narrow(dim, begin, end - begin), {dim}, /*keepdim=*/true));
  }
  return cat(maxima, dim);
}

// x with its dims from `first` on reordered by tail (indices relative to first).
Tensor permute_from(const Tensor& x, int64_t first, std::initializer_list<int64_t> tail) {
  Shape dims;
  for (int64_t d = 0; d < first; ++d) dims.push_back(d);
  for (int64_t d : tail) dims.push_back(first + d);
  return x.permute(dims);
}

}  // namespace

Tensor conv1d(const Tensor& input, const Tensor& weight, const Tensor& bias,
              const Conv1dOptions& o) {
  return conv_nd(OpId::conv1d, "conv1d", 1, input, weight, bias, o.stride, o.padding, o.dilation,
                 o.groups, o.padding_mode);
}

Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias,
              const Conv2dOptions& o) {
  return conv_nd(OpId::conv2d, "conv2d", 2, input, weight, bias, o.stride, o.padding, o.dilation,
                 o.groups, o.padding_mode);
}

Tensor max_pool2d(const Tensor& input, std::vector<int64_t> kernel_size,
                  std::vector<int64_t> stride, std::vector<int64_t> padding,
                  std::vector<int64_t> dilation, bool ceil_mode) {
  // Training keeps the argmax from the forward instead of searching again in backward.
  if (is_grad_enabled() && input.requires_grad()) {
    return max_pool2d_with_indices(input, std::move(kernel_size), std::move(stride),
                                   std::move(padding), std::move(dilation), ceil_mode)
        .values;
  }
  return dispatch1(OpId::max_pool2d, {input},
                   {std::move(kernel_size), std::move(stride), std::move(padding),
                    std::move(dilation), ceil_mode});
}

ValuesIndices max_pool2d_with_indices(const Tensor& input, std::vector<int64_t> kernel_size,
                                      std::vector<int64_t> stride, std::vector<int64_t> padding,
                                      std::vector<int64_t> dilation, bool ceil_mode) {
  const Tensor inputs[] = {input};
  TensorList out = ops::dispatch(OpId::max_pool2d_with_indices, inputs,
                                 {std::move(kernel_size), std::move(stride), std::move(padding),
                                  std::move(dilation), ceil_mode});
  return {std::move(out[0]), std::move(out[1])};
}

Tensor avg_pool2d(const Tensor& input, std::vector<int64_t> kernel_size,
                  std::vector<int64_t> stride, std::vector<int64_t> padding, bool ceil_mode,
                  bool count_include_pad, std::optional<int64_t> divisor_override) {
  ops::AttrValue divisor = divisor_override ? ops::AttrValue(*divisor_override)
                                            : ops::AttrValue(std::monostate{});
  return dispatch1(OpId::avg_pool2d, {input},
                   {std::move(kernel_size), std::move(stride), std::move(padding), ceil_mode,
                    count_include_pad, std::move(divisor)});
}

Tensor adaptive_avg_pool2d(const Tensor& input, std::vector<int64_t> output_size) {
  return dispatch1(OpId::adaptive_avg_pool2d, {input}, {std::move(output_size)});
}

Tensor conv_transpose1d(const Tensor& input, const Tensor& weight, const Tensor& bias,
                        const ConvTranspose1dOptions& o) {
  return conv_transpose_nd("conv_transpose1d", 1, input, weight, bias,
                           {o.stride, o.padding, o.output_padding, o.dilation, o.groups});
}

Tensor conv_transpose2d(const Tensor& input, const Tensor& weight, const Tensor& bias,
                        const ConvTranspose2dOptions& o) {
  return conv_transpose_nd("conv_transpose2d", 2, input, weight, bias,
                           {o.stride, o.padding, o.output_padding, o.dilation, o.groups});
}

Tensor adaptive_max_pool2d(const Tensor& input, std::vector<int64_t> output_size) {
  const auto cells = per_dim(output_size, 2, "adaptive_max_pool2d", "output_size");
  KILN_CHECK(input.dim() == 3 || input.dim() == 4, ShapeError,
             "adaptive_max_pool2d: expected [N, C, H, W] or [C, H, W], got shape ", input.sizes());
  const int64_t h = input.dim() - 2, w = input.dim() - 1;
  KILN_CHECK(input.size(h) > 0 && input.size(w) > 0, ShapeError,
             "adaptive_max_pool2d: the input's height and width must be positive, got shape ",
             input.sizes());
  KILN_CHECK(cells[0] > 0 && cells[1] > 0, ValueError,
             "adaptive_max_pool2d: output_size must be positive, got ", cells);
  // Evenly divided cells are a max pool; otherwise the maximum over a
  // rectangle is the maximum over its columns of the maxima over its rows.
  if (input.size(h) % cells[0] == 0 && input.size(w) % cells[1] == 0) {
    return max_pool2d(input, {input.size(h) / cells[0], input.size(w) / cells[1]});
  }
  return adaptive_max_along(adaptive_max_along(input, h, cells[0]), w, cells[1]);
}

Tensor max_pool1d(const Tensor& input, int64_t kernel_size, std::optional<int64_t> stride,
                  int64_t padding, int64_t dilation, bool ceil_mode) {
  KILN_CHECK(input.dim() == 2 || input.dim() == 3, ShapeError,
             "max_pool1d: expected [N, C, L] or [C, L], got shape ", input.sizes());
  return max_pool2d(input.unsqueeze(-2), {1, kernel_size}, {1, stride.value_or(kernel_size)},
                    {0, padding}, {1, dilation}, ceil_mode)
      .squeeze(-2);
}

Tensor avg_pool1d(const Tensor& input, int64_t kernel_size, std::optional<int64_t> stride,
                  int64_t padding, bool ceil_mode, bool count_include_pad) {
  KILN_CHECK(input.dim() == 2 || input.dim() == 3, ShapeError,
             "avg_pool1d: expected [N, C, L] or [C, L], got shape ", input.sizes());
  return avg_pool2d(input.unsqueeze(-2), {1, kernel_size}, {1, stride.value_or(kernel_size)},
                    {0, padding}, ceil_mode, count_include_pad)
      .squeeze(-2);
}

Tensor pixel_shuffle(const Tensor& input, int64_t upscale_factor) {
  const int64_t r = upscale_factor;
  KILN_CHECK(r > 0, ValueError, "pixel_shuffle: upscale_factor must be positive, got ", r);
  KILN_CHECK(input.dim() >= 3 && input.size(-3) % (r * r) == 0, ShapeError,
             "pixel_shuffle: expected [..., C * ", r * r, ", H, W], got shape ", input.sizes());
  const int64_t c = input.size(-3) / (r * r), h = input.size(-2), w = input.size(-1);
  Shape batch(input.sizes().begin(), input.sizes().end() - 3);
  const int64_t b = static_cast<int64_t>(batch.size());
  Shape split = batch;
  split.insert(split.end(), {c, r, r, h, w});
  // [..., c, r, r, h, w] -> [..., c, h, r, w, r]
  Tensor y = permute_from(input.reshape(split), b, {0, 3, 1, 4, 2});
  Shape out = batch;
  out.insert(out.end(), {c, h * r, w * r});
  return y.reshape(out);
}

Tensor pixel_unshuffle(const Tensor& input, int64_t downscale_factor) {
  const int64_t r = downscale_factor;
  KILN_CHECK(r > 0, ValueError, "pixel_unshuffle: downscale_factor must be positive, got ", r);
  KILN_CHECK(input.dim() >= 3 && input.size(-2) % r == 0 && input.size(-1) % r == 0, ShapeError,
             "pixel_unshuffle: expected [..., C, H, W] with H and W divisible by ", r,
             ", got shape ", input.sizes());
  const int64_t c = input.size(-3), h = input.size(-2) / r, w = input.size(-1) / r;
  Shape batch(input.sizes().begin(), input.sizes().end() - 3);
  const int64_t b = static_cast<int64_t>(batch.size());
  Shape split = batch;
  split.insert(split.end(), {c, h, r, w, r});
  // [..., c, h, r, w, r] -> [..., c, r, r, h, w]
  Tensor y = permute_from(input.reshape(split), b, {0, 2, 4, 1, 3});
  Shape out = batch;
  out.insert(out.end(), {c * r * r, h, w});
  return y.reshape(out);
}

}  // namespace kiln
