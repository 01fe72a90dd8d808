// Generated kernels' compiler and disk cache (backends/cpu/kernel_compiler.h,
// backends/kernel_cache.h): compiled once per machine, a second process
// compiles nothing, processes filling one cache at once agree, damaged
// entries are rebuilt, the cache stays within its bound, and no compiler
// or a build error is a reason, not a failure.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "backends/cpu/kernel_compiler.h"

namespace kiln::backend::cpu {
namespace {

namespace fs = std::filesystem;

// A fresh cache directory of this test, removed at the end.
struct TempCache {
  fs::path dir;
  explicit TempCache(const std::string& name)
      : dir(fs::temp_directory_path() /
            ("kiln_kernels_" + name + "_" + std::to_string(::getpid()))) {
    fs::remove_all(dir);
  }
  ~TempCache() { fs::remove_all(dir); }
  size_t entries() const {
    size_t n = 0;
    for (const auto& e : fs::directory_iterator(dir))
      n += e.is_directory() && e.path().filename().string()[0] != '.';
    return n;
  }
};

// Sets an environment variable for a scope.
struct ScopedEnv {
  std::string name;
  std::optional<std::string> old;
  ScopedEnv(std::string n, const std::string& value) : name(std::move(n)) {
    if (const char* v = std::getenv(name.c_str())) old = v;
    ::setenv(name.c_str(), value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old) {
      ::setenv(name.c_str(), old->c_str(), 1);
    } else {
      ::unsetenv(name.c_str());
    }
  }
};

std::string adder(int k) {
  return "extern \"C\" int kiln_test_add(int a, int b) { return a + b + " + std::to_string(k) +
         "; }\n";
}

using AddFn = int (*)(int, int);

int call(const LoadedKernel& k, int a, int b) { return reinterpret_cast<AddFn>(k.function)(a, b); }

constexpr uint64_t kRoomy = uint64_t{64} << 20;

TEST(KernelCompiler, CompilesOnceAndLoadsFromMemoryAfter) {
  TempCache cache("once");
  KernelCompiler compiler(cache.dir, kRoomy);
  std::string why;
  const auto k = compiler.load(adder(0), "kiln_test_add", why);
  ASSERT_TRUE(k) << why;
  EXPECT_EQ(call(*k, 2, 3), 5);
  const auto again = compiler.load(adder(0), "kiln_test_add", why);
  ASSERT_TRUE(again) << why;
  EXPECT_EQ(again->function, k->function);
  const KernelCompilerStats s = compiler.stats();
  EXPECT_EQ(s.compiled, 1);
  EXPECT_EQ(s.memory_hits, 1);
  EXPECT_GT(s.compile_ms, 0);
  EXPECT_EQ(cache.entries(), 1u);
  // Another source is another library.
  const auto other = compiler.load(adder(7), "kiln_test_add", why);
  ASSERT_TRUE(other) << why;
  EXPECT_EQ(call(*other, 2, 3), 12);
  EXPECT_EQ(cache.entries(), 2u);
  // A symbol the library lacks.
  EXPECT_FALSE(compiler.load(adder(0), "kiln_no_such_function", why));
  EXPECT_NE(why.find("no function kiln_no_such_function"), std::string::npos) << why;
}

// Runs f in a child process; its exit status (0: f returned true).
template <typename F>
pid_t in_child(F f) {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(f() ? 0 : 1);
  return pid;
}

int status_of(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(KernelCompiler, ASecondProcessCompilesNothing) {
  TempCache cache("warm");
  {
    KernelCompiler first(cache.dir, kRoomy);
    std::string why;
    ASSERT_TRUE(first.load(adder(1), "kiln_test_add", why)) << why;
    ASSERT_EQ(first.stats().compiled, 1);
  }
  const pid_t child = in_child([&] {
    KernelCompiler second(cache.dir, kRoomy);
    std::string why;
    const auto k = second.load(adder(1), "kiln_test_add", why);
    return k && call(*k, 1, 1) == 3 && second.stats().compiled == 0 &&
           second.stats().disk_hits == 1;
  });
  EXPECT_EQ(status_of(child), 0)
      << "the second process compiled, or did not load the cached library";
}

TEST(KernelCompiler, TwoProcessesFillingOneCacheAgree) {
  TempCache cache("race");
  const auto fill = [&] {
    KernelCompiler c(cache.dir, kRoomy);
    std::string why;
    const auto k = c.load(adder(2), "kiln_test_add", why);
    return k && call(*k, 0, 0) == 2;
  };
  const pid_t a = in_child(fill), b = in_child(fill);
  EXPECT_EQ(status_of(a), 0);
  EXPECT_EQ(status_of(b), 0);
  EXPECT_EQ(cache.entries(), 1u);
  KernelCompiler after(cache.dir, kRoomy);
  std::string why;
  ASSERT_TRUE(after.load(adder(2), "kiln_test_add", why)) << why;
  EXPECT_EQ(after.stats().compiled, 0);
  // No build directory is left behind.
  for (const auto& e : fs::directory_iterator(cache.dir))
    EXPECT_NE(e.path().filename().string().rfind(".build", 0), 0u) << e.path();
}

TEST(KernelCompiler, ADamagedEntryIsBuiltAgain) {
  TempCache cache("damaged");
  fs::path entry;
  {
    KernelCompiler c(cache.dir, kRoomy);
    std::string why;
    ASSERT_TRUE(c.load(adder(3), "kiln_test_add", why)) << why;
    for (const auto& e : fs::directory_iterator(cache.dir)) entry = e.path();
  }
  // Truncated library.
  const fs::path library = entry / "kernel.so";
  fs::resize_file(library, fs::file_size(library) / 2);
  {
    KernelCompiler c(cache.dir, kRoomy);
    std::string why;
    const auto k = c.load(adder(3), "kiln_test_add", why);
    ASSERT_TRUE(k) << why;
    EXPECT_EQ(call(*k, 1, 2), 6);
    EXPECT_EQ(c.stats().compiled, 1);
    EXPECT_EQ(c.cache_stats().rebuilt, 1);
  }
  // Another key under the entry's name (a hash collision).
  std::ofstream(entry / "key") << "some other kernel";
  KernelCompiler c(cache.dir, kRoomy);
  std::string why;
  ASSERT_TRUE(c.load(adder(3), "kiln_test_add", why)) << why;
  EXPECT_EQ(c.cache_stats().rebuilt, 1);
  EXPECT_EQ(c.stats().compiled, 1);
}

TEST(KernelCompiler, TheCacheStaysWithinItsBound) {
  TempCache cache("bound");
  // Room for about one library: the older ones go, least recently used first.
  KernelCompiler c(cache.dir, 1);
  std::string why;
  for (int k = 10; k < 13; ++k) ASSERT_TRUE(c.load(adder(k), "kiln_test_add", why)) << why;
  EXPECT_EQ(cache.entries(), 1u);
  EXPECT_EQ(c.cache_stats().evicted, 2);
  // The libraries it loaded stay usable.
  ASSERT_TRUE(c.load(adder(10), "kiln_test_add", why));
  EXPECT_EQ(c.stats().memory_hits, 1);
}

TEST(KernelCompiler, NoCompilerOrABuildErrorIsAReason) {
  TempCache cache("reasons");
  KernelCompiler c(cache.dir, kRoomy);
  std::string why;
  {
    ScopedEnv path("PATH", "/nonexistent-kiln-dir");
    EXPECT_FALSE(c.load(adder(4), "kiln_test_add", why));
    EXPECT_NE(why.find("no C++ compiler"), std::string::npos) << why;
  }
  {
    ScopedEnv cxx("KILN_CXX", "/nonexistent-kiln-dir/g++");
    EXPECT_FALSE(c.load(adder(4), "kiln_test_add", why));
    EXPECT_NE(why.find("KILN_CXX is '/nonexistent-kiln-dir/g++'"), std::string::npos) << why;
  }
  {
    ScopedEnv cxx("KILN_CXX", "kiln-no-such-compiler");
    EXPECT_FALSE(c.load(adder(4), "kiln_test_add", why));
    EXPECT_NE(why.find("KILN_CXX is 'kiln-no-such-compiler'"), std::string::npos) << why;
  }
  {
    // A bare name is found on PATH.
    ScopedEnv cxx("KILN_CXX", "g++");
    const auto k = c.load(adder(4), "kiln_test_add", why);
    ASSERT_TRUE(k) << why;
    EXPECT_EQ(call(*k, 0, 0), 4);
  }
  const std::string broken = "extern \"C\" int kiln_test_add(int a) { return a + ; }\n";
  EXPECT_FALSE(c.load(broken, "kiln_test_add", why));
  EXPECT_NE(why.find("error"), std::string::npos) << why;
  EXPECT_NE(why.find("failed (exit status"), std::string::npos) << why;
  // Nothing is stored for a failed build (the entry is g++'s library above).
  EXPECT_EQ(cache.entries(), 1u);
  EXPECT_EQ(c.stats().compiled, 1);
  EXPECT_EQ(c.stats().failed, 1);
  // The same source again: the same reason, without running the compiler.
  std::string again;
  EXPECT_FALSE(c.load(broken, "kiln_test_add", again));
  EXPECT_EQ(again.rfind(why, 0), 0u) << again;
  EXPECT_NE(again.find("not built again"), std::string::npos) << again;
  EXPECT_EQ(c.stats().failed, 1);
}

// A cache directory this process cannot write (as root, the child drops to
// the user nobody): the library is built in a directory of the process.
TEST(KernelCompiler, AnUnwritableCacheStillCompiles) {
  TempCache cache("readonly");
  fs::create_directories(cache.dir);
  using P = fs::perms;
  fs::permissions(cache.dir, P::owner_read | P::owner_exec | P::group_read | P::group_exec |
                                 P::others_read | P::others_exec);
  const pid_t child = in_child([&] {
    if (::geteuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0)) return false;
    if (::access(cache.dir.c_str(), W_OK) == 0) return false;
    KernelCompiler c(cache.dir, kRoomy);
    std::string why;
    const auto k = c.load(adder(5), "kiln_test_add", why);
    return k && call(*k, 0, 0) == 5 && c.stats().compiled == 1;
  });
  EXPECT_EQ(status_of(child), 0);
  fs::permissions(cache.dir, P::owner_all);
  EXPECT_EQ(cache.entries(), 0u);
}

}  // namespace
}  // namespace kiln::backend::cpu
