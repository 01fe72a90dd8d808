// Page-locked (pinned) host memory for copies between the host and CUDA
// devices: Tensor::pin_memory(), the CPU side of non-blocking copies to the
// host, and the staging buffers of non-blocking copies from pageable memory.
//
// Blocks are cached by power-of-two size class. A block that copies were
// queued with is reused only after those copies finished: record_stream()
// notes each stream, and free() records an event on each, which later
// allocations query before handing the block out again.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <map>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

namespace kiln::backend::cuda {

class HostAllocator {
 public:
  static HostAllocator& instance();

  void* allocate(size_t nbytes);
  void free(void* ptr);
  // Whether ptr lies in a live pinned block.
  bool contains(const void* ptr);
  // The block holding ptr is used by work queued on stream (of device).
  void record_stream(const void* ptr, int device, cudaStream_t stream);
  // Returns unused blocks (whose copies finished) to the system.
  void empty_cache();

 private:
  struct Block {
    size_t size = 0;
    bool in_use = false;
    std::set<std::pair<int, cudaStream_t>> streams;  // uses since allocation
    std::vector<cudaEvent_t> pending;                // recorded at free
  };
  // Moves freed blocks whose events all completed to the free lists.
  void collect_locked();

  std::mutex mutex_;
  std::map<char*, Block> blocks_;                  // every block, by address
  std::multimap<size_t, char*> free_;              // reusable, by size
  std::vector<char*> waiting_;                     // freed, copies maybe still running
};

}  // namespace kiln::backend::cuda
