// What a compiled function keeps and says about it: bounds on the graphs it
// keeps, its counters, reads whose values change on every call, and the
// logs and guards explain() shows.
#include <gtest/gtest.h>

#include "compiler/compiler_testing.h"
#include "kiln/kiln.h"

namespace kiln {
namespace {

using compiler::testing::LogCapture;
using compiler::testing::same;

// A message-passing step written as users write it: the node count is read
// (a zeros of x.size(0) rows), so each count is a graph of its own.
Tensor message_pass(const Tensor& x, const Tensor& w) {
  Tensor agg = zeros({x.size(0), 4});
  return (agg + matmul(x, w)).relu();
}

TEST(CompileCache, GraphsForNewSizesAreBoundedLeastRecentlyUsedFirst) {
  LogCapture logs("recompiles");
  const auto fast = compile(message_pass, {.cache_limit = 8, .name = "mp"});
  const Tensor w = randn({4, 4});
  for (int64_t nodes = 2; nodes < 42; ++nodes) {
    const Tensor x = randn({nodes, 4});
    EXPECT_TRUE(same(fast(x, w), message_pass(x, w))) << nodes;
  }
  CompileStats s = fast.stats();
  EXPECT_EQ(s.graphs_kept, 8);
  EXPECT_EQ(s.evictions, 32);
  EXPECT_EQ(s.graphs, 40);
  EXPECT_EQ(s.eager_calls, 0);
  EXPECT_TRUE(logs.contains("mp: the cache holds 9 keys and 0 bytes of CUDA graphs (limits 8 and"));
  // The latest sizes are hits; an early one is compiled again, as an instance.
  const Tensor recent = randn({41, 4}), early = randn({3, 4});
  EXPECT_TRUE(same(fast(recent, w), message_pass(recent, w)));
  EXPECT_EQ(fast.stats().graphs, 40);
  EXPECT_TRUE(same(fast(early, w), message_pass(early, w)));
  s = fast.stats();
  EXPECT_EQ(s.graphs, 41);
  EXPECT_EQ(s.graphs_kept, 8);
  EXPECT_EQ(s.recompiles, 1);  // the instances are not recompiles
  EXPECT_THROW(compile(message_pass, {.cache_limit = 0}), ValueError);
}

TEST(CompileCache, StatsCountGraphsAndRecompiles) {
  const auto fast = compile([](const Tensor& x, double s) { return x * s; });
  const Tensor x = randn({3});
  for (double s : {1.0, 2.0, 1.0, 3.0}) (void)fast(x, s);
  const CompileStats st = fast.stats();
  EXPECT_EQ(st.graphs, 3);
  EXPECT_EQ(st.graphs_kept, 3);
  EXPECT_EQ(st.recompiles, 2);
  EXPECT_NE(fast.explain().to_json().find("\"recompiles\": 2"), std::string::npos);
}

// The TF32 policy decides how float32 products run on CUDA, so it is part of
// every graph's guards: a call under another policy compiles a graph of its
// own, and the first policy's graph serves its calls again afterwards.
TEST(CompileCache, ACallUnderAnotherTf32PolicyHasAGraphOfItsOwn) {
  const auto fast = compile([](const Tensor& a, const Tensor& b) { return matmul(a, b); });
  const Tensor a = randn({4, 8}), b = randn({8, 3});
  const Tf32Policy first = allow_tf32();
  (void)fast(a, b);
  EXPECT_EQ(fast.stats().graphs, 1);
  {
    Tf32PolicyGuard other({.matmul = !first.matmul, .conv = first.conv});
    EXPECT_TRUE(same(fast(a, b), matmul(a, b)));
    EXPECT_EQ(fast.stats().graphs, 2);
    EXPECT_EQ(fast.stats().recompiles, 1);
  }
  {
    Tf32PolicyGuard other({.matmul = first.matmul, .conv = !first.conv});
    (void)fast(a, b);
    EXPECT_EQ(fast.stats().graphs, 3);
  }
  (void)fast(a, b);
  const CompileStats st = fast.stats();
  EXPECT_EQ(st.graphs, 3);
  EXPECT_EQ(st.traces, 3);
  EXPECT_EQ(st.calls, 4);
  EXPECT_EQ(st.replays, 4);  // every call ran a graph, tracing ones included
  EXPECT_NE(fast.explain().to_string().find("TF32 policy"), std::string::npos);
}

// A float read on the host whose value differs on every input: every call
// traces. kiln counts it and says, once, how to write it instead.
TEST(CompileCache, AFloatReadThatChangesEveryCallIsCountedAndNamed) {
  LogCapture logs("graph_breaks");
  const auto confident = [](const Tensor& logits) {
    if (softmax(logits, -1).max().item<float>() > 0.5f) return logits * 2.0;
    return logits;
  };
  const auto fast = compile(confident, {.name = "served"});
  Generator gen(4);
  for (int i = 0; i < 20; ++i) {
    const Tensor l = randn({1, 5}, {}, &gen);
    EXPECT_TRUE(same(fast(l), confident(l))) << i;
  }
  const CompileStats s = fast.stats();
  EXPECT_EQ(s.new_value_traces, 19);
  EXPECT_EQ(s.traces, 20);
  EXPECT_TRUE(logs.contains("served: graph 1 ends at a read that has given 16 different values"));
  EXPECT_TRUE(logs.contains("item() at cache_test.cpp:"));
  EXPECT_TRUE(logs.contains("`if ((x > t).item<bool>())`"));

  // The idiom: compare on the device, read the outcome. Two values, two branches.
  const auto compared = [](const Tensor& logits) {
    if ((softmax(logits, -1).max() > 0.5).item<bool>()) return logits * 2.0;
    return logits;
  };
  const auto better = compile(compared);
  for (int i = 0; i < 20; ++i) {
    const Tensor l = randn({1, 5}, {}, &gen);
    EXPECT_TRUE(same(better(l), compared(l))) << i;
  }
  EXPECT_LE(better.stats().traces, 2);
  EXPECT_EQ(better.stats().replays, 20);
}

// Guards that hold for every size say nothing: an open-ended slice and a
// ceil-mode pool leave none.
TEST(CompileCache, GuardsThatAlwaysHoldAreNotListed) {
  const auto f = [](const Tensor& x) {
    return max_pool2d(x.index({Slice(), Slice(), Slice(1)}), {2}, {}, {0}, {1}, true);
  };
  const auto fast = compile(f, {.dynamic = Dynamic::On});
  (void)fast(randn({2, 3, 9, 9}));
  const ExplainReport r = fast.explain();
  for (const std::string& g : r.symbolic_guards) {
    EXPECT_EQ(g.find("922337203685477"), std::string::npos) << g;
    EXPECT_EQ(g.find("2*(s"), std::string::npos) << g;
  }
  ASSERT_FALSE(r.symbolic_graph.empty());
  EXPECT_EQ(r.symbolic_graph.find("not symbolic"), std::string::npos) << r.symbolic_graph;
}

// Grad mode on with parameters that require grad: calls replay through
// dispatch to record autograd. Said once in the perf log.
TEST(CompileCache, TheSlowerAutogradPathIsLoggedOnce) {
  LogCapture logs("perf");
  nn::Linear fc(3, 2);
  const auto fast = compile(fc, {.name = "fc"});
  for (int64_t b : {2, 3, 4}) (void)fast(randn({b, 3}));
  int said = 0;
  for (const std::string& l : logs.lines)
    said += l.find("replay through dispatch to record autograd") != std::string::npos;
  EXPECT_EQ(said, 1);
  NoGradGuard no_grad;
  (void)fast(randn({2, 3}));
  EXPECT_TRUE(fast.explain().graphs.back().executable);
}

// A size that a kiln function must read (chunk's parts follow it) is blamed
// on the line that called the function, not on kiln's own source.
TEST(CompileCache, ASizeReadInsideKilnIsBlamedOnTheCallersLine) {
  const int line = __LINE__ + 1;
  const auto f = [](const Tensor& x) { return chunk(x.t().contiguous().t(), 2, 0)[0] * 2.0; };
  const auto fast = compile(f);
  for (int64_t n : {4, 6, 8}) (void)fast(randn({n, 3}));
  const std::string note = fast.explain().dynamic_sizes;
  EXPECT_NE(note.find(detail::str_cat("the function read size(0) of %3 at cache_test.cpp:", line)),
            std::string::npos)
      << note;
  EXPECT_EQ(note.find("shape.cpp"), std::string::npos) << note;
}

}  // namespace
}  // namespace kiln
