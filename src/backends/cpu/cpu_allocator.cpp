#include "backends/cpu/cpu_allocator.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/checked_size.h"

namespace kiln::backend {
namespace {

constexpr size_t kGuardBytes = 64;  // one alignment unit on each side keeps data aligned
constexpr unsigned char kGuardPattern = 0xA5;

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

// Large blocks come in sizes rounded to 1/16 of their power of two, so that
// tensors of nearly the same size share cached blocks.
size_t block_size(size_t nbytes) {
  const size_t payload = round_up(std::max<size_t>(nbytes, 1), CpuAllocator::kAlignment);
  if (payload < CpuAllocator::kMinCachedBlock) return payload;
  size_t step = size_t{1} << (63 - __builtin_clzll(payload));
  step = std::max<size_t>(step / 16, CpuAllocator::kAlignment);
  return round_up(payload, step);
}

}  // namespace

CpuAllocator& CpuAllocator::instance() {
  // Never destroyed: tensors with static storage duration may be freed after
  // every other static object is gone.
  static CpuAllocator* allocator = new CpuAllocator();
  return *allocator;
}

void CpuAllocator::note_allocated(size_t nbytes) {
  allocated_ += nbytes;
  peak_ = std::max(peak_, allocated_);
}

void CpuAllocator::note_freed(size_t nbytes) { allocated_ -= nbytes; }

void* CpuAllocator::take_block(size_t block_bytes) {
  if (block_bytes >= kMinCachedBlock) {
    auto it = cache_.find(block_bytes);
    if (it != cache_.end()) {
      void* p = it->second;
      cache_.erase(it);
      cached_bytes_ -= block_bytes;
      return p;
    }
  }
  void* p = std::aligned_alloc(kAlignment, block_bytes);
  if (!p && !cache_.empty()) {  // memory is short: drop the cache and try once more
    for (auto& [size, block] : cache_) std::free(block);
    cache_.clear();
    cached_bytes_ = 0;
    p = std::aligned_alloc(kAlignment, block_bytes);
  }
  if (!p) {
    throw Error(detail::str_cat("cpu: out of memory allocating ", block_bytes, " bytes (",
                                allocated_, " bytes held by tensors)"));
  }
  ++num_system_allocations_;
  return p;
}

void CpuAllocator::give_back(void* block, size_t block_bytes) {
  if (block_bytes >= kMinCachedBlock && cached_bytes_ + block_bytes <= kMaxCachedBytes) {
    cache_.emplace(block_bytes, block);
    cached_bytes_ += block_bytes;
  } else {
    std::free(block);
  }
}

std::shared_ptr<Storage> CpuAllocator::allocate(size_t nbytes, Device device) {
  check_allocation(nbytes, "cpu allocator");  // the rounding below cannot wrap
  std::lock_guard lock(mutex_);
  if (limit_ != 0 && nbytes > limit_ - std::min(limit_, allocated_)) {
    throw Error(detail::str_cat("cpu: out of memory allocating ", nbytes, " bytes (", allocated_,
                                " bytes held by tensors, limit ", limit_, " bytes)"));
  }
  if (guard_bytes_) return allocate_guarded(nbytes, device);
  const size_t bytes = block_size(nbytes);
  void* p = take_block(bytes);
  note_allocated(nbytes);
  return std::make_shared<Storage>(p, nbytes, device, [this, nbytes, bytes](void* data) {
    std::lock_guard inner(mutex_);
    note_freed(nbytes);
    give_back(data, bytes);
  });
}

std::shared_ptr<Storage> CpuAllocator::allocate_guarded(size_t nbytes, Device device) {
  const size_t total = round_up(nbytes, kAlignment) + 2 * kGuardBytes;
  auto* base = static_cast<unsigned char*>(std::aligned_alloc(kAlignment, total));
  if (!base) throw Error(detail::str_cat("cpu: out of memory allocating ", nbytes, " bytes"));
  ++num_system_allocations_;
  note_allocated(nbytes);
  std::memset(base, kGuardPattern, kGuardBytes);
  std::memset(base + kGuardBytes + nbytes, kGuardPattern, total - kGuardBytes - nbytes);
  return std::make_shared<Storage>(
      base + kGuardBytes, nbytes, device, [this, nbytes, total](void* p) {
        unsigned char* start = static_cast<unsigned char*>(p) - kGuardBytes;
        auto intact = [](const unsigned char* b, const unsigned char* e) {
          return std::all_of(b, e, [](unsigned char c) { return c == kGuardPattern; });
        };
        const bool ok = intact(start, start + kGuardBytes) &&
                        intact(start + kGuardBytes + nbytes, start + total);
        std::free(start);
        std::lock_guard inner(mutex_);
        if (!ok) ++guard_violations_;
        note_freed(nbytes);
      });
}

void CpuAllocator::set_limit(size_t bytes) noexcept {
  std::lock_guard lock(mutex_);
  limit_ = bytes;
}

void CpuAllocator::empty_cache() {
  std::lock_guard lock(mutex_);
  for (auto& [size, block] : cache_) std::free(block);
  cache_.clear();
  cached_bytes_ = 0;
}

MemoryStats CpuAllocator::stats() const {
  std::lock_guard lock(mutex_);
  return {allocated_, peak_, num_system_allocations_, allocated_ + cached_bytes_};
}

void CpuAllocator::reset_peak() {
  std::lock_guard lock(mutex_);
  peak_ = allocated_;
}

void CpuAllocator::set_guard_bytes(bool enabled) noexcept {
  std::lock_guard lock(mutex_);
  guard_bytes_ = enabled;
}

size_t CpuAllocator::guard_violations() const noexcept {
  std::lock_guard lock(mutex_);
  return guard_violations_;
}

}  // namespace kiln::backend
