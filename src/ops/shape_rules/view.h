// Helpers of the view rules that reshape and flatten also need. They serve
// eager mode (Tensor, int64_t sizes) and the compiler's symbolic shape rules
// (SymTensor, SymInt sizes) alike; view.cpp instantiates both.
#pragma once

#include <string_view>
#include <vector>

#include "core/symbolic.h"
#include "kiln/tensor.h"
#include "ops/sym_tensor.h"

namespace kiln::ops {

// shape with its -1 resolved against from's element count; ShapeError naming
// op. The size type I is int64_t or SymInt: with SymInt the -1 becomes the
// expression numel / (product of the other sizes).
template <class I>
std::vector<I> infer_view_shape(std::string_view op, const std::vector<I>& from,
                                const Shape& shape);
extern template Shape infer_view_shape(std::string_view, const Shape&, const Shape&);
extern template SymShape infer_view_shape(std::string_view, const SymShape&, const Shape&);

// Whether x can be viewed as shape without copying.
bool view_possible(const Tensor& x, const Shape& shape);
bool view_possible(const SymTensor& x, const SymShape& shape);

}  // namespace kiln::ops
