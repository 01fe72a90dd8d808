// Helpers of the view rules that reshape and flatten also need. They serve
// eager mode (Tensor, int64_t sizes) and the compiler's symbolic shape rules
// (SymTensor, SymInt sizes) alike; view.cpp instantiates both.
#pragma once

#include <optional>
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

// The stride of dims s..e of a layout merged into one, when they are one run
// of memory: each dim's stride is the next inner one's stride times its size,
// dims of size 1 aside (an empty tensor's always are). nullopt otherwise.
template <class I>
std::optional<I> merged_stride(const std::vector<I>& sizes, const std::vector<I>& strides,
                               int64_t s, int64_t e);
extern template std::optional<int64_t> merged_stride(const Shape&, const Shape&, int64_t, int64_t);
extern template std::optional<SymInt> merged_stride(const SymShape&, const SymShape&, int64_t,
                                                    int64_t);

// Whether x can be viewed as shape without copying.
bool view_possible(const Tensor& x, const Shape& shape);
bool view_possible(const SymTensor& x, const SymShape& shape);

}  // namespace kiln::ops
