// CUDA kernels of the shape and indexing ops. cat, stack, repeat and flip are
// copies between strided views (the elementwise engine); index_select,
// gather, scatter, scatter_add, one_hot and tril/triu have kernels of their
// own. Kernels check index values as they read them: a bad one is skipped
// and reported through device_errors.h, raised at the next synchronization.
#include <algorithm>

#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/device_errors.h"
#include "backends/cuda/pointwise.cuh"
#include "backends/element_size.h"
#include "ops/dispatch.h"

namespace kiln::backend::cuda {
namespace {

using ops::OpId;

constexpr int kThreads = 256;

unsigned grid_for(int64_t n) {
  return static_cast<unsigned>(
      std::max<int64_t>(1, std::min<int64_t>((n + kThreads - 1) / kThreads, 1 << 20)));
}

// A view of base's storage with the given layout (offset in elements of base's dtype).
Tensor strided_view(const Tensor& base, Shape sizes, Shape strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.storage();
  impl->sizes = std::move(sizes);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = base.dtype();
  return Tensor(std::move(impl));
}

bool same_view(const Tensor& a, const Tensor& b) {
  return a.shares_storage(b) && a.storage_offset() == b.storage_offset() &&
         a.strides() == b.strides();
}

// --- index checks ---------------------------------------------------------------

__global__ void check_index_kernel(const int64_t* index, int64_t n, int64_t bound, DeviceErrorRecord* errors,
                                   DeviceErrorOp op, int64_t dim) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t v = index[i];
    if (v < 0 || v >= bound) report_device_error(errors, op, v, bound, dim);
  }
}

// Checks a contiguous int64 index where no kernel reads it (an empty output),
// so that bad values are reported all the same. Does not wait.
void check_index_values(DeviceErrorOp op, const Tensor& index, int64_t bound, int64_t dim) {
  if (index.numel() == 0) return;
  DeviceGuard guard(index.device().index());
  check_index_kernel<<<grid_for(index.numel()), kThreads, 0, stream_for(index)>>>(
      static_cast<const int64_t*>(index.data_ptr()), index.numel(), bound, device_error_record(), op, dim);
  check_launch("index check");
}

// --- gather, scatter, scatter_add, index_select -------------------------------------

constexpr int kMaxIndexDims = 16;

// Coordinates of the elements of an iteration shape, and element strides of
// up to three tensors over it; `dim` is the indexed dim.
struct IndexGeometry {
  int ndim = 0;
  int dim = 0;
  int64_t sizes[kMaxIndexDims] = {};
  int64_t strides[3][kMaxIndexDims] = {};  // index, source, destination
  int64_t dim_size = 0;                    // size of the indexed dim of the indexed tensor
  DeviceErrorRecord* errors = nullptr;     // where a bad index value is reported
  DeviceErrorOp op = DeviceErrorOp::kGather;
};

IndexGeometry index_geometry(DeviceErrorOp op, int64_t dim_size, const Shape& sizes, int64_t dim,
                             const Shape& s0, const Shape& s1, const Shape& s2) {
  if (sizes.size() > kMaxIndexDims) {
    throw Error(detail::str_cat("cuda indexing: ", sizes.size(), " dims, at most ", kMaxIndexDims));
  }
  IndexGeometry g;
  g.ndim = static_cast<int>(sizes.size());
  g.dim = static_cast<int>(dim);
  g.dim_size = dim_size;
  g.errors = device_error_record();
  g.op = op;
  for (int d = 0; d < g.ndim; ++d) {
    g.sizes[d] = sizes[d];
    g.strides[0][d] = s0.empty() ? 0 : s0[d];
    g.strides[1][d] = s1.empty() ? 0 : s1[d];
    g.strides[2][d] = s2.empty() ? 0 : s2[d];
  }
  return g;
}

// Offsets of element e: [0] index, [1] source, [2] destination, with the
// coordinate along dim replaced by the index value for the operands in mask.
// ok is false, and the value reported, where the index value is out of range.
struct Offsets {
  int64_t off[3];
  bool ok;
};

template <int kReplaced>  // operand whose dim coordinate is the index value (1 or 2)
__device__ inline Offsets offsets_of(const IndexGeometry& g, int64_t e, const int64_t* index) {
  Offsets o{{0, 0, 0}, true};
  int64_t coord_dim = 0;
  for (int d = g.ndim - 1; d >= 0; --d) {
    const int64_t c = e % g.sizes[d];
    e /= g.sizes[d];
    o.off[0] += c * g.strides[0][d];
    if (d == g.dim) {
      coord_dim = c;
      continue;
    }
    o.off[1] += c * g.strides[1][d];
    o.off[2] += c * g.strides[2][d];
  }
  const int64_t v = index[o.off[0]];
  if (v < 0 || v >= g.dim_size) {
    report_device_error(g.errors, g.op, v, g.dim_size, g.dim);
    o.ok = false;
    return o;
  }
  const int other = 3 - kReplaced;
  o.off[kReplaced] += v * g.strides[kReplaced][g.dim];
  o.off[other] += coord_dim * g.strides[other][g.dim];
  return o;
}

// gather: over the index's elements, destination contiguous like the index.
template <typename E>
__global__ void gather_kernel(IndexGeometry g, int64_t n, const int64_t* index, const E* src,
                              E* dst) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n;
       e += int64_t{gridDim.x} * blockDim.x) {
    const Offsets o = offsets_of<1>(g, e, index);
    if (o.ok) dst[o.off[2]] = src[o.off[1]];
  }
}

// scatter: over the index's elements, the index value picks the destination.
// Where indices repeat, the last element (in row-major order of the index)
// wins, as on the CPU: a first pass claims each destination for the largest
// element number that writes it, a second writes only the claimed ones.
__global__ void scatter_claim_kernel(IndexGeometry g, int64_t n, const int64_t* index,
                                     unsigned long long* owner) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n;
       e += int64_t{gridDim.x} * blockDim.x) {
    const Offsets o = offsets_of<2>(g, e, index);
    if (o.ok) atomicMax(owner + o.off[2], static_cast<unsigned long long>(e) + 1);
  }
}

template <typename E>
__global__ void scatter_kernel(IndexGeometry g, int64_t n, const int64_t* index, const E* src,
                               E* dst, const unsigned long long* owner) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n;
       e += int64_t{gridDim.x} * blockDim.x) {
    const Offsets o = offsets_of<2>(g, e, index);
    if (o.ok && owner[o.off[2]] == static_cast<unsigned long long>(e) + 1) dst[o.off[2]] = src[o.off[1]];
  }
}

// Atomic add for every element type: native where CUDA has it, else a
// compare-and-swap on the aligned 32-bit word that holds the element.
template <typename T>
__device__ inline void atomic_add(T* address, T value) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> ||
                std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16> ||
                std::is_same_v<T, int32_t>) {
    atomicAdd(address, value);
  } else if constexpr (std::is_same_v<T, int64_t>) {
    atomicAdd(reinterpret_cast<unsigned long long*>(address),
              static_cast<unsigned long long>(value));
  } else {
    static_assert(sizeof(T) <= 2);
    auto* word =
        reinterpret_cast<unsigned int*>(reinterpret_cast<uintptr_t>(address) & ~uintptr_t{3});
    const unsigned shift = (reinterpret_cast<uintptr_t>(address) & 3) * 8;
    const unsigned mask = (sizeof(T) == 1 ? 0xffu : 0xffffu) << shift;
    unsigned old = *word, assumed;
    do {
      assumed = old;
      const T current = static_cast<T>((assumed & mask) >> shift);
      const T sum = static_cast<T>(current + value);
      const unsigned bits =
          (static_cast<unsigned>(static_cast<std::make_unsigned_t<T>>(sum)) << shift) & mask;
      old = atomicCAS(word, assumed, (assumed & ~mask) | bits);
    } while (old != assumed);
  }
}

template <typename T>
__global__ void scatter_add_kernel(IndexGeometry g, int64_t n, const int64_t* index, const T* src,
                                   T* dst) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n;
       e += int64_t{gridDim.x} * blockDim.x) {
    const Offsets o = offsets_of<2>(g, e, index);
    if (o.ok) atomic_add(dst + o.off[2], src[o.off[1]]);
  }
}

// index_select: over the output's elements; the index is 1-D along dim.
template <typename E>
__global__ void index_select_kernel(IndexGeometry g, int64_t n, const int64_t* index, const E* src,
                                    E* dst) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n;
       e += int64_t{gridDim.x} * blockDim.x) {
    int64_t rest = e, off = 0;
    bool ok = true;
    for (int d = g.ndim - 1; d >= 0; --d) {
      int64_t c = rest % g.sizes[d];
      rest /= g.sizes[d];
      if (d == g.dim) {
        c = index[c];
        if (c < 0 || c >= g.dim_size) {
          report_device_error(g.errors, g.op, c, g.dim_size, g.dim);
          ok = false;
          break;
        }
      }
      off += c * g.strides[1][d];
    }
    if (ok) dst[e] = src[off];
  }
}

Shape sizes_1d(const Tensor& t) { return t.dim() == 0 ? Shape{1} : t.sizes(); }
Shape strides_1d(const Tensor& t) { return t.dim() == 0 ? Shape{1} : t.strides(); }

void gather_op(const KernelCall& c) {
  const Tensor& x = c.in(0);
  const Tensor index = c.in(1).contiguous();
  const int64_t dim = c.attrs.i(0);
  if (index.numel() == 0) return;
  const IndexGeometry g = index_geometry(DeviceErrorOp::kGather, sizes_1d(x)[dim], sizes_1d(index), dim,
                                         strides_1d(index), strides_1d(x), strides_1d(c.out()));
  DeviceGuard guard(x.device().index());
  visit_element_size(x.element_size(), [&]<typename E>() {
    gather_kernel<E><<<grid_for(index.numel()), kThreads, 0, stream_for(x)>>>(
        g, index.numel(), static_cast<const int64_t*>(index.data_ptr()),
        static_cast<const E*>(x.data_ptr()), static_cast<E*>(c.out().data_ptr()));
  });
  check_launch("gather kernel");
}

// scatter and scatter_add write into a copy of self (or self, in place).
template <bool kAdd>
void scatter_op(const KernelCall& c) {
  const Tensor& out = c.out();
  const Tensor index = c.in(1).contiguous();
  const Tensor& src = c.in(2);
  const int64_t dim = c.attrs.i(0);
  if (!same_view(out, c.in(0))) copy_same_dtype(out, c.in(0));
  if (index.numel() == 0) return;
  const IndexGeometry g =
      index_geometry(kAdd ? DeviceErrorOp::kScatterAdd : DeviceErrorOp::kScatter, sizes_1d(out)[dim],
                     sizes_1d(index), dim, strides_1d(index), strides_1d(src), strides_1d(out));
  DeviceGuard guard(out.device().index());
  const cudaStream_t stream = stream_for(out);
  const auto* iv = static_cast<const int64_t*>(index.data_ptr());
  if constexpr (kAdd) {
    visit_device_dtype(out.dtype(), [&]<typename T>() {
      if constexpr (kIsBoolT<T>) {
        unsupported_dtype(c, out.dtype());
      } else {
        scatter_add_kernel<T><<<grid_for(index.numel()), kThreads, 0, stream>>>(
            g, index.numel(), iv, static_cast<const T*>(src.data_ptr()),
            static_cast<T*>(out.data_ptr()));
      }
    });
  } else {
    // One owner slot per element the destination's strides can reach.
    int64_t span = 1;
    for (int64_t d = 0; d < out.dim(); ++d) span += (out.size(d) - 1) * out.stride(d);
    Tensor owners = ops::make_tensor({span}, kInt64, out.device(), false);
    fill_bits(owners, 0);
    auto* owner = static_cast<unsigned long long*>(owners.data_ptr());
    scatter_claim_kernel<<<grid_for(index.numel()), kThreads, 0, stream>>>(g, index.numel(), iv,
                                                                           owner);
    visit_element_size(out.element_size(), [&]<typename E>() {
      scatter_kernel<E><<<grid_for(index.numel()), kThreads, 0, stream>>>(
          g, index.numel(), iv, static_cast<const E*>(src.data_ptr()),
          static_cast<E*>(out.data_ptr()), owner);
    });
  }
  check_launch(kAdd ? "scatter_add kernel" : "scatter kernel");
}

void index_select_op(const KernelCall& c) {
  const Tensor& x = c.in(0);
  const Tensor index = c.in(1).to(kInt64).contiguous();
  const int64_t dim = c.attrs.i(0);
  const Tensor& out = c.out();
  if (out.numel() == 0) {  // the values are still checked
    check_index_values(DeviceErrorOp::kIndexSelect, index, sizes_1d(x)[dim], dim);
    return;
  }
  const IndexGeometry g =
      index_geometry(DeviceErrorOp::kIndexSelect, sizes_1d(x)[dim], sizes_1d(out), dim, {}, strides_1d(x), {});
  DeviceGuard guard(x.device().index());
  visit_element_size(x.element_size(), [&]<typename E>() {
    index_select_kernel<E><<<grid_for(out.numel()), kThreads, 0, stream_for(x)>>>(
        g, out.numel(), static_cast<const int64_t*>(index.data_ptr()),
        static_cast<const E*>(x.data_ptr()), static_cast<E*>(out.data_ptr()));
  });
  check_launch("index_select kernel");
}

// embedding: rows of the weight picked by the indices (any shape, int32 or int64).
void embedding_op(const KernelCall& c) {
  const Tensor& weight = c.in(0);
  const Tensor index = c.in(1).to(kInt64).contiguous();
  const int64_t v = weight.size(0), d = weight.size(1);
  const Tensor& out = c.out();
  if (out.numel() == 0) {  // zero-width rows: the values are still checked
    check_index_values(DeviceErrorOp::kEmbedding, index, v, 0);
    return;
  }
  const Shape rows{index.numel(), d};
  const IndexGeometry g = index_geometry(DeviceErrorOp::kEmbedding, v, rows, 0, {}, weight.strides(), {});
  DeviceGuard guard(weight.device().index());
  visit_element_size(weight.element_size(), [&]<typename E>() {
    index_select_kernel<E><<<grid_for(out.numel()), kThreads, 0, stream_for(weight)>>>(
        g, out.numel(), static_cast<const int64_t*>(index.data_ptr()),
        static_cast<const E*>(weight.data_ptr()), static_cast<E*>(out.data_ptr()));
  });
  check_launch("embedding kernel");
}

// --- copies between views -------------------------------------------------------

void cat_op(const KernelCall& c) {
  const Tensor& out = c.out();
  if (out.numel() == 0) return;
  const int64_t dim = c.attrs.i(0);
  int64_t start = 0;
  for (const Tensor& t : c.inputs) {
    if (t.numel() == 0) continue;
    Shape sizes = out.sizes();
    sizes[dim] = t.sizes()[dim];
    copy_same_dtype(
        strided_view(out, sizes, out.strides(), out.storage_offset() + start * out.strides()[dim]),
        t);
    start += t.sizes()[dim];
  }
}

void stack_op(const KernelCall& c) {
  const Tensor& out = c.out();
  if (out.numel() == 0) return;
  const int64_t dim = c.attrs.i(0);
  Shape sizes = out.sizes(), strides = out.strides();
  const int64_t step = strides[dim];
  sizes.erase(sizes.begin() + dim);
  strides.erase(strides.begin() + dim);
  for (size_t k = 0; k < c.inputs.size(); ++k) {
    copy_same_dtype(
        strided_view(out, sizes, strides, out.storage_offset() + static_cast<int64_t>(k) * step),
        c.inputs[k]);
  }
}

// repeat: the output seen as [r0, s0, r1, s1, ...], the input broadcast over
// the r dims.
void repeat_op(const KernelCall& c) {
  const Tensor& x = c.in(0);
  const Tensor& out = c.out();
  if (out.numel() == 0) return;
  const auto& repeats = c.attrs.ints(0);
  const size_t lead = repeats.size() - static_cast<size_t>(x.dim());
  Shape sizes, src_strides;
  for (size_t i = 0; i < repeats.size(); ++i) {
    sizes.push_back(repeats[i]);
    src_strides.push_back(0);
    if (i < lead) continue;
    sizes.push_back(x.sizes()[i - lead]);
    src_strides.push_back(x.strides()[i - lead]);
  }
  copy_same_dtype(strided_view(out, sizes, ops::contiguous_strides(sizes), out.storage_offset()),
                  strided_view(x, sizes, src_strides, x.storage_offset()));
}

// flip: the input read through negative strides.
void flip_op(const KernelCall& c) {
  const Tensor& x = c.in(0);
  if (x.numel() == 0) return;
  Shape strides = x.strides();
  int64_t offset = x.storage_offset();
  for (int64_t d : c.attrs.ints(0)) {
    offset += (x.sizes()[d] - 1) * strides[d];
    strides[d] = -strides[d];
  }
  copy_same_dtype(c.out(), strided_view(x, x.sizes(), strides, offset));
}

// --- tril, triu, one_hot ------------------------------------------------------------

template <typename E, bool kLower>
__global__ void triangle_kernel(const E* x, E* y, int64_t n, int64_t rows, int64_t cols,
                                int64_t diagonal) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t j = e % cols, i = (e / cols) % rows;
    const bool keep = kLower ? j - i <= diagonal : j - i >= diagonal;
    y[e] = keep ? x[e] : E(0);
  }
}

template <bool kLower>
void triangle_op(const KernelCall& c) {
  const Tensor& out = c.out();
  if (out.numel() == 0) return;
  const Tensor x = same_view(out, c.in(0)) ? out : c.in(0).contiguous();
  const int64_t rows = out.sizes()[out.dim() - 2], cols = out.sizes()[out.dim() - 1];
  DeviceGuard guard(out.device().index());
  visit_element_size(out.element_size(), [&]<typename E>() {
    triangle_kernel<E, kLower><<<grid_for(out.numel()), kThreads, 0, stream_for(out)>>>(
        static_cast<const E*>(x.data_ptr()), static_cast<E*>(out.data_ptr()), out.numel(), rows,
        cols, c.attrs.i(0));
  });
  check_launch("tril/triu kernel");
}

__global__ void one_hot_kernel(const int64_t* index, int64_t n, int64_t classes, int64_t* out,
                               DeviceErrorRecord* errors) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t v = index[e];
    if (v < 0 || v >= classes) {
      report_device_error(errors, DeviceErrorOp::kOneHot, v, classes);
    } else {
      out[e * classes + v] = 1;
    }
  }
}

void one_hot_op(const KernelCall& c) {
  const Tensor index = c.in(0).contiguous();
  const int64_t classes = c.attrs.i(0);
  fill_bits(c.out(), 0);
  if (index.numel() == 0) return;
  DeviceGuard guard(index.device().index());
  one_hot_kernel<<<grid_for(index.numel()), kThreads, 0, stream_for(index)>>>(
      static_cast<const int64_t*>(index.data_ptr()), index.numel(), classes,
      static_cast<int64_t*>(c.out().data_ptr()), device_error_record());
  check_launch("one_hot kernel");
}

}  // namespace

void register_cuda_shape_kernels(KernelTable& t) {
  t.set(OpId::cat, cat_op);
  t.set(OpId::stack, stack_op);
  t.set(OpId::index_select, index_select_op);
  t.set(OpId::gather, gather_op);
  t.set(OpId::scatter, scatter_op<false>);
  t.set(OpId::scatter_add, scatter_op<true>);
  t.set(OpId::repeat, repeat_op);
  t.set(OpId::flip, flip_op);
  t.set(OpId::tril, triangle_op<true>);
  t.set(OpId::triu, triangle_op<false>);
  t.set(OpId::one_hot, one_hot_op);
  t.set(OpId::embedding, embedding_op);
}

}  // namespace kiln::backend::cuda
