#include "backends/cpu/weight_cache.h"

#include <cstdlib>
#include <list>
#include <mutex>

#include "backends/cpu/loops.h"
#include "kiln/ops/factory.h"

namespace kiln::backend::cpu {
namespace {

struct Key {
  const Storage* storage;
  DerivedWeight kind;
  int64_t offset, rows, cols, row_stride, col_stride;
  bool operator==(const Key&) const = default;
};

struct Entry {
  Key key;
  std::weak_ptr<Storage> storage;  // expires with the weight: a new storage at the same address never matches
  uint64_t version;
  std::shared_ptr<const void> value;
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

std::shared_ptr<const void> derived_weight(const Tensor& weight, DerivedWeight kind, size_t bytes,
                                           const std::function<std::shared_ptr<const void>()>& make,
                                           const std::function<bool(const void*)>& accept) {
  const std::shared_ptr<Storage>& storage = weight.impl().storage;
  if (!storage || bytes > capacity_bytes()) return nullptr;
  const uint64_t version = storage->version();
  const Key key{storage.get(), kind,           weight.storage_offset(), weight.size(0),
                weight.size(1), weight.stride(0), weight.stride(1)};
  Cache& c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    for (auto it = c.entries.begin(); it != c.entries.end(); ++it) {
      if (!(it->key == key)) continue;
      if (it->storage.lock() != storage || it->version != version ||
          (accept && !accept(it->value.get()))) {
        c.erase(it);
        break;
      }
      c.entries.splice(c.entries.begin(), c.entries, it);
      return it->value;
    }
  }
  // Made outside the lock: other weights stay reachable meanwhile.
  std::shared_ptr<const void> value = make();
  std::lock_guard<std::mutex> lock(c.mutex);
  for (auto it = c.entries.begin(); it != c.entries.end(); ++it) {
    if (it->key == key) {  // another thread made it meanwhile
      c.erase(it);
      break;
    }
  }
  c.make_room(bytes);
  c.entries.push_front({key, storage, version, value, bytes});
  c.bytes += bytes;
  return value;
}

Tensor cached_transposed_weight(const Tensor& weight) {
  const auto value = derived_weight(weight, DerivedWeight::transposed,
                                    static_cast<size_t>(weight.numel()) * sizeof(float),
                                    [&] { return std::make_shared<const Tensor>(transpose_copy(weight)); });
  return value ? *static_cast<const Tensor*>(value.get()) : Tensor();
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
