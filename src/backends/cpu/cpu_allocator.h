// CPU memory for tensors: 64-byte aligned blocks with statistics. Freed blocks
// of 1 MiB and more are kept for reuse (bounded), because the system returns
// large blocks to the kernel and every new one then page-faults on first
// touch: without the cache an eager op on 64 MB spends more time faulting
// than computing.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>

#include "backends/backend.h"

namespace kiln::backend {

class CpuAllocator {
 public:
  static constexpr size_t kAlignment = 64;
  // Blocks from here up are cached: below it malloc's own free lists serve well,
  // above it malloc maps and unmaps pages on every call (page faults on every
  // gradient and optimizer temporary of a mid-sized layer).
  static constexpr size_t kMinCachedBlock = size_t{64} << 10;
  static constexpr size_t kMaxCachedBytes = size_t{2} << 30;

  static CpuAllocator& instance();
  std::shared_ptr<Storage> allocate(size_t nbytes, Device device);
  // Returns every cached block to the system.
  void empty_cache();
  MemoryStats stats() const;
  void reset_peak();
  // A bound on the bytes tensors hold at once (0: none): an allocation past it
  // is the out-of-memory Error, as when the system refuses. Tests use it to
  // keep random sizes from taking the machine's memory.
  void set_limit(size_t bytes) noexcept;
  // Test support: guard bytes around each allocation, checked when it is freed.
  void set_guard_bytes(bool enabled) noexcept;
  size_t guard_violations() const noexcept;

 private:
  void* take_block(size_t block_bytes);
  void give_back(void* block, size_t block_bytes);
  void note_allocated(size_t nbytes);
  void note_freed(size_t nbytes);
  std::shared_ptr<Storage> allocate_guarded(size_t nbytes, Device device);

  mutable std::mutex mutex_;  // guards everything below
  std::multimap<size_t, void*> cache_;
  size_t cached_bytes_ = 0;
  size_t allocated_ = 0;
  size_t peak_ = 0;
  size_t num_system_allocations_ = 0;
  size_t limit_ = 0;
  bool guard_bytes_ = false;
  size_t guard_violations_ = 0;
};

}  // namespace kiln::backend
