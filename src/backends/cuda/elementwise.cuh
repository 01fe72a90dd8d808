// The elementwise engine of the CUDA backend: one output and up to three
// inputs, broadcast and with any strides, as one kernel template over a
// functor. The host side coalesces dims (contiguous tensors become one run),
// splits launches so that indices fit in 32 bits, and picks one of two
// kernels:
//   - linear: one run; 16-byte vector loads and stores when every operand is
//     contiguous and aligned, else one element per step with its stride;
//   - nd: any dims, the element's coordinates found by multiply-shift
//     division.
// 0-dim CPU inputs (a C++ number, a CPU scalar tensor) are passed by value in
// the launch arguments.
//
//   launch_elementwise<float, float, float>(out, inputs, AddF{alpha});
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <span>
#include <utility>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/device_types.cuh"
#include "kiln/tensor.h"

namespace kiln::backend::cuda {

inline constexpr int kMaxDims = 16;
inline constexpr int kMaxOperands = 4;
inline constexpr int kBlockThreads = 128;
inline constexpr int kItemsPerThread = 4;

// n / d and n % d for n, d < 2^31 with a multiply and a shift (Granlund and
// Montgomery's method with a 33-bit magic number split into m and the add).
struct IntDivider {
  uint32_t divisor = 1, magic = 1, shift = 0;
  IntDivider() = default;
  explicit IntDivider(uint32_t d) : divisor(d) {
    while (shift < 32 && (uint64_t{1} << shift) < d) ++shift;
    magic = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << shift) - d)) / d + 1);
  }
  __device__ uint32_t div(uint32_t n) const { return (__umulhi(n, magic) + n) >> shift; }
};

// What a kernel needs to find its operands: pointers (or immediate values)
// and, for the nd kernel, sizes and element strides, innermost dim first.
struct Operands {
  char* ptr[kMaxOperands] = {};
  uint64_t imm[kMaxOperands] = {};  // the bits of an immediate operand's value
  int64_t stride[kMaxDims][kMaxOperands] = {};
  IntDivider size[kMaxDims];
  int ndim = 0;
  uint32_t imm_mask = 0;   // bit k: operand k is immediate
  bool vectorize = false;  // linear kernel: every operand contiguous and 16-byte aligned
};

template <typename T>
__device__ inline T load_operand(const Operands& a, int k, int64_t offset) {
  if (a.imm_mask & (1u << k)) {
    T v;
    memcpy(&v, &a.imm[k], sizeof(T));
    return v;
  }
  return reinterpret_cast<const T*>(a.ptr[k])[offset];
}

template <typename Out, typename... In, typename F, size_t... I>
__device__ inline void apply_at(const F& f, const Operands& a, const int64_t* off,
                                std::index_sequence<I...>) {
  reinterpret_cast<Out*>(a.ptr[0])[off[0]] =
      cvt<Out>(f(to_compute(load_operand<In>(a, static_cast<int>(I) + 1, off[I + 1]))...));
}

template <typename T>
struct alignas(16) Vec16 {
  static constexpr int kCount = 16 / sizeof(T);
  T v[kCount];
};

// The number of elements in one 16-byte vector of the widest operand.
template <typename... T>
constexpr int vec_width() {
  size_t widest = 1;
  ((widest = sizeof(T) > widest ? sizeof(T) : widest), ...);
  return static_cast<int>(16 / widest);
}

// kVec values of each input type, one array per input.
template <int K, size_t I, typename T>
struct Slot {
  T x[K];
};
template <int K, typename Seq, typename... T>
struct VecPack;
template <int K, size_t... I, typename... T>
struct VecPack<K, std::index_sequence<I...>, T...> : Slot<K, I, T>... {};
template <size_t I, int K, typename T>
__device__ inline T* slot(Slot<K, I, T>& s) {
  return s.x;
}

template <typename T, int K>
__device__ inline void load_vec(const Operands& a, int k, int64_t base, T* dst) {
  if (a.imm_mask & (1u << k)) {
    T s;
    memcpy(&s, &a.imm[k], sizeof(T));
#pragma unroll
    for (int j = 0; j < K; ++j) dst[j] = s;
  } else {
    struct alignas(sizeof(T) * K) V {
      T x[K];
    };
    const V loaded = *reinterpret_cast<const V*>(reinterpret_cast<const T*>(a.ptr[k]) + base);
#pragma unroll
    for (int j = 0; j < K; ++j) dst[j] = loaded.x[j];
  }
}

// One run of n elements: operand k at ptr[k] + i * stride[0][k].
template <typename Out, typename... In, typename F, size_t... I>
__device__ inline void linear_body(const F& f, const Operands& a, uint32_t n,
                                   std::index_sequence<I...>) {
  constexpr int N = sizeof...(In) + 1;
  using Seq = std::index_sequence<I...>;
  if (a.vectorize) {
    // Vectors of the widest operand's 16 bytes; narrower operands load their share.
    constexpr int kVec = vec_width<Out, In...>();
    const uint32_t nvec = n / kVec;
    for (uint32_t v = blockIdx.x * blockDim.x + threadIdx.x; v < nvec;
         v += gridDim.x * blockDim.x) {
      const int64_t base = static_cast<int64_t>(v) * kVec;
      VecPack<kVec, Seq, In...> ins;
      (load_vec<In, kVec>(a, static_cast<int>(I) + 1, base, slot<I>(ins)), ...);
      struct alignas(sizeof(Out) * kVec) OutVec {
        Out x[kVec];
      } out;
#pragma unroll
      for (int j = 0; j < kVec; ++j) out.x[j] = cvt<Out>(f(to_compute(slot<I>(ins)[j])...));
      *reinterpret_cast<OutVec*>(reinterpret_cast<Out*>(a.ptr[0]) + base) = out;
    }
    // The tail that does not fill a vector.
    const uint32_t tail = nvec * kVec + threadIdx.x;
    if (blockIdx.x == 0 && tail < n) {
      int64_t off[N];
      for (int k = 0; k < N; ++k) off[k] = tail;
      apply_at<Out, In...>(f, a, off, Seq{});
    }
    return;
  }
  const uint32_t block_base = blockIdx.x * (kBlockThreads * kItemsPerThread) + threadIdx.x;
#pragma unroll
  for (int j = 0; j < kItemsPerThread; ++j) {
    const uint32_t i = block_base + j * kBlockThreads;
    if (i < n) {
      int64_t off[N];
#pragma unroll
      for (int k = 0; k < N; ++k) off[k] = static_cast<int64_t>(i) * a.stride[0][k];
      apply_at<Out, In...>(f, a, off, Seq{});
    }
  }
}

template <typename F, typename Out, typename... In>
__global__ void __launch_bounds__(kBlockThreads) linear_kernel(F f, Operands a, uint32_t n) {
  linear_body<Out, In...>(f, a, n, std::index_sequence_for<In...>{});
}

template <typename F, typename Out, typename... In>
__global__ void __launch_bounds__(kBlockThreads) nd_kernel(F f, Operands a, uint32_t n) {
  constexpr int N = sizeof...(In) + 1;
  const uint32_t block_base = blockIdx.x * (kBlockThreads * kItemsPerThread) + threadIdx.x;
#pragma unroll
  for (int j = 0; j < kItemsPerThread; ++j) {
    uint32_t i = block_base + j * kBlockThreads;
    if (i < n) {
      int64_t off[N] = {};
      for (int d = 0; d < a.ndim; ++d) {
        const uint32_t q = a.size[d].div(i);
        const uint32_t coord = i - q * a.size[d].divisor;
        i = q;
#pragma unroll
        for (int k = 0; k < N; ++k) off[k] += static_cast<int64_t>(coord) * a.stride[d][k];
      }
      apply_at<Out, In...>(f, a, off, std::index_sequence_for<In...>{});
    }
  }
}

// --- host side ----------------------------------------------------------------

// The operands of one elementwise op, coalesced; innermost dim first.
struct Geometry {
  int ntensors = 0;
  int ndim = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[kMaxDims][kMaxOperands] = {};  // elements
  char* ptr[kMaxOperands] = {};
  int64_t elsize[kMaxOperands] = {};
  uint64_t imm[kMaxOperands] = {};
  uint32_t imm_mask = 0;
  int64_t numel() const {
    int64_t n = 1;
    for (int d = 0; d < ndim; ++d) n *= sizes[d];
    return n;
  }
};

// out and inputs (broadcast to out's shape) as a Geometry. Inputs on the CPU
// must have one element: they become immediates.
Geometry make_geometry(const Tensor& out, std::span<const Tensor> inputs);

// Launch configuration of one chunk (numel < 2^31) of a Geometry.
struct LaunchPlan {
  Operands ops;
  uint32_t n = 0;
  unsigned grid = 0;
  bool linear = false;
};

// Calls launch(plan) for pieces of g small enough for 32-bit indices.
void for_each_chunk(const Geometry& g, void (*launch)(const LaunchPlan&, void*), void* ctx);

// This thread's current stream on the device of `out`.
cudaStream_t stream_for(const Tensor& out);

// Throws a kiln::Error naming the kernel if the last launch failed.
void check_launch(const char* what);

template <typename Out, typename... In, typename F>
void launch_elementwise(const Tensor& out, std::span<const Tensor> inputs, const F& f) {
  if (out.numel() == 0) return;
  const Geometry g = make_geometry(out, inputs);
  DeviceGuard guard(out.device().index());
  struct Ctx {
    const F* f;
    cudaStream_t stream;
  } ctx{&f, stream_for(out)};
  for_each_chunk(
      g,
      [](const LaunchPlan& p, void* raw) {
        const auto& c = *static_cast<const Ctx*>(raw);
        if (p.linear) {
          unsigned grid = p.grid;
          if (p.ops.vectorize) {
            constexpr uint32_t kPerBlock = kBlockThreads * vec_width<Out, In...>();
            grid = static_cast<unsigned>((p.n + kPerBlock - 1) / kPerBlock);
          }
          linear_kernel<F, Out, In...><<<grid, kBlockThreads, 0, c.stream>>>(*c.f, p.ops, p.n);
        } else {
          nd_kernel<F, Out, In...><<<p.grid, kBlockThreads, 0, c.stream>>>(*c.f, p.ops, p.n);
        }
      },
      &ctx);
  check_launch("elementwise kernel");
}

}  // namespace kiln::backend::cuda
