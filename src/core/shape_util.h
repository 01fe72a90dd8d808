// Small shape helpers shared by shape rules and kernels.
#pragma once

#include <cstdint>
#include <string_view>

#include "kiln/tensor.h"

namespace kiln {

// dim in [-ndim, ndim) -> [0, ndim); IndexError naming op otherwise. A 0-dim
// tensor accepts dims -1 and 0, as in PyTorch.
int64_t wrap_dim(int64_t dim, int64_t ndim, std::string_view op);
int64_t shape_numel(const Shape& sizes) noexcept;
// Tensor::is_contiguous of a layout: row-major, size-1 dims' strides aside.
bool contiguous_layout(const Shape& sizes, const Shape& strides) noexcept;
// Broadcast of two shapes; ShapeError naming op when they don't broadcast.
Shape broadcast_pair(const Shape& a, const Shape& b, std::string_view op);
// Dims list -> sorted unique wrapped dims; empty means all dims.
std::vector<int64_t> wrap_dims(const std::vector<int64_t>& dims, int64_t ndim,
                               std::string_view op);

}  // namespace kiln
