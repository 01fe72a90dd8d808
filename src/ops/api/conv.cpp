// The public convolution and pooling functions: PyTorch-style options turned
// into the op table's attributes (padding as begin pads then end pads).
#include "kiln/ops/conv.h"

#include "kiln/autograd.h"
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

}  // namespace kiln
