// What a compiled function depends on besides its tensors' layouts: the
// training flags of the modules it runs, and which tensors the modules'
// slots hold. Each is guarded, so a compiled call always gives the result
// the module gives eagerly in its current state.
#include <gtest/gtest.h>

#include <memory>

#include "compiler/compiler_testing.h"
#include "kiln/kiln.h"

namespace kiln {
namespace {

using compiler::testing::LogCapture;
using compiler::testing::same;

struct ConvNet : nn::Module {
  nn::Conv2d conv{3, 4, 3, {.padding = 1}};
  nn::BatchNorm2d bn{4};
  nn::Dropout drop{0.5};
  nn::Linear fc{4, 2};
  ConvNet() {
    register_module("conv", conv);
    register_module("bn", bn);
    register_module("drop", drop);
    register_module("fc", fc);
  }
  Tensor forward(const Tensor& x) {
    Tensor h = relu(bn(conv(x)));
    return fc(drop(adaptive_avg_pool2d(h, {1}).flatten(1)));
  }
};

// Two nets with the same weights and buffers.
std::pair<std::unique_ptr<ConvNet>, std::unique_ptr<ConvNet>> twins() {
  manual_seed(11);
  auto a = std::make_unique<ConvNet>(), b = std::make_unique<ConvNet>();
  b->load_state_dict(a->state_dict());
  return {std::move(a), std::move(b)};
}

void expect_same_buffers(const nn::Module& a, const nn::Module& b, const std::string& when) {
  const TensorList x = a.buffers(), y = b.buffers();
  ASSERT_EQ(x.size(), y.size());
  for (size_t i = 0; i < x.size(); ++i)
    EXPECT_TRUE(same(x[i], y[i])) << "buffer " << i << " " << when;
}

// The usual loop: train compiled, evaluate each epoch, train again.
TEST(ModuleState, ACompiledModuleFollowsTrainAndEval) {
  LogCapture logs("recompiles");
  auto [net, eager] = twins();
  const auto fast = compile(*net, {.name = "net"});
  Generator data(3);
  for (int epoch = 0; epoch < 3; ++epoch) {
    net->train();
    eager->train();
    for (int step = 0; step < 2; ++step) {
      const Tensor x = randn({4, 3, 6, 6}, {}, &data);
      manual_seed(100 + step);
      const Tensor y = fast(x);
      manual_seed(100 + step);
      EXPECT_TRUE(same(y, eager->forward(x))) << "train, epoch " << epoch;
      expect_same_buffers(*net, *eager, "after a train step");
    }
    net->eval();
    eager->eval();
    const Tensor x = randn({4, 3, 6, 6}, {}, &data);
    const Tensor y = fast(x);
    EXPECT_TRUE(same(y, eager->forward(x))) << "eval, epoch " << epoch;
    // Eval reads the running statistics and writes nothing.
    expect_same_buffers(*net, *eager, "after an eval call");
  }
  const ExplainReport r = fast.explain();
  // One graph per mode; switching back and forth traces nothing more.
  EXPECT_EQ(r.stats.traces, 2) << r.to_string();
  EXPECT_EQ(r.stats.replays, 9);
  EXPECT_EQ(r.graphs.size(), 2u) << r.to_string();
  ASSERT_EQ(r.recompiles.size(), 1u) << r.to_string();
  EXPECT_NE(r.recompiles[0].find("the training flag of a BatchNorm2d was true, now false"),
            std::string::npos)
      << r.recompiles[0];
  EXPECT_TRUE(logs.contains("tracing net again: the training flag of a"));
  EXPECT_NE(r.to_string().find("the training flag of a Dropout"), std::string::npos)
      << r.to_string();
}

TEST(ModuleState, AModuleCompiledInEvalModeTrainsAfterTrain) {
  auto [net, eager] = twins();
  net->eval();
  eager->eval();
  const auto fast = compile(*net);
  const Tensor x = randn({4, 3, 5, 5});
  EXPECT_TRUE(same(fast(x), eager->forward(x)));
  net->train();
  eager->train();
  manual_seed(7);
  const Tensor y = fast(x);
  manual_seed(7);
  EXPECT_TRUE(same(y, eager->forward(x)));
  // The running statistics moved, as eager's did.
  expect_same_buffers(*net, *eager, "after a train call");
  EXPECT_FALSE(same(net->bn.running_mean, zeros({4})));
  EXPECT_EQ(fast.stats().traces, 2);
}

// A lambda that calls modules depends on their flags as a compiled module does.
TEST(ModuleState, ALambdaThatCallsModulesFollowsTheirFlags) {
  auto [net, eager] = twins();
  nn::Dropout drop(0.25);
  const auto fast = compile([&](const Tensor& x) { return drop(net->forward(x)); });
  const Tensor x = randn({2, 3, 4, 4});
  net->train();
  (void)fast(x);
  net->eval();
  eager->load_state_dict(net->state_dict());
  eager->eval();
  // drop is still in training mode: the result is the eval net's, dropped.
  const Tensor y = fast(x);
  const Tensor want = eager->forward(x);
  const std::vector<double> got = y.to_vector<double>(), base = want.to_vector<double>();
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_TRUE(got[i] == 0 || std::abs(got[i] - base[i] / 0.75) <= 1e-6 * std::abs(base[i])) << i;
  drop.eval();
  EXPECT_TRUE(same(fast(x), want));
  EXPECT_EQ(fast.stats().traces, 3);
}

// A module made and dropped inside the compiled function: its flag's guard
// outlives it.
TEST(ModuleState, AModuleMadeInsideTheFunctionLeavesNoDanglingGuard) {
  const auto fast = compile([](const Tensor& x) {
    nn::Dropout drop(0.5);
    drop.eval();
    return drop(x) * 2.0;
  });
  const Tensor x = randn({3, 4});
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(same(fast(x), x * 2.0));
  EXPECT_EQ(fast.stats().traces, 1);
}

// A new size after a switch of mode is made from the trace of that mode.
TEST(ModuleState, NewSizesAreMadeFromTheTraceOfTheCurrentMode) {
  auto [net, eager] = twins();
  net->eval();
  eager->eval();
  const auto fast = compile(*net);
  for (int64_t batch : {2, 3}) (void)fast(randn({batch, 3, 5, 5}));
  net->train();
  eager->train();
  const Tensor x4 = randn({4, 3, 5, 5});
  manual_seed(12);
  (void)fast(x4);
  manual_seed(12);
  (void)eager->forward(x4);
  net->eval();
  eager->eval();
  for (int64_t batch : {5, 6}) {
    const Tensor x = randn({batch, 3, 5, 5});
    EXPECT_TRUE(same(fast(x), eager->forward(x))) << batch;
  }
  EXPECT_GE(fast.stats().retraces, 2) << fast.explain().to_string();
}

// Parameters and buffers are read from the module's slots: a slot given
// another tensor is seen by the next call.
TEST(ModuleState, AReassignedParameterIsSeen) {
  LogCapture logs("recompiles");
  nn::Linear fc(4, 3);
  const auto fast = compile(fc, {.name = "fc"});
  const Tensor x = randn({2, 4});
  EXPECT_TRUE(same(fast(x), fc.forward(x)));
  fc.weight = randn({3, 4});
  EXPECT_TRUE(same(fast(x), fc.forward(x)));
  fc.bias = zeros({3});
  EXPECT_TRUE(same(fast(x), fc.forward(x)));
  EXPECT_EQ(fast.stats().traces, 3);
  EXPECT_TRUE(
      logs.contains("the parameter 'weight' of a Linear is another tensor than when traced"));
  // A tensor of another shape fails as eagerly.
  fc.weight = randn({3, 5});
  EXPECT_THROW(fast(x), ShapeError);
  EXPECT_THROW(fc.forward(x), ShapeError);
}

TEST(ModuleState, AReassignedBufferOfAModuleALambdaCallsIsSeen) {
  auto [net, eager] = twins();
  net->eval();
  eager->eval();
  const auto fast = compile([&](const Tensor& x) { return net->forward(x); });
  const Tensor x = randn({2, 3, 5, 5});
  (void)fast(x);
  net->bn.running_var = full({4}, 4.0);
  eager->bn.running_var = full({4}, 4.0);
  EXPECT_TRUE(same(fast(x), eager->forward(x)));
  EXPECT_EQ(fast.stats().traces, 2);
}

// Assigning in place (load_state_dict, an optimizer's step) is no retrace.
TEST(ModuleState, UpdatesInPlaceNeedNoRetrace) {
  nn::Linear fc(4, 3), other(4, 3);
  const auto fast = compile(fc);
  const Tensor x = randn({2, 4});
  (void)fast(x);
  fc.load_state_dict(other.state_dict());
  EXPECT_TRUE(same(fast(x), other.forward(x)));
  EXPECT_EQ(fast.stats().traces, 1);
}

// On a GPU under ReduceOverhead, each mode keeps its CUDA graph: switching
// replays the other one, and running statistics are written where they live.
// Without gradient recording (as when batch-norm statistics are recalibrated
// in train mode): a call that records gradients replays through autograd,
// which launches no CUDA graph.
TEST(ModuleState, TrainAndEvalEachKeepTheirCudaGraph) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device: " << cuda::unavailable_reason();
  auto [net, eager] = twins();
  net->to(Device::cuda());
  eager->to(Device::cuda());
  const auto fast = compile(*net, {.mode = Mode::ReduceOverhead});
  NoGradGuard no_grad;
  Generator data(6);
  for (int round = 0; round < 3; ++round) {
    for (const bool training : {true, false}) {
      net->train(training);
      eager->train(training);
      const Tensor x = randn({4, 3, 6, 6}, {}, &data).to(Device::cuda());
      manual_seed(40 + round);
      const Tensor y = fast(x);
      manual_seed(40 + round);
      EXPECT_TRUE(same(y.to(Device::cpu()), eager->forward(x).to(Device::cpu())))
          << round << " " << training;
      expect_same_buffers(*net, *eager, "after a call");
    }
  }
  const CompileStats s = fast.stats();
  EXPECT_EQ(s.traces, 2);
  EXPECT_GE(s.graph_launches, 4);
}

}  // namespace
}  // namespace kiln
