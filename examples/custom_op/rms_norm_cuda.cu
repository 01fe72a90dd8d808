// example::rms_norm on the GPU: one block of 256 threads per row, the sum of
// squares reduced across the block in shared memory, then each thread scales
// its share of the row.
#include "rms_norm_cuda.h"

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace {

constexpr int kThreads = 256;

__global__ void rms_norm_rows(const float* __restrict__ x, const float* __restrict__ w,
                              float* __restrict__ y, int64_t cols, float eps) {
  __shared__ float partial[kThreads];
  const float* row = x + blockIdx.x * cols;
  float* out = y + blockIdx.x * cols;
  float sum = 0.f;
  for (int64_t c = threadIdx.x; c < cols; c += kThreads) sum += row[c] * row[c];
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  const float r = rsqrtf(partial[0] / static_cast<float>(cols) + eps);
  for (int64_t c = threadIdx.x; c < cols; c += kThreads) out[c] = row[c] * r * w[c];
}

}  // namespace

void launch_rms_norm(const float* x, const float* w, float* y, int64_t rows, int64_t cols,
                     float eps, void* stream) {
  if (rows == 0) return;
  rms_norm_rows<<<static_cast<unsigned>(rows), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      x, w, y, cols, eps);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    throw std::runtime_error(std::string("example::rms_norm: ") + cudaGetErrorString(err));
}
