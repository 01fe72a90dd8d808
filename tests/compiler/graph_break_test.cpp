// Graph breaks: host reads inside a compiled function cut it into a tree of
// graphs, chosen by the values read; each call against eager mode.
#include <gtest/gtest.h>

#include "compiler/compiler_testing.h"
#include "kiln/kiln.h"
#include "unit/expect_error.h"

namespace kiln {
namespace {

using compiler::testing::LogCapture;
using compiler::testing::same;
using kiln::testing::expect_error;

Tensor branchy(const Tensor& x) { return x.sum().item<float>() > 0 ? x * 2.0 : x - 1.0; }

TEST(GraphBreak, AValueReadOnTheHostEndsAGraphAndTheValueChoosesTheNext) {
  LogCapture logs("graph_breaks,recompiles");
  const auto fast = compile(branchy, {.name = "branchy"});
  const Tensor pos = ones({3}), neg = -ones({3});
  EXPECT_TRUE(same(fast(pos), branchy(pos)));
  EXPECT_TRUE(same(fast(neg), branchy(neg)));
  EXPECT_TRUE(same(fast(pos), branchy(pos)));  // the value read (3) was seen: no trace
  CompileStats s = fast.stats();
  EXPECT_EQ(s.traces, 2);
  EXPECT_EQ(s.graph_breaks, 1);
  EXPECT_EQ(s.replays, 3);
  EXPECT_EQ(s.eager_calls, 0);
  ExplainReport r = fast.explain();
  ASSERT_EQ(r.graphs.size(), 3u) << r.to_string();  // the sum, then x * 2 or x - 1
  EXPECT_NE(r.graphs[0].read.find("item() at graph_break_test.cpp:16"), std::string::npos) << r.graphs[0].read;
  EXPECT_EQ(r.graphs[1].resumes, 1);
  EXPECT_EQ(r.graphs[2].resumes, 1);
  EXPECT_TRUE(r.graphs[0].executable && r.graphs[1].executable && r.graphs[2].executable);
  EXPECT_NE(r.to_string().find("value read by graph 1 (the function reads the values of a float32[] tensor on the "
                               "host (item() at graph_break_test.cpp:16)) == -3"),
            std::string::npos)
      << r.to_string();
  EXPECT_TRUE(logs.contains("branchy: graph 1: the function reads the values of a float32[] tensor on the host "
                            "(item() at graph_break_test.cpp:16)"));
  EXPECT_TRUE(logs.contains("a value not seen there before"));

  // A new value traces again, and finds the graph after it already compiled.
  const Tensor more = full({3}, 2.0);
  EXPECT_TRUE(same(fast(more), branchy(more)));
  s = fast.stats();
  EXPECT_EQ(s.traces, 3);
  EXPECT_EQ(s.replays, 4);
  r = fast.explain();
  EXPECT_EQ(r.graphs.size(), 3u);
  EXPECT_EQ(r.recompiles.size(), 1u);  // only the trace that compiled a graph
  EXPECT_TRUE(same(fast(more), branchy(more)));
  EXPECT_EQ(fast.stats().traces, 3);
}

TEST(GraphBreak, FullgraphNamesTheReadAndItsLine) {
  const auto strict = compile(branchy, {.fullgraph = true, .name = "branchy"});
  expect_error<Error>([&] { strict(ones({3})); }, "branchy (fullgraph)",
                      "reads the values of a float32[] tensor on the host (item() at graph_break_test.cpp:16)");
  const auto vec = compile([](const Tensor& x) { return x * static_cast<double>(x.to_vector<double>().size()); }, {.fullgraph = true});
  expect_error<Error>([&] { vec(ones({2})); }, "to_vector() at graph_break_test.cpp:");
}

TEST(GraphBreak, ALoopOnReadValuesIsAChainOfGraphs) {
  const auto halve = [](const Tensor& a) {
    Tensor x = a;
    while (x.abs().max().item<double>() > 0.5) x = x * 0.5;
    return x;
  };
  const auto fast = compile(halve);
  const Tensor x = from_vector(std::vector<float>{3.0f, -1.0f, 0.25f});
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(same(fast(x), halve(x)));
  EXPECT_EQ(fast.stats().traces, 1);
  EXPECT_EQ(fast.stats().graph_breaks, 4);  // 3, 1.5, 0.75, 0.375: four reads
  EXPECT_EQ(fast.explain().graphs.size(), 5u);
  // Another input reads other values: a trace, and only new graphs are compiled.
  const Tensor y = x * 0.5;
  EXPECT_TRUE(same(fast(y), halve(y)));
  EXPECT_EQ(fast.stats().traces, 2);
}

TEST(GraphBreak, WritesBeforeAndAfterABreakHappenOnceAsInEager) {
  Tensor buffer = zeros({4}), eager_buffer = zeros({4});
  const auto step = [](Tensor& buf, const Tensor& x) {
    buf.add_(x);
    if (buf.sum().item<double>() > 2) buf.mul_(0.5);
    return buf * x + 1.0;
  };
  const auto fast = compile([&](const Tensor& x) { return step(buffer, x); }, {.check = true});
  Tensor x = from_vector(std::vector<float>{1, 0.5f, -0.25f, 2});
  for (int i = 0; i < 4; ++i) {
    const Tensor got = fast(x);
    const Tensor want = step(eager_buffer, x);
    EXPECT_TRUE(same(got, want)) << i;
    EXPECT_TRUE(same(buffer, eager_buffer)) << i;
  }
  EXPECT_EQ(fast.stats().graph_breaks, 1);
  EXPECT_EQ(fast.stats().eager_calls, 0);
}

TEST(GraphBreak, AReadThroughAPointerFinishesTheCallAndLaterCallsRunEagerly) {
  LogCapture logs("graph_breaks");
  const auto peek = [](const Tensor& x) {
    const Tensor y = x * 3.0;
    return y.data<float>()[0] > 1 ? y + 1.0 : y - 1.0;
  };
  const auto fast = compile(peek);
  for (float v : {1.0f, -1.0f, 2.0f}) {
    const Tensor x = full({2}, v);
    EXPECT_TRUE(same(fast(x), peek(x))) << v;
  }
  const CompileStats s = fast.stats();
  EXPECT_EQ(s.graph_breaks, 1);
  EXPECT_EQ(s.traces, 1);
  EXPECT_EQ(s.eager_calls, 3);  // the first finished from its trace, keeping nothing
  EXPECT_TRUE(logs.contains("(data() at graph_break_test.cpp:")) << logs.lines.size();
  EXPECT_TRUE(logs.contains("calls with this key run eagerly"));
  EXPECT_TRUE(fast.explain().graphs.empty());
}

TEST(GraphBreak, ValuesNeverSeenPastTheRecompileLimitStillGiveEagersResults) {
  const auto scale = [](const Tensor& x) {
    const double s = x.sum().item<double>();
    return s > 0 ? x * 2.0 : x.exp();  // graphs: the sum, then one of two
  };
  const auto fast = compile(scale, {.recompile_limit = 2});
  for (int i = 0; i < 6; ++i) {
    const Tensor x = full({3}, i % 2 ? 1.0f + static_cast<float>(i) : -1.0f - static_cast<float>(i));
    EXPECT_TRUE(same(fast(x), scale(x))) << i;
  }
  const CompileStats s = fast.stats();
  EXPECT_EQ(s.traces, 6);
  EXPECT_EQ(s.eager_calls, 0);  // both branches compiled within the limit, reused after
  EXPECT_EQ(fast.explain().graphs.size(), 3u);
  const auto tight = compile(scale, {.recompile_limit = 1});
  for (int i = 0; i < 4; ++i) {
    const Tensor x = full({3}, i % 2 ? 1.0f + static_cast<float>(i) : -1.0f - static_cast<float>(i));
    EXPECT_TRUE(same(tight(x), scale(x))) << i;
  }
  EXPECT_EQ(tight.explain().graphs.size(), 2u);  // the second branch is never kept
  EXPECT_EQ(tight.stats().eager_calls, 2);
}

TEST(GraphBreak, AFunctionThatTracesDifferentlyWithTheSameGuardsIsAnError) {
  int calls = 0;
  const auto fickle = [&](const Tensor& x) {
    const Tensor y = calls++ == 0 ? x + 1.0 : x * 3.0;  // depends on a host counter
    return y.sum().item<double>() > 0 ? y : -y;
  };
  const auto fast = compile(fickle, {.name = "fickle"});
  (void)fast(ones({2}));
  expect_error<Error>([&] { fast(full({2}, 2.0)); }, "fickle", "did not reach graph break 1 as before");
}

}  // namespace
}  // namespace kiln
