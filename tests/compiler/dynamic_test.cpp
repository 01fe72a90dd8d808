// Dynamic dims (CompileOptions::dynamic, compiler::mark_dynamic): a dim left
// out of the key that picks a program; each size still traced, guarded and
// checked against eager.
#include <gtest/gtest.h>

#include <array>
#include <memory>

#include "backends/cpu/kernel_compiler.h"
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
  EXPECT_TRUE(logs.contains("rows: new sizes of dynamic dims: argument 0 sizes [5, 4, 5]"));
  // The reshape read the batch: each size is traced, and explain says why.
  EXPECT_EQ(s.retraces, 0);
  EXPECT_NE(r.dynamic_sizes.find(
                "new sizes are traced: the function read size(0) of %0 at dynamic_test.cpp:"),
            std::string::npos)
      << r.dynamic_sizes;
  EXPECT_NE(r.dynamic_sizes.find("which gave 5 (now 7)"), std::string::npos) << r.dynamic_sizes;
  EXPECT_TRUE(logs.contains("rows: new sizes are traced: the function read size(0)"));
}

// A program that reads none of the sizes that change: a new size's graph is
// bound from the program compiled once for all sizes (its layouts evaluated
// at the new sizes), and the function is not called. At batch 1 the
// transpose is contiguous already, so contiguous() copies nothing: a read
// that changed, and batch 1 is traced (a program of its own), while later
// sizes are still bound from the program of batch 3's trace.
TEST(Dynamic, NewSizesAreMadeFromTheTraceWithoutCallingTheFunction) {
  LogCapture logs("recompiles");
  manual_seed(5);
  nn::Linear linear(6, 4);
  int calls = 0;
  const auto f = [&](const Tensor& x, const Tensor& bias) {
    ++calls;
    Tensor h = linear(x).relu();
    h.add_(bias);  // broadcast over the rows
    // A read of a dim that does not change is fine.
    const Tensor rows = h.reshape({-1, h.size(1) / 2, 2}).sum({2});
    return std::make_tuple(h.softmax(-1), rows, h.t().contiguous().view({-1}));
  };
  NoGradGuard no_grad;
  const auto fast = compile(f, {.name = "rows"});
  const Tensor bias = randn({4});
  for (int64_t batch : {2, 3, 5, 1, 9, 3, 64, 5}) {
    const Tensor x = randn({batch, 6});
    const auto [a, b, c] = fast(x, bias);
    const auto [ea, eb, ec] = f(x, bias);
    EXPECT_TRUE(same(a, ea) && same(b, eb) && same(c, ec)) << batch;
  }
  EXPECT_EQ(
      calls,
      3 + 8);  // traced for 2, 3 (the recompile that makes dim 0 dynamic) and 1; 8 eager calls
  const ExplainReport r = fast.explain();
  EXPECT_EQ(r.stats.traces, 3);
  EXPECT_EQ(r.stats.retraces, 3);           // 5, 9, 64
  EXPECT_EQ(r.stats.dynamic_instances, 3);  // the same three: batch 1's program is another
  EXPECT_EQ(r.stats.replays, 8);
  ASSERT_EQ(r.recompiles.size(), 2u);
  EXPECT_NE(r.recompiles[1].find("its ops differ from those compiled for other sizes"),
            std::string::npos);
  ASSERT_EQ(r.graphs.size(), 6u);
  EXPECT_EQ(r.stats.bound_sizes, 3);
  for (size_t g : {2u, 4u, 5u}) {
    EXPECT_TRUE(r.graphs[g].retraced) << g;
    EXPECT_TRUE(r.graphs[g].bound) << g;
    EXPECT_EQ(r.graphs[g].instance_of, 2) << g;
    EXPECT_TRUE(r.graphs[g].executable) << g;
    // No pass or schedule of its own (the first made the program).
    if (g != 2u) EXPECT_EQ(r.graphs[g].passes_ms, 0.0) << g;
  }
  EXPECT_FALSE(r.graphs[1].retraced);
  EXPECT_FALSE(r.graphs[3].retraced);
  EXPECT_EQ(r.dynamic_sizes,
            "new sizes bind graph 2's program, compiled once for all sizes its guards admit");
  EXPECT_NE(r.to_string().find("the program of graph 2, compiled once for all sizes of its "
                               "dynamic dims that its guards admit, bound to these (s0 = 64)"),
            std::string::npos)
      << r.to_string();
  EXPECT_NE(r.to_json().find("\"retraces\": 3"), std::string::npos);
  EXPECT_NE(r.to_json().find("\"bound_sizes\": 3"), std::string::npos);
  EXPECT_TRUE(logs.contains("rows: new sizes bind graph 2's program"));
  EXPECT_TRUE(logs.contains("rows: graph 2's program is compiled for all sizes its guards admit"));
  EXPECT_TRUE(logs.contains("rows: new sizes are traced: the function read is_contiguous() of %"));
}

// A decision of the passes that holds at some sizes only: a slice of the
// first 16 columns is the whole tensor at 16 columns only, where
// remove_noops drops it. The program compiled at 20 columns recorded the
// guard that the slice is not whole (s1 != 16): it serves every other
// size, and 16 columns are made from the trace as before, with the log
// saying which guard failed. Results are eager's at every size.
TEST(Dynamic, AProgramsDecisionsGuardTheSizesItServes) {
  LogCapture logs("recompiles");
  const auto f = [](const Tensor& x) { return (x.narrow(1, 0, 16) * 2.0).exp(); };
  const auto fast = compile(f, {.dynamic = Dynamic::On, .name = "narrow"});
  for (int64_t cols : {20, 24, 16, 31, 17}) {
    const Tensor x = randn({4, cols});
    EXPECT_TRUE(same(fast(x), f(x))) << cols;
  }
  const ExplainReport r = fast.explain();
  EXPECT_EQ(r.stats.traces, 1);
  EXPECT_EQ(r.stats.retraces, 4);
  EXPECT_EQ(r.stats.bound_sizes, 3);  // 24, 31, 17
  ASSERT_EQ(r.graphs.size(), 5u);
  EXPECT_TRUE(r.graphs[1].bound);
  EXPECT_FALSE(r.graphs[2].bound);  // 16
  EXPECT_TRUE(r.graphs[2].retraced);
  EXPECT_LT(r.graphs[2].nodes, r.graphs[1].nodes);  // its slice dropped
  EXPECT_TRUE(
      logs.contains("narrow: the program for all sizes does not serve these: guard s1 "
                    "!= 16 (the passes) fails for s1 = 16"));
  EXPECT_NE(std::find(r.symbolic_guards.begin(), r.symbolic_guards.end(), "s1 != 16  (the passes)"),
            r.symbolic_guards.end());
}

// A size the program branches on: the branch read it, so each size is
// traced and takes its own branch, as eager does.
TEST(Dynamic, AProgramThatBranchesOnASizeIsTracedForEachSize) {
  const auto f = [](const Tensor& x) {
    if (x.size(0) > 4) return x * 2.0;
    return x.narrow(0, 0, std::min<int64_t>(x.size(0), 2)) + 1.0;
  };
  const auto fast = compile(f, {.dynamic = Dynamic::On});
  for (int64_t rows : {2, 3, 6, 1, 8, 3}) {
    const Tensor x = randn({rows, 3});
    EXPECT_TRUE(same(fast(x), f(x))) << rows;
  }
  EXPECT_EQ(fast.stats().retraces, 0);
  EXPECT_EQ(fast.stats().traces, 5);
}

// Arguments that share memory are a guard: a graph traced for distinct
// arguments (where the second read is merged with the first) never serves
// a call whose arguments alias, nor the other way round.
TEST(Dynamic, ArgumentsThatShareMemoryAreGuarded) {
  const auto f = [](Tensor a, const Tensor& b) {
    const Tensor before = b * 2.0;
    a.add_(1.0);
    return before + b * 2.0;
  };
  for (Dynamic mode : {Dynamic::Off, Dynamic::On}) {
    const auto fast = compile(f, {.dynamic = mode, .name = "aliasing"});
    for (int i = 0; i < 3; ++i) {
      for (bool alias : {false, true, false}) {
        const Tensor x = randn({3 + i, 2}), y = alias ? x : randn({3 + i, 2});
        const Tensor ex = x.clone(), ey = alias ? ex : y.clone();
        EXPECT_TRUE(same(fast(x, y), f(ex, ey))) << i << " " << alias;
        EXPECT_TRUE(same(x, ex));
      }
    }
    const ExplainReport r = fast.explain();
    bool named = false;
    for (const std::string& why : r.recompiles)
      named = named ||
              why.find("memory shared by arguments was none, now argument 1 with argument 0") !=
                  std::string::npos;
    EXPECT_TRUE(named) << r.to_string();
  }
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
  const auto net = compiler::testing::small_bert();
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

// BERT over lengths 9 to 64 (its position table's), every dim dynamic:
// the first new length compiles the program for all lengths, and every
// later one binds it. No kernel is compiled or read after the first
// length's, no later length runs a pass of its own, and each length's result
// is eager's bitwise.
TEST(Dynamic, BertLengthsBindOneProgramAndCompileNothing) {
  KILN_NEEDS_COMPILER();
  const auto net = compiler::testing::small_bert();
  NoGradGuard no_grad;
  const auto forward = [net](const Tensor& ids) { return net->forward(ids).last_hidden_state; };
  const auto f = compile(forward, {.dynamic = Dynamic::On, .name = "lengths"});
  const Tensor first = randint(0, 100, {2, 8});
  EXPECT_TRUE(same(f(first), forward(first)));
  const auto before = backend::cpu::KernelCompiler::instance().stats();
  int64_t lengths = 0;
  for (int64_t length = 9; length <= 64; length += 5, ++lengths) {
    const Tensor ids = randint(0, 100, {2, length});
    EXPECT_TRUE(same(f(ids), forward(ids))) << length;
  }
  const auto after = backend::cpu::KernelCompiler::instance().stats();
  EXPECT_EQ(after.compiled, before.compiled);
  EXPECT_EQ(after.disk_hits, before.disk_hits);
  const ExplainReport r = f.explain();
  EXPECT_EQ(r.stats.traces, 1);
  EXPECT_EQ(r.stats.bound_sizes, lengths);
  ASSERT_EQ(r.graphs.size(), static_cast<size_t>(lengths + 1));
  for (size_t g = 1; g < r.graphs.size(); ++g) {
    EXPECT_TRUE(r.graphs[g].bound) << g;
    EXPECT_EQ(r.graphs[g].generated_kernels, r.graphs[0].generated_kernels) << g;
    if (g > 1) EXPECT_EQ(r.graphs[g].passes_ms, 0.0) << g;
  }
  EXPECT_GT(r.graphs[0].generated_kernels, 0);
}

// A server's ResNet over changing batch sizes: the layers read only their
// channels (and flatten the dims after the batch), so each new batch size
// is made from the first trace.
TEST(Dynamic, ResNetMakesNewBatchSizesFromItsTrace) {
  manual_seed(4);
  auto net = models::resnet18({.num_classes = 10, .widths = {8, 16, 32, 64}});
  net->eval();
  NoGradGuard no_grad;
  const auto forward = [net](const Tensor& images) { return net->forward(images); };
  const auto fast = compile(forward, {.name = "resnet"});
  for (int64_t batch : {2, 3, 1, 5, 3}) {
    const Tensor images = randn({batch, 3, 32, 32});
    EXPECT_TRUE(same(fast(images), forward(images))) << batch;
  }
  const ExplainReport r = fast.explain();
  EXPECT_EQ(r.stats.traces, 2) << r.dynamic_sizes;
  EXPECT_EQ(r.stats.retraces, 2) << r.dynamic_sizes;
  // Batch 5 binds the program; batch 1 is not a size of the symbols (0 and
  // 1 are not symbolic) and is made from the trace.
  EXPECT_EQ(r.stats.bound_sizes, 1) << r.dynamic_sizes;
  EXPECT_EQ(r.dynamic_sizes,
            "new sizes bind graph 2's program, compiled once for all sizes its guards admit");
}

// BERT over changing batch sizes and lengths (token ids alone): its layers
// read neither (positions are made from the ids' shape, the heads split and
// merge the last dim), so each new size is made from the trace; its one
// guard is its check of the length against the position table.
TEST(Dynamic, BertMakesNewBatchSizesAndLengthsFromItsTrace) {
  const auto net = compiler::testing::small_bert();
  NoGradGuard no_grad;
  const auto forward = [net](const Tensor& ids) { return net->forward(ids).last_hidden_state; };
  const auto fast = compile(forward, {.name = "bert"});
  for (int64_t batch : {2, 3, 5, 4, 6, 3}) {
    const Tensor ids = randint(0, 100, {batch, 16});
    EXPECT_TRUE(same(fast(ids), forward(ids))) << batch;
  }
  ExplainReport r = fast.explain();
  EXPECT_EQ(r.stats.traces, 2) << r.dynamic_sizes;
  EXPECT_EQ(r.stats.retraces, 3) << r.dynamic_sizes;
  // 17 tokens: a recompile, which makes the sequence dim dynamic; 18 and 64
  // (the table's length): instances made from that trace.
  for (int64_t seq : {17, 18, 64}) {
    const Tensor longer = randint(0, 100, {3, seq});
    EXPECT_TRUE(same(fast(longer), forward(longer))) << seq;
  }
  r = fast.explain();
  EXPECT_EQ(r.stats.traces, 3) << r.dynamic_sizes;
  EXPECT_EQ(r.stats.retraces, 5) << r.dynamic_sizes;
  EXPECT_EQ(r.stats.bound_sizes, 5) << r.dynamic_sizes;
  EXPECT_EQ(r.recompiles.size(), 2u);
  EXPECT_EQ(r.dynamic_sizes,
            "new sizes bind graph 6's program, compiled once for all sizes its guards admit");
  // 65 tokens fail the guard: traced, and the model's own error, as eager.
  kiln::testing::expect_error_with<ValueError>(
      [&] {
        (void)fast(randint(0, 100, {3, 65}));
      },
      {"BertModel", "sequence length 65", "max_position_embeddings 64"});
}

// BERT with an attention mask, as a server pads its batches: the mask is
// checked against the ids with same_sizes, a guard on the relation (the
// mask's dims equal the ids'), so new sizes of both are made from the trace.
TEST(Dynamic, BertWithAMaskMakesNewSizesFromItsTrace) {
  const auto net = compiler::testing::small_bert();
  NoGradGuard no_grad;
  const auto forward = [net](const Tensor& ids, const Tensor& mask) {
    return net->forward(ids, mask).last_hidden_state;
  };
  const auto fast = compile(forward, {.name = "bert_masked"});
  const auto padded = [](int64_t batch, int64_t seq) {
    Tensor mask = ones({batch, seq}, {.dtype = kInt64});
    mask.narrow(1, seq / 2, seq - seq / 2).select(0, 0).fill_(0);  // the first row half padding
    return std::pair{randint(0, 100, {batch, seq}), mask};
  };
  for (const auto& [batch, seq] : std::vector<std::pair<int64_t, int64_t>>{
           {2, 16}, {3, 16}, {3, 20}, {5, 9}, {4, 33}, {2, 16}}) {
    const auto [ids, mask] = padded(batch, seq);
    EXPECT_TRUE(same(fast(ids, mask), forward(ids, mask))) << batch << " x " << seq;
  }
  const ExplainReport r = fast.explain();
  EXPECT_EQ(r.stats.traces, 3) << r.dynamic_sizes;    // (2, 16), (3, 16), (3, 20)
  EXPECT_EQ(r.stats.retraces, 2) << r.dynamic_sizes;  // (5, 9), (4, 33)
  EXPECT_NE(r.symbolic_graph.find("guard s0 == s2"), std::string::npos) << r.symbolic_graph;
  EXPECT_NE(r.symbolic_graph.find("guard s1 == s3"), std::string::npos) << r.symbolic_graph;
  // A mask of another length: the guard fails, and the model's own error.
  kiln::testing::expect_error_with<ShapeError>(
      [&] {
        (void)fast(randint(0, 100, {4, 33}), ones({4, 32}, {.dtype = kInt64}));
      },
      {"BertModel", "attention_mask", "[4, 33]", "[4, 32]"});
}

// The LSTM loop over changing batch sizes: its cells make their zero
// states from the input's shape, so each new batch is made from the trace.
// A new number of steps is a new program (the loop unrolls over them).
// Its input projections are one product per layer (batch_recurrent_projections):
// within tolerance of eager, not bitwise.
TEST(Dynamic, LstmLoopMakesNewBatchSizesFromItsTrace) {
  manual_seed(6);
  models::LSTMCellLoop net(
      {.input_size = 16, .hidden_size = 32, .num_layers = 2, .num_classes = 10});
  net.eval();
  NoGradGuard no_grad;
  const auto forward = [&net](const Tensor& x) { return net.forward(x); };
  const auto fast = compile(forward, {.name = "lstm_loop"});
  for (int64_t batch : {2, 3, 7, 4, 2}) {
    const Tensor x = randn({batch, 5, 16});
    EXPECT_TRUE(compiler::testing::near(fast(x), forward(x))) << batch;
  }
  ExplainReport r = fast.explain();
  EXPECT_EQ(r.stats.traces, 2) << r.dynamic_sizes;
  EXPECT_EQ(r.stats.retraces, 2) << r.dynamic_sizes;
  EXPECT_TRUE(r.symbolic_guards.empty()) << r.symbolic_graph;
  const Tensor longer = randn({3, 6, 16});
  EXPECT_TRUE(compiler::testing::near(fast(longer), forward(longer)));
  r = fast.explain();
  EXPECT_EQ(r.stats.traces, 3) << r.dynamic_sizes;
}

// A size-1 dim's stride never matters (only index 0 exists): at batch 1, a
// new size of another dim is made from the trace as at batch 2.
TEST(Dynamic, BatchOneMakesNewSizesFromTheTrace) {
  for (const int64_t batch : {1, 2}) {
    const auto fast = compile([](const Tensor& x) { return x * 2.0; });
    for (int64_t s = 8; s <= 12; ++s) {
      const Tensor x = randn({batch, 4, s, 64});
      EXPECT_TRUE(same(fast(x), x * 2.0)) << batch << " " << s;
    }
    const ExplainReport r = fast.explain();
    EXPECT_EQ(r.stats.traces, 2) << "batch " << batch << ": " << r.dynamic_sizes;
    EXPECT_EQ(r.stats.retraces, 3) << "batch " << batch << ": " << r.dynamic_sizes;
  }
}

// Generation's common case: a cache grown by cat at batch 1, one token per call.
TEST(Dynamic, ACacheGrownByCatAtBatchOneIsMadeFromOneTrace) {
  manual_seed(4);
  NoGradGuard no_grad;  // generation: the cache's tensors record no autograd
  nn::Linear proj(16, 16);
  const auto step = [&](const Tensor& cache, const Tensor& token) {
    Tensor grown = cat({cache, proj(token).unsqueeze(1)}, 1);  // [1, t + 1, 16]
    Tensor scores = softmax(matmul(proj(token).unsqueeze(1), grown.transpose(1, 2)) * 0.25, -1);
    return std::make_pair(grown, matmul(scores, grown).squeeze(1));
  };
  const auto fast = compile(step);
  Tensor cache = randn({1, 3, 16}), eager_cache = cache;
  for (int i = 0; i < 6; ++i) {
    const Tensor token = randn({1, 16});
    auto [grown, out] = fast(cache, token);
    auto [want_grown, want_out] = step(eager_cache, token);
    EXPECT_TRUE(same(grown, want_grown)) << i;
    EXPECT_TRUE(same(out, want_out)) << i;
    cache = grown;
    eager_cache = want_grown;
  }
  const ExplainReport r = fast.explain();
  EXPECT_EQ(r.stats.traces, 2) << r.dynamic_sizes;
  EXPECT_EQ(r.stats.retraces, 4) << r.dynamic_sizes;
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
