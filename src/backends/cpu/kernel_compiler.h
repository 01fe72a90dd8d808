// Generated C++ kernels on the CPU (docs/architecture.md, "Generated kernels
// and their cache"): source compiled by the system compiler into a shared
// library, loaded with dlopen, the library kept in the content-addressed
// disk cache (backends/kernel_cache.h) so that a second process compiling
// the same kernels compiles nothing.
//
// Compiling C++ was measured against an in-process JIT: g++ -O3 builds a
// small fused kernel in 0.4 s (0.3 s of it <cmath>), fifty kernels in one
// translation unit in 2.9-3.3 s (about 60 ms a kernel), with no new
// dependency; the cache makes it a one-time cost per machine.
//
// No compiler (none on PATH, or $KILN_CXX not runnable), a build error or a
// library that does not load is not a failure of the program: load() says
// why, and the caller runs the library kernels instead. A source the
// compiler refused is not compiled again by the same process.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "backends/kernel_cache.h"

namespace kiln::backend::cpu {

struct LoadedKernel {
  void* function = nullptr;       // the extern "C" symbol asked for
  std::shared_ptr<void> library;  // keeps it loaded
};

// Several functions of one source.
struct LoadedKernels {
  std::vector<void*> functions;  // as the symbols asked for
  std::shared_ptr<void> library;
  enum class Origin : uint8_t { kCompiled, kDisk, kMemory } origin = Origin::kCompiled;
  double ms = 0;  // the time load_all took (compiling included)
};

struct KernelCompilerStats {
  int64_t compiled = 0;     // sources compiled by this process
  int64_t disk_hits = 0;    // libraries found in the disk cache
  int64_t memory_hits = 0;  // loads served by a library this process had loaded
  int64_t failed = 0;       // builds the compiler refused (each source once)
  double compile_ms = 0;    // time spent compiling
};

class KernelCompiler {
 public:
  // The process's compiler, over KernelCache::default_dir().
  static KernelCompiler& instance();
  KernelCompiler(std::filesystem::path cache_dir, uint64_t cache_max_bytes);

  // The function `symbol` (extern "C") of `source`: from a library this
  // process loaded, from the disk cache, or compiled now. Null, with `why`,
  // when it cannot be had.
  std::optional<LoadedKernel> load(const std::string& source, const std::string& symbol,
                                   std::string& why);

  // The functions `symbols` of one source, as load() finds one.
  std::optional<LoadedKernels> load_all(const std::string& source,
                                        std::span<const std::string> symbols, std::string& why);

  KernelCompilerStats stats() const;
  KernelCacheStats cache_stats() const { return cache_.stats(); }
  const std::filesystem::path& cache_dir() const noexcept { return cache_.dir(); }

  // The compiler it runs: $KILN_CXX, else c++, g++ or clang++ on PATH;
  // empty (and `why`) when there is none. The flags it passes.
  static std::string find_compiler(std::string& why);
  static const char* flags();

 private:
  KernelCache cache_;
  mutable std::mutex mutex_;
  std::unordered_map<std::string, std::shared_ptr<void>> libraries_;  // by source and compiler
  // Why the compiler refused a source, by source and compiler: a build
  // error is not retried (each new executable of a dynamic program would
  // pay for it again).
  std::unordered_map<std::string, std::string> failures_;
  KernelCompilerStats stats_;
};

}  // namespace kiln::backend::cpu
