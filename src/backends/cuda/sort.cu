// CUDA kernels of sort and topk: every line along the dim becomes a segment
// of order keys (unsigned integers whose order is the values' order, NaN
// above every number, -0 equal to +0) with the elements' positions, sorted by
// CUB's stable segmented sort, so that equal values keep their order as on
// the CPU; the first k of each segment are then gathered into the outputs.
#include <cub/device/device_segmented_sort.cuh>

#include <climits>
#include <cstdint>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/device_types.cuh"
#include "backends/cuda/elementwise.cuh"
#include "backends/reduce_view.h"
#include "ops/workspace.h"

namespace kiln::backend::cuda {
namespace {

constexpr int kThreads = 256;

unsigned blocks_for(int64_t work) {
  return static_cast<unsigned>(
      std::min<int64_t>((work + kThreads - 1) / kThreads, int64_t{1} << 20));
}

// Order keys: 16- and 32-bit floats through float, the narrow integers
// through int32, double and int64 as 64-bit keys.
template <typename T>
using key_t =
    std::conditional_t<std::is_same_v<T, double> || std::is_same_v<T, int64_t>, uint64_t, uint32_t>;

template <typename T>
__device__ key_t<T> order_key(T x) {
  if constexpr (std::is_same_v<T, double>) {
    if (x != x) return ~uint64_t{0};
    const uint64_t u = static_cast<uint64_t>(__double_as_longlong(x == 0 ? 0.0 : x));
    return (u >> 63) ? ~u : (u | (uint64_t{1} << 63));
  } else if constexpr (std::is_floating_point_v<dcompute_t<T>>) {
    const float v = static_cast<float>(to_compute(x));
    if (v != v) return ~uint32_t{0};
    const uint32_t u = __float_as_uint(v == 0 ? 0.0f : v);
    return (u >> 31) ? ~u : (u | (uint32_t{1} << 31));
  } else if constexpr (std::is_same_v<T, int64_t>) {
    return static_cast<uint64_t>(x) ^ (uint64_t{1} << 63);
  } else {
    return static_cast<uint32_t>(static_cast<int32_t>(x)) ^ (uint32_t{1} << 31);
  }
}

// Element e of the segments is position e % n of line e / n; line o * inner + i
// reads x[o, :, i] of the [outer, n, inner] view.
template <typename T>
__global__ void make_keys_kernel(const T* x, key_t<T>* keys, int32_t* positions, int64_t lines,
                                 int64_t n, int64_t inner) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < lines * n;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t line = e / n, r = e - line * n;
    const int64_t o = line / inner, i = line - o * inner;
    keys[e] = order_key(x[(o * n + r) * inner + i]);
    positions[e] = static_cast<int32_t>(r);
  }
}

__global__ void segment_offsets_kernel(int64_t* offsets, int64_t lines, int64_t n) {
  for (int64_t l = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; l <= lines;
       l += int64_t{gridDim.x} * blockDim.x) {
    offsets[l] = l * n;
  }
}

// The first k of each sorted segment into values and indices [outer, k, inner].
template <typename T>
__global__ void gather_first_kernel(const T* x, const int32_t* sorted, T* values, int64_t* indices,
                                    int64_t lines, int64_t n, int64_t inner, int64_t k) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < lines * k;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t line = e / k, j = e - line * k;
    const int64_t o = line / inner, i = line - o * inner;
    const int64_t r = sorted[line * n + j];
    const int64_t at = (o * k + j) * inner + i;
    values[at] = x[(o * n + r) * inner + i];
    indices[at] = r;
  }
}

// Carves aligned pieces out of one workspace.
class Carver {
 public:
  explicit Carver(char* base) : base_(base) {}
  template <typename U>
  U* take(size_t count) {
    U* p = reinterpret_cast<U*>(base_ ? base_ + used_ : nullptr);
    used_ += (count * sizeof(U) + 255) / 256 * 256;
    return p;
  }
  size_t used() const { return used_; }

 private:
  char* base_;
  size_t used_ = 0;
};

template <typename T>
void order_lines(const KernelCall& c, const ReduceView& v, int64_t k, bool descending) {
  using Key = key_t<T>;
  const int64_t lines = v.outer * v.inner, n = v.reduced, total = lines * n;
  if (total > INT_MAX || lines > INT_MAX) {
    throw Error(detail::str_cat(c.schema.name,
                                ": CUDA sorts at most 2^31 - 1 elements at once, got ", lines,
                                " lines of ", n));
  }
  const cudaStream_t stream = stream_for(c.out(0));
  auto sort = [&](void* temp, size_t& temp_bytes, const Key* keys_in, Key* keys_out,
                  const int32_t* pos_in, int32_t* pos_out, const int64_t* offsets) {
    const int items = static_cast<int>(total), segments = static_cast<int>(lines);
    return descending ? cub::DeviceSegmentedSort::StableSortPairsDescending(
                            temp, temp_bytes, keys_in, keys_out, pos_in, pos_out, items, segments,
                            offsets, offsets + 1, stream)
                      : cub::DeviceSegmentedSort::StableSortPairs(
                            temp, temp_bytes, keys_in, keys_out, pos_in, pos_out, items, segments,
                            offsets, offsets + 1, stream);
  };
  size_t temp_bytes = 0;
  check(sort(nullptr, temp_bytes, nullptr, nullptr, nullptr, nullptr, nullptr),
        "cub::DeviceSegmentedSort (temporary storage)");
  Carver sizes(nullptr);
  sizes.take<Key>(2 * static_cast<size_t>(total));
  sizes.take<int32_t>(2 * static_cast<size_t>(total));
  sizes.take<int64_t>(static_cast<size_t>(lines) + 1);
  sizes.take<char>(temp_bytes);
  Tensor workspace = ops::make_workspace(sizes.used(), c.out(0).device());
  Carver carve(static_cast<char*>(workspace.data_ptr()));
  Key* keys = carve.take<Key>(2 * static_cast<size_t>(total));
  int32_t* positions = carve.take<int32_t>(2 * static_cast<size_t>(total));
  int64_t* offsets = carve.take<int64_t>(static_cast<size_t>(lines) + 1);
  void* temp = carve.take<char>(temp_bytes);

  const T* x = reinterpret_cast<const T*>(v.data);
  make_keys_kernel<T>
      <<<blocks_for(total), kThreads, 0, stream>>>(x, keys, positions, lines, n, v.inner);
  segment_offsets_kernel<<<blocks_for(lines + 1), kThreads, 0, stream>>>(offsets, lines, n);
  check_launch("sort keys kernel");
  check(sort(temp, temp_bytes, keys, keys + total, positions, positions + total, offsets),
        "cub::DeviceSegmentedSort");
  gather_first_kernel<T><<<blocks_for(lines * k), kThreads, 0, stream>>>(
      x, positions + total, static_cast<T*>(c.out(0).data_ptr()),
      static_cast<int64_t*>(c.out(1).data_ptr()), lines, n, v.inner, k);
  check_launch("sort gather kernel");
}

void order_kernel(const KernelCall& c, int64_t dim, int64_t k, bool descending) {
  const Tensor& x = c.in(0);
  if (c.out(0).numel() == 0) return;
  DeviceGuard guard(x.device().index());
  const ReduceView v = make_line_view(x, x.dim() == 0 ? 0 : dim);
  visit_device_dtype(x.dtype(), [&]<typename T>() { order_lines<T>(c, v, k, descending); });
}

}  // namespace

void register_cuda_sort_kernels(KernelTable& t) {
  t.set(ops::OpId::sort, [](const KernelCall& c) {
    const Tensor& x = c.in(0);
    const int64_t dim = c.attrs.i(0);
    order_kernel(c, dim, x.dim() == 0 ? 1 : x.size(dim), c.attrs.b(1));
  });
  t.set(ops::OpId::topk, [](const KernelCall& c) {
    // A 0-dim input is its own top value, for k 0 as for 1 (as PyTorch).
    order_kernel(c, c.attrs.i(1), c.in(0).dim() == 0 ? 1 : c.attrs.i(0), c.attrs.b(2));
  });
}

}  // namespace kiln::backend::cuda
