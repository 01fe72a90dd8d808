// Capture: programs traced into graphs, the graphs' invariants, dumps and
// hashes, and the reference replay against eager mode.
#include <gtest/gtest.h>

#include <functional>

#include "compiler/capture/capture.h"
#include "compiler/compiler_testing.h"
#include "compiler/ir/graph.h"
#include "kiln/kiln.h"
#include "ops/dispatch.h"
#include "unit/expect_error.h"

namespace kiln::compiler {
namespace {

namespace F = nn::functional;
using kiln::testing::expect_error;
using testing::op_names;
using testing::Program;
using testing::trace_of;
using testing::same;

// The next offset a generator would hand out.
uint64_t offset_of(Generator g) { return g.advance(0); }

void expect_equal(const TensorList& actual, const TensorList& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    EXPECT_EQ(actual[i].sizes(), expected[i].sizes()) << i;
    EXPECT_EQ(actual[i].dtype(), expected[i].dtype()) << i;
    EXPECT_TRUE(same(actual[i], expected[i])) << i << ": " << actual[i] << " vs " << expected[i];
  }
}

TEST(Capture, RecordsOpsOnProxiesWithoutRunningThem) {
  const Tensor x = arange(0, 6).to(kFloat32).view({2, 3}), y = ones({3});
  const Program f = [](const TensorList& a) { return TensorList{relu(a[0] * 2.0 - a[1]).sum({1})}; };
  const Trace t = trace_of(f, {x, y});
  const Graph& g = t.graph;
  verify(g);
  EXPECT_EQ(op_names(g), (std::vector<std::string>{"mul", "sub", "relu", "sum"}));
  EXPECT_EQ(g.inputs().size(), 2u);
  EXPECT_EQ(g.captured().size(), 0u);
  ASSERT_EQ(g.constants().size(), 1u);  // the 2.0, by value
  EXPECT_EQ(g.constant(0).item<double>(), 2.0);
  ASSERT_EQ(g.outputs().size(), 1u);
  EXPECT_EQ(sym::hints(g.value(g.outputs()[0]).sizes), Shape{2});
  EXPECT_EQ(g.value(g.outputs()[0]).dtype, kFloat32);  // the constant promotes as a number
  // The graph replays to eager's result, bitwise.
  expect_equal(replay(t, {x, y}), f({x, y}));
  const Tensor x2 = randn({2, 3}), y2 = randn({3});
  expect_equal(replay(t, {x2, y2}), f({x2, y2}));
}

TEST(Capture, TextAndDotDumpsNameEveryNode) {
  const Trace t = trace_of([](const TensorList& a) { return TensorList{(a[0] + 1).t()}; }, {ones({2, 3})});
  const std::string text = to_text(t.graph);
  EXPECT_NE(text.find("graph(%0: float32[2, 3] cpu) constants(%1: int64[] cpu = 1)"), std::string::npos)
      << text;
  EXPECT_NE(text.find("%2 = add(%0, %1) {alpha=1} : float32[2, 3] cpu"), std::string::npos) << text;
  EXPECT_NE(text.find("%3 = permute(%2) {dims=[1, 0]} : float32[3, 2]{[1, 3]+0} cpu aliases %2"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("return (%3)"), std::string::npos) << text;
  const std::string dot = to_dot(t.graph);
  EXPECT_EQ(dot.rfind("digraph kiln {", 0), 0u);
  EXPECT_NE(dot.find("n0 -> n1"), std::string::npos) << dot;
  EXPECT_NE(dot.find("n1 -> out"), std::string::npos) << dot;
}

TEST(Capture, ModuleParametersAreCapturedByReference) {
  Generator gen(3);
  nn::Linear linear(4, 3);
  const Tensor x = randn({2, 4}, {}, &gen);
  const Program f = [&](const TensorList& a) { return TensorList{linear(a[0])}; };
  const Trace t = trace_of(f, {x});
  verify(t.graph);
  ASSERT_EQ(t.captured.size(), 2u);
  EXPECT_TRUE(t.captured[0].impl_ptr() == linear.weight.impl_ptr());
  EXPECT_TRUE(t.captured[1].impl_ptr() == linear.bias.impl_ptr());
  EXPECT_EQ(op_names(t.graph), std::vector<std::string>{"linear"});
  {
    NoGradGuard no_grad;
    expect_equal(replay(t, {x}), f({x}));
    linear.weight.mul_(-2.0);  // an update the replay sees without a new trace
    expect_equal(replay(t, {x}), f({x}));
  }
}

TEST(Capture, InPlaceWritesThroughViewsTakeEffectAsInEager) {
  // x is written through a view and in place; a captured buffer is updated as
  // BatchNorm updates its running statistics.
  Tensor buffer = zeros({3});
  const Program f = [&](const TensorList& a) {
    Tensor x = a[0].clone();
    Tensor row = x.select(0, 1);
    row.fill_(5.0);
    x.mul_(a[0]);
    Tensor b = buffer;
    b.mul_(0.5).add_(x.mean({0}), 0.5);
    return TensorList{x, row.sum()};
  };
  const Tensor x = arange(0, 6).to(kFloat32).view({2, 3});
  const Trace t = trace_of(f, {x});
  verify(t.graph);
  EXPECT_EQ(buffer.to_vector<float>(), std::vector<float>(3, 0.0f)) << "tracing ran an op";
  EXPECT_EQ(op_names(t.graph),
            (std::vector<std::string>{"copy", "select", "fill_", "mul_", "mul_", "mean", "add_", "sum"}));
  // The write through the view targets the clone's storage.
  const Graph& g = t.graph;
  const Node& fill = g.nodes()[2];
  EXPECT_EQ(g.value(fill.target).storage, g.value(g.nodes()[0].outputs[0]).storage);
  EXPECT_EQ(g.value(fill.outputs[0]).storage, g.value(g.nodes()[0].outputs[0]).storage);
  // The buffer's updates target the captured value.
  ASSERT_EQ(g.captured().size(), 1u);
  EXPECT_EQ(g.nodes()[4].target, g.captured()[0]);
  EXPECT_NE(to_text(g).find("aliases"), std::string::npos);

  const Tensor eager_buffer = zeros({3});
  const Tensor saved = buffer.clone();
  const TensorList replayed = replay(t, {x});
  const TensorList replayed_buffer{buffer.clone()};
  buffer.copy_(saved);
  const TensorList expected = f({x});
  expect_equal(replayed, expected);
  expect_equal(replayed_buffer, {buffer});
  EXPECT_NE(buffer.to_vector<float>(), std::vector<float>(3, 0.0f));
}

// A small CNN in training mode (BatchNorm updates its running statistics in
// place) and an LSTM: traced once, replayed, equal to eager bitwise, buffers
// included.
TEST(Capture, ModelsReplayAsEagerIncludingBufferUpdates) {
  Generator gen(5);
  manual_seed(5);
  auto bn_module = std::make_shared<nn::BatchNorm2d>(8);
  nn::Sequential cnn(std::make_shared<nn::Conv2d>(3, 8, 3, nn::Conv2d::Options{.padding = 1}), bn_module,
                     std::make_shared<nn::ReLU>(),
                     std::make_shared<nn::MaxPool2d>(2), std::make_shared<nn::Flatten>(),
                     std::make_shared<nn::Linear>(8 * 4 * 4, 5));
  const Tensor x = randn({2, 3, 8, 8}, {}, &gen);
  NoGradGuard no_grad;
  const Program f = [&](const TensorList& a) { return TensorList{cnn(a[0])}; };
  const Trace t = trace_of(f, {x});
  verify(t.graph);
  nn::BatchNorm2d& bn = *bn_module;
  const Tensor mean_before = bn.running_mean.clone();
  const TensorList replayed = replay(t, {x});
  const Tensor replayed_mean = bn.running_mean.clone();
  bn.running_mean.copy_(mean_before);
  bn.running_var.fill_(1.0);
  bn.num_batches_tracked.fill_(0);
  expect_equal(replayed, f({x}));
  expect_equal({replayed_mean}, {bn.running_mean});
  EXPECT_FALSE(same(replayed_mean, mean_before)) << "the replay did not update the running mean";

  nn::LSTM lstm(4, 6, {.num_layers = 2});
  const Tensor seq = randn({5, 2, 4}, {}, &gen);
  const Program g = [&](const TensorList& a) {
    auto r = lstm(a[0]);
    return TensorList{r.output, r.state.h, r.state.c};
  };
  const Trace lt = trace_of(g, {seq});
  verify(lt.graph);
  expect_equal(replay(lt, {seq}), g({seq}));
}

TEST(Capture, StructuralHashFollowsTheProgramNotTheTrace) {
  const Program f = [](const TensorList& a) { return TensorList{F::dropout(a[0] * 3.0, 0.5, true)}; };
  const uint64_t h = structural_hash(trace_of(f, {ones({4, 5})}).graph);
  EXPECT_EQ(h, structural_hash(trace_of(f, {zeros({4, 5})}).graph)) << "values or seeds changed the hash";
  EXPECT_NE(h, structural_hash(trace_of(f, {ones({4, 6})}).graph));
  EXPECT_NE(h, structural_hash(trace_of(f, {ones({4, 5}, {.dtype = kFloat64})}).graph));
  EXPECT_NE(h, structural_hash(trace_of(f, {ones({5, 4}).t()}).graph));  // another layout
  const Program g = [](const TensorList& a) { return TensorList{F::dropout(a[0] * 4.0, 0.5, true)}; };
  EXPECT_NE(h, structural_hash(trace_of(g, {ones({4, 5})}).graph));  // another constant
}

TEST(Capture, RandomOpsDrawAnewAtEveryReplay) {
  Generator gen(11);
  const Program f = [&](const TensorList& a) {
    return TensorList{a[0] + randn({3}, {}, &gen), F::dropout(a[0], 0.5, true, &gen)};
  };
  const Tensor x = ones({3});
  Generator before = gen;
  const Trace t = trace_of(f, {x});
  EXPECT_EQ(offset_of(gen), offset_of(before)) << "tracing advanced the generator";
  ASSERT_EQ(t.graph.nodes().size(), 3u);
  EXPECT_EQ(t.graph.nodes()[0].generator, &gen);
  const TensorList first = replay(t, {x});
  const TensorList second = replay(t, {x});
  EXPECT_FALSE(same(first[0], second[0])) << "the replay reused the trace's seed";
  // Replays draw exactly what eager draws from the same generator state.
  Generator copy = before;
  gen = before;
  const TensorList replayed = replay(t, {x});
  gen = copy;
  expect_equal(replayed, f({x}));
}

TEST(Capture, ArgumentsThatShareStorageShareItInTheGraph) {
  const Tensor base = arange(0, 6).to(kFloat32).view({2, 3});
  const Trace t = trace_of([](const TensorList& a) { return TensorList{a[0] + a[1].t()}; }, {base, base.t()});
  EXPECT_EQ(t.graph.value(t.graph.inputs()[0]).storage, t.graph.value(t.graph.inputs()[1]).storage);
  verify(t.graph);
}

TEST(Capture, ErrorsAreEagersAndNameTheOp) {
  Tracer tracer;
  const Tensor x = tracer.input(ones({2, 3}));
  expect_error<ShapeError>([&] { (void)(x + ones({4})); }, "add");
  expect_error<Error>([] { Tracer nested; }, "already running");
  const Tensor stray = ops::make_tensor({3}, kFloat32, Device::cpu(), /*meta=*/true);
  expect_error<Error>([&] { (void)(x + stray); }, "meta tensor");
}

TEST(Capture, ReplayChecksItsArguments) {
  const Trace t = trace_of([](const TensorList& a) { return TensorList{a[0] * 2.0}; }, {ones({2, 3})});
  expect_error<Error>([&] { replay(t, {ones({3, 2})}); }, "argument 0", "float32[3, 2]");
  expect_error<Error>([&] { replay(t, {}); }, "expected 1 tensor arguments");
}

TEST(Verify, NamesTheNodeThatBreaksAnInvariant) {
  Graph g;
  const ValueId a = g.add_input(ones({2, 3}));
  // An add whose recorded output has the wrong shape.
  g.add_node(ops::OpId::add, {a, a}, {Scalar(1)}, {ones({3, 2})});
  expect_error<Error>([&] { verify(g); }, "node 0 (add)", "float32[2, 3]");

  Graph h;
  const ValueId b = h.add_input(ones({2}));
  h.add_node(ops::OpId::neg, {b + 5}, {}, {ones({2})});  // a value that does not exist
  expect_error<Error>([&] { verify(h); }, "node 0 (neg)", "used before it is defined");

  Graph k;
  const ValueId c = k.add_input(ones({2}));
  k.add_node(ops::OpId::neg, {c}, {}, {ones({2})});
  k.set_outputs({c + 7});
  expect_error<Error>([&] { verify(k); }, "graph output %7");
}

}  // namespace
}  // namespace kiln::compiler
