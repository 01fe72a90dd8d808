// The [outer, reduced, inner] view of a reduction's input that the CPU and
// CUDA reduction engines share: a strided view when the layout allows it, else
// a contiguous copy made on the input's device.
#pragma once

#include <cstdint>
#include <vector>

#include "backends/backend.h"
#include "kiln/tensor.h"

namespace kiln::backend {

struct ReduceView {
  Tensor holder;  // the contiguous copy, when one was needed
  const char* data = nullptr;
  int64_t outer = 1, reduced = 1, inner = 1;
  // Rows gathered (the CPU's row engine alone): where the reduced dims are
  // apart in memory, the [outer, reduced] rows of x permuted (its kept dims
  // first, the reduced ones last) are not copied whole. `data` is then x's
  // first element and these the permuted dims' sizes and element strides;
  // the engine copies each row, or segment of one, into a buffer in cache
  // and folds it there, the very values in the very order of the copy.
  // Empty: data holds the [outer, reduced, inner] values.
  std::vector<int64_t> gather_sizes, gather_strides;
};

// The [outer, reduced, inner] view of x for a reduction over dims (sorted, unique).
// Output element o * inner + i is then output element number o * inner + i of the
// reduced shape. With `ordered`, the reduced elements of one output are visited
// in row-major order (the arg ops need it when they flatten several dims). With
// `gather`, rows of reduced dims apart in memory are gathered (see above) where
// a row fits a buffer in cache; the caller's ops then must not read `data`.
ReduceView make_reduce_view(const Tensor& x, const std::vector<int64_t>& dims, bool ordered,
                            bool gather = false);

// The view of x for a scan or softmax along one dim: the same as above, but the
// output (x's shape, contiguous) is addressed as [outer, reduced, inner] too.
ReduceView make_line_view(const Tensor& x, int64_t dim);

// The dims attribute at index k (a 0-dim input has none).
inline std::vector<int64_t> reduce_dims_attr(const KernelCall& c, size_t k) {
  return c.in(0).dim() == 0 ? std::vector<int64_t>{} : c.attrs.ints(k);
}

// The view of max_dim / min_dim / argmax / argmin: attribute 0 is the dim, or
// absent for argmax and argmin over every dim (in row-major order).
inline ReduceView make_arg_reduce_view(const KernelCall& c) {
  const Tensor& x = c.in(0);
  std::vector<int64_t> dims;
  if (x.dim() > 0 && c.attrs.has(0)) dims.push_back(c.attrs.i(0));
  if (!c.attrs.has(0)) {
    for (int64_t d = 0; d < x.dim(); ++d) dims.push_back(d);
  }
  return make_reduce_view(x, dims, /*ordered=*/true);
}

}  // namespace kiln::backend
