// oneDNN glue of the CPU backend: the engine, one stream per thread, a
// per-thread scratchpad, and a registry of primitives keyed by shapes and
// attributes so that a repeated call skips primitive creation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

namespace kiln::backend::cpu {

// The process-wide CPU engine; primitives built on it may run on any thread.
const dnnl::engine& onednn_engine();
// This thread's stream: oneDNN streams must not be shared between threads.
dnnl::stream& onednn_stream();
// This thread's scratchpad, at least nbytes long (primitives use scratchpad_mode::user
// so that concurrent calls never share library-owned scratch memory).
void* onednn_scratchpad(size_t nbytes);
// data, laid out as `from`, run through `reorder` into new memory laid out as
// `to` (owned by oneDNN, freed with its last handle); waits for the result.
dnnl::memory reordered_copy(const dnnl::reorder& reorder, const dnnl::memory::desc& from,
                            const void* data, const dnnl::memory::desc& to);

// For a layout of plain blocks (oneDNN's "blocked" kind: plain strides, or
// blocks such as OIhw16i16o), the offset in elements of each index along
// each dim: element (i0, i1, ...) is at offset0 + tables[0][i0] + tables[1][i1]
// + ... Empty for any other layout (with extra flags, or not blocked).
std::vector<std::vector<int64_t>> blocked_offsets(const dnnl::memory::desc& desc);

// The attributes every cached primitive is created with.
dnnl::primitive_attr onednn_default_attr();

// Primitives (with whatever descriptors their callers need) built once per key.
// Entries are immutable and shared, so a caller keeps using one even if the
// registry evicts it meanwhile. Guarded by a mutex: ops run on many threads.
template <typename Entry>
class OnednnPrimitiveCache {
 public:
  using Key = std::vector<int64_t>;

  // The entry for key, built by make() on a miss (outside the lock: creation is slow).
  template <typename Make>
  std::shared_ptr<const Entry> get(const Key& key, Make&& make) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = entries_.find(key);
      if (it != entries_.end()) return it->second;
    }
    auto entry = std::make_shared<const Entry>(make());
    std::lock_guard<std::mutex> lock(mutex_);
    // A workload with ever-changing shapes must not grow memory without bound.
    if (entries_.size() >= kMaxEntries) entries_.clear();
    return entries_.emplace(key, std::move(entry)).first->second;
  }

 private:
  static constexpr size_t kMaxEntries = 1024;
  struct KeyHash {
    size_t operator()(const Key& key) const noexcept {
      size_t h = 0xcbf29ce484222325ull;
      for (int64_t v : key) h = (h ^ static_cast<size_t>(v)) * 0x100000001b3ull;
      return h;
    }
  };
  std::mutex mutex_;
  std::unordered_map<Key, std::shared_ptr<const Entry>, KeyHash> entries_;
};

}  // namespace kiln::backend::cpu
