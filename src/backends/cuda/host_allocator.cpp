#include "backends/cuda/host_allocator.h"

#include <bit>

#include "backends/cuda/cuda_check.h"
#include "core/checked_size.h"
#include "kiln/error.h"

namespace kiln::backend::cuda {

HostAllocator& HostAllocator::instance() {
  static HostAllocator* allocator = new HostAllocator();  // outlives static destructors
  return *allocator;
}

void* HostAllocator::allocate(size_t nbytes) {
  check_allocation(nbytes, "pinned host allocator");  // bit_ceil cannot wrap
  const size_t size = std::bit_ceil(std::max<size_t>(nbytes, 4096));
  std::lock_guard<std::mutex> lock(mutex_);
  collect_locked();
  auto it = free_.find(size);
  if (it != free_.end()) {
    char* p = it->second;
    free_.erase(it);
    blocks_[p].in_use = true;
    return p;
  }
  void* p = nullptr;
  cudaError_t status = cudaHostAlloc(&p, size, cudaHostAllocDefault);
  if (status != cudaSuccess) {  // release the cache and try once more
    cudaGetLastError();
    for (auto& [s, q] : free_) {
      cudaFreeHost(q);
      blocks_.erase(q);
    }
    free_.clear();
    status = cudaHostAlloc(&p, size, cudaHostAllocDefault);
  }
  if (status != cudaSuccess) {
    cudaGetLastError();
    throw Error(detail::str_cat("pinned host memory: cannot allocate ", nbytes, " bytes: ",
                                      cudaGetErrorString(status)));
  }
  Block& b = blocks_[static_cast<char*>(p)];
  b.size = size;
  b.in_use = true;
  return p;
}

void HostAllocator::free(void* ptr) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = blocks_.find(static_cast<char*>(ptr));
  if (it == blocks_.end()) return;
  Block& b = it->second;
  b.in_use = false;
  for (const auto& [device, stream] : b.streams) {
    int previous = 0;
    cudaGetDevice(&previous);
    if (previous != device) cudaSetDevice(device);
    cudaEvent_t event = nullptr;
    if (cudaEventCreateWithFlags(&event, cudaEventDisableTiming) == cudaSuccess &&
        cudaEventRecord(event, stream) == cudaSuccess) {
      b.pending.push_back(event);
    } else {  // no event: wait for the stream instead
      cudaGetLastError();
      if (event) cudaEventDestroy(event);
      cudaStreamSynchronize(stream);
    }
    if (previous != device) cudaSetDevice(previous);
  }
  b.streams.clear();
  if (b.pending.empty()) {
    free_.emplace(b.size, it->first);
  } else {
    waiting_.push_back(it->first);
  }
}

void HostAllocator::collect_locked() {
  for (size_t i = 0; i < waiting_.size();) {
    Block& b = blocks_[waiting_[i]];
    while (!b.pending.empty() && cudaEventQuery(b.pending.back()) != cudaErrorNotReady) {
      cudaEventDestroy(b.pending.back());
      b.pending.pop_back();
    }
    cudaGetLastError();
    if (b.pending.empty()) {
      free_.emplace(b.size, waiting_[i]);
      waiting_[i] = waiting_.back();
      waiting_.pop_back();
    } else {
      ++i;
    }
  }
}

bool HostAllocator::contains(const void* ptr) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = blocks_.upper_bound(const_cast<char*>(static_cast<const char*>(ptr)));
  if (it == blocks_.begin()) return false;
  --it;
  return it->second.in_use && static_cast<const char*>(ptr) < it->first + it->second.size;
}

void HostAllocator::record_stream(const void* ptr, int device, cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = blocks_.upper_bound(const_cast<char*>(static_cast<const char*>(ptr)));
  if (it == blocks_.begin()) return;
  --it;
  if (static_cast<const char*>(ptr) < it->first + it->second.size)
    it->second.streams.emplace(device, stream);
}

void HostAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  collect_locked();
  for (auto& [size, p] : free_) {
    cudaFreeHost(p);
    blocks_.erase(p);
  }
  free_.clear();
}

}  // namespace kiln::backend::cuda
