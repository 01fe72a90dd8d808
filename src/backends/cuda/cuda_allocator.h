// The CUDA caching allocator: device memory is taken from the driver in
// segments (2 MiB for requests up to 1 MiB, the request rounded up to 2 MiB
// above) and kept after tensors free it. A request is served by the smallest
// free block of its pool (small or large) on the same device and stream, split
// when the rest is worth keeping; freed blocks merge with free neighbours of
// their segment. Out of memory frees the cached segments, retries once, then
// throws a kiln::Error naming the request and the statistics.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <set>
#include <unordered_map>

#include "backends/backend.h"

namespace kiln::backend::cuda {

class CudaAllocator {
 public:
  static constexpr size_t kRound = 512;                  // every block is a multiple of this
  static constexpr size_t kSmallRequest = 1 << 20;       // up to this: the small pool
  static constexpr size_t kSmallSegment = 2 << 20;       // segment size of the small pool
  static constexpr size_t kLargeRound = 2 << 20;         // large segments round up to this
  static constexpr size_t kMinLargeSplit = 1 << 20;      // a large block's rest below this stays attached

  // The allocator of device `index`, created on first use.
  static CudaAllocator& for_device(int index);
  // A pool private to one device graph (DeviceGraph): it never gives its
  // blocks to anyone else, and returns its segments to the driver when
  // destroyed. Its segments count as allocated (and reserved) in the
  // statistics of the device's allocator while the pool exists. Its memory
  // serves one graph, whose work is ordered: blocks are not kept apart by
  // stream, nor small requests from large ones, and its segments are as
  // large as the requests that make them (not rounded to segment sizes).
  static std::shared_ptr<CudaAllocator> make_private(int index);
  // A private pool's first segment, of nbytes exactly (rounded to kRound),
  // made before anything is allocated: requests are split from it while it
  // has room.
  void reserve(size_t nbytes);
  ~CudaAllocator();

  // A block of at least nbytes (one kRound block for 0) usable on `stream`.
  void* allocate(size_t nbytes, void* stream);
  void free(void* ptr);

  MemoryStats stats() const;
  void reset_peak();
  // Gives every segment without a live block back to the driver.
  void empty_cache();

  // Rounded size a request is served with.
  static size_t round_size(size_t nbytes) noexcept;

 private:
  struct Block;
  struct BySize {
    bool operator()(const Block* a, const Block* b) const noexcept;
  };
  struct Pool {
    std::set<Block*, BySize> free_blocks;
  };

  explicit CudaAllocator(int index, CudaAllocator* parent = nullptr) : device_(index), parent_(parent) {}
  // A private pool's segments, as the parent's statistics see them.
  void account_private(size_t bytes, bool add);
  Pool& pool_of(const Block* block);
  Block* find_free(Pool& pool, size_t size, void* stream);
  // `exact`: a segment of `size` bytes, not rounded up to the pools' segment sizes.
  Block* new_segment(size_t size, void* stream, size_t requested, bool exact = false);
  void release_cached_segments();
  void merge_into(Block* block, Block* neighbour);

  int device_;
  CudaAllocator* parent_;  // set for a private pool
  mutable std::mutex mutex_;
  Pool small_, large_;
  std::unordered_map<void*, Block*> live_;  // allocated blocks by address
  size_t allocated_ = 0, peak_ = 0, reserved_ = 0, device_mallocs_ = 0;
};

}  // namespace kiln::backend::cuda
