// A content-addressed cache on disk of generated kernels' build products (a
// shared library on the CPU; the same cache serves a device's binaries)
// (docs/architecture.md, "Generated kernels and their cache").
//
// An entry is a directory named by a hash of its key, the text of
// everything that decides the product: the source, the compiler and its
// flags, the CPU's features, kiln's version. It holds the key, the product
// and a record of the product's size and checksum. It is built in a
// directory of its own and renamed into place, so processes that fill one
// cache at once never see half an entry: the first rename wins, the others
// use its entry. An entry whose key or product does not match (a truncated
// file, a hash collision) is removed and built again. Past the size bound,
// the least recently used entries go.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>
#include <string>

namespace kiln::backend {

struct KernelCacheStats {
  int64_t hits = 0;     // products found on disk
  int64_t builds = 0;   // products built (and stored)
  int64_t rebuilt = 0;  // entries found damaged, removed and built again
  int64_t evicted = 0;  // entries removed to stay within the bound
};

class KernelCache {
 public:
  // Writes the product at the path it is given; returns "" or why it failed.
  using Build = std::function<std::string(const std::filesystem::path& product)>;

  KernelCache(std::filesystem::path dir, uint64_t max_bytes);

  // The path of the product for `key`: from the cache, or built now (then
  // stored). Null when the build fails (`why` says why; nothing is stored).
  // When the cache's directory cannot be written, the product is built in a
  // directory of this process instead. `hit` tells whether it came from disk.
  std::optional<std::filesystem::path> get(const std::string& key, const std::string& product_name,
                                           const Build& build, std::string& why,
                                           bool* hit = nullptr);

  KernelCacheStats stats() const;
  const std::filesystem::path& dir() const noexcept { return dir_; }

  // $KILN_KERNEL_CACHE, else $XDG_CACHE_HOME/kiln/kernels, else ~/.cache/kiln/kernels.
  static std::filesystem::path default_dir();
  // $KILN_KERNEL_CACHE_MB megabytes (default 512).
  static uint64_t default_max_bytes();

 private:
  // The entry's product when the entry is whole and holds `key`.
  std::optional<std::filesystem::path> whole_entry(const std::filesystem::path& entry,
                                                   const std::string& key,
                                                   const std::string& product_name) const;
  void evict_beyond_bound(const std::filesystem::path& keep);
  std::filesystem::path scratch_name(const std::string& what);

  std::filesystem::path dir_;
  uint64_t max_bytes_;
  mutable std::mutex mutex_;
  KernelCacheStats stats_;
  uint64_t counter_ = 0;
};

// FNV-1a over bytes, as 16 hex digits.
std::string hex_hash(const std::string& bytes);

}  // namespace kiln::backend
