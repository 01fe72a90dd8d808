// Reductions within groups of threads, for kernels that give each row a
// group of lanes: up to a warp by shuffles, or a whole block through shared
// memory. No #include: NVRTC's sources embed it (backends/cuda/row_reduce.cuh).
#pragma once

namespace kiln::backend::cuda {

struct GroupMax {
  template <typename V>
  __device__ V operator()(V a, V b) const {
    return a > b ? a : b;
  }
};
struct GroupSum {
  template <typename V>
  __device__ V operator()(V a, V b) const {
    return a + b;
  }
};
struct GroupOr {
  __device__ int operator()(int a, int b) const { return a | b; }
};

// Reduces v over each group of `group` consecutive threads (a power of two; up
// to 32 within a warp, or the whole block). Every thread gets the result.
template <typename V, typename Op>
__device__ V group_reduce(V v, int group, Op op) {
  const int width = group < 32 ? group : 32;
  for (int o = width / 2; o > 0; o /= 2) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  if (group <= 32) return v;
  __shared__ V partial[32];
  const int warp = threadIdx.x / 32;
  __syncthreads();  // an earlier call may still read partial
  if (threadIdx.x % 32 == 0) partial[warp] = v;
  __syncthreads();
  v = partial[0];
  for (int w = 1; w < static_cast<int>(blockDim.x / 32); ++w) v = op(v, partial[w]);
  return v;
}

}  // namespace kiln::backend::cuda
