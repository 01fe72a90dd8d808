// CPU kernel of scatter_add. The index splits into lines along dim; every
// element of one line adds into the output line with the same coordinates
// outside dim, so distinct lines never touch the same output element and run
// in parallel without atomics. Indices are validated before the parallel loop.
#include <algorithm>

#include "backends/cpu/backward_ops.h"
#include "backends/cpu/loops.h"
#include "core/shape_util.h"

namespace kiln::backend::cpu {
namespace {

using ops::OpId;

// The sizes and strides of t, a 0-dim tensor counting as one element of [1].
Shape sizes_1d(const Tensor& t) { return t.dim() == 0 ? Shape{1} : t.sizes(); }
Shape strides_1d(const Tensor& t) { return t.dim() == 0 ? Shape{1} : t.strides(); }

void check_indices(const Tensor& index, int64_t dim, int64_t size) {
  const int64_t* v = index.data<int64_t>();
  for (int64_t i = 0; i < index.numel(); ++i) {
    if (v[i] < 0 || v[i] >= size) {
      throw IndexError(detail::str_cat("scatter_add: index ", v[i], " is out of range for dim ",
                                       dim, " of size ", size));
    }
  }
}

// Offsets in index (contiguous), src and out of the element at coordinates 0
// in dim and in the last dim, l in row-major order over the other dims.
struct LineStart {
  int64_t index, src, out;
};

LineStart line_start(int64_t l, const Shape& is, const Shape& ist, const Shape& sst,
                     const Shape& ost, int64_t dim) {
  LineStart at{0, 0, 0};
  const int64_t last = static_cast<int64_t>(is.size()) - 1;
  for (int64_t d = last - 1; d >= 0; --d) {
    if (d == dim) continue;
    const int64_t i = l % is[d];
    l /= is[d];
    at.index += i * ist[d];
    at.src += i * sst[d];
    at.out += i * ost[d];
  }
  return at;
}

// A task owns a block of positions of the last dim for one choice of the other
// coordinates outside dim, and walks dim in its outer loop so that each step
// reads a contiguous run of index and src (along the last dim, a block is one line).
template <typename T>
void scatter_add(const KernelCall& c, const Tensor& index, int64_t dim) {
  using C = compute_t<T>;
  const Tensor& out = c.out();
  const Tensor& src = c.in(2);
  const Shape is = sizes_1d(index), ist = strides_1d(index);
  const Shape sst = strides_1d(src), ost = strides_1d(out);
  const int64_t last = static_cast<int64_t>(is.size()) - 1;
  const bool along_last = dim == last;
  const int64_t len = is[dim], width = along_last ? 1 : is[last];
  const int64_t block = std::min<int64_t>(width, 64), blocks = (width + block - 1) / block;
  const int64_t tasks = index.numel() / (len * width) * blocks;
  const int64_t istep = ist[dim], sstep = sst[dim], ostep = ost[dim];
  const int64_t ilast = along_last ? 0 : ist[last], slast = along_last ? 0 : sst[last];
  const int64_t olast = along_last ? 0 : ost[last];
  const int64_t* iv = index.data<int64_t>();
  const T* s = src.data<T>();
  T* o = out.data<T>();
  parallel_for(tasks, std::max<int64_t>(1, kParallelGrain / (len * block)),
               [&](int64_t b, int64_t e) {
                 for (int64_t t = b; t < e; ++t) {
                   const LineStart at = line_start(t / blocks, is, ist, sst, ost, dim);
                   const int64_t j0 = (t % blocks) * block, j1 = std::min(width, j0 + block);
                   T* ol = o + at.out;
                   for (int64_t i = 0; i < len; ++i) {
                     const int64_t* v = iv + at.index + i * istep;
                     const T* sl = s + at.src + i * sstep;
                     for (int64_t j = j0; j < j1; ++j) {
                       T& dst = ol[v[j * ilast] * ostep + j * olast];
                       dst = static_cast<T>(static_cast<C>(dst) + static_cast<C>(sl[j * slast]));
                     }
                   }
                 }
               });
}

void scatter_add_kernel(const KernelCall& c) {
  const Tensor& out = c.out();
  const Tensor index = c.in(1).contiguous();
  const int64_t dim = c.attrs.i(0);
  check_indices(index, dim, sizes_1d(out)[dim]);
  const Tensor& self = c.in(0);
  const bool same = out.data_ptr() == self.data_ptr() && out.strides() == self.strides();
  if (!same) {
    Tensor o = out;
    o.copy_(self);
  }
  if (index.numel() == 0) return;
  visit_dtype(out.dtype(), [&]<typename T>() {
    if constexpr (!std::is_same_v<T, bool>) scatter_add<T>(c, index, dim);
  });
}

}  // namespace

void register_cpu_scatter_add_kernels(KernelTable& t) {
  t.set(OpId::scatter_add, scatter_add_kernel);
}

}  // namespace kiln::backend::cpu
