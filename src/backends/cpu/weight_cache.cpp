#include "backends/cpu/weight_cache.h"

#include <cstdlib>
#include <list>
#include <memory>
#include <mutex>

#include "backends/cpu/loops.h"
#include "kiln/ops/factory.h"

namespace kiln::backend::cpu {
namespace {

struct Entry {
  std::weak_ptr<Storage> storage;
  const Storage* key;
  int64_t offset, rows, cols;
  uint64_t version;
  Tensor transposed;
  size_t bytes;
};

size_t capacity_bytes() {
  static const size_t cap = [] {
    const char* env = std::getenv("KILN_WEIGHT_CACHE_MB");
    const long long mb = env && *env ? std::atoll(env) : 1024;
    return static_cast<size_t>(mb > 0 ? mb : 0) << 20;
  }();
  return cap;
}

// Most recently used first.
struct Cache {
  std::mutex mutex;
  std::list<Entry> entries;
  size_t bytes = 0;

  void erase(std::list<Entry>::iterator it) {
    bytes -= it->bytes;
    entries.erase(it);
  }
  // Drops entries whose weight is gone, then the least recently used until
  // `incoming` more bytes fit.
  void make_room(size_t incoming) {
    for (auto it = entries.begin(); it != entries.end();) {
      auto next = std::next(it);
      if (it->storage.expired()) erase(it);
      it = next;
    }
    while (!entries.empty() && bytes + incoming > capacity_bytes()) erase(std::prev(entries.end()));
  }
};

Cache& cache() {
  static Cache c;
  return c;
}

// [N, K] -> [K, N] in 32 x 32 tiles, rows of tiles spread over threads.
Tensor transpose_copy(const Tensor& weight) {
  const int64_t n = weight.size(0), k = weight.size(1);
  Tensor out = empty({k, n}, {.dtype = kFloat32});
  const float* src = weight.data<float>();
  float* dst = out.data<float>();
  constexpr int64_t kTile = 32;
  parallel_for((n + kTile - 1) / kTile, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t i0 = t0 * kTile; i0 < std::min(n, t1 * kTile); i0 += kTile) {
      for (int64_t j0 = 0; j0 < k; j0 += kTile) {
        for (int64_t i = i0; i < std::min(n, i0 + kTile); ++i)
          for (int64_t j = j0; j < std::min(k, j0 + kTile); ++j) dst[j * n + i] = src[i * k + j];
      }
    }
  });
  return out;
}

}  // namespace

Tensor cached_transposed_weight(const Tensor& weight) {
  const size_t bytes = static_cast<size_t>(weight.numel()) * sizeof(float);
  if (bytes > capacity_bytes()) return {};
  const std::shared_ptr<Storage>& storage = weight.impl().storage;
  if (!storage) return {};
  const uint64_t version = storage->version();
  const int64_t offset = weight.storage_offset(), rows = weight.size(0), cols = weight.size(1);
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  for (auto it = c.entries.begin(); it != c.entries.end(); ++it) {
    if (it->key != storage.get() || it->offset != offset || it->rows != rows || it->cols != cols) continue;
    // The same address may hold a new storage once the old one is freed.
    if (it->storage.lock() != storage || it->version != version) {
      c.erase(it);
      break;
    }
    c.entries.splice(c.entries.begin(), c.entries, it);
    return it->transposed;
  }
  c.make_room(bytes);
  Tensor transposed = transpose_copy(weight);
  c.entries.push_front({storage, storage.get(), offset, rows, cols, version, transposed, bytes});
  c.bytes += bytes;
  return transposed;
}

size_t weight_cache_bytes() {
  std::lock_guard<std::mutex> lock(cache().mutex);
  return cache().bytes;
}

void clear_weight_cache() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  c.entries.clear();
  c.bytes = 0;
}

}  // namespace kiln::backend::cpu
