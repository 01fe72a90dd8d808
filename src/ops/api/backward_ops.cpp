// The internal adjoint ops of backward_ops.h: attributes in the op rows' order.
#include "ops/api/backward_ops.h"

#include <utility>

#include "ops/dispatch.h"

namespace kiln::ops {

Tensor conv_backward_input(const Tensor& grad_output, const Tensor& weight, const Shape& input_size,
                           const Shape& stride, const Shape& padding, const Shape& dilation,
                           int64_t groups) {
  return dispatch1(OpId::conv_backward_input, {grad_output, weight},
                   {input_size, stride, padding, dilation, groups});
}

Tensor conv_backward_weight(const Tensor& grad_output, const Tensor& input,
                            const Shape& weight_size, const Shape& stride, const Shape& padding,
                            const Shape& dilation, int64_t groups) {
  return dispatch1(OpId::conv_backward_weight, {grad_output, input},
                   {weight_size, stride, padding, dilation, groups});
}

Tensor avg_pool2d_backward(const Tensor& grad_output, const Shape& input_size,
                           const Shape& kernel_size, const Shape& stride, const Shape& padding,
                           bool ceil_mode, bool count_include_pad,
                           std::optional<int64_t> divisor_override) {
  AttrValue divisor = divisor_override ? AttrValue(*divisor_override) : AttrValue(std::monostate{});
  return dispatch1(
      OpId::avg_pool2d_backward, {grad_output},
      {input_size, kernel_size, stride, padding, ceil_mode, count_include_pad, std::move(divisor)});
}

Tensor adaptive_avg_pool2d_backward(const Tensor& grad_output, const Shape& input_size) {
  return dispatch1(OpId::adaptive_avg_pool2d_backward, {grad_output}, {input_size});
}

Tensor interpolate_backward(const Tensor& grad_output, const Shape& input_size,
                            const std::string& mode, bool align_corners) {
  return dispatch1(OpId::interpolate_backward, {grad_output}, {input_size, mode, align_corners});
}

Tensor pad_backward(const Tensor& grad_output, const Shape& input_size, const Shape& pad,
                    const std::string& mode) {
  return dispatch1(OpId::pad_backward, {grad_output}, {input_size, pad, mode});
}

}  // namespace kiln::ops
