// The graph passes: what each removes, merges or folds, what it must leave
// alone (writes, random draws, results), and results equal to eager's.
#include <gtest/gtest.h>

#include <functional>

#include "compiler/capture/capture.h"
#include "compiler/compiler_testing.h"
#include "compiler/passes/pass.h"
#include "compiler/runtime/executable.h"
#include "core/shape_util.h"
#include "kiln/kiln.h"
#include "ops/dispatch.h"

namespace kiln::compiler {
namespace {

namespace F = nn::functional;
using testing::op_names;
using testing::Program;
using testing::same;
using testing::trace_of;

// The pass's result verifies, and its executable equals eager on args.
void expect_equivalent(const Trace& t, const Program& f, const TensorList& args) {
  verify(t.graph);
  const Executable exe(std::make_shared<const Trace>(t));
  const TensorList expected = f(args), actual = exe.run(args);
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) EXPECT_TRUE(same(actual[i], expected[i])) << i << "\n" << to_text(t.graph);
}

TEST(Passes, DeadCodeGoesButWritesAndDrawsStay) {
  Tensor buffer = zeros({4});
  const Program f = [&](const TensorList& a) {
    Tensor unused = a[0].exp().sum();          // dead
    Tensor dropped = F::dropout(a[0], 0.5);    // unused, but it draws: stays
    Tensor b = buffer;
    b.add_(a[0]);                              // a write: stays
    (void)unused;
    (void)dropped;
    return TensorList{a[0].relu()};
  };
  const Tensor x = randn({4});
  const Trace t = trace_of(f, {x});
  EXPECT_EQ(op_names(t.graph), (std::vector<std::string>{"exp", "sum", "dropout", "add_", "relu"}));
  const Trace d = eliminate_dead_code(t);
  EXPECT_EQ(op_names(d.graph), (std::vector<std::string>{"dropout", "add_", "relu"}));
  verify(d.graph);
}

TEST(Passes, CommonSubexpressionsMergeUnlessAWriteIntervenes) {
  const Program f = [](const TensorList& a) {
    Tensor x = a[0] * 2.0;
    Tensor p = x.exp() + x.exp();    // merged
    x.add_(1.0);
    Tensor q = x.exp();              // after a write to x: not merged
    Tensor w = a[0].neg();
    Tensor v = a[0].neg();
    v.mul_(3.0);                     // v is written later: keeps its own storage
    return TensorList{p, q, w, v};
  };
  const Tensor x = randn({5});
  const Trace t = trace_of(f, {x});
  const Trace c = eliminate_common_subexpressions(t);
  EXPECT_EQ(op_names(c.graph),
            (std::vector<std::string>{"mul", "exp", "add", "add_", "exp", "neg", "neg", "mul_"}));
  expect_equivalent(c, f, {x});
  // Two results that are the same computation stay two results.
  const Program twice = [](const TensorList& a) { return TensorList{a[0].exp(), a[0].exp()}; };
  const Trace r = eliminate_common_subexpressions(trace_of(twice, {x}));
  EXPECT_EQ(r.graph.nodes().size(), 2u);
}

// A pass that finds nothing to do gives back the graph as it was; one
// whose first change comes late builds the nodes before it as they were,
// ids and all, though a captured tensor first read after them is a source.
TEST(Passes, APassThatChangesNothingOrChangesLateKeepsTheGraph) {
  const Tensor w = randn({5});
  const Program f = [&](const TensorList& a) {
    Tensor x = a[0] * 2.0 + 1.0;
    Tensor y = x.exp() * w;  // w is read after three nodes
    return TensorList{y.tanh() + y.tanh(), y.sigmoid()};
  };
  const Tensor x = randn({5});
  const Trace t = trace_of(f, {x});
  for (const auto& pass : {remove_noops, eliminate_dead_code, fold_constants, elide_copies}) {
    const Trace same_trace = pass(t);
    EXPECT_EQ(to_text(same_trace.graph), to_text(t.graph));
    EXPECT_EQ(structural_hash(same_trace.graph), structural_hash(t.graph));
  }
  const Trace c = eliminate_common_subexpressions(t);
  EXPECT_EQ(op_names(c.graph),
            (std::vector<std::string>{"mul", "add", "exp", "mul", "tanh", "add", "sigmoid"}));
  expect_equivalent(c, f, {x});
  const Trace all = run_passes(t);
  EXPECT_EQ(op_names(all.graph), op_names(c.graph));
  expect_equivalent(all, f, {x});
}

TEST(Passes, ConstantsFoldWhenSmallAndPrivate) {
  const Program f = [](const TensorList& a) {
    Tensor ramp = arange(0, 8).to(kFloat32) * 0.5;  // folded: arange, copy (to), mul
    Tensor big = zeros({65});                       // 260 bytes: left to the call
    return TensorList{a[0] + ramp, big.sum(), arange(0, 3)};  // a returned constant is not folded
  };
  const Tensor x = randn({8});
  const Trace t = trace_of(f, {x});
  const Trace c = fold_constants(t);
  EXPECT_EQ(op_names(c.graph), (std::vector<std::string>{"full", "add", "sum", "arange"}));

  expect_equivalent(c, f, {x});
}

TEST(Passes, ViewsThatChangeNothingGo) {
  const Program f = [](const TensorList& a) {
    Tensor same_shape = a[0].view({2, 3}).expand({2, 3});
    Tensor moved = a[0].reshape({3, 2});
    return TensorList{(same_shape * 2.0).sum(), moved};
  };
  const Tensor x = randn({2, 3});
  const Trace t = trace_of(f, {x});
  const Trace n = remove_noops(t);
  EXPECT_EQ(op_names(n.graph), (std::vector<std::string>{"view", "mul", "sum"}));
  expect_equivalent(n, f, {x});
}

// A copy of a tensor nothing else sees (as autograd's copy of a gradient
// into .grad) goes; copies whose original something else sees, of another
// dtype or layout, of a part of a storage, or of an argument stay, and so
// do copies autograd records.
TEST(Passes, CopiesOfTensorsNothingElseSeesGo) {
  NoGradGuard no_grad;
  const Program f = [](const TensorList& a) {
    const Tensor fresh = (a[0] * 2.0).clone();                    // goes
    const Tensor column = a[0].sum({0}, true).view({3}).clone();  // goes (through a view)
    Tensor shared = a[0] + 1.0;
    const Tensor kept = shared.clone();                        // shared is returned: stays
    const Tensor cast = (a[0] - 1.0).to(kFloat64);             // another dtype: stays
    const Tensor part = (a[0] * 3.0).narrow(0, 0, 1).clone();  // a part of a storage: stays
    const Tensor argument = a[1].clone();                      // an argument: stays
    Tensor written = a[0].exp();
    const Tensor before = written.clone();  // written after: stays
    written.add_(1.0);
    return TensorList{fresh, column, shared, kept, cast, part, argument, before, written};
  };
  const Tensor x = randn({2, 3}), y = randn({3});
  const Trace t = trace_of(f, {x, y});
  const Trace e = elide_copies(t);
  const auto count = [](const Trace& tr) {
    const auto names = op_names(tr.graph);
    return std::count(names.begin(), names.end(), "copy");
  };
  EXPECT_EQ(count(t), 7);
  EXPECT_EQ(count(e), 5) << to_text(e.graph);
  expect_equivalent(e, f, {x, y});
  // Results stay tensors of their own where the copy stays.
  const Executable exe(std::make_shared<const Trace>(e));
  const TensorList out = exe.run({x, y});
  EXPECT_NE(out[2].data_ptr(), out[3].data_ptr());
  EXPECT_NE(out[7].data_ptr(), out[8].data_ptr());
  {
    EnableGradGuard recording;
    EXPECT_EQ(count(elide_copies(trace_of(f, {x, y}))), 7);
  }
}

// A reduction over dims moves to just after the node that makes its last
// input, unless a node in between writes what it reads; chains of them keep
// their order. Results stay eager's, and a linear's bias gradient then runs
// in the kernel that makes the gradient (storing it for the weight's product).
TEST(Passes, ReductionsMoveToTheirInputsUnlessAWriteIntervenes) {
  NoGradGuard no_grad;
  const Program f = [](const TensorList& a) {
    const Tensor g = (a[0] * 2.0).tanh();
    const Tensor w = g.t().matmul(a[1]);  // read first, as a linear's backward does
    const Tensor b = g.sum({0});          // hoisted to g
    const Tensor bb = b.mean({0}, true);  // after b, still
    Tensor h = a[0].exp();
    const Tensor e = a[1].relu();
    h.mul_(3.0);
    const Tensor s = h.sum({1});  // h written in between its maker and here: stays
    return TensorList{w, b, bb, e, s};
  };
  const Tensor x = randn({6, 5}), y = randn({6, 4});
  const Trace t = trace_of(f, {x, y});
  EXPECT_EQ(op_names(t.graph), (std::vector<std::string>{"mul", "tanh", "permute", "matmul", "sum",
                                                         "mean", "exp", "relu", "mul_", "sum"}));
  const Trace h = hoist_reductions(t);
  EXPECT_EQ(op_names(h.graph), (std::vector<std::string>{"mul", "tanh", "sum", "mean", "permute",
                                                         "matmul", "exp", "relu", "mul_", "sum"}))
      << to_text(h.graph);
  expect_equivalent(h, f, {x, y});
  // Nothing to move: the same trace.
  const Program plain = [](const TensorList& a) { return TensorList{(a[0] * 2.0).sum({1})}; };
  const Trace p = trace_of(plain, {x});
  EXPECT_EQ(structural_hash(hoist_reductions(p).graph), structural_hash(p.graph));
  // Through the pipeline, the bias gradient's sum joins the tanh's kernel.
  if (testing::can_generate_kernels()) {
    const auto fast = compile(
        [&](const Tensor& a, const Tensor& b) {
          const auto out = f({a, b});
          return std::make_tuple(out[0], out[1]);
        },
        {.strict = true});
    const auto [w, b] = fast(x, y);
    const TensorList want = f({x, y});
    EXPECT_TRUE(same(w, want[0]) && same(b, want[1]));
    const ExplainReport r = fast.explain();
    ASSERT_FALSE(r.graphs[0].fused.empty()) << r.to_string();
    EXPECT_EQ(r.graphs[0].fused[0],
              "mul + tanh + sum (nodes 0-2): one generated kernel of 2 inputs, its columns "
              "reduced by sum in cache, its input stored as it is reduced")
        << r.to_string();
  }
}

TEST(Passes, FreezingFoldsBatchNormsIntoConvolutions) {
  Generator gen(12);
  manual_seed(12);
  NoGradGuard no_grad;
  auto bn1 = std::make_shared<nn::BatchNorm2d>(6), bn2 = std::make_shared<nn::BatchNorm2d>(6);
  nn::Sequential net(std::make_shared<nn::Conv2d>(3, 6, 3, nn::Conv2d::Options{.padding = 1}), bn1,
                     std::make_shared<nn::ReLU>(),
                     std::make_shared<nn::Conv2d>(6, 6, 3, nn::Conv2d::Options{.padding = 1, .bias = false}), bn2);
  for (auto* bn : {bn1.get(), bn2.get()}) {  // statistics other than the defaults
    bn->running_mean.copy_(randn({6}, {}, &gen));
    bn->running_var.copy_(rand({6}, {}, &gen) + 0.5);
    bn->weight.copy_(randn({6}, {}, &gen));
    bn->bias.copy_(randn({6}, {}, &gen));
  }
  net.eval();
  const Tensor x = randn({2, 3, 8, 8}, {}, &gen);
  const auto fast = compile(net, {.freeze = true});
  const Tensor expected = net(x), actual = fast(x);
  EXPECT_LT((actual - expected).abs().max().item<double>(), 1e-5 * (1 + expected.abs().max().item<double>()));
  const ExplainReport report = fast.explain();
  ASSERT_EQ(report.graphs.size(), 1u);
  EXPECT_EQ(report.graphs[0].ops,
            (std::vector<std::pair<std::string, int64_t>>{{"conv2d", 2}, {"relu", 1}}));
  EXPECT_EQ(report.graphs[0].captured, 0);
  // Frozen: later updates to the parameters are not seen until a reset.
  net.named_parameters().front().second.mul_(2.0);
  EXPECT_TRUE(same(fast(x), actual));
  compiler::reset();
  EXPECT_LT((fast(x) - net(x)).abs().max().item<double>(), 1e-4 * (1 + net(x).abs().max().item<double>()));
}

// Frozen on the CPU, convolutions and max pools whose results only
// convolutions, pools and in-place pointwise writes read leave them channels
// last: the layout changes, the values stay eager's within tolerance. A
// result that is returned, viewed or read by an out-of-place op keeps its
// row-major layout, and so do the tensors its in-place writes read; strict
// mode changes no layout.
TEST(Passes, FrozenConvolutionsKeepTheirActivationsChannelsLast) {
  NoGradGuard no_grad;
  Generator gen(41);
  const Tensor stem = randn({8, 3, 3, 3}, {}, &gen) * 0.3, stem_b = randn({8}, {}, &gen);
  const Tensor w1 = randn({8, 8, 1, 1}, {}, &gen) * 0.3, w2 = randn({8, 8, 3, 3}, {}, &gen) * 0.1;
  const Tensor w3 = randn({6, 8, 3, 3}, {}, &gen) * 0.1;
  const Program net = [&](const TensorList& a) {
    Tensor x = kiln::conv2d(a[0], stem, stem_b, {.stride = {2}, .padding = {1}}).relu_();
    const Tensor pooled = kiln::max_pool2d(x, {3}, {2}, {1});
    Tensor y = kiln::conv2d(pooled, w1).relu_();
    y = kiln::conv2d(y, w2, {}, {.padding = {1}});
    y.add_(pooled).relu_();  // the residual add reads two channels-last tensors
    const Tensor side = kiln::conv2d(y, w3, {}, {.padding = {1}}) * 2.0;  // read out of place
    const Tensor head = kiln::adaptive_avg_pool2d(y, {1}).flatten(1);
    return TensorList{head, side, kiln::conv2d(pooled, w3)};  // the last one is returned
  };
  const Tensor image = randn({2, 3, 19, 17}, {}, &gen);
  const Trace traced = trace_of(net, {image});
  const auto channels_last_ops = [](const Trace& t) {
    std::vector<std::string> ops;
    for (const Node& n : t.graph.nodes()) {
      const Value& v = t.graph.value(n.outputs[0]);
      if (!n.inplace() && channels_last_layout(v.sizes, v.strides))
        ops.emplace_back(ops::op_schema(n.op).name);
    }
    return ops;
  };
  const Trace frozen = run_passes(traced, {.freeze = true});
  // The stem, the pool, both convolutions of the block; not the one read
  // out of place, not the returned one.
  EXPECT_EQ(channels_last_ops(frozen),
            (std::vector<std::string>{"conv2d", "max_pool2d", "conv2d", "conv2d"}))
      << to_text(frozen.graph);
  const TensorList got = Executable(std::make_shared<const Trace>(frozen)).run({image});
  const TensorList want = net({image});
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(testing::near(got[i], want[i])) << i;
    EXPECT_TRUE(got[i].is_contiguous()) << i;  // results keep eager's layout
  }
  EXPECT_TRUE(channels_last_ops(run_passes(traced, {.freeze = true, .strict = true})).empty());
  EXPECT_TRUE(channels_last_ops(run_passes(traced, {})).empty());  // not frozen
  // A residual read from a row-major tensor keeps the target row-major too.
  const Program mixed = [&](const TensorList& a) {
    Tensor y = kiln::conv2d(a[0], w1);
    y.add_(a[1]).relu_();
    return TensorList{kiln::adaptive_avg_pool2d(y, {1})};
  };
  const Tensor in = randn({1, 8, 5, 5}, {}, &gen), skip = randn({1, 8, 5, 5}, {}, &gen);
  EXPECT_TRUE(channels_last_ops(run_passes(trace_of(mixed, {in, skip}), {.freeze = true})).empty());
}

// The pools on channels-last inputs are the plane loops' results bitwise.
TEST(Passes, PoolsOnChannelsLastInputsEqualTheirRowMajorResults) {
  Generator gen(43);
  Tensor x = randn({2, 9, 8, 5}, {}, &gen);
  x.data<float>()[7] = std::numeric_limits<float>::quiet_NaN();
  const Tensor last = x.permute({0, 2, 3, 1}).contiguous().permute({0, 3, 1, 2});
  ASSERT_TRUE(channels_last_layout(last.sizes(), last.strides()));
  EXPECT_TRUE(same(kiln::max_pool2d(last, {3}, {2}, {1}), kiln::max_pool2d(x, {3}, {2}, {1})));
  EXPECT_TRUE(same(kiln::max_pool2d(last, {2, 3}, {1, 2}, {0, 1}, {2, 1}, true),
                   kiln::max_pool2d(x, {2, 3}, {1, 2}, {0, 1}, {2, 1}, true)));
  for (const Shape& out : {Shape{1, 1}, Shape{3, 2}, Shape{8, 5}})
    EXPECT_TRUE(same(kiln::adaptive_avg_pool2d(last, out), kiln::adaptive_avg_pool2d(x, out)));
}

// An LSTM written as a loop over its steps: each layer's input projections
// become one product over the sequence (the weight read once), and where
// its steps are one chain whose cell states nothing else reads, the layer
// is one lstm_sequence node; else the steps keep their hidden projections
// and cells. Within float32 tolerance of eager. An output fed back as the
// next input, an in-place write or strict mode leave the steps as they are.
TEST(Passes, AnLstmLoopProjectsItsInputsInOneProductPerLayer) {
  NoGradGuard no_grad;
  Generator gen(31);
  manual_seed(31);
  nn::LSTMCell lower_cell(6, 8), upper_cell(8, 8);
  const Program loop = [&](const TensorList& a) {
    nn::LSTMState low, high;
    for (int64_t t = 0; t < a[0].size(1); ++t) {
      low = lower_cell(a[0].select(1, t), low);
      high = upper_cell(low.h, high);
    }
    return TensorList{high.h, high.c, low.h};
  };
  const auto count = [](const Trace& t, const std::string& op) {
    const auto names = op_names(t.graph);
    return std::count(names.begin(), names.end(), op);
  };
  for (int64_t steps : {1, 2, 7}) {
    SCOPED_TRACE(steps);
    const Tensor x = randn({3, steps, 6}, {}, &gen);
    const Trace t = trace_of(loop, {x});
    ASSERT_EQ(count(t, "lstm_step"), 2 * steps);
    const Trace b = batch_recurrent_projections(t);
    verify(b.graph);
    EXPECT_EQ(count(b, "lstm_step"), steps == 1 ? 2 : 0) << to_text(b.graph);
    EXPECT_EQ(count(b, "stack"), steps == 1 ? 0 : 2);
    EXPECT_EQ(count(b, "lstm_sequence"), steps == 1 ? 0 : 2);
    EXPECT_EQ(count(b, "lstm_cell"), 0);
    const Executable exe(std::make_shared<const Trace>(b));
    const TensorList got = exe.run({x}), want = loop({x});
    for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(testing::near(got[i], want[i])) << i;
    // Every step's cell state returned: the steps stay, on one product.
    const Program cells = [&](const TensorList& a) {
      nn::LSTMState s;
      TensorList out;
      for (int64_t k = 0; k < a[0].size(1); ++k) {
        s = lower_cell(a[0].select(1, k), s);
        out.push_back(s.c);
      }
      return out;
    };
    const Trace apart = batch_recurrent_projections(trace_of(cells, {x}));
    EXPECT_EQ(count(apart, "lstm_sequence"), 0);
    EXPECT_EQ(count(apart, "lstm_cell"), steps == 1 ? 0 : steps);
    const TensorList cell_states = Executable(std::make_shared<const Trace>(apart)).run({x});
    const TensorList cell_want = cells({x});
    for (size_t i = 0; i < cell_states.size(); ++i)
      EXPECT_TRUE(testing::near(cell_states[i], cell_want[i])) << i;
    // strict: the pipeline leaves the steps alone.
    EXPECT_EQ(count(run_passes(t, {.strict = true}), "lstm_step"), 2 * steps);
    EXPECT_EQ(count(run_passes(t, {}), "lstm_step"), steps == 1 ? 2 : 0);
  }
  // The output fed back as the next input: each step needs the one before.
  const Program feedback = [&](const TensorList& a) {
    nn::LSTMState s;
    Tensor in = a[0];
    for (int t = 0; t < 4; ++t) {
      s = upper_cell(in, s);
      in = s.h;
    }
    return TensorList{s.h};
  };
  const Tensor h = randn({2, 8}, {}, &gen);
  EXPECT_EQ(count(batch_recurrent_projections(trace_of(feedback, {h})), "lstm_step"), 4);
  // Fed back from the third step on: the first three inputs are one product.
  const Program partly = [&](const TensorList& a) {
    nn::LSTMState s;
    for (int t = 0; t < 5; ++t) s = upper_cell(t < 3 ? a[0].select(1, t) : s.h, s);
    return TensorList{s.h};
  };
  const Tensor seq = randn({2, 3, 8}, {}, &gen);
  const Trace p = batch_recurrent_projections(trace_of(partly, {seq}));
  EXPECT_EQ(count(p, "lstm_step"), 2);
  EXPECT_EQ(count(p, "lstm_sequence"), 1);
  const TensorList got = Executable(std::make_shared<const Trace>(p)).run({seq});
  EXPECT_LE((got[0] - partly({seq})[0]).abs().max().item<double>(), 1e-5);
  // A weight the program computes: the product comes after it.
  const Program computed = [&](const TensorList& a) {
    const Tensor w = lower_cell.weight_ih * 0.5;
    nn::LSTMState s;
    for (int64_t t = 0; t < a[0].size(1); ++t)
      s = F::lstm_cell(a[0].select(1, t),
                       s.h.defined() ? s : nn::LSTMState{zeros({3, 8}), zeros({3, 8})}, w,
                       lower_cell.weight_hh, lower_cell.bias_ih, lower_cell.bias_hh);
    return TensorList{s.h};
  };
  const Tensor x6 = randn({3, 4, 6}, {}, &gen);
  const Trace c = batch_recurrent_projections(trace_of(computed, {x6}));
  verify(c.graph);
  EXPECT_EQ(count(c, "stack"), 1) << to_text(c.graph);
  EXPECT_EQ(count(c, "lstm_sequence"), 1);
  const TensorList from_computed = Executable(std::make_shared<const Trace>(c)).run({x6});
  EXPECT_TRUE(testing::near(from_computed[0], computed({x6})[0]));
  // An in-place write anywhere: the order is part of the program.
  const Program written = [&](const TensorList& a) {
    TensorList out = loop(a);
    out[0].mul_(2.0);
    return out;
  };
  const Tensor x = randn({3, 4, 6}, {}, &gen);
  EXPECT_EQ(count(batch_recurrent_projections(trace_of(written, {x})), "lstm_step"), 8);
}

TEST(Passes, ThePipelineKeepsModelsExact) {
  Generator gen(6);
  manual_seed(6);
  NoGradGuard no_grad;
  nn::MultiheadAttention mha(16, 4);
  nn::Sequential cnn(std::make_shared<nn::Conv2d>(3, 4, 3), std::make_shared<nn::BatchNorm2d>(4),
                     std::make_shared<nn::ReLU>(), std::make_shared<nn::Flatten>(),
                     std::make_shared<nn::Linear>(4 * 6 * 6, 3));
  cnn.eval();
  const std::vector<std::pair<Program, TensorList>> cases = {
      {[&](const TensorList& a) { return TensorList{mha(a[0], a[0], a[0]).output}; }, {randn({3, 2, 16}, {}, &gen)}},
      {[&](const TensorList& a) { return TensorList{cnn(a[0]).softmax(-1)}; }, {randn({2, 3, 8, 8}, {}, &gen)}},
  };
  for (const auto& [f, args] : cases) {
    std::vector<PassReport> reports;
    const Trace t = run_passes(trace_of(f, args), {}, &reports);
    ASSERT_EQ(reports.size(), 8u);
    EXPECT_LE(reports.back().nodes_after, reports.front().nodes_before);
    expect_equivalent(t, f, args);
  }
}

// Eval-mode batch norms with fixed statistics and affine parameters.
struct Norms {
  explicit Norms(int64_t channels) : a(channels), b(channels), c(channels) {
    for (auto* bn : {&a, &b, &c}) {
      bn->eval();
      NoGradGuard no_grad;
      bn->running_mean.copy_(randn({channels}));
      bn->running_var.copy_(rand({channels}) + 0.5);
      bn->weight.copy_(randn({channels}));
      bn->bias.copy_(randn({channels}));
    }
  }
  nn::BatchNorm2d a, b, c;
};

TEST(Passes, EvalBatchNormFusesWithTheResidualAddAndReluAfterIt) {
  manual_seed(7);
  NoGradGuard no_grad;
  Norms n(4);
  const Program f = [&](const TensorList& a) {
    const Tensor h = n.a(a[0]).relu();  // batch_norm -> relu
    Tensor out = n.b(h * 2.0);
    out += a[1];  // y += r, in place, then relu_
    out.relu_();
    const Tensor skip = a[1] + n.c(a[0]);  // r + y, no relu
    const Tensor twice = n.a(a[0]);        // read twice: left alone
    const Tensor e = twice.exp();
    return TensorList{out, skip, e + twice.sin()};
  };
  const TensorList args = {randn({2, 4, 3, 5}), randn({2, 4, 3, 5})};
  const Trace t = trace_of(f, args);
  const Trace fused = fuse_batch_norm_activation(t);
  EXPECT_EQ(op_names(fused.graph),
            (std::vector<std::string>{"batch_norm_eval", "mul", "batch_norm_eval",
                                      "batch_norm_eval", "batch_norm", "exp", "sin", "add"}))
      << to_text(fused.graph);
  expect_equivalent(fused, f, args);
  // The pipeline fuses too, and the executable runs the fused kernel.
  expect_equivalent(run_passes(t), f, args);
}

TEST(Passes, BatchNormIsNotFusedWhereItWouldChangeWhatItReadsOrRecords) {
  manual_seed(8);
  Norms n(3);
  const TensorList args = {randn({2, 3, 4, 5})};
  {
    // Its input written between the batch norm and the relu.
    NoGradGuard no_grad;
    const Program f = [&](const TensorList& a) {
      Tensor src = a[0] * 1.0;
      const Tensor y = n.a(src);
      src.add_(1.0);
      return TensorList{y.relu(), src};
    };
    const Trace t = trace_of(f, args);
    EXPECT_EQ(op_names(fuse_batch_norm_activation(t).graph), op_names(t.graph));
  }
  {
    // Training mode: the batch's statistics.
    NoGradGuard no_grad;
    n.b.train();
    const Program f = [&](const TensorList& a) { return TensorList{n.b(a[0]).relu()}; };
    const Trace t = trace_of(f, args);
    EXPECT_EQ(op_names(fuse_batch_norm_activation(t).graph), op_names(t.graph));
  }
  {
    // Recording autograd (the parameters require grad): replayed through dispatch.
    const Program f = [&](const TensorList& a) { return TensorList{n.c(a[0]).relu()}; };
    const Trace t = trace_of(f, args);
    EXPECT_EQ(op_names(fuse_batch_norm_activation(t).graph), op_names(t.graph));
  }
}

// The fused op against the ops it stands for, on every device and floating
// dtype: bitwise, with and without each part, the residual contiguous or not
// (the CPU applies the add and the relu as it normalizes: one pass).
TEST(BatchNormEval, EqualsTheOpsItFusesBitwise) {
  NoGradGuard no_grad;
  std::vector<Device> devices = {Device::cpu()};
  if (cuda::is_available()) devices.push_back(Device::cuda());
  Generator gen(9);
  for (const Device& device : devices) {
    for (const DType dtype : {kFloat32, kFloat64, kBFloat16, kFloat16}) {
      for (const Shape& shape : {Shape{2, 4, 3, 5}, Shape{40, 16, 7, 7}, Shape{5, 6}}) {
        const int64_t c = shape[1];
        const auto make = [&](const Shape& s) { return randn(s, {}, &gen).to(dtype).to(device); };
        const Tensor x = make(shape), w = make({c}), b = make({c});
        // The residual contiguous, or a view with its dims reversed.
        Shape reversed(shape.rbegin(), shape.rend()), back;
        for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) back.push_back(d);
        const Tensor residuals[] = {make(shape), make(reversed).permute(back)};
        const Tensor mean = randn({c}, {}, &gen).to(device),
                     var = (rand({c}, {}, &gen) + 0.5).to(device);
        for (const int residual : {-1, 0, 1}) {
          for (const bool relu : {false, true}) {
            SCOPED_TRACE(detail::str_cat(device, " ", dtype, " ", shape, " residual ", residual,
                                         relu ? " relu" : ""));
            const Tensor r = residual < 0 ? Tensor() : residuals[residual];
            const TensorList in = {x, w, b, mean, var, r};
            const Tensor got = ops::dispatch(ops::OpId::batch_norm_eval, in, {1e-5, relu})[0];
            Tensor want = F::batch_norm(x, mean, var, w, b, false, 0.1, 1e-5);
            if (r.defined()) want += r;
            if (relu) want.relu_();
            EXPECT_TRUE(same(got, want));
          }
        }
      }
    }
  }
  const TensorList bad = {randn({2, 3, 4}), Tensor(),  Tensor(),
                          zeros({3}),       ones({3}), randn({2, 3, 5})};
  try {
    (void)ops::dispatch(ops::OpId::batch_norm_eval, bad, {1e-5, true});
    ADD_FAILURE() << "no error";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "batch_norm_eval: residual must have input's shape [2, 3, 4], got [2, 3, 5]"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace kiln::compiler
