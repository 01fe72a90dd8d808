// KILN_DUMP_DIR (compiler/dump.h, docs/debugging.md "Dumps"): each compiled
// function writes its graphs (text and Graphviz), the graph after each pass
// that changed it, the generated kernels' sources, its guards and explain()
// into one folder per function and graph.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "compiler/compiler_testing.h"
#include "kiln/kiln.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using compiler::testing::same;

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// KILN_DUMP_DIR set to a fresh folder while alive.
class DumpDir {
 public:
  DumpDir() : dir_(fs::temp_directory_path() / ("kiln_dump_test_" + std::to_string(::getpid()))) {
    fs::remove_all(dir_);
    ::setenv("KILN_DUMP_DIR", dir_.c_str(), 1);
  }
  ~DumpDir() {
    ::unsetenv("KILN_DUMP_DIR");
    std::error_code ec;
    if (!std::getenv("KEEP_DUMP")) fs::remove_all(dir_, ec);
  }
  const fs::path& path() const { return dir_; }

 private:
  fs::path dir_;
};

TEST(Dump, EachFunctionAndGraphGetsItsFolder) {
  DumpDir dump;
  const Tensor w = randn({8, 8});
  // The reshape to x's own shape is removed by a pass; the pointwise chain
  // after the matmul is one generated kernel.
  const auto f = [&](const Tensor& x) {
    return (x.reshape({-1, 8}).matmul(w) * 2 + 1).tanh().relu();
  };
  const auto fast = compile(f, {.name = "my model/v1"});
  NoGradGuard no_grad;
  for (int64_t rows : {4, 4, 6}) {
    const Tensor x = randn({rows, 8});
    EXPECT_TRUE(same(fast(x), f(x)));
  }
  const fs::path function = dump.path() / "my_model_v1";  // '/' and ' ' as '_'
  ASSERT_TRUE(fs::is_directory(function)) << function;
  const ExplainReport r = fast.explain();
  ASSERT_EQ(r.graphs.size(), 2u);  // rows 4, then 6
  for (size_t g = 1; g <= r.graphs.size(); ++g) {
    const fs::path graph = function / ("graph" + std::to_string(g));
    EXPECT_EQ(read(graph / "graph.txt"), r.graphs[g - 1].text) << g;
    EXPECT_EQ(read(graph / "graph.dot").rfind("digraph", 0), 0u) << g;
    const std::string guards = read(graph / "guards.txt");
    EXPECT_NE(guards.find("argument 0 sizes == [" + std::to_string(g == 1 ? 4 : 6) + ", 8]"),
              std::string::npos)
        << guards;
  }
  // The passes: as traced, then each pass that changed the graph.
  const fs::path passes = function / "graph1" / "passes";
  const std::string traced = read(passes / "00_traced.txt");
  EXPECT_NE(traced.find("view("), std::string::npos) << traced;  // the reshape
  EXPECT_TRUE(fs::exists(passes / "01_remove_noops.txt"));
  // The generated kernel's source, where the graph has one.
  if (r.graphs[0].generated_kernels > 0) {
    bool source = false;
    for (const auto& f : fs::directory_iterator(function / "graph1" / "kernels"))
      source = source || read(f.path()).find("kiln_pointwise_") != std::string::npos;
    EXPECT_TRUE(source);
  }
  // explain(), as text and JSON, as of the last graph made.
  EXPECT_EQ(read(function / "explain.txt"), r.to_string());
  const auto json = nlohmann::json::parse(read(function / "explain.json"));
  EXPECT_EQ(json["graphs"].size(), 2u);
}

TEST(Dump, AnUnnamedFunctionAndADynamicProgramsInstances) {
  DumpDir dump;
  const auto fast = compile([](const Tensor& x) { return x.exp() * 3; }, {.dynamic = Dynamic::On});
  NoGradGuard no_grad;
  for (int64_t n : {3, 5, 7}) (void)fast(randn({n}));
  const fs::path function = dump.path() / "compiled_function";  // the default name
  for (int g = 1; g <= 3; ++g)
    EXPECT_TRUE(fs::exists(function / ("graph" + std::to_string(g)) / "graph.txt")) << g;
  EXPECT_TRUE(fs::exists(function / "explain.json"));
  // Graph 2's call made the program for all sizes: its passes and kernels
  // are in graph 2's folder (graph 3, an instance, has none of its own), and
  // nothing lies outside the function's folder.
  const std::string traced = read(function / "graph2" / "passes" / "00_traced.txt");
  EXPECT_NE(traced.find("exp("), std::string::npos);
  // Its sizes are the program's symbols, not the sizes of the call that made it.
  EXPECT_NE(traced.find("float32[s"), std::string::npos) << traced;
  EXPECT_EQ(traced.find("float32[5]"), std::string::npos) << traced;
  EXPECT_FALSE(fs::exists(function / "graph3" / "passes"));
  for (const auto& e : fs::directory_iterator(dump.path()))
    EXPECT_EQ(e.path().filename(), "compiled_function");
  if (fast.explain().graphs[1].generated_kernels > 0)
    EXPECT_FALSE(fs::is_empty(function / "graph2" / "kernels"));
}

}  // namespace
}  // namespace kiln
