// CudaBackend::copy_within: copies between allocations of one device in one
// kernel launch. A compiled function's CUDA graph takes its arguments into
// static buffers and gives its results out of them at every call; a launch
// costs the host less than a cudaMemcpyAsync per tensor.
#include <algorithm>
#include <cstdint>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_check.h"

namespace kiln::backend::cuda {
namespace {

constexpr int kJobsPerLaunch = 16;
constexpr int kWordsPerLaunch = 8;
constexpr int kThreads = 256;

struct CopyJobs {
  int count;
  const char* src[kJobsPerLaunch];
  char* dst[kJobsPerLaunch];
  int64_t nbytes[kJobsPerLaunch];
  // Values written from the kernel's parameters.
  int words;
  uint64_t* word_dst[kWordsPerLaunch];
  uint64_t word_value[kWordsPerLaunch];
};

__global__ void __launch_bounds__(kThreads) copy_jobs_kernel(CopyJobs jobs) {
  const int64_t start = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  if (start < jobs.words) *jobs.word_dst[start] = jobs.word_value[start];
  for (int j = 0; j < jobs.count; ++j) {
    const char* src = jobs.src[j];
    char* dst = jobs.dst[j];
    const int64_t n = jobs.nbytes[j];
    int64_t done = 0;
    if ((reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst)) % 16 == 0) {
      const int64_t vectors = n / 16;
      const auto* s = reinterpret_cast<const uint4*>(src);
      auto* d = reinterpret_cast<uint4*>(dst);
      for (int64_t i = start; i < vectors; i += stride) d[i] = s[i];
      done = vectors * 16;
    }
    for (int64_t i = done + start; i < n; i += stride) dst[i] = src[i];
  }
}

}  // namespace

void CudaBackend::copy_within(Device device, std::span<const ByteCopy> copies, std::span<const WordWrite> writes) {
  if (copies.empty() && writes.empty()) return;
  if (!device.is_cuda()) {
    throw DeviceError(detail::str_cat("cuda: copy_within on ", device, ": not a CUDA device"));
  }
  DeviceGuard guard(device.index());
  const auto stream = static_cast<cudaStream_t>(current_stream_handle(device.index()));
  size_t next = 0, next_word = 0;
  while (next < copies.size() || next_word < writes.size()) {
    CopyJobs jobs{};
    int64_t largest = 0;
    for (; next_word < writes.size() && jobs.words < kWordsPerLaunch; ++next_word, ++jobs.words) {
      jobs.word_dst[jobs.words] = writes[next_word].dst;
      jobs.word_value[jobs.words] = writes[next_word].value;
    }
    for (; next < copies.size() && jobs.count < kJobsPerLaunch; ++next) {
      if (copies[next].nbytes == 0) continue;
      jobs.src[jobs.count] = static_cast<const char*>(copies[next].src);
      jobs.dst[jobs.count] = static_cast<char*>(copies[next].dst);
      jobs.nbytes[jobs.count] = static_cast<int64_t>(copies[next].nbytes);
      largest = std::max(largest, jobs.nbytes[jobs.count]);
      ++jobs.count;
    }
    if (jobs.count == 0 && jobs.words == 0) continue;
    const int64_t blocks = std::clamp<int64_t>((largest / 16 + kThreads - 1) / kThreads, 1, 1024);
    copy_jobs_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(jobs);
    check(cudaGetLastError(), "copy_within");
  }
}

}  // namespace kiln::backend::cuda
