#include "backends/cuda/cuda_allocator.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <memory>
#include <tuple>

#include "backends/cuda/cuda_check.h"
#include "core/checked_size.h"

namespace kiln::backend::cuda {

// A piece of a segment. Neighbours in the same segment are linked so that
// freed blocks can merge; a segment goes back to the driver only whole.
struct CudaAllocator::Block {
  void* ptr;
  size_t size;
  void* stream;
  bool small;                     // from a small-pool segment
  bool allocated = false;
  size_t requested = 0;           // what the tensor asked for, while allocated
  Block* prev = nullptr;          // neighbours within the segment
  Block* next = nullptr;
};

bool CudaAllocator::BySize::operator()(const Block* a, const Block* b) const noexcept {
  return std::tie(a->stream, a->size, a->ptr) < std::tie(b->stream, b->size, b->ptr);
}

CudaAllocator::Pool& CudaAllocator::pool_of(const Block* block) {
  return block->small ? small_ : large_;
}

size_t CudaAllocator::round_size(size_t nbytes) noexcept {
  return std::max<size_t>(kRound, (nbytes + kRound - 1) / kRound * kRound);
}

CudaAllocator& CudaAllocator::for_device(int index) {
  constexpr int kMaxDevices = 64;
  static std::array<std::unique_ptr<CudaAllocator>, kMaxDevices> allocators;
  static std::mutex mutex;
  if (index < 0 || index >= kMaxDevices) {
    throw DeviceError(detail::str_cat("cuda: device index ", index, " is out of range"));
  }
  std::lock_guard lock(mutex);
  // Never destroyed: tensors with static storage duration may be freed after
  // every other static object is gone.
  if (!allocators[index]) allocators[index].reset(new CudaAllocator(index));
  return *allocators[index];
}

std::shared_ptr<CudaAllocator> CudaAllocator::make_private(int index) {
  CudaAllocator& parent = for_device(index);
  return std::shared_ptr<CudaAllocator>(new CudaAllocator(index, &parent));
}

CudaAllocator::~CudaAllocator() {
  if (!parent_) return;  // a device's allocator lives as long as the process
  // Every tensor of the pool is gone (each holds the pool). Segments whose
  // blocks all came back are one free block again: give them back.
  release_cached_segments();
}

void CudaAllocator::account_private(size_t bytes, bool add) {
  std::lock_guard lock(mutex_);
  if (add) {
    allocated_ += bytes;
    reserved_ += bytes;
    peak_ = std::max(peak_, allocated_);
  } else {
    allocated_ -= bytes;
    reserved_ -= bytes;
  }
}

CudaAllocator::Block* CudaAllocator::find_free(Pool& pool, size_t size, void* stream) {
  Block key{nullptr, size, stream, false};
  auto it = pool.free_blocks.lower_bound(&key);
  if (it == pool.free_blocks.end() || (*it)->stream != stream) return nullptr;
  Block* block = *it;
  pool.free_blocks.erase(it);
  return block;
}

CudaAllocator::Block* CudaAllocator::new_segment(size_t size, void* stream, size_t requested, bool exact) {
  const bool small = !parent_ && size <= kSmallRequest;
  // A private pool takes what it is asked for: its memory counts as
  // allocated for as long as the graph lives.
  const size_t segment = exact || parent_ ? size
                         : small ? kSmallSegment
                                 : (size + kLargeRound - 1) / kLargeRound * kLargeRound;
  DeviceGuard guard(device_);
  // A private pool grows while a graph is being recorded on this thread:
  // cudaMalloc does not touch the recorded stream, so it is allowed then.
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  cudaThreadExchangeStreamCaptureMode(&mode);
  void* ptr = nullptr;
  cudaError_t status = cudaMalloc(&ptr, segment);
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    release_cached_segments();
    status = cudaMalloc(&ptr, segment);
  }
  cudaThreadExchangeStreamCaptureMode(&mode);
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    size_t free_bytes = 0, total_bytes = 0;
    cudaMemGetInfo(&free_bytes, &total_bytes);
    throw Error(detail::str_cat("cuda: out of memory on cuda:", device_, " allocating ", requested,
                                " bytes (a ", segment, "-byte segment); ", allocated_,
                                " bytes held by tensors, ", reserved_, " reserved by kiln, ", free_bytes,
                                " of ", total_bytes, " free on the device"));
  }
  check(status, "cudaMalloc");
  if (parent_) parent_->account_private(segment, true);
  reserved_ += segment;
  ++device_mallocs_;
  return new Block{ptr, segment, stream, small};
}

void CudaAllocator::reserve(size_t nbytes) {
  std::lock_guard lock(mutex_);
  if (!parent_ || reserved_ != 0) {
    throw Error(detail::str_cat("cuda allocator: reserve(", nbytes, "): only an empty private pool can reserve"));
  }
  large_.free_blocks.insert(new_segment(round_size(nbytes), nullptr, nbytes, true));
}

void* CudaAllocator::allocate(size_t nbytes, void* stream) {
  check_allocation(nbytes, "cuda allocator");  // round_size cannot wrap
  const size_t size = round_size(nbytes);
  if (parent_) stream = nullptr;  // one graph's memory: its work is ordered
  std::lock_guard lock(mutex_);
  Block* block = find_free(!parent_ && size <= kSmallRequest ? small_ : large_, size, stream);
  if (!block) block = new_segment(size, stream, nbytes);
  // Split off the rest when it is worth keeping as a block of its own.
  const size_t rest = block->size - size;
  const size_t min_rest = block->small || parent_ ? kRound : kMinLargeSplit;
  if (rest >= min_rest) {
    Block* tail = new Block{static_cast<char*>(block->ptr) + size, rest, stream, block->small};
    tail->prev = block;
    tail->next = block->next;
    if (block->next) block->next->prev = tail;
    block->next = tail;
    block->size = size;
    pool_of(tail).free_blocks.insert(tail);
  }
  block->allocated = true;
  block->requested = nbytes;
  live_.emplace(block->ptr, block);
  allocated_ += block->size;
  peak_ = std::max(peak_, allocated_);
  return block->ptr;
}

void CudaAllocator::merge_into(Block* block, Block* neighbour) {
  // neighbour is free and adjacent: it joins block.
  if (neighbour == block->next) {
    block->next = neighbour->next;
    if (neighbour->next) neighbour->next->prev = block;
  } else {
    block->ptr = neighbour->ptr;
    block->prev = neighbour->prev;
    if (neighbour->prev) neighbour->prev->next = block;
  }
  block->size += neighbour->size;
  delete neighbour;
}

void CudaAllocator::free(void* ptr) {
  std::lock_guard lock(mutex_);
  auto it = live_.find(ptr);
  if (it == live_.end()) return;  // not ours: nothing to do (never happens for kiln storage)
  Block* block = it->second;
  live_.erase(it);
  allocated_ -= block->size;
  block->allocated = false;
  block->requested = 0;
  for (Block* neighbour : {block->prev, block->next}) {
    if (neighbour && !neighbour->allocated) {
      pool_of(neighbour).free_blocks.erase(neighbour);
      merge_into(block, neighbour);
    }
  }
  pool_of(block).free_blocks.insert(block);
}

void CudaAllocator::release_cached_segments() {
  DeviceGuard guard(device_);
  for (Pool* pool : {&small_, &large_}) {
    for (auto it = pool->free_blocks.begin(); it != pool->free_blocks.end();) {
      Block* block = *it;
      if (block->prev || block->next) {  // part of a segment still in use
        ++it;
        continue;
      }
      cudaFree(block->ptr);
      reserved_ -= block->size;
      if (parent_) parent_->account_private(block->size, false);
      it = pool->free_blocks.erase(it);
      delete block;
    }
  }
}

MemoryStats CudaAllocator::stats() const {
  std::lock_guard lock(mutex_);
  return {allocated_, peak_, device_mallocs_, reserved_};
}

void CudaAllocator::reset_peak() {
  std::lock_guard lock(mutex_);
  peak_ = allocated_;
}

void CudaAllocator::empty_cache() {
  std::lock_guard lock(mutex_);
  release_cached_segments();
}

}  // namespace kiln::backend::cuda
