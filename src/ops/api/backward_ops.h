// Internal ops for autograd's backward rules: the adjoints of convolution,
// average pooling, interpolate and pad. Each takes the gradient of the
// forward's output and the forward's attributes as the forward op received
// them (before canonicalization is fine), plus the shape of the tensor whose
// gradient it returns. For a forward F linear in x, F_backward satisfies
// sum(F(x) * g) == sum(x * F_backward(g)).
//
//   Tensor gx = ops::conv_backward_input(gy, w, x.sizes(), {1, 1}, {1}, {1, 1}, 1);
//   Tensor gw = ops::conv_backward_weight(gy, x, w.sizes(), {1, 1}, {1}, {1, 1}, 1);
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "kiln/tensor.h"

namespace kiln::ops {

// padding as conv1d/conv2d's row takes it: 1, dims or 2 * dims entries (begins, then ends).
Tensor conv_backward_input(const Tensor& grad_output, const Tensor& weight, const Shape& input_size,
                           const Shape& stride, const Shape& padding, const Shape& dilation,
                           int64_t groups);
Tensor conv_backward_weight(const Tensor& grad_output, const Tensor& input,
                            const Shape& weight_size, const Shape& stride, const Shape& padding,
                            const Shape& dilation, int64_t groups);

Tensor avg_pool2d_backward(const Tensor& grad_output, const Shape& input_size,
                           const Shape& kernel_size, const Shape& stride, const Shape& padding,
                           bool ceil_mode, bool count_include_pad,
                           std::optional<int64_t> divisor_override);
Tensor adaptive_avg_pool2d_backward(const Tensor& grad_output, const Shape& input_size);
Tensor interpolate_backward(const Tensor& grad_output, const Shape& input_size,
                            const std::string& mode, bool align_corners);
Tensor pad_backward(const Tensor& grad_output, const Shape& input_size, const Shape& pad,
                    const std::string& mode);

}  // namespace kiln::ops
