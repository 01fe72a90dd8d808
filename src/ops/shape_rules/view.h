// Helpers of the view rules that reshape and flatten also need.
#pragma once

#include <string_view>

#include "kiln/tensor.h"

namespace kiln::ops {

// shape with its -1 resolved against from's element count; ShapeError naming op.
Shape infer_view_shape(std::string_view op, const Shape& from, const Shape& shape);
// Whether x can be viewed as shape without copying.
bool view_possible(const Tensor& x, const Shape& shape);

}  // namespace kiln::ops
