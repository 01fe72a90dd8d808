#include "backends/kernel_cache.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <system_error>
#include <vector>

namespace kiln::backend {
namespace fs = std::filesystem;
namespace {

uint64_t fnv1a(const std::string& bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : bytes) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

std::optional<std::string> read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return std::nullopt;
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return std::nullopt;
  return s;
}

bool write_file(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  return static_cast<bool>(out);
}

// "<size> <checksum>" of a product's bytes.
std::string record_of(const std::string& bytes) {
  return std::to_string(bytes.size()) + " " + hex_hash(bytes) + "\n";
}

uint64_t bytes_under(const fs::path& dir) {
  uint64_t total = 0;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code size_ec;
    if (it->is_regular_file(size_ec)) total += it->file_size(size_ec);
  }
  return total;
}

void remove_quietly(const fs::path& p) {
  std::error_code ec;
  fs::remove_all(p, ec);
}

}  // namespace

std::string hex_hash(const std::string& bytes) {
  char out[17];
  std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(fnv1a(bytes)));
  return out;
}

KernelCache::KernelCache(fs::path dir, uint64_t max_bytes)
    : dir_(std::move(dir)), max_bytes_(max_bytes) {}

fs::path KernelCache::default_dir() {
  if (const char* p = std::getenv("KILN_KERNEL_CACHE"); p && *p) return p;
  fs::path base;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) {
    base = x;
  } else if (const char* h = std::getenv("HOME"); h && *h) {
    base = fs::path(h) / ".cache";
  } else {
    base = fs::temp_directory_path();
  }
  return base / "kiln" / "kernels";
}

uint64_t KernelCache::default_max_bytes() {
  if (const char* p = std::getenv("KILN_KERNEL_CACHE_MB"); p && *p) {
    char* end = nullptr;
    const unsigned long long mb = std::strtoull(p, &end, 10);
    if (end && *end == '\0') return static_cast<uint64_t>(mb) << 20;
  }
  return uint64_t{512} << 20;
}

KernelCacheStats KernelCache::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

fs::path KernelCache::scratch_name(const std::string& what) {
  return dir_ / (std::string(".") + what + "-" + std::to_string(::getpid()) + "-" +
                 std::to_string(++counter_));
}

std::optional<fs::path> KernelCache::whole_entry(const fs::path& entry, const std::string& key,
                                                 const std::string& product_name) const {
  const auto stored_key = read_file(entry / "key");
  const auto record = read_file(entry / "record");
  const auto product = read_file(entry / product_name);
  if (!stored_key || !record || !product || *stored_key != key || *record != record_of(*product))
    return std::nullopt;
  return entry / product_name;
}

std::optional<fs::path> KernelCache::get(const std::string& key, const std::string& product_name,
                                         const Build& build, std::string& why, bool* hit) {
  std::lock_guard lock(mutex_);
  if (hit) *hit = false;
  std::error_code ec;
  fs::create_directories(dir_, ec);
  const bool writable = !ec && ::access(dir_.c_str(), W_OK) == 0;
  const fs::path entry = dir_ / hex_hash(key);
  for (int attempt = 0; writable && attempt < 2; ++attempt) {
    if (!fs::exists(entry, ec)) break;
    if (auto product = whole_entry(entry, key, product_name)) {
      ++stats_.hits;
      if (hit) *hit = true;
      fs::last_write_time(entry, fs::file_time_type::clock::now(), ec);  // recently used
      return product;
    }
    // Damaged, or another key with this hash: out of the way, then built again.
    const fs::path trash = scratch_name("trash");
    fs::rename(entry, trash, ec);
    remove_quietly(trash);
    ++stats_.rebuilt;
  }
  // Built in a directory of its own, then renamed into place whole.
  fs::path work = writable ? scratch_name("build")
                           : fs::temp_directory_path() /
                                 ("kiln-kernels-" + std::to_string(::getpid())) / hex_hash(key);
  remove_quietly(work);
  fs::create_directories(work, ec);
  if (ec) {
    why = "cannot make a directory to build in (" + work.string() + ": " + ec.message() + ")";
    return std::nullopt;
  }
  why = build(work / product_name);
  if (!why.empty()) {
    remove_quietly(work);
    return std::nullopt;
  }
  const auto product = read_file(work / product_name);
  if (!product || !write_file(work / "key", key) ||
      !write_file(work / "record", record_of(*product))) {
    why = "cannot write the built product in " + work.string();
    remove_quietly(work);
    return std::nullopt;
  }
  ++stats_.builds;
  if (!writable) return work / product_name;
  fs::rename(work, entry, ec);
  if (ec) {
    // Another process stored this entry meanwhile: use theirs when whole.
    remove_quietly(work);
    if (auto theirs = whole_entry(entry, key, product_name)) return theirs;
    why = "cannot store the built product in " + entry.string() + ": " + ec.message();
    return std::nullopt;
  }
  evict_beyond_bound(entry);
  return entry / product_name;
}

void KernelCache::evict_beyond_bound(const fs::path& keep) {
  struct Item {
    fs::path path;
    fs::file_time_type used;
    uint64_t bytes;
  };
  std::vector<Item> items;
  uint64_t total = 0;
  std::error_code ec;
  for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.empty() || name[0] == '.' || !it->is_directory()) continue;
    std::error_code time_ec;
    const uint64_t bytes = bytes_under(it->path());
    items.push_back({it->path(), fs::last_write_time(it->path(), time_ec), bytes});
    total += bytes;
  }
  std::sort(items.begin(), items.end(),
            [](const Item& a, const Item& b) { return a.used < b.used; });
  for (const Item& item : items) {
    if (total <= max_bytes_) break;
    if (item.path == keep) continue;
    const fs::path trash = scratch_name("trash");
    fs::rename(item.path, trash, ec);
    if (ec) continue;
    remove_quietly(trash);
    total -= item.bytes;
    ++stats_.evicted;
  }
}

}  // namespace kiln::backend
