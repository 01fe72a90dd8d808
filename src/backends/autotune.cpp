#include "backends/autotune.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "io/atomic_file.h"
#include "kiln/error.h"

namespace kiln::backend::autotune {
namespace {

thread_local bool t_active = false;
std::atomic<int64_t> g_timed{0};

struct Cache {
  std::mutex mutex;
  std::string loaded_from;  // the path `entries` was read from ("" : not read)
  std::map<std::string, int64_t> entries;
  std::set<std::string> warned;  // paths already complained about
};

Cache& cache() {
  static Cache* c = new Cache();  // used by kernels that may run during static destruction
  return *c;
}

void warn_once(Cache& c, const std::string& path, const std::string& what) {
  if (!c.warned.insert(path + what).second) return;
  std::fprintf(stderr, "kiln: autotune cache %s: %s\n", path.c_str(), what.c_str());
}

// Reads the file once per path (the caller holds the mutex).
void load(Cache& c, const std::string& path) {
  if (c.loaded_from == path) return;
  c.loaded_from = path;
  c.entries.clear();
  std::ifstream in(path);
  if (!in) return;  // no cache yet
  try {
    const nlohmann::json j = nlohmann::json::parse(in);
    if (!j.is_object() || !j.contains("entries") || !j["entries"].is_object()) {
      warn_once(c, path, "is not a kiln autotune cache (no \"entries\" object); it will be written afresh");
      return;
    }
    for (const auto& [key, value] : j["entries"].items()) {
      if (value.is_number_integer()) c.entries[key] = value.get<int64_t>();
    }
  } catch (const nlohmann::json::exception& e) {
    warn_once(c, path, std::string("is malformed (") + e.what() + "); it will be written afresh");
  }
}

}  // namespace

bool active() noexcept { return t_active; }

Scope::Scope() noexcept : previous_(t_active) { t_active = true; }
Scope::~Scope() { t_active = previous_; }

std::string cache_path() {
  if (const char* p = std::getenv("KILN_AUTOTUNE_CACHE"); p && *p) return p;
  std::filesystem::path base;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) {
    base = x;
  } else if (const char* h = std::getenv("HOME"); h && *h) {
    base = std::filesystem::path(h) / ".cache";
  } else {
    base = std::filesystem::temp_directory_path();
  }
  return (base / "kiln" / "autotune.json").string();
}

std::optional<int64_t> lookup(const std::string& key) {
  Cache& c = cache();
  std::lock_guard lock(c.mutex);
  load(c, cache_path());
  const auto it = c.entries.find(key);
  if (it == c.entries.end()) return std::nullopt;
  return it->second;
}

void store(const std::string& key, int64_t choice) {
  Cache& c = cache();
  std::lock_guard lock(c.mutex);
  const std::string path = cache_path();
  load(c, path);
  c.entries[key] = choice;
  nlohmann::json j;
  j["format"] = "kiln autotune cache";
  j["version"] = 1;
  j["entries"] = c.entries;
  std::error_code ec;
  const std::filesystem::path target(path);
  if (target.has_parent_path()) std::filesystem::create_directories(target.parent_path(), ec);
  // Written whole beside the target, then renamed over it (io/atomic_file.h).
  try {
    io::AtomicFileWriter out(path, "autotune cache");
    const std::string text = j.dump(1) + "\n";
    out.write(text.data(), text.size());
    out.commit();
  } catch (const IOError& e) {
    warn_once(c, path,
              detail::str_cat("cannot be written (", e.what(), "); tuning results are not kept"));
  }
}

void forget_loaded() {
  Cache& c = cache();
  std::lock_guard lock(c.mutex);
  c.loaded_from.clear();
  c.entries.clear();
}

int64_t candidates_timed() noexcept { return g_timed.load(std::memory_order_relaxed); }
void note_timed(int64_t candidates) noexcept { g_timed.fetch_add(candidates, std::memory_order_relaxed); }

}  // namespace kiln::backend::autotune
