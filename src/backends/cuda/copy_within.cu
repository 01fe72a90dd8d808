// CudaBackend::copy_within: copies between allocations of one device in one
// kernel launch. A compiled function's CUDA graph takes its arguments into
// static buffers and gives its results out of them at every call; a launch
// costs the host less than a cudaMemcpyAsync per tensor.
#include <algorithm>
#include <cstdint>

#include "backends/cuda/copy_kernel.h"
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

// The next launch's worth of copies and writes from next and next_word on
// (zero-byte copies are left out), and its grid.
CopyJobs next_jobs(std::span<const ByteCopy> copies, std::span<const WordWrite> writes,
                   size_t& next, size_t& next_word, unsigned& blocks) {
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
  blocks =
      static_cast<unsigned>(std::clamp<int64_t>((largest / 16 + kThreads - 1) / kThreads, 1, 1024));
  return jobs;
}

// The whole of copies and writes in one launch's jobs, or false.
bool one_launch(std::span<const ByteCopy> copies, std::span<const WordWrite> writes, CopyJobs& jobs,
                unsigned& blocks) {
  size_t next = 0, next_word = 0;
  jobs = next_jobs(copies, writes, next, next_word, blocks);
  return next == copies.size() && next_word == writes.size();
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
    unsigned blocks = 0;
    const CopyJobs jobs = next_jobs(copies, writes, next, next_word, blocks);
    if (jobs.count == 0 && jobs.words == 0) continue;
    copy_jobs_kernel<<<blocks, kThreads, 0, stream>>>(jobs);
    check(cudaGetLastError(), "copy_within");
  }
}

bool launch_copy_kernel(cudaStream_t stream, std::span<const ByteCopy> copies,
                        std::span<const WordWrite> writes) {
  CopyJobs jobs;
  unsigned blocks = 0;
  if (!one_launch(copies, writes, jobs, blocks)) return false;
  copy_jobs_kernel<<<blocks, kThreads, 0, stream>>>(jobs);
  check(cudaGetLastError(), "copy kernel of a graph");
  return true;
}

void set_copy_kernel(cudaGraphExec_t exec, cudaGraphNode_t node, std::span<const ByteCopy> copies,
                     std::span<const WordWrite> writes) {
  CopyJobs jobs;
  unsigned blocks = 0;
  if (!one_launch(copies, writes, jobs, blocks)) {
    throw Error(detail::str_cat("cuda graph: ", copies.size(), " copies and ", writes.size(),
                                " writes do not fit the copy kernel recorded"));
  }
  void* args[] = {&jobs};
  cudaKernelNodeParams params{};
  params.func = reinterpret_cast<void*>(&copy_jobs_kernel);
  params.gridDim = dim3(blocks);
  params.blockDim = dim3(kThreads);
  params.sharedMemBytes = 0;
  params.kernelParams = args;
  params.extra = nullptr;
  check(cudaGraphExecKernelNodeSetParams(exec, node, &params), "cudaGraphExecKernelNodeSetParams");
}

}  // namespace kiln::backend::cuda
