#include "backends/cpu/kernel_compiler.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <vector>

#include "kiln/error.h"
#include "kiln/runtime.h"

extern char** environ;

namespace kiln::backend::cpu {
namespace fs = std::filesystem;
namespace {

bool executable_file(const fs::path& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0;
}

std::string read_text(const fs::path& p, size_t at_most) {
  std::ifstream in(p, std::ios::binary);
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (s.size() > at_most) s = s.substr(0, at_most) + "\n...";
  return s;
}

// Runs argv with stdout and stderr into `log`; its exit status, or -1 when
// it could not start.
int run(const std::vector<std::string>& argv, const fs::path& log) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  pid_t pid = 0;
  const int started = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (started != 0) return -1;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// What decides a library besides its source: the compiler (its --version),
// the flags, the CPU (its model and features: -march=native), kiln's version.
std::string build_identity(const std::string& compiler) {
  static std::mutex mutex;
  static std::unordered_map<std::string, std::string> known;
  std::lock_guard lock(mutex);
  if (auto it = known.find(compiler); it != known.end()) return it->second;
  const fs::path log =
      fs::temp_directory_path() / ("kiln-cxx-version-" + std::to_string(::getpid()));
  std::string version = run({compiler, "--version"}, log) == 0 ? read_text(log, 4096) : "unknown";
  std::error_code ec;
  fs::remove(log, ec);
  std::string cpu;
  std::ifstream info("/proc/cpuinfo");
  for (std::string line; std::getline(info, line);) {
    if (line.rfind("model name", 0) == 0 || line.rfind("flags", 0) == 0) cpu += line + "\n";
    if (line.empty() && !cpu.empty()) break;  // the first processor is enough
  }
  std::string id = "compiler " + compiler + "\n" + version + "\nflags " + KernelCompiler::flags() +
                   "\ncpu\n" + cpu + "kiln " + version_string() + "\n";
  known.emplace(compiler, id);
  return id;
}

}  // namespace

KernelCompiler& KernelCompiler::instance() {
  static KernelCompiler compiler(KernelCache::default_dir(), KernelCache::default_max_bytes());
  return compiler;
}

KernelCompiler::KernelCompiler(fs::path cache_dir, uint64_t cache_max_bytes)
    : cache_(std::move(cache_dir), cache_max_bytes) {}

const char* KernelCompiler::flags() {
  // The library's floating-point flags (CMakeLists.txt): each operation
  // rounds on its own, as in the library kernels (no fused multiply-add that
  // eager does not do), and loops with selects vectorize.
  return "-std=c++20 -O3 -march=native -fno-math-errno -fno-trapping-math -ffp-contract=off -fPIC "
         "-shared";
}

std::string KernelCompiler::find_compiler(std::string& why) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "");
  std::vector<std::string> searched;
  for (std::string dir; std::getline(dirs, dir, ':');) searched.push_back(dir.empty() ? "." : dir);
  const auto on_path = [&](const std::string& name) -> std::string {
    for (const std::string& dir : searched) {
      const fs::path candidate = fs::path(dir) / name;
      if (executable_file(candidate)) return candidate.string();
    }
    return "";
  };
  if (const char* cxx = std::getenv("KILN_CXX"); cxx && *cxx) {
    // A name without a slash is looked up on PATH, as a shell would.
    const std::string found = std::string(cxx).find('/') == std::string::npos ? on_path(cxx)
                              : executable_file(cxx)                          ? std::string(cxx)
                                                                              : std::string();
    if (!found.empty()) return found;
    why = std::string("KILN_CXX is '") + cxx + "', which is not an executable file";
    return "";
  }
  for (const char* name : {"c++", "g++", "clang++"}) {
    if (std::string found = on_path(name); !found.empty()) return found;
  }
  why = "no C++ compiler (c++, g++ or clang++) on PATH, and KILN_CXX is not set";
  return "";
}

std::optional<LoadedKernel> KernelCompiler::load(const std::string& source,
                                                 const std::string& symbol, std::string& why) {
  auto loaded = load_all(source, std::span<const std::string>(&symbol, 1), why);
  if (!loaded) return std::nullopt;
  return LoadedKernel{loaded->functions[0], loaded->library};
}

std::optional<LoadedKernels> KernelCompiler::load_all(const std::string& source,
                                                      std::span<const std::string> symbols,
                                                      std::string& why) {
  const auto start = std::chrono::steady_clock::now();
  LoadedKernels loaded;
  const std::string compiler = find_compiler(why);
  if (compiler.empty()) return std::nullopt;
  const std::string key = build_identity(compiler) + "source\n" + source;
  std::lock_guard lock(mutex_);
  std::shared_ptr<void> library;
  if (auto it = failures_.find(key); it != failures_.end()) {
    why = it->second + "\n(the same source failed earlier in this process; not built again)";
    return std::nullopt;
  }
  if (auto it = libraries_.find(key); it != libraries_.end()) {
    library = it->second;
    ++stats_.memory_hits;
    loaded.origin = LoadedKernels::Origin::kMemory;
  } else {
    double ms = 0;
    bool hit = false, refused = false;
    const auto path = cache_.get(
        key, "kernel.so",
        [&](const fs::path& product) -> std::string {
          const fs::path src = product.parent_path() / "kernel.cpp",
                         log = product.parent_path() / "build.log";
          std::ofstream(src) << source;
          std::vector<std::string> argv = {compiler};
          std::stringstream f(flags());
          for (std::string flag; f >> flag;) argv.push_back(flag);
          argv.insert(argv.end(), {"-o", product.string(), src.string()});
          const auto start = std::chrono::steady_clock::now();
          const int status = run(argv, log);
          ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                   .count();
          if (status == 0 && fs::exists(product)) return "";
          refused = status > 0;
          return status < 0 ? "could not run " + compiler
                            : compiler + " failed (exit status " + std::to_string(status) + "):\n" +
                                  read_text(log, 2000);
        },
        why, &hit);
    if (!path) {
      if (refused) {
        ++stats_.failed;
        failures_.emplace(key, why);
      }
      return std::nullopt;
    }
    loaded.origin = hit ? LoadedKernels::Origin::kDisk : LoadedKernels::Origin::kCompiled;
    if (hit) {
      ++stats_.disk_hits;
    } else {
      ++stats_.compiled;
      stats_.compile_ms += ms;
    }
    void* handle = ::dlopen(path->c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      const char* err = ::dlerror();
      why = "the compiled library " + path->string() +
            " does not load: " + (err ? err : "dlopen failed");
      return std::nullopt;
    }
    // A library built outside the cache (its directory was not writable)
    // is not needed on disk once loaded.
    std::error_code ec;
    if (path->parent_path().parent_path() != cache_.dir()) fs::remove_all(path->parent_path(), ec);
    library = std::shared_ptr<void>(handle, [](void* h) { ::dlclose(h); });
    libraries_.emplace(key, library);
  }
  for (const std::string& symbol : symbols) {
    ::dlerror();
    void* fn = ::dlsym(library.get(), symbol.c_str());
    if (!fn) {
      why = "the compiled library has no function " + symbol;
      return std::nullopt;
    }
    loaded.functions.push_back(fn);
  }
  loaded.library = std::move(library);
  loaded.ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return loaded;
}

KernelCompilerStats KernelCompiler::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

}  // namespace kiln::backend::cpu
