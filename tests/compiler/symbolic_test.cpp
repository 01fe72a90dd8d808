// Symbolic sizes: expressions in one canonical form, comparisons that guard
// only what the expressions leave open, and a trace's symbolic shapes, made
// by the shape rules on symbols, checked against the graphs the same rules
// make for other sizes: wherever the guards hold, the graph made for the new
// sizes has exactly the layouts the expressions give.
#include <gtest/gtest.h>

#include <functional>
#include <optional>

#include "compiler/capture/capture.h"
#include "compiler/compiler_testing.h"
#include "compiler/ir/symbolic_shapes.h"
#include "core/symbolic.h"
#include "kiln/kiln.h"
#include "kiln/models.h"

namespace kiln::compiler {
namespace {

namespace F = nn::functional;
using sym::Expr;
using sym::Guard;
using sym::GuardScope;
using testing::Program;

const Expr s0 = Expr::symbol(0), s1 = Expr::symbol(1);

TEST(Symbolic, ExpressionsHaveOneForm) {
  EXPECT_EQ(s0 + s1, s1 + s0);
  EXPECT_EQ((s0 + 1) * (s0 - 1), s0 * s0 - 1);
  EXPECT_EQ(floordiv(64 * s0, 64), s0);
  EXPECT_EQ(floordiv(64 * s0 * s1, 64 * s1), s0);
  EXPECT_EQ(floordiv(2 * s0 + 3, 2), s0 + 1);  // the divisible terms come out
  EXPECT_EQ(floordiv(floordiv(s0 - 1, 2), 4), floordiv(s0 - 1, 8));
  EXPECT_EQ(mod(2 * s0 + 3, 2), Expr(1));
  EXPECT_EQ(mod(6 * s0, 3), Expr(0));
  EXPECT_TRUE((s0 - s0).is_constant());
  EXPECT_NE(floordiv(s0 - 1, 2) * 2, s0 - 1);
  const Expr conv = floordiv(s0 - 1, 2) + 1;  // a 3x3 convolution of stride 2, padding 1
  EXPECT_EQ(conv.str(), "(s0 - 1)//2 + 1");
  EXPECT_EQ((64 * s0 * s1).str(), "64*s0*s1");
  EXPECT_EQ((3 - s1).str(), "-s1 + 3");
  const std::vector<int64_t> at{7, 5};
  EXPECT_EQ(conv.eval(at), 4);
  EXPECT_EQ(floordiv(s0 - 10, 4).eval(at), -1);  // floor division, as in Python
  EXPECT_EQ((s0 * s1 + 1).lower_bound(), 5);     // every symbol is at least 2
  EXPECT_EQ((conv * s1).symbols(), (std::vector<int32_t>{0, 1}));
}

TEST(Symbolic, ComparisonsGuardOnlyWhatTheExpressionsLeaveOpen) {
  const SymInt a(7, s0), b(7, s1);
  GuardScope scope;
  EXPECT_FALSE(a == 1);         // a symbol is at least 2: no guard
  EXPECT_TRUE(a > 0);           // nor here
  EXPECT_TRUE(a * 4 == 4 * a);  // equal expressions
  EXPECT_TRUE(a - a + 3 == 3);
  EXPECT_TRUE(scope.guards().empty());
  EXPECT_TRUE(a == b);  // equal when traced: that they stay equal is a guard
  EXPECT_TRUE(a < 9);
  EXPECT_EQ(((a - 5) / 2).hint(),
            1);  // truncation is floor division where the dividend is not negative
  EXPECT_EQ(SymInt(9, s0 + 2).specialize(), 9);
  std::vector<std::string> texts;
  for (const Guard& g : scope.guards()) texts.push_back(g.str());
  ASSERT_EQ(texts.size(), 4u) << ::testing::PrintToString(texts);
  EXPECT_EQ(texts, (std::vector<std::string>{"s0 == s1", "8 >= s0", "s0 >= 5", "s0 == 7"}));
  const std::vector<int64_t> holds{7, 7}, breaks{9, 7};
  for (const Guard& g : scope.guards()) EXPECT_TRUE(g.holds(holds)) << g.str();
  EXPECT_FALSE(scope.guards()[1].holds(breaks));
  // The same guard twice is kept once.
  (void)(a == b);
  EXPECT_EQ(scope.guards().size(), 4u);
}

struct Traced {
  Trace trace;
  std::vector<LayoutRead> reads;
};

Traced traced(const Program& f, const TensorList& args) {
  Tracer tracer;
  TensorList proxies;
  for (const Tensor& a : args) proxies.push_back(tracer.input(a));
  Trace t = tracer.finish(f(proxies));
  return {std::move(t), tracer.layout_reads()};
}

// For each argument list: whether the symbolic shapes admit it, and where
// they do, that retrace makes its graph and the graph has the layouts the
// expressions give. Where they refuse, retrace refuses too (the guards are
// exactly the program's dependence on its sizes), but where the guards are
// cautious: a symbol's size of 0 or 1, which the expressions do not cover,
// or a size whose expression was 1 when traced (a 1 broadcasts: the rules
// compare with it), which retrace may make all the same.
enum Expect : uint8_t { kAdmitted, kRefused, kCautious };

void check_sizes(const Traced& t, const SymbolicShapes& shapes,
                 const std::vector<TensorList>& calls, const std::vector<Expect>& expected) {
  ASSERT_EQ(calls.size(), expected.size());
  for (size_t i = 0; i < calls.size(); ++i) {
    std::string why;
    const bool admits = shapes.admits(calls[i], why);
    EXPECT_EQ(admits, expected[i] == kAdmitted) << "call " << i << ": " << why;
    std::string refused;
    const std::optional<Trace> made = retrace(t.trace, t.reads, calls[i], refused);
    if (expected[i] != kCautious) {
      EXPECT_EQ(made.has_value(), admits) << "call " << i << ": " << refused << " / " << why;
    }
    if (!made || !admits) continue;
    std::string differs;
    EXPECT_TRUE(shapes.describes(made->graph, shapes.bind(calls[i]), differs))
        << "call " << i << ": " << differs;
  }
}

// Convolution, pooling, flatten, a linear layer and a reshape with -1, over
// dynamic batch, height and width: every size follows its expressions.
TEST(Symbolic, ConvolutionAndPoolingFollowTheirFormulas) {
  manual_seed(1);
  nn::Conv2d conv(3, 8, 3, {.stride = 2, .padding = 1});
  nn::Linear fc(8, 4);
  const Program f = [&](const TensorList& a) {
    const Tensor h = max_pool2d(conv(a[0]).relu(), {2});  // [N, 8, H', W']
    const Tensor pooled = adaptive_avg_pool2d(h, {1, 1}).flatten(1);
    return TensorList{fc(pooled).reshape({-1, 2, 2}), h.sum({2, 3})};
  };
  NoGradGuard no_grad;
  const Traced t = traced(f, {randn({3, 3, 17, 21})});
  std::string why;
  const uint64_t dims = 1 | 4 | 8;  // batch, height, width
  const std::optional<SymbolicShapes> shapes =
      symbolize(t.trace, t.reads, std::vector<uint64_t>{dims}, why);
  ASSERT_TRUE(shapes) << why;
  ASSERT_EQ(shapes->symbols.size(), 3u);
  const std::string text = shapes->text(t.trace.graph);
  EXPECT_NE(text.find("s0: argument 0 dim 0 (traced as 3)"), std::string::npos) << text;
  EXPECT_NE(text.find("float32[s0, 8, (s1 - 1)//2 + 1, (s2 - 1)//2 + 1]"), std::string::npos)
      << text;
  EXPECT_NE(text.find("float32[s0, 2, 2]"), std::string::npos) << text;
  const std::string dot = shapes->dot(t.trace.graph);
  EXPECT_NE(dot.find("float32[s0, 8, (s1 - 1)//2 + 1, (s2 - 1)//2 + 1]\"];"), std::string::npos)
      << dot;
  check_sizes(t, *shapes,
              {{randn({5, 3, 17, 21})},
               {randn({2, 3, 9, 40})},
               {randn({7, 3, 4, 4})},
               {randn({1, 3, 17, 21})}},
              {kAdmitted, kAdmitted, kAdmitted, kCautious});
}

// Two dynamic dims that broadcast against each other must stay equal; a
// program that reads a size is tied to it.
TEST(Symbolic, BroadcastingAndReadsAreGuards) {
  const Program f = [](const TensorList& a) {
    const Tensor s = a[0] + a[1];
    return TensorList{s.view({-1, s.size(1)}).softmax(1)};
  };
  const Traced t = traced(f, {randn({4, 6}), randn({4, 6})});
  std::string why;
  const std::optional<SymbolicShapes> shapes =
      symbolize(t.trace, t.reads, std::vector<uint64_t>{3, 3}, why);
  ASSERT_TRUE(shapes) << why;
  std::vector<std::string> guards;
  for (const Guard& g : shapes->guards) guards.push_back(g.str());
  EXPECT_NE(std::find(guards.begin(), guards.end(), "s0 == s2"), guards.end())
      << ::testing::PrintToString(guards);
  EXPECT_NE(std::find(guards.begin(), guards.end(), "s1 == 6"), guards.end())
      << ::testing::PrintToString(guards);
  check_sizes(t, *shapes,
              {{randn({9, 6}), randn({9, 6})},
               {randn({9, 6}), randn({5, 6})},
               {randn({4, 7}), randn({4, 7})}},
              {kAdmitted, kRefused, kRefused});
  std::string refused;
  EXPECT_FALSE(shapes->admits({randn({4, 7}), randn({4, 7})}, refused));
  EXPECT_NE(refused.find("the function read size(1) of %"), std::string::npos) << refused;
  EXPECT_NE(refused.find("(now 7): guard s1 == 6"), std::string::npos) << refused;
  // A read of a shape made inside the program: the guards fix its symbols,
  // so the refusal says their values.
  const Program g = [](const TensorList& a) {
    const Tensor h = a[0].relu();
    return TensorList{h.view(h.sizes())};
  };
  const Traced tg = traced(g, {randn({4, 6})});
  const std::optional<SymbolicShapes> fixed =
      symbolize(tg.trace, tg.reads, std::vector<uint64_t>{3}, why);
  ASSERT_TRUE(fixed) << why;
  EXPECT_FALSE(fixed->admits({randn({5, 6})}, refused));
  EXPECT_NE(refused.find("the function read sizes() of %1"), std::string::npos) << refused;
  EXPECT_NE(refused.find("which gave [4, 6]: guard s0 == 4 fails for s0 = 5"), std::string::npos)
      << refused;
}

// The reference models: ResNet over batch and image sizes, BERT over batch
// sizes and sequence lengths.
TEST(Symbolic, ReferenceModelsShapesAreSymbolic) {
  manual_seed(4);
  auto resnet = models::resnet18({.num_classes = 10, .widths = {8, 16, 32, 64}});
  resnet->eval();
  NoGradGuard no_grad;
  {
    const Program f = [&](const TensorList& a) { return TensorList{resnet->forward(a[0])}; };
    // 64 x 64 images: the last stage is 2 x 2 (at 32 x 32 it would be 1 x 1,
    // and its guards would hold for that size only).
    const Traced t = traced(f, {randn({2, 3, 64, 64})});
    std::string why;
    const auto shapes = symbolize(t.trace, t.reads, std::vector<uint64_t>{1 | 4 | 8}, why);
    ASSERT_TRUE(shapes) << why;
    const std::string text = shapes->text(t.trace.graph);
    EXPECT_NE(text.find("float32[s0, 10]"), std::string::npos) << text;
    EXPECT_NE(text.find("float32[s0, 64, (s1 - 1)//32 + 1, (s2 - 1)//32 + 1]"), std::string::npos)
        << text;
    // 48 x 40 and 17 x 64 (a last stage of 1 x 2): the same program.
    check_sizes(t, *shapes,
                {{randn({5, 3, 64, 64})}, {randn({3, 3, 48, 40})}, {randn({2, 3, 17, 64})}},
                {kAdmitted, kAdmitted, kAdmitted});
  }
  const auto bert = testing::small_bert();
  const Program f = [&](const TensorList& a) {
    return TensorList{bert->forward(a[0]).last_hidden_state};
  };
  const Traced t = traced(f, {randint(0, 100, {2, 16})});
  std::string why;
  const auto shapes = symbolize(t.trace, t.reads, std::vector<uint64_t>{1 | 2}, why);
  ASSERT_TRUE(shapes) << why;
  EXPECT_NE(shapes->text(t.trace.graph).find("float32[s0, s1, 32]"), std::string::npos)
      << shapes->text(t.trace.graph);
  // New batch sizes and new lengths are the same program: the model reads
  // neither (its positions are made from the ids' shape, its heads split and
  // merge the last dim only).
  // Its one guard is its check of the length against the position table.
  ASSERT_EQ(shapes->guards.size(), 1u);
  EXPECT_EQ(shapes->guards[0].str(), "64 >= s1");
  check_sizes(t, *shapes,
              {{randint(0, 100, {5, 16})},
               {randint(0, 100, {3, 17})},
               {randint(0, 100, {2, 40})},
               {randint(0, 100, {2, 65})}},
              {kAdmitted, kAdmitted, kAdmitted, kRefused});
}

// Every group of ops, over two free sizes (a, b) with every dim of every
// argument dynamic: traced at (6, 10), then for other (a, b) the symbolic
// shapes must never admit sizes whose graph the shape rules make otherwise
// (soundness), and must admit some (they are not vacuous). This runs the
// symbolic instance of nearly every shape rule against its eager instance.
TEST(Symbolic, EveryRuleGroupAgreesWithItsEagerInstance) {
  manual_seed(7);
  struct Case {
    const char* name;
    std::function<TensorList(int64_t a, int64_t b)> args;
    Program f;
    bool tied = false;  // reads a, so only (6, 11) is admitted
  };
  const Tensor w8 = randn({4, 8}), table = randn({20, 8}), conv_w = randn({4, 3, 3}),
               gamma = randn({8}), stats = rand({3}), bias5 = randn({5});
  nn::LSTMCell cell(8, 6);
  const auto ids = [](Shape s, int64_t high) { return randint(0, high, s); };
  const std::vector<Case> cases = {
      {"pointwise",
       [](int64_t a, int64_t b) {
         return TensorList{randn({a, b}), randn({b})};
       },
       [](const TensorList& x) {
         const Tensor y = (x[0] * x[1] + 1.0).relu().sigmoid();
         return TensorList{where(x[0] > 0.0, x[0], x[1]), clamp(y, 0.1, 0.9),
                           masked_fill(x[0], x[0] < 0.0, 0.0), x[0].pow(2.0) - x[1].exp()};
       }},
      {"reductions",
       [](int64_t a, int64_t b) {
         return TensorList{randn({a, b})};
       },
       [](const TensorList& x) {
         return TensorList{sum(x[0], {1}, true), mean(x[0], {0}),  amax(x[0], {1}),
                           argmax(x[0], 1),      softmax(x[0], 1), log_softmax(x[0], 0),
                           cumsum(x[0], 1),      var(x[0], {1}),   norm(x[0], 2, {0}),
                           logsumexp(x[0], {1}), sum(x[0])};
       }},
      {"linalg",
       [](int64_t a, int64_t b) {
         return TensorList{randn({a, b}), randn({b, 5}), randn({2, a, b}), randn({2, b, a}),
                           randn({a, 8})};
       },
       [&](const TensorList& x) {
         return TensorList{matmul(x[0], x[1]), bmm(x[2], x[3]), addmm(bias5, x[0], x[1]),
                           linear(x[4], w8), matmul(x[2], x[1])};
       }},
      {"views",
       [](int64_t a, int64_t b) {
         return TensorList{randn({a, b})};
       },
       [](const TensorList& x) {
         const Tensor t = x[0];
         return TensorList{t.view({-1}),
                           t.transpose(0, 1).contiguous(),
                           t.unsqueeze(1).expand({-1, 3, -1}),
                           t.permute({1, 0}).select(0, -1),
                           t.slice(1, 1, std::nullopt, 2),
                           t.slice(1, 0, 2),
                           t.narrow(1, 0, 3),
                           t.unsqueeze(0).squeeze(),
                           t.flatten(),
                           t.reshape({-1, 1}),
                           t.unsqueeze(0).flatten(0, 1),
                           t.unflatten(0, {1, -1}),
                           t.unflatten(1, {-1, 1}).flatten(1)};
       }},
      {"shape ops",
       [&](int64_t a, int64_t b) {
         return TensorList{randn({a, b}), ids({3}, 2), ids({a, b}, 2), ids({a}, 5)};
       },
       [](const TensorList& x) {
         const Tensor t = x[0];
         return TensorList{cat({t, t * 2.0}, 0),
                           stack({t, t}, 1),
                           index_select(t, 0, x[1]),
                           gather(t, 1, x[2].slice(1, 0, 1)),
                           flip(t, {0}),
                           tril(t),
                           triu(t, 1),
                           repeat(t, {2, 1}),
                           one_hot(x[3], 5),
                           scatter_add(t, 0, remainder(x[2], 2), t)};
       }},
      {"normalization",
       [](int64_t a, int64_t b) {
         return TensorList{randn({a, 8}), randn({a, 3, b}), randn({2, 8, a, b})};
       },
       [&](const TensorList& x) {
         return TensorList{F::layer_norm(x[0], {8}, gamma), F::group_norm(x[2], 4),
                           F::batch_norm(x[1], stats, stats + 1.0)};
       }},
      {"embedding and attention",
       [&](int64_t a, int64_t b) {
         return TensorList{ids({a, b}, 20), randn({a, 2, b, 8})};
       },
       [&](const TensorList& x) {
         return TensorList{F::embedding(x[0], table),
                           F::scaled_dot_product_attention(x[1], x[1], x[1]),
                           F::scaled_dot_product_attention(x[1], x[1], x[1], {.is_causal = true})};
       }},
      {"convolution and pooling",
       [](int64_t a, int64_t b) {
         return TensorList{randn({a, 3, b}), randn({2, 3, a, b})};
       },
       [&](const TensorList& x) {
         return TensorList{conv1d(x[0], conv_w, {}, {.stride = {2}, .padding = {1}}),
                           avg_pool2d(x[1], {2}),
                           max_pool2d(x[1], {3}, {2}, {1}, {1}, true),
                           adaptive_avg_pool2d(x[1], {2, 3}),
                           F::pad(x[1], {1, 2, 0, 1}),
                           F::pad(x[0], {2, 1}, "reflect"),
                           F::interpolate(x[1], {.size = std::vector<int64_t>{12, 20}})};
       }},
      {"losses",
       [&](int64_t a, int64_t) {
         return TensorList{randn({a, 5}), ids({a}, 5)};
       },
       [&](const TensorList& x) {
         return TensorList{F::nll_loss(log_softmax(x[0], 1), x[1]), F::cross_entropy(x[0], x[1])};
       }},
      // An LSTM cell makes its zero state from the input's shape and checks
      // a given state against the input's batch by comparison: no read.
      {"cells",
       [&](int64_t a, int64_t) {
         return TensorList{randn({a, 8})};
       },
       [&](const TensorList& x) {
         const nn::LSTMState first = cell(x[0]);
         const nn::LSTMState second = cell(x[0] * 2.0, first);
         return TensorList{second.h, second.c};
       }},
  };
  NoGradGuard no_grad;
  const std::vector<std::pair<int64_t, int64_t>> sizes = {{3, 7},  {9, 12}, {4, 20},
                                                          {12, 5}, {2, 2},  {6, 11}};
  for (const Case& c : cases) {
    const TensorList traced_args = c.args(6, 10);
    const Traced t = traced(c.f, traced_args);
    const std::vector<uint64_t> all(traced_args.size(), ~uint64_t{0});
    std::string why;
    const std::optional<SymbolicShapes> shapes = symbolize(t.trace, t.reads, all, why);
    ASSERT_TRUE(shapes) << c.name << ": " << why;
    int admitted = 0;
    for (const auto& [a, b] : sizes) {
      const TensorList args = c.args(a, b);
      std::string refused;
      if (!shapes->admits(args, refused)) continue;
      ++admitted;
      std::string not_made;
      const std::optional<Trace> made = retrace(t.trace, t.reads, args, not_made);
      ASSERT_TRUE(made) << c.name << " at (" << a << ", " << b << "): admitted, but " << not_made
                        << "\n"
                        << shapes->text(t.trace.graph);
      std::string differs;
      EXPECT_TRUE(shapes->describes(made->graph, shapes->bind(args), differs))
          << c.name << " at (" << a << ", " << b << "): " << differs;
    }
    if (c.tied) {
      EXPECT_EQ(admitted, 1) << c.name;
    } else {
      EXPECT_GT(admitted, 0) << c.name << ": no size admitted\n" << shapes->text(t.trace.graph);
    }
  }
}

// Tensor::size_is: a check on a size is a guard on the comparison, not on
// the size. The branch below holds for every batch up to 4, then for every
// batch above.
TEST(Symbolic, AComparedSizeIsAGuardOnTheComparison) {
  int calls = 0;
  const auto f = [&](const Tensor& x) {
    ++calls;
    if (x.size_is(0, SizeCmp::kGt, 4)) return x * 2.0;
    return x + 1.0;
  };
  const auto fast = compile(f, {.name = "branch"});
  for (int64_t batch : {2, 3, 4, 6, 9, 3}) {
    const Tensor x = randn({batch, 5});
    EXPECT_TRUE(testing::same(fast(x), f(x))) << batch;
  }
  const ExplainReport r = fast.explain();
  EXPECT_EQ(r.stats.traces, 3);    // 2, 3 (dim 0 dynamic), 6 (the other branch)
  EXPECT_EQ(r.stats.retraces, 2);  // 4 from 3's trace, 9 from 6's
  EXPECT_EQ(calls, 3 + 6);
  ASSERT_EQ(r.symbolic_guards.size(), 1u) << r.symbolic_graph;
  EXPECT_NE(r.symbolic_guards[0].find("s0 >= 5  (the function's read of size(0) of %0 > 4 at "
                                      "symbolic_test.cpp:"),
            std::string::npos)
      << r.symbolic_guards[0];
  // narrow checks its bounds the same way: any batch of at least 3 rows.
  const auto g = [](const Tensor& x) { return x.narrow(0, 0, 3).sum({0}); };
  const auto head = compile(g, {.name = "head"});
  for (int64_t batch : {4, 5, 7, 3}) {
    const Tensor x = randn({batch, 2});
    EXPECT_TRUE(testing::same(head(x), g(x))) << batch;
  }
  EXPECT_EQ(head.stats().traces, 2);
  EXPECT_EQ(head.stats().retraces, 2);
  EXPECT_THROW((void)head(randn({2, 2})), IndexError);
}

// Comparing two tensors' sizes (size_is with another tensor, same_sizes)
// relates them (s0 == s2) and fixes neither: eager answers the same, and a
// compiled check holds for every pair of sizes that compares the same.
TEST(Symbolic, SizesComparedWithSizesAreGuardsOnTheRelation) {
  const Tensor a = zeros({2, 3}), b = zeros({2, 3}), row = zeros({3});
  EXPECT_TRUE(a.same_sizes(b));
  EXPECT_FALSE(a.same_sizes(zeros({2, 4})));
  EXPECT_FALSE(a.same_sizes(row));
  EXPECT_TRUE(row.size_is(0, SizeCmp::kEq, a, -1));
  EXPECT_TRUE(a.size_is(0, SizeCmp::kLt, a, 1));
  EXPECT_FALSE(a.size_is(1, SizeCmp::kLe, a, 0));
  EXPECT_THROW((void)a.size_is(2, SizeCmp::kEq, b, 0), IndexError);
  EXPECT_THROW((void)a.size_is(0, SizeCmp::kEq, row, 1), IndexError);

  int calls = 0;
  const auto f = [&](const Tensor& x, const Tensor& mask) {
    ++calls;
    if (!mask.same_sizes(x)) throw ShapeError("masked: the mask does not match");
    // A longer second dim than first takes the other branch.
    if (x.size_is(1, SizeCmp::kGt, x, 0)) return x * mask;
    return x + mask;
  };
  const auto fast = compile(f, {.name = "masked"});
  const std::vector<std::pair<int64_t, int64_t>> sizes = {{2, 3}, {3, 4}, {5, 9}, {9, 5}, {4, 7}};
  for (const auto& [rows, cols] : sizes) {
    const Tensor x = randn({rows, cols}), mask = rand({rows, cols});
    EXPECT_TRUE(testing::same(fast(x, mask), f(x, mask))) << rows << " x " << cols;
  }
  const ExplainReport r = fast.explain();
  EXPECT_EQ(r.stats.traces, 3) << r.dynamic_sizes;    // (2, 3); (3, 4): dynamic; (9, 5): the branch
  EXPECT_EQ(r.stats.retraces, 2) << r.dynamic_sizes;  // (5, 9) and (4, 7)
  std::vector<std::string> guards;
  for (const std::string& g : r.symbolic_guards) guards.push_back(g.substr(0, g.find("  (")));
  // The latest dynamic program, (9, 5)'s: the branch's other outcome.
  EXPECT_EQ(guards, (std::vector<std::string>{"s0 == s2", "s1 == s3", "s0 >= s1"}))
      << r.symbolic_graph;
  EXPECT_NE(r.symbolic_graph.find("size(1) of %0 > size(0) of %0 at symbolic_test.cpp:"),
            std::string::npos)
      << r.symbolic_graph;
  // A mask that does not match: the guard fails, the function is traced and
  // throws its own error, as eager.
  EXPECT_THROW((void)fast(randn({4, 7}), rand({4, 6})), ShapeError);
  EXPECT_EQ(calls, 5 + 3 + 1);  // eager's five, three traces, and the mismatched one
}

// compile(): the dynamic program's symbolic graph and guards in explain();
// a size the guards refuse is traced, with the read named.
TEST(Symbolic, ExplainShowsTheDynamicProgramsSymbolicShapes) {
  nn::Linear linear(6, 4);
  NoGradGuard no_grad;
  const auto f = [&](const Tensor& x) { return linear(x).relu().reshape({-1, 2, 2}).sum({2}); };
  const auto fast = compile(f, {.name = "head"});
  for (int64_t batch : {2, 3, 9}) {
    const Tensor x = randn({batch, 6});
    EXPECT_TRUE(testing::same(fast(x), f(x))) << batch;
  }
  ExplainReport r = fast.explain();
  EXPECT_EQ(r.stats.retraces, 1);
  EXPECT_NE(r.symbolic_graph.find("s0: argument 0 dim 0 (traced as 3)"), std::string::npos)
      << r.symbolic_graph;
  EXPECT_NE(r.symbolic_graph.find("float32[s0, 2, 2]"), std::string::npos) << r.symbolic_graph;
  EXPECT_TRUE(r.symbolic_guards.empty()) << r.symbolic_graph;
  ASSERT_EQ(r.graphs.size(), 3u);
  EXPECT_EQ(r.graphs[2].symbols, "s0 = 9");
  EXPECT_NE(r.to_string().find("that its guards admit, bound to these (s0 = 9)"), std::string::npos)
      << r.to_string();
  EXPECT_NE(r.to_string().find("symbolic shapes of the dynamic program:"), std::string::npos);
  EXPECT_NE(r.to_json().find("\"symbolic_guards\""), std::string::npos);

  // A program that reads its batch is tied to it: a guard, and new sizes traced.
  const auto g = [&](const Tensor& x) { return linear(x).narrow(0, 0, x.size(0) - 1); };
  const auto tied = compile(g, {.name = "tied"});
  for (int64_t batch : {2, 3, 4}) {
    const Tensor x = randn({batch, 6});
    EXPECT_TRUE(testing::same(tied(x), g(x))) << batch;
  }
  r = tied.explain();
  EXPECT_EQ(r.stats.retraces, 0);
  EXPECT_EQ(r.stats.traces, 3);
  ASSERT_FALSE(r.symbolic_guards.empty()) << r.symbolic_graph;
  EXPECT_NE(r.symbolic_guards[0].find(
                "s0 == 4  (the function's read of size(0) of %0 at symbolic_test.cpp:"),
            std::string::npos)
      << r.symbolic_guards[0];
  EXPECT_NE(r.dynamic_sizes.find("the function read size(0) of %0 at symbolic_test.cpp:"),
            std::string::npos)
      << r.dynamic_sizes;
  EXPECT_NE(r.dynamic_sizes.find("(now 4): guard s0 == 3"), std::string::npos) << r.dynamic_sizes;
}

}  // namespace
}  // namespace kiln::compiler
