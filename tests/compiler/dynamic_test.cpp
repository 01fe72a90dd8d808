// Dynamic dims (CompileOptions::dynamic, compiler::mark_dynamic): a dim left
// out of the key that picks a program; each size still traced, guarded and
// checked against eager.
#include <gtest/gtest.h>

#include <array>
#include <memory>

#include "compiler/compiler_testing.h"
#include "kiln/kiln.h"
#include "kiln/models.h"
#include "unit/expect_error.h"

namespace kiln {
namespace {

using compiler::testing::LogCapture;
using compiler::testing::same;
using kiln::testing::expect_error;

// Its ops do not depend on the batch, though a reshape's attribute does.
Tensor rows_program(const Tensor& x) { return x.reshape({x.size(0), -1}).relu().sum({1}) * 0.5; }

TEST(Dynamic, AChangedDimIsRecompiledOnceThenEachSizeIsAnInstance) {
  LogCapture logs("recompiles");
  int calls = 0;
  const auto fast = compile(
      [&](const Tensor& x) {
        ++calls;
        return rows_program(x);
      },
      {.name = "rows"});
  for (int64_t batch : {2, 3, 5, 7, 3, 5, 2}) {
    const Tensor x = randn({batch, 4, 5});
    EXPECT_TRUE(same(fast(x), rows_program(x))) << batch;
  }
  const CompileStats s = fast.stats();
  EXPECT_EQ(calls, 4);  // 2, 3 (the recompile that makes dim 0 dynamic), 5 and 7 (instances)
  EXPECT_EQ(s.traces, 4);
  EXPECT_EQ(s.dynamic_instances, 2);
  EXPECT_EQ(s.replays, 7);
  EXPECT_EQ(s.eager_calls, 0);
  const ExplainReport r = fast.explain();
  ASSERT_EQ(r.recompiles.size(), 1u);
  EXPECT_NE(r.recompiles[0].find("argument 0 sizes was [2, 4, 5], now [3, 4, 5]"), std::string::npos) << r.recompiles[0];
  ASSERT_EQ(r.dynamic_dims.size(), 1u);
  EXPECT_EQ(r.dynamic_dims[0], "argument 0 dim 0: its size changed from 2 to 3");
  ASSERT_EQ(r.graphs.size(), 4u);
  EXPECT_EQ(r.graphs[0].instance_of, 0);
  EXPECT_EQ(r.graphs[1].instance_of, 0);
  EXPECT_EQ(r.graphs[2].instance_of, 2);
  EXPECT_EQ(r.graphs[3].instance_of, 2);
  EXPECT_NE(r.to_string().find("dynamic: argument 0 dim 0"), std::string::npos);
  EXPECT_NE(r.to_string().find("the program of graph 2, compiled for new sizes of dynamic dims"), std::string::npos);
  EXPECT_NE(r.to_json().find("\"dynamic_instances\": 2"), std::string::npos);
  EXPECT_TRUE(logs.contains("rows: argument 0 dim 0 is dynamic from now on (its size changed from 2 to 3)"));
  EXPECT_TRUE(logs.contains("tracing rows for new sizes of dynamic dims: argument 0 sizes [5, 4, 5]"));
}

TEST(Dynamic, AMarkedDimIsDynamicFromTheFirstCall) {
  const auto fast = compile(rows_program);
  Tensor x = randn({2, 4, 5});
  compiler::mark_dynamic(x, 0);
  EXPECT_EQ(compiler::dynamic_marks(x), 1u);
  EXPECT_EQ(compiler::dynamic_marks(Tensor(x)), 1u);  // a copy shares the handle
  EXPECT_EQ(compiler::dynamic_marks(x.view({2, 20})), 0u);
  EXPECT_TRUE(same(fast(x), rows_program(x)));
  for (int64_t batch : {3, 4, 6}) {
    const Tensor y = randn({batch, 4, 5});  // not marked: the function's dim is dynamic now
    EXPECT_TRUE(same(fast(y), rows_program(y))) << batch;
  }
  const ExplainReport r = fast.explain();
  EXPECT_TRUE(r.recompiles.empty());
  EXPECT_EQ(r.stats.dynamic_instances, 3);
  ASSERT_EQ(r.dynamic_dims.size(), 1u);
  EXPECT_EQ(r.dynamic_dims[0], "argument 0 dim 0: marked by mark_dynamic");
  // A new size of another dim is a recompile (which makes that dim dynamic too).
  const Tensor z = randn({3, 4, 6});
  EXPECT_TRUE(same(fast(z), rows_program(z)));
  EXPECT_EQ(fast.explain().recompiles.size(), 1u);
}

TEST(Dynamic, MarkDynamicNamesABadDim) {
  const Tensor x = randn({2, 3});
  expect_error<IndexError>([&] { compiler::mark_dynamic(x, 2); }, "mark_dynamic: dim 2 is out of range for a tensor of 2 dims");
  expect_error<IndexError>([&] { compiler::mark_dynamic(x, -3); }, "dim -3");
  expect_error<ValueError>([] { compiler::mark_dynamic(Tensor(), 0); }, "mark_dynamic: the tensor is undefined");
  compiler::mark_dynamic(x, -1);
  compiler::mark_dynamic(x, 0);
  EXPECT_EQ(compiler::dynamic_marks(x), 3u);
  EXPECT_EQ(compiler::dynamic_marks(randn({2, 3})), 0u);
}

TEST(Dynamic, OffRecompilesEverySizeAndIgnoresMarks) {
  const auto fast = compile(rows_program, {.dynamic = Dynamic::Off, .recompile_limit = 2});
  for (int64_t batch : {2, 3, 4}) {
    Tensor x = randn({batch, 4, 5});
    compiler::mark_dynamic(x, 0);
    EXPECT_TRUE(same(fast(x), rows_program(x))) << batch;
  }
  const CompileStats s = fast.stats();
  EXPECT_EQ(s.traces, 2);
  EXPECT_EQ(s.eager_calls, 1);  // past the limit
  EXPECT_EQ(s.dynamic_instances, 0);
  EXPECT_TRUE(fast.explain().dynamic_dims.empty());
}

TEST(Dynamic, OnMakesEveryDimDynamic) {
  const auto f = [](const Tensor& x, const Tensor& y) { return (x.matmul(y) + 1.0).softmax(-1); };
  const auto fast = compile(f, {.dynamic = Dynamic::On, .recompile_limit = 1});
  for (auto [m, k, n] : {std::array<int64_t, 3>{2, 3, 4}, {5, 3, 2}, {1, 7, 1}, {6, 6, 6}}) {
    const Tensor x = randn({m, k}), y = randn({k, n});
    EXPECT_TRUE(same(fast(x, y), f(x, y))) << m << " " << k << " " << n;
  }
  const ExplainReport r = fast.explain();
  EXPECT_TRUE(r.recompiles.empty());
  EXPECT_EQ(r.stats.eager_calls, 0);
  EXPECT_EQ(r.stats.dynamic_instances, 3);
  EXPECT_EQ(r.dynamic_dims.size(), 4u);  // both dims of both arguments
}

// A loop over a dim unrolls differently for each size: the ops follow the
// size, so each size is a recompile, bounded by the limit as any.
TEST(Dynamic, AProgramWhoseOpsFollowTheSizeRecompiles) {
  const auto f = [](const Tensor& x) {
    Tensor acc = x.select(0, 0);
    for (int64_t i = 1; i < x.size(0); ++i) acc = acc * 0.5 + x.select(0, i);
    return acc;
  };
  LogCapture logs("recompiles");
  const auto fast = compile(f, {.recompile_limit = 3, .name = "rows_loop"});
  for (int64_t rows : {2, 3, 4, 5, 2}) {
    Tensor x = randn({rows, 3});
    compiler::mark_dynamic(x, 0);
    EXPECT_TRUE(same(fast(x), f(x))) << rows;
  }
  const CompileStats s = fast.stats();
  EXPECT_EQ(s.dynamic_instances, 0);
  EXPECT_EQ(s.eager_calls, 1);  // 5: past the limit
  const ExplainReport r = fast.explain();
  ASSERT_EQ(r.recompiles.size(), 2u);
  EXPECT_NE(r.recompiles[0].find("new sizes of dynamic dims: argument 0 sizes [3, 3], and its ops differ from those "
                                 "compiled for other sizes"),
            std::string::npos)
      << r.recompiles[0];
  EXPECT_TRUE(logs.contains("recompiling rows_loop: new sizes of dynamic dims"));
}

// Sizes do not use up the recompile limit; a family keeps the graphs of its
// 64 latest sizes.
TEST(Dynamic, SizesDoNotUseUpTheRecompileLimit) {
  const auto fast = compile(rows_program, {.recompile_limit = 1});
  for (int64_t batch = 1; batch <= 70; ++batch) {
    Tensor x = randn({batch, 2, 3});
    compiler::mark_dynamic(x, 0);
    ASSERT_TRUE(same(fast(x), rows_program(x))) << batch;
  }
  CompileStats s = fast.stats();
  EXPECT_EQ(s.traces, 70);
  EXPECT_EQ(s.dynamic_instances, 69);
  EXPECT_EQ(s.eager_calls, 0);
  const Tensor last = randn({70, 2, 3}), first = randn({1, 2, 3});
  EXPECT_TRUE(same(fast(last), rows_program(last)));
  EXPECT_EQ(fast.stats().traces, 70);  // kept
  EXPECT_TRUE(same(fast(first), rows_program(first)));
  EXPECT_EQ(fast.stats().traces, 71);  // forgotten, traced again
  EXPECT_EQ(fast.explain().graphs.size(), 64u);
}

// Guard soundness with dynamic dims: random sizes, layouts, dtypes and
// broadcasts, every call against eager.
TEST(Dynamic, EverySizeGivesEagersResult) {
  const auto f = [](const Tensor& x, const Tensor& y) {
    const Tensor z = x * 2.0 + y;
    return std::make_tuple(z.softmax(1), z.sum({0}), z.reshape({-1}).narrow(0, 0, 1), z.t().contiguous());
  };
  for (Dynamic mode : {Dynamic::Auto, Dynamic::On}) {
    const auto fast = compile(f, {.dynamic = mode, .recompile_limit = 100000});
    uint64_t state = 7;
    const auto pick = [&](int64_t n) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      return static_cast<int64_t>((state >> 33) % static_cast<uint64_t>(n));
    };
    for (int i = 0; i < 120; ++i) {
      const int64_t rows = 1 + pick(4), cols = 1 + pick(5);
      Tensor x = pick(2) ? randn({rows, cols}) : randn({cols, rows}).t();
      if (pick(4) == 0) x = x.to(kFloat64);
      const Tensor y = pick(2) ? randn({cols}) : randn({rows, 1});
      const auto [a, b, c, d] = fast(x, y);
      const auto [ea, eb, ec, ed] = f(x, y);
      ASSERT_TRUE(same(a, ea) && same(b, eb) && same(c, ec) && same(d, ed)) << "call " << i;
      ASSERT_EQ(a.strides(), ea.strides()) << "call " << i;
    }
    EXPECT_GT(fast.stats().dynamic_instances, 0);
  }
}

// BERT over sequences of changing length, as an inference server sees them:
// one recompile, then instances.
TEST(Dynamic, BertOverChangingSequenceLengths) {
  models::BertConfig config;
  config.vocab_size = 100;
  config.hidden_size = 32;
  config.num_hidden_layers = 2;
  config.num_attention_heads = 4;
  config.intermediate_size = 64;
  config.max_position_embeddings = 64;
  manual_seed(3);
  auto net = std::make_shared<models::BertModel>(config);
  net->eval();
  NoGradGuard no_grad;
  const auto forward = [net](const Tensor& ids) { return net->forward(ids).last_hidden_state; };
  const auto fast = compile(forward, {.name = "bert"});
  for (int64_t seq : {16, 9, 33, 9, 17, 64}) {
    const Tensor ids = randint(0, 100, {2, seq});
    EXPECT_TRUE(same(fast(ids), forward(ids))) << seq;
  }
  const ExplainReport r = fast.explain();
  EXPECT_EQ(r.recompiles.size(), 1u);
  EXPECT_EQ(r.stats.dynamic_instances, 3);
  ASSERT_EQ(r.dynamic_dims.size(), 1u);
  EXPECT_EQ(r.dynamic_dims[0], "argument 0 dim 1: its size changed from 16 to 9");
}

TEST(Dynamic, ResetForgetsDynamicDims) {
  const auto fast = compile(rows_program);
  for (int64_t batch : {2, 3}) (void)fast(randn({batch, 2, 2}));
  EXPECT_EQ(fast.explain().dynamic_dims.size(), 1u);
  compiler::reset();
  (void)fast(randn({4, 2, 2}));
  EXPECT_TRUE(fast.explain().dynamic_dims.empty());
}

}  // namespace
}  // namespace kiln
