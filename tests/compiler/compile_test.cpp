// kiln::compile: guards, the cache, recompiles, eager fallbacks, modules,
// autograd and threads, each against eager mode.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <thread>

#include "compiler/compiler_testing.h"
#include "compiler/logs.h"
#include "kiln/kiln.h"
#include "unit/expect_error.h"

namespace kiln {
namespace {

namespace F = nn::functional;
using kiln::testing::expect_error;
using compiler::testing::same;

using compiler::testing::LogCapture;

TEST(Compile, ReplaysWithoutCallingTheFunctionAgain) {
  int calls = 0;
  const auto f = [&](const Tensor& x, const Tensor& y) {
    ++calls;  // a host side effect: happens while tracing only
    return relu(x * 2.0 - y).sum({1});
  };
  const auto fast = compile(f);
  for (int i = 0; i < 5; ++i) {
    const Tensor x = randn({3, 4}), y = randn({4});
    const Tensor expected = relu(x * 2.0 - y).sum({1});
    EXPECT_TRUE(same(fast(x, y), expected)) << i;
  }
  EXPECT_EQ(calls, 1);
  const CompileStats s = fast.stats();
  EXPECT_EQ(s.calls, 5);
  EXPECT_EQ(s.traces, 1);
  EXPECT_EQ(s.replays, 5);
  EXPECT_EQ(s.eager_calls, 0);
}

TEST(Compile, ANewGuardRecompilesAndTheLogNamesIt) {
  LogCapture logs("recompiles");
  const auto fast = compile([](const Tensor& x) { return x.softmax(-1) * 3.0; }, {.name = "scaled_softmax"});
  const Tensor a = randn({2, 3}), b = randn({4, 3}), c = randn({3, 2}).t();
  EXPECT_TRUE(same(fast(a), a.softmax(-1) * 3.0));
  EXPECT_TRUE(same(fast(b), b.softmax(-1) * 3.0));
  EXPECT_TRUE(logs.contains("recompiling scaled_softmax (trace 2 of at most 8): argument 0 sizes was [2, 3], now [4, 3]"))
      << (logs.lines.empty() ? "" : logs.lines.back());
  EXPECT_TRUE(same(fast(c), c.softmax(-1) * 3.0));  // same sizes as a, other strides
  EXPECT_TRUE(logs.contains("argument 0 strides was [3, 1], now [1, 2]"));
  EXPECT_TRUE(same(fast(a.to(kFloat64)), a.to(kFloat64).softmax(-1) * 3.0));
  EXPECT_TRUE(logs.contains("argument 0 dtype was float32, now float64"));
  const Tensor again = randn({2, 3});
  EXPECT_TRUE(same(fast(again), again.softmax(-1) * 3.0));
  EXPECT_EQ(fast.stats().traces, 4);  // a's key was seen: no new trace
}

TEST(Compile, NumbersAreGuardedByValue) {
  int calls = 0;
  const auto fast = compile([&](const Tensor& x, double scale, int64_t dim) {
    ++calls;
    return (x * scale).sum({dim});
  });
  const Tensor x = randn({3, 5});
  EXPECT_TRUE(same(fast(x, 0.5, int64_t{1}), (x * 0.5).sum({1})));
  EXPECT_TRUE(same(fast(x, 2.0, int64_t{1}), (x * 2.0).sum({1})));
  EXPECT_TRUE(same(fast(x, 2.0, int64_t{0}), (x * 2.0).sum({0})));
  EXPECT_TRUE(same(fast(x, 0.5, int64_t{1}), (x * 0.5).sum({1})));
  EXPECT_EQ(calls, 3);
}

TEST(Compile, PastTheRecompileLimitCallsRunEagerly) {
  int calls = 0;
  const auto fast = compile(
      [&](const Tensor& x) {
        ++calls;
        return x.exp();
      },
      {.recompile_limit = 2});
  for (size_t rank = 1; rank <= 4; ++rank) {  // new ranks: new sizes of one rank would be dynamic dims
    const Tensor x = randn(Shape(rank, 2));
    EXPECT_TRUE(same(fast(x), x.exp())) << rank;
  }
  const CompileStats s = fast.stats();
  EXPECT_EQ(s.traces, 2);
  EXPECT_EQ(s.eager_calls, 2);
  EXPECT_EQ(calls, 4);  // two traces, two eager calls
  expect_error<ValueError>([] { compile([](const Tensor& x) { return x; }, {.recompile_limit = 0}); },
                           "recompile_limit");
}

TEST(Compile, CopiesBetweenDevicesAreRecorded) {
  if (!cuda::is_available()) GTEST_SKIP() << "copies between devices need a CUDA device: " << cuda::unavailable_reason();
  const Device gpu = Device::cuda();
  // Into the device and back, with a buffer of the closure copied in too.
  Tensor bias = full({3}, 0.5);
  const auto there_and_back = [&](const Tensor& x) { return ((x * 2.0).to(gpu) + bias.to(gpu)).exp().to(Device::cpu()); };
  const auto fast = compile(there_and_back, {.fullgraph = true});
  for (int i = 0; i < 3; ++i) {
    const Tensor x = randn({2, 3});
    EXPECT_TRUE(same(fast(x), there_and_back(x))) << i;
  }
  const ExplainReport r = fast.explain();
  EXPECT_EQ(r.stats.traces, 1);
  EXPECT_EQ(r.stats.graph_breaks, 0);
  ASSERT_EQ(r.graphs.size(), 1u);
  EXPECT_TRUE(r.graphs[0].executable);
  const auto copies = std::find_if(r.graphs[0].ops.begin(), r.graphs[0].ops.end(),
                                   [](const auto& op) { return op.first == "to_device"; });
  ASSERT_NE(copies, r.graphs[0].ops.end()) << r.to_string();
  EXPECT_EQ(copies->second, 3);
  // The captured buffer is read at each call: an update in place is seen.
  bias.fill_(-1.0);
  const Tensor x = randn({2, 3});
  EXPECT_TRUE(same(fast(x), there_and_back(x)));
  // item() of a device tensor is a graph break like any other read: the
  // second call, reading the same value, replays.
  const auto f = compile([](const Tensor& t) { return t.sum().item<float>() > 0 ? t * 2.0 : t - 1.0; });
  const Tensor y = ones({3}, {.dtype = kFloat32, .device = gpu});
  for (int i = 0; i < 2; ++i) EXPECT_TRUE(same(f(y).to(Device::cpu()), (y * 2.0).to(Device::cpu())));
  EXPECT_EQ(f.stats().graph_breaks, 1);
  EXPECT_EQ(f.stats().traces, 1);
  EXPECT_EQ(f.stats().eager_calls, 0);
  // Differentiable: a call that needs gradients replays through dispatch.
  const Tensor w = randn({3}).requires_grad_(true);
  const auto g = compile([&](const Tensor& t) { return (t.to(gpu) * w.to(gpu)).sum().to(Device::cpu()); });
  const Tensor t = randn({3});
  g(t).backward();
  EXPECT_TRUE(same(w.grad(), t));
}

TEST(Compile, ModulesAreReadByReference) {
  LogCapture logs("recompiles");
  Generator gen(1);
  nn::Linear linear(4, 3);
  const auto fast = compile(linear);
  const Tensor x = randn({2, 4}, {}, &gen);
  NoGradGuard no_grad;
  EXPECT_TRUE(same(fast(x), linear(x)));
  linear.weight.mul_(0.5);  // seen by the next replay: no retrace
  EXPECT_TRUE(same(fast(x), linear(x)));
  EXPECT_EQ(fast.stats().traces, 1);
  // A function whose arguments keep their guards while the parameters change
  // dtype in place: the captured guards catch it.
  const auto cast_then_linear = compile([&](const Tensor& in) { return linear(in.to(linear.weight.dtype())); });
  EXPECT_TRUE(same(cast_then_linear(x), linear(x)));
  linear.to(kFloat64);
  EXPECT_TRUE(same(cast_then_linear(x), linear(x.to(kFloat64))));
  EXPECT_EQ(cast_then_linear.stats().traces, 2);
  EXPECT_TRUE(logs.contains("captured tensor 0 (float32[3, 4] cpu) is now float64[3, 4] cpu")) << logs.lines.size();
}

TEST(Compile, ResultsKeepTheirStructure) {
  const auto fast = compile([](const Tensor& x, const std::vector<Tensor>& ys) {
    std::vector<Tensor> sums;
    for (const Tensor& y : ys) sums.push_back(x + y);
    return std::make_tuple(x.neg(), sums, std::make_pair(x.exp(), x.abs()));
  });
  const Tensor x = randn({3});
  const std::vector<Tensor> ys = {randn({3}), randn({3})};
  const auto [n, sums, pair] = fast(x, ys);
  EXPECT_TRUE(same(n, x.neg()));
  ASSERT_EQ(sums.size(), 2u);
  EXPECT_TRUE(same(sums[1], x + ys[1]));
  EXPECT_TRUE(same(pair.second, x.abs()));
  const auto [n3, sums3, pair3] = fast(x, std::vector<Tensor>{ys[0], ys[1], ys[0]});  // list length is a guard
  EXPECT_EQ(sums3.size(), 3u);
  EXPECT_EQ(fast.stats().traces, 2);
}

TEST(Compile, GradientsFlowThroughCompiledCalls) {
  const auto f = [](const Tensor& x, const Tensor& w) { return (x.matmul(w).tanh() * 0.5).sum(); };
  const auto fast = compile(f);
  const Tensor x = randn({4, 3}), w0 = randn({3, 2});
  const Tensor w = w0.clone().requires_grad_(), v = w0.clone().requires_grad_();
  fast(x, w).backward();
  f(x, v).backward();
  ASSERT_TRUE(w.grad().defined());
  EXPECT_TRUE(same(w.grad(), v.grad()));
}

TEST(Compile, ThreadsShareOneCompiledFunction) {
  nn::Linear linear(8, 4);
  const auto fast = compile([&](const Tensor& x) { return linear(x).relu(); }, {.recompile_limit = 64});
  NoGradGuard no_grad;
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      NoGradGuard no_grad_here;
      Generator gen(static_cast<uint64_t>(t));
      for (int i = 0; i < 20; ++i) {
        const Tensor x = randn({1 + (t + i) % 3, 8}, {}, &gen);
        if (!same(fast(x), linear(x).relu())) ++mismatches;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
  // Two sizes traced (the second makes dim 0 dynamic), the third traced or
  // made from a trace; threads may trace one key at once.
  const CompileStats s = fast.stats();
  EXPECT_GE(s.traces, 2);
  EXPECT_GE(s.traces + s.retraces, 3);
  EXPECT_LE(s.traces + s.retraces, 3 * 8);
  EXPECT_EQ(s.calls, 160);
}

// Guard soundness: random sequences of shapes, layouts, dtypes, devices and
// numbers, every call checked against eager. A stale graph would give a
// wrong value, shape or dtype.
TEST(Compile, GuardsAreSoundOverRandomCalls) {
  const auto f = [](const Tensor& x, const Tensor& y, double s, int64_t dim) {
    const Tensor z = x * s + y;
    return std::make_tuple(z.softmax(dim), (z.abs() + 1).log().sum({dim}), z.narrow(dim, 0, 1));
  };
  const auto fast = compile(f, {.recompile_limit = 100000});
  std::vector<Device> devices = {Device::cpu()};
  if (cuda::is_available()) devices.push_back(Device::cuda());
  uint64_t state = 12345;
  const auto pick = [&](int64_t n) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<int64_t>((state >> 33) % static_cast<uint64_t>(n));
  };
  Generator gen(8);
  for (int i = 0; i < 300; ++i) {
    const int64_t rows = 1 + pick(3), cols = 1 + 3 * pick(2);
    const DType dtype = pick(2) ? kFloat32 : kFloat64;
    const Device device = devices[static_cast<size_t>(pick(static_cast<int64_t>(devices.size())))];
    Tensor x = pick(2) ? randn({rows, cols}, {}, &gen) : randn({cols, rows}, {}, &gen).t();
    const Shape y_shape = pick(3) == 0 ? Shape{cols} : pick(2) ? Shape{rows, cols} : Shape{1};
    x = x.to(dtype).to(device);
    const Tensor y = randn(y_shape, {}, &gen).to(pick(2) ? dtype : kFloat32).to(device);
    const double scale = std::array<double, 3>{0.5, 2.0, -1.0}[static_cast<size_t>(pick(3))];
    const int64_t dim = pick(2);
    const auto [a, b, c] = fast(x, y, scale, dim);
    const auto [ea, eb, ec] = f(x, y, scale, dim);
    ASSERT_TRUE(same(a.to(Device::cpu()), ea.to(Device::cpu()))) << "call " << i;
    ASSERT_TRUE(same(b.to(Device::cpu()), eb.to(Device::cpu()))) << "call " << i;
    ASSERT_TRUE(same(c.to(Device::cpu()), ec.to(Device::cpu()))) << "call " << i;
    ASSERT_EQ(c.strides(), ec.strides()) << "call " << i;
  }
  const CompileStats st = fast.stats();
  EXPECT_EQ(st.calls, 300);
  EXPECT_GT(st.replays - st.traces, 0) << "no call hit the cache";
}

TEST(Compile, ExplainReportsGraphsBreaksRecompilesAndStages) {
  nn::Linear linear(4, 3);
  NoGradGuard no_grad;
  const ExplainReport r = explain(linear, randn({2, 4}));
  ASSERT_EQ(r.graphs.size(), 1u);
  EXPECT_EQ(r.graphs[0].nodes, 1);
  EXPECT_EQ(r.graphs[0].ops, (std::vector<std::pair<std::string, int64_t>>{{"linear", 1}}));
  EXPECT_EQ(r.graphs[0].captured, 2);
  EXPECT_TRUE(r.graphs[0].executable);
  EXPECT_GE(r.graphs[0].trace_ms, 0.0);
  const std::string text = r.to_string();
  EXPECT_NE(text.find("graph 1: 1 ops (linear x1), 2 captured tensors, planned executable"), std::string::npos) << text;
  EXPECT_NE(text.find("argument 0 sizes == [2, 4]"), std::string::npos) << text;
  EXPECT_NE(r.to_json().find("\"op\": \"linear\""), std::string::npos) << r.to_json();

  const auto f = compile([](const Tensor& x) { return x.max().item<float>() > 1 ? x.exp() : x.relu().sum(); },
                         {.name = "branchy"});
  f(randn({3}));
  f(randn({4, 2}));
  const ExplainReport b = f.explain();
  EXPECT_EQ(b.graphs.size(), 4u);  // per key: the max, then exp or relu and sum
  ASSERT_EQ(b.graph_breaks.size(), 2u);
  EXPECT_NE(b.graph_breaks[0].find("graph 1: the function reads the values of a float32[] tensor on the host (item() "
                                   "at compile_test.cpp:"),
            std::string::npos)
      << b.graph_breaks[0];
  ASSERT_EQ(b.recompiles.size(), 1u);
  EXPECT_EQ(b.recompiles[0], "argument 0 sizes was [3], now [4, 2]");
  EXPECT_NE(b.to_string().find("branchy: 4 graphs, 2 graph breaks, 1 recompile"), std::string::npos) << b.to_string();
  EXPECT_NE(b.to_json().find("\"resumes\": 1"), std::string::npos);
}

TEST(Compile, CheckRunsEveryCallEagerlyFromTheSameStateToo) {
  manual_seed(7);
  nn::BatchNorm1d bn(4), eager_bn(4);
  const auto f = [](nn::BatchNorm1d& m, const Tensor& x) { return F::dropout(m(x), 0.3) * 2.0; };
  const auto fast = compile([&](const Tensor& x) { return f(bn, x); }, {.check = true});
  for (int i = 0; i < 3; ++i) {
    const Tensor x = randn({5, 4});
    manual_seed(100 + i);
    const Tensor got = fast(x);
    const Tensor next_draw = rand({3});
    manual_seed(100 + i);
    const Tensor want = f(eager_bn, x);
    EXPECT_TRUE(same(got, want)) << i;
    // The generator advanced as far as one eager call takes it.
    EXPECT_TRUE(same(next_draw, rand({3}))) << i;
    // The running statistics were updated once per call, not once per run.
    EXPECT_TRUE(same(bn.running_mean, eager_bn.running_mean)) << i;
    EXPECT_TRUE(same(bn.running_var, eager_bn.running_var)) << i;
  }
  EXPECT_EQ(fast.stats().replays, 3);
}

TEST(Compile, CheckNamesWhatDivergesFromEager) {
  // A host side effect the trace cannot see: the scale is the call count,
  // 1 when traced, 2 in the eager run that checks the first call.
  int calls = 0;
  const auto counted = compile([&](const Tensor& x) { return x * static_cast<double>(++calls); },
                               {.check = true, .name = "counted"});
  const Tensor x = ones({3});
  expect_error<Error>([&] { (void)counted(x); },
                      "counted (check): result 0: element 0 is 1, eager's is 2 (tolerance 1e-05 relative, 1e-06 "
                      "absolute); every node of the graph gives eager dispatch's value");
  // Folding batch norms into convolutions rounds differently: within the
  // float32 tolerance, and not allowed under strict.
  manual_seed(8);
  nn::Sequential cnn(std::make_shared<nn::Conv2d>(3, 8, 3, nn::Conv2d::Options{.padding = 1}),
                     std::make_shared<nn::BatchNorm2d>(8), std::make_shared<nn::ReLU>());
  NoGradGuard no_grad;
  for (const auto& [name, b] : cnn.named_buffers()) {
    Tensor buffer = b;
    if (is_floating(buffer.dtype())) buffer.copy_(rand(buffer.sizes()) + 0.5);
  }
  cnn.eval();
  const auto frozen = compile(cnn, {.freeze = true, .check = true});
  const Tensor img = randn({2, 3, 6, 6});
  EXPECT_LT((frozen(img) - cnn.forward(img)).abs().max().item<double>(), 1e-4);
  EXPECT_EQ(frozen.explain().graphs.at(0).ops.size(), 2u) << frozen.explain().to_string();  // conv, relu: folded
  expect_error<ValueError>([&] { (void)compile(cnn, {.freeze = true, .strict = true}); }, "strict and freeze");
}

TEST(Compile, ResetForgetsTheGraphs) {
  int calls = 0;
  const auto fast = compile([&](const Tensor& x) {
    ++calls;
    return x + 1;
  });
  const Tensor x = ones({2});
  fast(x);
  fast(x);
  compiler::reset();
  fast(x);
  EXPECT_EQ(calls, 2);
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

TEST(Compile, ReplayAndEagerBackendsBisectAWrongResult) {
  int calls = 0;
  const auto f = [&](const Tensor& x) {
    ++calls;
    return ((x * 2.0).relu() + 1.0).sum({1});
  };
  const auto replayed = compile(f, {.name = "f", .backend = CompileBackend::Replay});
  const auto eager = compile(f, {.backend = CompileBackend::Eager});
  for (int i = 0; i < 3; ++i) {
    const Tensor x = randn({3, 4});
    EXPECT_TRUE(same(replayed(x), f(x)));
    EXPECT_TRUE(same(eager(x), f(x)));
  }
  EXPECT_EQ(calls, 6 + 1 + 3);  // the test's own, one trace, every call of the Eager backend
  const ExplainReport r = replayed.explain();
  ASSERT_EQ(r.graphs.size(), 1u);
  EXPECT_FALSE(r.graphs[0].executable);
  EXPECT_EQ(r.graphs[0].nodes, r.graphs[0].traced_nodes);  // no passes
  EXPECT_EQ(r.stats.replays, 3);
  EXPECT_EQ(eager.stats().eager_calls, 3);
  EXPECT_TRUE(eager.explain().graphs.empty());
  expect_error<ValueError>([&] { compile(f, {.mode = Mode::ReduceOverhead, .backend = CompileBackend::Replay}); },
                           "the Replay backend runs no passes and no executable");
  expect_error<ValueError>([&] { compile(f, {.freeze = true, .backend = CompileBackend::Eager}); },
                           "freeze needs the Default backend");
}

}  // namespace
}  // namespace kiln
