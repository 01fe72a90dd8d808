// Mode::ReduceOverhead: graphs recorded as CUDA graphs and replayed by one
// launch, checked against eager mode bitwise; the reasons a graph is not
// recorded; parameters and buffers read and written where they live; results
// that outlive later calls; threads and streams sharing one graph; the
// graph's private memory in the device's statistics.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <utility>

#include <unistd.h>

#include "backends/autotune.h"
#include "compiler/compiler_testing.h"
#include "kiln/kiln.h"
#include "kiln/models.h"
#include "unit/expect_error.h"

namespace kiln {
namespace {

namespace F = nn::functional;
using compiler::testing::same;
using kiln::testing::expect_error;

bool mentions(const std::vector<std::string>& lines, const std::string& s) {
  for (const auto& l : lines)
    if (l.find(s) != std::string::npos) return true;
  return false;
}

#define REQUIRE_CUDA() \
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device: " << cuda::unavailable_reason()

// A small network with the usual op kinds: matmuls, a normalization, a
// reduction, pointwise ops, a view.
struct Block : nn::Module {
  nn::Linear a{16, 32}, b{32, 16};
  nn::LayerNorm norm{16};
  Block() {
    register_module("a", a);
    register_module("b", b);
    register_module("norm", norm);
  }
  Tensor forward(const Tensor& x) {
    const Tensor h = gelu(a(x));
    const Tensor y = norm(b(h) + x);
    return (y.softmax(-1) * 2.0).view({-1, 4, 4}).sum({2});
  }
};

// Two Blocks on the GPU with equal parameters.
std::pair<std::unique_ptr<Block>, std::unique_ptr<Block>> twin_blocks(uint64_t seed) {
  manual_seed(seed);
  auto one = std::make_unique<Block>();
  manual_seed(seed);
  auto two = std::make_unique<Block>();
  one->to(Device::cuda());
  two->to(Device::cuda());
  return {std::move(one), std::move(two)};
}

// One optimizer step of a Block on mean squared error; with `dropouts`, its
// input and output go through dropout (training).
Tensor train_block(Block& m, optim::Optimizer& o, const Tensor& x, const Tensor& y, bool dropouts = false) {
  o.zero_grad();
  Tensor out = m.forward(dropouts ? F::dropout(x, 0.2, true) : x);
  Tensor loss = F::mse_loss(dropouts ? F::dropout(out, 0.5, true) : out, y);
  loss.backward();
  o.step();
  return loss;
}

// Each parameter of `got` equals `want`'s by `equal` after a step.
void expect_parameters(Block& got, Block& want, const std::function<bool(const Tensor&, const Tensor&)>& equal,
                       int step) {
  const auto p = got.parameters(), q = want.parameters();
  for (size_t k = 0; k < p.size(); ++k) EXPECT_TRUE(equal(p[k], q[k])) << "parameter " << k << " after step " << step;
}

// A training step traced twice (without gradients, then with them) into one
// CUDA graph, launched by the four calls after the traces.
void expect_one_cuda_graph(const ExplainReport& r) {
  ASSERT_EQ(r.graphs.size(), 1u) << r.to_string();
  EXPECT_TRUE(r.graphs[0].cuda_graph) << r.to_string();
  EXPECT_EQ(r.stats.graph_launches, 4);
}

TEST(ReduceOverhead, OnTheCpuGraphsRunTheExecutableAndExplainSaysWhy) {
  Block block;
  NoGradGuard no_grad;
  for (const Mode mode : {Mode::ReduceOverhead, Mode::MaxAutotune}) {
    const auto fast = compile(block, {.mode = mode});
    for (int i = 0; i < 3; ++i) {
      const Tensor x = randn({5, 16});
      EXPECT_TRUE(same(fast(x), block.forward(x))) << i;
    }
    const ExplainReport r = fast.explain();
    EXPECT_EQ(r.stats.graph_launches, 0);
    ASSERT_EQ(r.graphs.size(), 1u);
    EXPECT_FALSE(r.graphs[0].cuda_graph);
    EXPECT_TRUE(mentions(r.cuda_graph_skips, "graph 1: it uses the cpu")) << r.to_string();
    EXPECT_NE(r.to_string().find("not captured as a CUDA graph: graph 1: it uses the cpu"), std::string::npos);
  }
  const auto nothing = compile([] { return std::vector<Tensor>{}; }, {.mode = Mode::ReduceOverhead});
  EXPECT_TRUE(nothing().empty());
  EXPECT_TRUE(mentions(nothing.explain().cuda_graph_skips, "no tensors on a device"));
}

// Points the autotune cache at a file of its own while alive.
class TempCache {
 public:
  TempCache()
      : path_((std::filesystem::temp_directory_path() / ("kiln_autotune_" + std::to_string(::getpid()) + ".json"))
                  .string()) {
    std::filesystem::remove(path_);
    ::setenv("KILN_AUTOTUNE_CACHE", path_.c_str(), 1);
    backend::autotune::forget_loaded();
  }
  ~TempCache() {
    ::unsetenv("KILN_AUTOTUNE_CACHE");
    backend::autotune::forget_loaded();
    std::filesystem::remove(path_);
  }
  const std::string& path() const { return path_; }
  std::string text() const {
    std::ifstream in(path_);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

 private:
  std::string path_;
};

TEST(Autotune, TheCacheFileRoundTripsAndAMalformedOneIsSetAside) {
  namespace tune = backend::autotune;
  const TempCache cache;
  EXPECT_EQ(tune::cache_path(), cache.path());
  EXPECT_FALSE(tune::lookup("conv a").has_value());
  tune::store("conv a", 3);
  tune::store("matmul b", 0);
  tune::forget_loaded();  // read back from the file
  EXPECT_EQ(tune::lookup("conv a"), std::optional<int64_t>(3));
  EXPECT_EQ(tune::lookup("matmul b"), std::optional<int64_t>(0));
  EXPECT_NE(cache.text().find("\"format\": \"kiln autotune cache\""), std::string::npos) << cache.text();
  for (const std::string bad : {"{\"entries\": [1, 2", "[]", "not json"}) {
    std::ofstream(cache.path(), std::ios::trunc) << bad;
    tune::forget_loaded();
    EXPECT_FALSE(tune::lookup("conv a").has_value()) << bad;  // tuned again, not an error
    tune::store("conv a", 1);                                  // and the file is whole again
    tune::forget_loaded();
    EXPECT_EQ(tune::lookup("conv a"), std::optional<int64_t>(1)) << bad;
  }
  {
    const tune::Scope on;
    EXPECT_TRUE(tune::active());
  }
  EXPECT_FALSE(tune::active());
}

TEST(Autotune, MaxAutotuneTimesEachNewShapeOnceAndEagerUsesTheWinners) {
  REQUIRE_CUDA();
  namespace tune = backend::autotune;
  const TempCache cache;
  manual_seed(6);
  // Shapes no other test uses: their plans are made here, tuned.
  nn::Conv2d conv(5, 7, 3, {.padding = 1});
  nn::Linear linear(7 * 9 * 9, 33);
  conv.to(Device::cuda());
  linear.to(Device::cuda());
  NoGradGuard no_grad;
  const auto net = [&](const Tensor& x) { return linear(conv(x).relu().flatten(1)); };
  const auto fast = compile(net, {.mode = Mode::MaxAutotune});
  const int64_t timed_before = tune::candidates_timed();
  std::vector<Tensor> inputs, results;
  for (int i = 0; i < 3; ++i) {
    inputs.push_back(randn({11, 5, 9, 9}).to(Device::cuda()));
    results.push_back(fast(inputs.back()));
  }
  const int64_t timed = tune::candidates_timed() - timed_before;
  EXPECT_GT(timed, 0);
  // Eager calls of these shapes now take the tuned algorithms: equal bitwise.
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(same(results[i], net(inputs[i]))) << i;
  const ExplainReport r = fast.explain();
  EXPECT_EQ(r.stats.graph_launches, 2);
  ASSERT_EQ(r.graphs.size(), 1u);
  EXPECT_TRUE(r.graphs[0].cuda_graph) << r.to_string();
  EXPECT_GT(r.graphs[0].autotune_ms, 0.0);
  EXPECT_NE(r.to_string().find("first run with autotuning"), std::string::npos);
  const std::string text = cache.text();
  EXPECT_NE(text.find("cudnn "), std::string::npos) << text;
  EXPECT_NE(text.find("cublasLt "), std::string::npos) << text;
  // Compiled again: the shapes are tuned already, nothing is timed.
  const auto again = compile(net, {.mode = Mode::MaxAutotune});
  EXPECT_TRUE(same(again(inputs[0]), results[0]));
  EXPECT_EQ(tune::candidates_timed() - timed_before, timed);
}

TEST(ReduceOverhead, ReplaysAsOneLaunchEqualToEagerAndResultsOutliveLaterCalls) {
  REQUIRE_CUDA();
  manual_seed(3);
  Block block;
  block.to(Device::cuda());
  NoGradGuard no_grad;
  const auto fast = compile(block, {.mode = Mode::ReduceOverhead, .name = "block"});
  std::vector<Tensor> inputs, results;
  for (int i = 0; i < 6; ++i) {
    inputs.push_back(randn({8, 16}).to(Device::cuda()));
    results.push_back(fast(inputs.back()));
  }
  // Every result is its own tensor: later calls did not overwrite it.
  for (int i = 0; i < 6; ++i) EXPECT_TRUE(same(results[i], block.forward(inputs[i]))) << i;
  const ExplainReport r = fast.explain();
  EXPECT_EQ(r.stats.traces, 1);
  EXPECT_EQ(r.stats.graph_launches, 5);  // the first call runs the executable, then records
  ASSERT_EQ(r.graphs.size(), 1u);
  EXPECT_TRUE(r.graphs[0].cuda_graph) << r.to_string();
  EXPECT_GT(r.graphs[0].record_ms, 0.0);
  EXPECT_TRUE(r.cuda_graph_skips.empty()) << r.to_string();
  EXPECT_NE(r.to_string().find("replayed as one CUDA graph"), std::string::npos);
  EXPECT_NE(r.to_json().find("\"graph_launches\": 5"), std::string::npos);
  // A new shape is a new graph, recorded on its first call too.
  const Tensor x = randn({3, 16}).to(Device::cuda());
  EXPECT_TRUE(same(fast(x), block.forward(x)));
  EXPECT_TRUE(same(fast(x), block.forward(x)));
  EXPECT_EQ(fast.stats().traces, 2);
  EXPECT_EQ(fast.stats().graph_launches, 6);
}

// New sizes of a dynamic dim made from the kept trace (retrace) are each
// recorded as their own CUDA graph, and equal eager.
TEST(ReduceOverhead, NewSizesMadeFromTheTraceAreRecordedToo) {
  REQUIRE_CUDA();
  manual_seed(5);
  Block block;
  block.to(Device::cuda());
  NoGradGuard no_grad;
  const auto fast = compile(block, {.mode = Mode::ReduceOverhead, .name = "block"});
  for (int64_t batch : {8, 3, 5, 12, 5, 12}) {
    const Tensor x = randn({batch, 16}).to(Device::cuda());
    EXPECT_TRUE(same(fast(x), block.forward(x))) << batch;
  }
  const ExplainReport r = fast.explain();
  EXPECT_EQ(r.stats.traces, 2) << r.dynamic_sizes;
  EXPECT_EQ(r.stats.retraces, 2) << r.dynamic_sizes;
  EXPECT_EQ(r.stats.graph_launches, 2);  // the repeated 5 and 12
  ASSERT_EQ(r.graphs.size(), 4u);
  for (size_t g = 0; g < 4; ++g) EXPECT_TRUE(r.graphs[g].cuda_graph) << g << "\n" << r.to_string();
  EXPECT_TRUE(r.graphs[2].retraced);
  EXPECT_TRUE(r.graphs[3].retraced);
}

// A call copies arguments in and results out by copy kernels of the graph
// (up to 16 of each); beyond that, by launches around the graph's.
TEST(ReduceOverhead, ManyArgumentsAndResultsAreCopiedAroundTheLaunch) {
  REQUIRE_CUDA();
  NoGradGuard no_grad;
  const auto f = [](const std::vector<Tensor>& xs) {
    std::vector<Tensor> out;
    for (const Tensor& x : xs) out.push_back(x * 2.0 + xs[0]);
    return out;
  };
  const auto fast = compile(f, {.mode = Mode::ReduceOverhead});
  for (const size_t n : {size_t{3}, size_t{20}}) {
    for (int call = 0; call < 3; ++call) {
      std::vector<Tensor> xs;
      for (size_t i = 0; i < n; ++i)
        xs.push_back(randn({4, static_cast<int64_t>(i) + 1}).to(Device::cuda()));
      const std::vector<Tensor> got = fast(xs), want = f(xs);
      ASSERT_EQ(got.size(), n);
      for (size_t i = 0; i < n; ++i)
        EXPECT_TRUE(same(got[i], want[i])) << n << " " << call << " " << i;
    }
  }
  const ExplainReport r = fast.explain();
  EXPECT_EQ(r.stats.graph_launches, 4);
  EXPECT_TRUE(r.cuda_graph_skips.empty()) << r.to_string();
}

TEST(ReduceOverhead, EachGraphOfAGraphBreakIsRecordedOnItsOwn) {
  REQUIRE_CUDA();
  const auto f = [](const Tensor& x) {
    const Tensor y = (x * 2.0).relu();
    return y.sum().item<float>() > 1 ? (y + 1.0).exp() : y - 1.0;
  };
  const auto fast = compile(f, {.mode = Mode::ReduceOverhead, .name = "branchy"});
  const Tensor x = randn({64}).to(Device::cuda());
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(same(fast(x), f(x))) << i;
  const ExplainReport r = fast.explain();
  EXPECT_EQ(r.stats.traces, 1);
  ASSERT_EQ(r.graphs.size(), 2u) << r.to_string();
  // The first graph returns its argument too (the program still holds it):
  // that result is the argument itself, and both graphs are CUDA graphs.
  EXPECT_TRUE(r.graphs[0].cuda_graph) << r.to_string();
  EXPECT_TRUE(r.graphs[1].cuda_graph) << r.to_string();
  EXPECT_EQ(r.stats.graph_launches, 6);
  EXPECT_TRUE(r.cuda_graph_skips.empty()) << r.to_string();
}

TEST(ReduceOverhead, ResultsAliasAsEagersDo) {
  REQUIRE_CUDA();
  NoGradGuard no_grad;
  manual_seed(3);
  nn::Linear linear(4, 4);
  linear.to(Device::cuda());
  const auto f = [&](const Tensor& a) {
    const Tensor y = a * 2;
    return TensorList{y, y.t(), a.view({16}), linear.weight.narrow(0, 1, 2), y.narrow(1, 1, 2)};
  };
  const auto fast = compile(f, {.mode = Mode::ReduceOverhead});
  const Tensor rows = randn({5, 4}).to(Device::cuda());
  TensorList first;
  for (int k = 0; k < 4; ++k) {
    SCOPED_TRACE(k);
    // An argument at another offset of its storage, from the third call on.
    const Tensor x = k < 2 ? rows.narrow(0, 0, 4).clone() : rows.narrow(0, 1, 4);
    const TensorList got = fast(x), want = f(x);
    ASSERT_EQ(got.size(), want.size());
    for (size_t j = 0; j < got.size(); ++j) EXPECT_TRUE(same(got[j], want[j])) << j;
    // Results of one storage share a fresh one; the argument's and the
    // parameter's views are views of them, as eager's.
    EXPECT_EQ(got[1].storage(), got[0].storage());
    EXPECT_EQ(got[4].storage(), got[0].storage());
    EXPECT_EQ(got[4].storage_offset(), 1);
    EXPECT_EQ(got[2].storage(), x.storage());
    EXPECT_EQ(got[2].storage_offset(), x.storage_offset());
    EXPECT_EQ(got[3].storage(), linear.weight.storage());
    EXPECT_EQ(got[3].storage_offset(), 4);
    if (k == 0) first = got;
  }
  EXPECT_TRUE(same(first[0], rows.narrow(0, 0, 4) * 2));  // results outlive later calls
  const ExplainReport r = fast.explain();
  ASSERT_EQ(r.graphs.size(), 1u);
  EXPECT_TRUE(r.graphs[0].cuda_graph) << r.to_string();
  EXPECT_EQ(r.stats.graph_launches, 3);
  EXPECT_TRUE(r.cuda_graph_skips.empty()) << r.to_string();
}

TEST(ReduceOverhead, AWholeTrainingStepIsOneCudaGraphEqualToEager) {
  REQUIRE_CUDA();
  auto [net, eager_net] = twin_blocks(12);
  optim::SGD opt(net->parameters(), {.lr = 0.05, .weight_decay = 1e-4});
  optim::SGD eager_opt(eager_net->parameters(), {.lr = 0.05, .weight_decay = 1e-4});
  const auto step = compile([&](const Tensor& x, const Tensor& y) { return train_block(*net, opt, x, y); },
                            {.mode = Mode::ReduceOverhead, .name = "step"});
  for (int i = 0; i < 6; ++i) {
    const Tensor x = randn({8, 16}).to(Device::cuda()), y = randn({8, 4}).to(Device::cuda());
    EXPECT_TRUE(same(step(x, y), train_block(*eager_net, eager_opt, x, y))) << i;
    expect_parameters(*net, *eager_net, same, i);
    const auto p = net->parameters(), q = eager_net->parameters();
    for (size_t k = 0; k < p.size(); ++k)
      EXPECT_TRUE(same(p[k].grad(), q[k].grad())) << "gradient " << k << " after step " << i;
  }
  const ExplainReport r = step.explain();
  EXPECT_EQ(r.stats.traces, 2);  // without gradients, then with the first call's
  expect_one_cuda_graph(r);
}

TEST(ReduceOverhead, AnAdamStepIsOneCudaGraphCountingOnTheDevice) {
  REQUIRE_CUDA();
  auto [net, eager_net] = twin_blocks(13);
  optim::AdamW opt(net->parameters(), {.lr = 1e-2}), eager_opt(eager_net->parameters(), {.lr = 1e-2});
  const auto step = compile([&](const Tensor& x, const Tensor& y) { return train_block(*net, opt, x, y); },
                            {.mode = Mode::ReduceOverhead, .name = "adam_step"});
  // Within float32's tolerance of eager's host-counted steps.
  const auto close = [](const Tensor& a, const Tensor& b) {
    return ((a - b).abs() - (b.abs() * 1e-5 + 1e-6)).max().item<double>() <= 0;
  };
  for (int i = 0; i < 6; ++i) {
    const Tensor x = randn({8, 16}).to(Device::cuda()), y = randn({8, 4}).to(Device::cuda());
    EXPECT_TRUE(close(step(x, y), train_block(*eager_net, eager_opt, x, y))) << i;
    expect_parameters(*net, *eager_net, close, i);
  }
  expect_one_cuda_graph(step.explain());
  EXPECT_EQ(opt.state_dict().find("state.0.step")->item<double>(), 6);
}

TEST(ReduceOverhead, RandomOpsDrawAnewAtEveryReplayAsEagerDraws) {
  REQUIRE_CUDA();
  NoGradGuard no_grad;
  const Device gpu = Device::cuda();
  Generator mine(77);
  // Two generators; dropout with an odd count (rounded up to even), randn
  // and randint from the default generator, rand from another.
  const auto f = [&](const Tensor& x) {
    const Tensor a = F::dropout(x, 0.3, true) + randn({5, 7}, {.device = gpu});
    const Tensor b = rand({5, 7}, {.device = gpu}, &mine) * 2 + F::dropout(x * 2, 0.6, true);
    return TensorList{a, b, randint(0, 100, {9}, {.device = gpu})};
  };
  const auto fast = compile(f, {.mode = Mode::ReduceOverhead});
  Generator eager_mine(77);
  const auto g = [&](const Tensor& x) {
    const Tensor a = F::dropout(x, 0.3, true) + randn({5, 7}, {.device = gpu});
    const Tensor b = rand({5, 7}, {.device = gpu}, &eager_mine) * 2 + F::dropout(x * 2, 0.6, true);
    return TensorList{a, b, randint(0, 100, {9}, {.device = gpu})};
  };
  const Tensor x = randn({5, 7}).to(gpu);
  TensorList previous;
  // Each call starts at another offset of the default generator; `mine`
  // goes on from the last call.
  const auto reseed = [&](int i) {
    manual_seed(500 + static_cast<uint64_t>(i));
    (void)randn({i + 1}, {.device = gpu});
  };
  for (int i = 0; i < 5; ++i) {
    reseed(i);
    const TensorList got = fast(x);
    const Tensor after = randn({3}, {.device = gpu});
    reseed(i);
    const TensorList want = g(x);
    EXPECT_TRUE(same(randn({3}, {.device = gpu}), after)) << "the default generator after call " << i;
    ASSERT_EQ(got.size(), want.size());
    for (size_t k = 0; k < got.size(); ++k) EXPECT_TRUE(same(got[k], want[k])) << "result " << k << " of call " << i;
    if (!previous.empty()) EXPECT_FALSE(same(got[1], previous[1])) << "a replay repeated its draw";
    previous = got;
  }
  EXPECT_TRUE(same(rand({4}, {}, &mine), rand({4}, {}, &eager_mine))) << "the user's generator after the calls";
  const ExplainReport r = fast.explain();
  ASSERT_EQ(r.graphs.size(), 1u);
  EXPECT_TRUE(r.graphs[0].cuda_graph) << r.to_string();
  EXPECT_EQ(r.stats.graph_launches, 4);
}

TEST(ReduceOverhead, ATrainingStepWithDropoutIsOneCudaGraphEqualToEager) {
  REQUIRE_CUDA();
  auto [net, eager_net] = twin_blocks(14);
  optim::SGD opt(net->parameters(), {.lr = 0.05}), eager_opt(eager_net->parameters(), {.lr = 0.05});
  const auto step = compile([&](const Tensor& x, const Tensor& y) { return train_block(*net, opt, x, y, true); },
                            {.mode = Mode::ReduceOverhead});
  for (int i = 0; i < 6; ++i) {
    const Tensor x = randn({8, 16}).to(Device::cuda()), y = randn({8, 4}).to(Device::cuda());
    manual_seed(900 + static_cast<uint64_t>(i));
    const Tensor loss = step(x, y);
    manual_seed(900 + static_cast<uint64_t>(i));
    EXPECT_TRUE(same(loss, train_block(*eager_net, eager_opt, x, y, true))) << i;
    expect_parameters(*net, *eager_net, same, i);
  }
  expect_one_cuda_graph(step.explain());
}

TEST(ReduceOverhead, ParametersAreReadWhereTheyLiveAndBuffersWrittenAsInEager) {
  REQUIRE_CUDA();
  manual_seed(4);
  nn::Linear linear(8, 8);
  linear.to(Device::cuda());
  Tensor mean = zeros({8}).to(Device::cuda()), var = ones({8}).to(Device::cuda());
  Tensor eager_mean = mean.clone(), eager_var = var.clone();
  NoGradGuard no_grad;
  const auto f = [&](const Tensor& x, const Tensor& m, const Tensor& v) {
    return F::batch_norm(linear(x), m, v, {}, {}, /*training=*/true, 0.1).relu();
  };
  const auto fast = compile([&](const Tensor& x) { return f(x, mean, var); }, {.mode = Mode::ReduceOverhead});
  for (int i = 0; i < 4; ++i) {
    const Tensor x = randn({6, 8}).to(Device::cuda());
    EXPECT_TRUE(same(fast(x), f(x, eager_mean, eager_var))) << i;
    EXPECT_TRUE(same(mean, eager_mean)) << i;
    EXPECT_TRUE(same(var, eager_var)) << i;
    // An update in place (an optimizer step) is seen by the next replay.
    linear.weight.mul_(0.9);
  }
  EXPECT_EQ(fast.stats().graph_launches, 3);
  // Parameters moved to other memory (converted and back): recorded anew.
  linear.to(kFloat64);
  linear.to(kFloat32);
  for (int i = 0; i < 2; ++i) {
    const Tensor x = randn({6, 8}).to(Device::cuda());
    EXPECT_TRUE(same(fast(x), f(x, eager_mean, eager_var))) << i;
  }
  EXPECT_EQ(fast.stats().traces, 1);
  EXPECT_EQ(fast.stats().graph_launches, 4);  // the call that found the move ran the executable
  EXPECT_TRUE(same(mean, eager_mean));
}

TEST(ReduceOverhead, ExplainNamesWhatKeepsAGraphFromBeingRecorded) {
  REQUIRE_CUDA();
  NoGradGuard no_grad;
  const Tensor x = randn({4, 4}).to(Device::cuda());
  struct Case {
    std::function<TensorList(const Tensor&)> fn;
    std::string reason;
  };
  const std::vector<Case> cases = {
      {[](const Tensor& a) {
         Tensor b = a;
         b.add_(1.0);
         return TensorList{b * 2};
       },
       "writes argument 0 in place"},
      {[](const Tensor& a) {
         return TensorList{a.t(), a.view({16})};
       },
       "it launches no kernels"},
      {[](const Tensor& a) { return TensorList{(a.to(Device::cpu()) + 1).to(Device::cuda())}; },
       "it uses the cpu: device graphs record CUDA work only"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(i);
    const auto fast = compile(cases[i].fn, {.mode = Mode::ReduceOverhead});
    for (int k = 0; k < 3; ++k) {
      Tensor a = x.clone(), b = x.clone();
      manual_seed(k);
      const TensorList got = fast(a);
      manual_seed(k);
      const TensorList want = cases[i].fn(b);
      ASSERT_EQ(got.size(), want.size());
      for (size_t j = 0; j < got.size(); ++j) EXPECT_TRUE(same(got[j], want[j])) << k << " " << j;
      EXPECT_TRUE(same(a, b));
    }
    const ExplainReport r = fast.explain();
    EXPECT_EQ(r.stats.graph_launches, 0);
    EXPECT_EQ(r.stats.graph_breaks, 0);
    EXPECT_TRUE(mentions(r.cuda_graph_skips, cases[i].reason)) << r.to_string();
  }
  // Autograd: a call that needs gradients replays through dispatch.
  nn::Linear linear(4, 4);
  linear.to(Device::cuda());
  EnableGradGuard grad;
  const auto fast = compile(linear, {.mode = Mode::ReduceOverhead});
  fast(x).sum().backward();
  EXPECT_TRUE(linear.weight.grad().defined());
  EXPECT_TRUE(mentions(fast.explain().cuda_graph_skips, "require grad"));
}

TEST(ReduceOverhead, ThreadsOnSeveralStreamsShareOneGraph) {
  REQUIRE_CUDA();
  manual_seed(5);
  Block block;
  block.to(Device::cuda());
  NoGradGuard no_grad;
  const auto fast = compile(block, {.mode = Mode::ReduceOverhead});
  (void)fast(randn({8, 16}).to(Device::cuda()));  // recorded
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      NoGradGuard no_grad_here;
      // Half the threads work on a stream of their own, half on the default one.
      std::optional<cuda::StreamGuard> on;
      const cuda::Stream own = cuda::Stream::create();
      if (t % 2) on.emplace(own);
      Generator gen(static_cast<uint64_t>(t));
      for (int i = 0; i < 20; ++i) {
        const Tensor x = randn({8, 16}, {}, &gen).to(Device::cuda());
        const Tensor got = fast(x), want = block.forward(x);
        if (!same(got, want)) ++mismatches;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
  const CompileStats s = fast.stats();
  EXPECT_EQ(s.calls, 161);
  EXPECT_EQ(s.traces, 1);
  EXPECT_GT(s.graph_launches, 0);
}

// A graph's pool holds what its recorded work needs at once, not the
// segments it grew by while recording.
TEST(ReduceOverhead, AGraphHoldsOnlyTheMemoryItUsesAtOnce) {
  REQUIRE_CUDA();
  NoGradGuard no_grad;
  const auto f = [](const Tensor& x) { return ((x * 2.0 + 1.0).relu() * x).sum({0}); };
  const auto fast = compile(f, {.mode = Mode::ReduceOverhead});
  const Tensor x = randn({1000}).to(Device::cuda());
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(same(fast(x), f(x))) << i;
  const ExplainReport r = fast.explain();
  ASSERT_EQ(r.graphs.size(), 1u);
  ASSERT_TRUE(r.graphs[0].cuda_graph) << r.to_string();
  EXPECT_EQ(r.stats.graph_launches, 2);
  // The arena's intermediates (4000 bytes each) and the result: a few
  // 512-byte blocks, where a recording's pool takes 2 MiB segments from the
  // device. The graph reads the argument where it is: no copy of it.
  const size_t direct = r.graphs[0].cuda_graph_bytes;
  EXPECT_GT(direct, 4000u);
  EXPECT_LE(direct, size_t{64} << 10) << r.to_string();
  // An argument elsewhere: recorded anew over a static copy of the
  // arguments (4000 bytes more), which serves every later call.
  const Tensor y = randn({1000}).to(Device::cuda()), z = randn({1000}).to(Device::cuda());
  for (const Tensor& t : {y, z, x, y}) EXPECT_TRUE(same(fast(t), f(t)));
  const ExplainReport after = fast.explain();
  EXPECT_EQ(after.stats.graph_launches, 6);
  EXPECT_GE(after.graphs[0].cuda_graph_bytes, direct + 4000) << after.to_string();
  EXPECT_LE(after.graphs[0].cuda_graph_bytes, size_t{64} << 10) << after.to_string();
}

// Convolutions (cuDNN, with workspaces), a batch norm and a matmul.
struct ConvNet : nn::Module {
  nn::Conv2d a{3, 32, 3, {.padding = 1}}, b{32, 64, 3, {.stride = 2, .padding = 1}};
  nn::BatchNorm2d norm{32};
  nn::Linear head{64, 10};
  ConvNet() {
    register_module("a", a);
    register_module("b", b);
    register_module("norm", norm);
    register_module("head", head);
  }
  Tensor forward(const Tensor& x) {
    const Tensor h = b(norm(a(x)).relu()).relu();
    return head(h.mean({2, 3}));
  }
};

// The most allocated at once over the first call and two more, beyond what
// was allocated before (weights, input).
size_t peak_extra(const std::function<Tensor()>& call) {
  const Device gpu = Device::cuda();
  cuda::synchronize();
  const size_t before = memory_stats(gpu).allocated_bytes;
  reset_peak_memory_stats(gpu);
  for (int i = 0; i < 3; ++i) (void)call();
  cuda::synchronize();
  return memory_stats(gpu).peak_allocated_bytes - before;
}

TEST(ReduceOverhead, CompiledCallsPeakNoHigherThanEager) {
  REQUIRE_CUDA();
  InferenceModeGuard inference;
  const Device gpu = Device::cuda();
  ConvNet net;
  net.eval();
  net.to(gpu);
  const Tensor x = randn({4, 3, 64, 64}).to(gpu);
  const Tensor want = net.forward(x);
  const size_t eager = peak_extra([&] { return net.forward(x); });
  for (Mode mode : {Mode::Default, Mode::ReduceOverhead}) {
    SCOPED_TRACE(mode == Mode::Default ? "default" : "reduce-overhead");
    const auto fast = compile(net, {.mode = mode});
    const size_t compiled = peak_extra([&] { return fast(x); });
    EXPECT_TRUE(same(fast(x), want));
    const ExplainReport r = fast.explain();
    ASSERT_EQ(r.graphs.size(), 1u);
    // Every convolution asks for a workspace, planned in the arena.
    EXPECT_GT(r.graphs[0].workspace_bytes, 0u) << r.to_string();
    // The CUDA graph reads the argument where it is: no copy of it.
    EXPECT_LE(compiled, eager) << r.to_string();
  }
}

// The LSTM cell loop, whose eager peak is a few state vectors: its initial
// zero states are computed into the memory plan at each call (not held as
// constants), and the CUDA graph reads the input where it is. What is left
// beyond eager's peak is the result: eager makes it when the loop's states
// are gone, while a compiled call holds its planned buffers until its last
// kernel has written the result (and a CUDA graph, its static result too).
TEST(ReduceOverhead, TheLstmLoopPeaksNoHigherThanEagerButForItsResult) {
  REQUIRE_CUDA();
  InferenceModeGuard inference;
  manual_seed(2);
  auto net = std::make_shared<models::LSTMCellLoop>();
  net->eval();
  net->to(Device::cuda());
  const Tensor x = randn({1, 32, 256}).to(Device::cuda());
  const Tensor want = net->forward(x);
  const size_t eager = peak_extra([&] { return net->forward(x); });
  for (Mode mode : {Mode::Default, Mode::ReduceOverhead}) {
    SCOPED_TRACE(mode == Mode::Default ? "default" : "reduce-overhead");
    const auto fast = compile([net](const Tensor& in) { return net->forward(in); }, {.mode = mode});
    const size_t compiled = peak_extra([&] { return fast(x); });
    EXPECT_TRUE(same(fast(x), want));
    const size_t result = 512;  // [1, 10] floats, in one block of the allocator
    EXPECT_LE(compiled, eager + (mode == Mode::Default ? 1 : 2) * result)
        << fast.explain().to_string();
  }
}

TEST(ReduceOverhead, TheGraphsMemoryCountsInTheDevicesStatisticsUntilReset) {
  REQUIRE_CUDA();
  NoGradGuard no_grad;
  const Device gpu = Device::cuda();
  cuda::synchronize();
  const size_t before = memory_stats(gpu).allocated_bytes;
  {
    const auto fast = compile([](const Tensor& x) { return (x.exp() + 1).log().sum({1}); },
                              {.mode = Mode::ReduceOverhead});
    const Tensor x = randn({256, 1024}).to(gpu);
    (void)fast(x);
    const size_t with_graph = memory_stats(gpu).allocated_bytes;
    // The static argument and the graph's intermediates: at least 2 MiB.
    EXPECT_GE(with_graph, before + 2 * 256 * 1024 * sizeof(float));
    EXPECT_TRUE(same(fast(x), (x.exp() + 1).log().sum({1})));
  }
  cuda::synchronize();
  EXPECT_LE(memory_stats(gpu).allocated_bytes, before + (size_t{1} << 20));
}

}  // namespace
}  // namespace kiln
