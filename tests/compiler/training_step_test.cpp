// A whole training step in one graph: forward, loss, backward() and an
// optimizer step traced together (the autograd engine's ops are recorded),
// against the same steps run eagerly on a copy of the model.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "compiler/compiler_testing.h"
#include "kiln/kiln.h"
#include "unit/expect_error.h"

namespace kiln {
namespace {

using compiler::testing::same;
using kiln::testing::expect_error;

struct Net : nn::Module {
  nn::Linear a{6, 16}, b{16, 3};
  Net() {
    register_module("a", a);
    register_module("b", b);
  }
  Tensor forward(const Tensor& x) { return b(a(x).tanh()); }
};

// Two nets with equal parameters.
std::pair<std::unique_ptr<Net>, std::unique_ptr<Net>> twins(uint64_t seed) {
  manual_seed(seed);
  auto one = std::make_unique<Net>();
  manual_seed(seed);
  auto two = std::make_unique<Net>();
  return {std::move(one), std::move(two)};
}

void expect_same_parameters(Net& got, Net& want, int step) {
  const auto p = got.parameters(), q = want.parameters();
  ASSERT_EQ(p.size(), q.size());
  for (size_t i = 0; i < p.size(); ++i) {
    EXPECT_TRUE(same(p[i], q[i])) << "parameter " << i << " after step " << step;
    ASSERT_EQ(p[i].grad().defined(), q[i].grad().defined()) << "gradient " << i << " after step " << step;
    if (p[i].grad().defined()) {
      EXPECT_TRUE(same(p[i].grad(), q[i].grad())) << "gradient " << i << " after step " << step;
    }
  }
}

Tensor train_step(Net& net, optim::Optimizer& opt, const Tensor& x, const Tensor& y) {
  opt.zero_grad();
  Tensor loss = nn::functional::mse_loss(net.forward(x), y);
  loss.backward();
  opt.step();
  return loss;
}

TEST(TrainingStep, ForwardBackwardAndSGDStepAreOneGraphEqualToEager) {
  auto [net, eager_net] = twins(5);
  optim::SGD opt(net->parameters(), {.lr = 0.1}), eager_opt(eager_net->parameters(), {.lr = 0.1});
  const auto step = compile([&](const Tensor& x, const Tensor& y) { return train_step(*net, opt, x, y); },
                            {.name = "step"});
  Generator gen(9);
  for (int i = 0; i < 6; ++i) {
    const Tensor x = randn({8, 6}, {}, &gen), y = randn({8, 3}, {}, &gen);
    const Tensor loss = step(x, y);
    EXPECT_TRUE(same(loss, train_step(*eager_net, eager_opt, x, y))) << i;
    EXPECT_FALSE(loss.requires_grad());
    expect_same_parameters(*net, *eager_net, i);
  }
  const ExplainReport r = step.explain();
  // The first call found no gradients, the second the first call's: two
  // traces, the second graph replacing the first.
  EXPECT_EQ(r.stats.traces, 2) << r.to_string();
  EXPECT_EQ(r.stats.replays, 6);
  ASSERT_EQ(r.graphs.size(), 1u);
  EXPECT_TRUE(r.graphs[0].executable) << r.to_string();
  // The backward ops (matmuls for linear's gradients) and SGD's in-place updates of the parameters.
  EXPECT_NE(r.graphs[0].text.find("matmul("), std::string::npos) << r.graphs[0].text;
  EXPECT_NE(r.graphs[0].text.find(".add_("), std::string::npos) << r.graphs[0].text;
  EXPECT_NE(r.graphs[0].text.find("{alpha=-0.1}"), std::string::npos) << r.graphs[0].text;
  EXPECT_NE(r.to_string().find(
                "captured tensor 0 (float32[16, 6] cpu) has a gradient now (none when traced)"),
            std::string::npos)
      << r.to_string();
}

TEST(TrainingStep, DropoutsBackwardUsesTheMaskOfItsForwardDraw) {
  auto [net, eager_net] = twins(15);
  optim::SGD opt(net->parameters(), {.lr = 0.1}), eager_opt(eager_net->parameters(), {.lr = 0.1});
  // Two dropouts: each backward must apply its own forward's mask, drawn
  // anew at every call.
  const auto train = [](Net& n, optim::Optimizer& o, const Tensor& x, const Tensor& y) {
    o.zero_grad();
    const Tensor h = nn::functional::dropout(n.a(x).tanh(), 0.5);
    Tensor loss = nn::functional::mse_loss(nn::functional::dropout(n.b(h), 0.25), y);
    loss.backward();
    o.step();
    return loss;
  };
  const auto step = compile([&](const Tensor& x, const Tensor& y) { return train(*net, opt, x, y); });
  Generator gen(16);
  for (int i = 0; i < 5; ++i) {
    const Tensor x = randn({8, 6}, {}, &gen), y = randn({8, 3}, {}, &gen);
    manual_seed(100 + static_cast<uint64_t>(i));
    const Tensor loss = step(x, y);
    const Tensor after = randn({3});  // the generator advanced as eager's
    manual_seed(100 + static_cast<uint64_t>(i));
    EXPECT_TRUE(same(loss, train(*eager_net, eager_opt, x, y))) << i;
    EXPECT_TRUE(same(after, randn({3}))) << i;
    expect_same_parameters(*net, *eager_net, i);
  }
  EXPECT_EQ(step.stats().traces, 2);
  if (!compiler::testing::can_generate_kernels()) return;
  // All four dropouts (two forward, two backward masks) draw inside
  // generated kernels.
  const ExplainReport r = step.explain();
  ASSERT_FALSE(r.graphs.empty());
  int drawn = 0;
  for (const std::string& line : r.graphs.back().fused) {
    if (line.find("generated kernel") == std::string::npos) continue;
    for (size_t at = line.find("dropout"); at != std::string::npos;
         at = line.find("dropout", at + 1))
      ++drawn;
  }
  EXPECT_EQ(drawn, 4) << r.to_string();
}

// Clipping the gradients' total norm reads nothing on the host: the step
// stays one graph, and a batch of another size is made from its trace.
TEST(TrainingStep, ClippingGradientsKeepsTheStepOneGraph) {
  auto [net, eager_net] = twins(21);
  optim::AdamW opt(net->parameters(), {.lr = 0.05}),
      eager_opt(eager_net->parameters(), {.lr = 0.05});
  const auto train = [](Net& n, optim::Optimizer& o, const Tensor& x, const Tensor& y) {
    o.zero_grad();
    Tensor loss = nn::functional::mse_loss(n.forward(x), y);
    loss.backward();
    const Tensor total = optim::clip_grad_norm_(n.parameters(), 0.5);
    o.step();
    return TensorList{loss, total};
  };
  const auto step = compile(
      [&](const Tensor& x, const Tensor& y) { return train(*net, opt, x, y); }, {.name = "step"});
  Generator gen(22);
  for (int i = 0; i < 5; ++i) {
    const int64_t batch = i < 3 ? 8 : 12;
    const Tensor x = randn({batch, 6}, {}, &gen), y = randn({batch, 3}, {}, &gen) * 4.0;
    const TensorList got = step(x, y), want = train(*eager_net, eager_opt, x, y);
    ASSERT_EQ(got.size(), 2u);
    EXPECT_TRUE(same(got[0], want[0])) << i;
    EXPECT_TRUE(same(got[1], want[1])) << i;
    EXPECT_GT(got[1].item<double>(), 0.5) << i;  // the gradients were clipped
    expect_same_parameters(*net, *eager_net, i);
  }
  const ExplainReport r = step.explain();
  EXPECT_EQ(r.stats.graph_breaks, 0) << r.to_string();
  EXPECT_EQ(r.stats.eager_calls, 0) << r.to_string();
  EXPECT_EQ(r.stats.traces, 3) << r.to_string();  // no gradients; Adam's state; batch 12 traced
}

TEST(TrainingStep, GradientsAccumulateAcrossCallsAsInEager) {
  auto [net, eager_net] = twins(6);
  // No zero_grad: each backward adds to the gradients of the last.
  const auto accumulate = [](Net& n, const Tensor& x) {
    Tensor loss = n.forward(x).pow(2.0).mean();
    loss.backward();
    return loss;
  };
  const auto fast = compile([&](const Tensor& x) { return accumulate(*net, x); });
  for (int i = 0; i < 4; ++i) {
    const Tensor x = randn({5, 6});
    EXPECT_TRUE(same(fast(x), accumulate(*eager_net, x))) << i;
    expect_same_parameters(*net, *eager_net, i);
  }
  EXPECT_EQ(fast.stats().traces, 2);  // without gradients, then adding in place to the second call's
}

TEST(TrainingStep, MomentumStateAndLearningRateChanges) {
  for (const bool nesterov : {false, true}) {
    SCOPED_TRACE(nesterov ? "nesterov" : "momentum");
    auto [net, eager_net] = twins(7);
    const optim::SGDOptions options{.lr = 0.05, .momentum = 0.9, .nesterov = nesterov};
    optim::SGD opt(net->parameters(), options);
    optim::SGD eager_opt(eager_net->parameters(), options);
    const auto step =
        compile([&](const Tensor& x, const Tensor& y) { return train_step(*net, opt, x, y); },
                {.name = "step"});
    const Tensor x = randn({4, 6}), y = randn({4, 3});
    // The first step is recorded too: its buffers are made as zeros outside
    // the graph, and the update takes the first gradient whole, as eager's.
    for (int i = 0; i < 6; ++i) {
      if (i == 4) {  // a schedule's change: the graph's constant is stale, so it traces anew
        opt.set_lr(0, 0.01);
        eager_opt.set_lr(0, 0.01);
      }
      EXPECT_TRUE(same(step(x, y), train_step(*eager_net, eager_opt, x, y))) << i;
      expect_same_parameters(*net, *eager_net, i);
    }
    const ExplainReport r = step.explain();
    EXPECT_EQ(r.stats.traces, 3) << r.to_string();  // without gradients, with them, the new lr
    EXPECT_NE(r.to_string().find("SGD group 0 lr was 0.05, now 0.01"), std::string::npos)
        << r.to_string();
    const StateDict state = opt.state_dict(), eager_state = eager_opt.state_dict();
    EXPECT_EQ(state.keys(), eager_state.keys());
  }
}

// Within float32's documented tolerance: a recorded Adam step computes its
// bias corrections on the device, from its count there.
bool close(const Tensor& got, const Tensor& want) {
  if (got.sizes() != want.sizes()) return false;
  return ((got - want).abs() - (want.abs() * 1e-5 + 1e-6)).max().item<double>() <= 0;
}

void expect_close_parameters(Net& got, Net& want, const std::string& what) {
  const auto p = got.parameters(), q = want.parameters();
  ASSERT_EQ(p.size(), q.size());
  for (size_t i = 0; i < p.size(); ++i) EXPECT_TRUE(close(p[i], q[i])) << "parameter " << i << " " << what;
}

TEST(TrainingStep, DampenedMomentumCountsItsFirstStepOnTheDevice) {
  auto [net, eager_net] = twins(8);
  const optim::SGDOptions options{
      .lr = 0.05, .momentum = 0.9, .dampening = 0.3, .weight_decay = 0.01};
  optim::SGD opt(net->parameters(), options);
  optim::SGD eager_opt(eager_net->parameters(), options);
  const auto step =
      compile([&](const Tensor& x, const Tensor& y) { return train_step(*net, opt, x, y); },
              {.name = "dampened"});
  Generator gen(9);
  for (int i = 0; i < 5; ++i) {
    const Tensor x = randn({4, 6}, {}, &gen), y = randn({4, 3}, {}, &gen);
    // The factor (1 on the first step, then 1 - dampening) is a tensor.
    const Tensor loss = step(x, y), eager_loss = train_step(*eager_net, eager_opt, x, y);
    if (i == 0) {
      EXPECT_TRUE(same(loss, eager_loss));
      expect_same_parameters(*net, *eager_net, 0);
    }
    EXPECT_TRUE(close(loss, eager_loss)) << i;
    expect_close_parameters(*net, *eager_net, detail::str_cat("after step ", i));
  }
  EXPECT_EQ(step.stats().traces, 2);
  EXPECT_EQ(step.stats().replays, 5);
  // Eager steps after the recorded ones go on from the device's count.
  opt.step();
  eager_opt.step();
  expect_close_parameters(*net, *eager_net, "after an eager step");
  EXPECT_EQ(opt.state_dict().keys(), eager_opt.state_dict().keys());
}

struct AdamCase {
  std::string name;
  std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)> make;
};

std::vector<AdamCase> adam_cases() {
  return {
      {"Adam", [](std::vector<Tensor> p) { return std::make_unique<optim::Adam>(std::move(p), optim::AdamOptions{.lr = 1e-2}); }},
      {"Adam amsgrad, L2", [](std::vector<Tensor> p) {
         return std::make_unique<optim::Adam>(std::move(p), optim::AdamOptions{.lr = 1e-2, .weight_decay = 0.1, .amsgrad = true});
       }},
      {"AdamW maximize", [](std::vector<Tensor> p) {
         return std::make_unique<optim::AdamW>(std::move(p), optim::AdamWOptions{.lr = 1e-2, .weight_decay = 0.05, .maximize = true});
       }},
  };
}

TEST(TrainingStep, AdamStepsAreRecordedAndCountOnTheDevice) {
  for (const AdamCase& c : adam_cases()) {
    SCOPED_TRACE(c.name);
    auto [net, eager_net] = twins(11);
    auto opt = c.make(net->parameters()), eager_opt = c.make(eager_net->parameters());
    const auto step = compile([&](const Tensor& x, const Tensor& y) { return train_step(*net, *opt, x, y); },
                              {.name = "adam_step"});
    Generator gen(12);
    for (int i = 0; i < 6; ++i) {
      const Tensor x = randn({8, 6}, {}, &gen), y = randn({8, 3}, {}, &gen);
      EXPECT_TRUE(close(step(x, y), train_step(*eager_net, *eager_opt, x, y))) << i;
      expect_close_parameters(*net, *eager_net, detail::str_cat("after step ", i));
    }
    const ExplainReport r = step.explain();
    // Without gradients, then with them; the first step with gradients made
    // the state (zeros, outside the graph) while tracing.
    EXPECT_EQ(r.stats.traces, 2) << r.to_string();
    EXPECT_EQ(r.stats.replays, 6);
    ASSERT_EQ(r.graphs.size(), 1u);
    EXPECT_TRUE(r.graphs[0].executable) << r.to_string();
    EXPECT_NE(r.graphs[0].text.find("pow("), std::string::npos) << r.graphs[0].text;
    // Each parameter's update, with its moments, is one generated kernel
    // that writes them in place.
    if (compiler::testing::can_generate_kernels()) {
      int64_t updates = 0;
      for (const std::string& line : r.graphs[0].fused)
        updates += line.find(", written in place into inputs ") != std::string::npos;
      EXPECT_EQ(updates, 4) << r.to_string();
    }
    // The count is the device's: six steps, as eager's on the host.
    const StateDict sd = opt->state_dict(), eager_sd = eager_opt->state_dict();
    for (int i = 0; i < 4; ++i) {
      const std::string key = detail::str_cat("state.", i, ".step");
      ASSERT_TRUE(sd.find(key)) << key;
      EXPECT_EQ(sd.find(key)->item<double>(), 6) << key;
      for (const std::string name : {"exp_avg", "exp_avg_sq"}) {
        const std::string k = detail::str_cat("state.", i, ".", name);
        EXPECT_TRUE(close(*sd.find(k), *eager_sd.find(k))) << k;
      }
    }
    // Eager steps go on counting on the device.
    const Tensor x = randn({8, 6}, {}, &gen), y = randn({8, 3}, {}, &gen);
    EXPECT_TRUE(close(train_step(*net, *opt, x, y), train_step(*eager_net, *eager_opt, x, y)));
    expect_close_parameters(*net, *eager_net, "after an eager step");
    EXPECT_EQ(opt->state_dict().find("state.0.step")->item<double>(), 7);
  }
}

// A forward value that the backward reads again (gelu's input) is stored by
// the kernel that makes the gelu: one kernel, two outputs, and the
// gradients eager's bitwise.
TEST(TrainingStep, AForwardValueTheBackwardReadsIsStoredByTheGroupThatMakesIt) {
  manual_seed(14);
  Tensor s = randn({64}).requires_grad_(true), b = randn({64}).requires_grad_(true);
  Tensor s2 = s.detach().clone().requires_grad_(true), b2 = b.detach().clone().requires_grad_(true);
  const auto loss_of = [](const Tensor& x, const Tensor& scale, const Tensor& bias) {
    Tensor loss = gelu(x * scale + bias).square().mean();
    loss.backward();
    return loss;
  };
  const auto step = compile([&](const Tensor& x) { return loss_of(x, s, b); }, {.name = "gelu"});
  Generator gen(15);
  for (int i = 0; i < 3; ++i) {
    const Tensor x = randn({32, 64}, {}, &gen);
    EXPECT_TRUE(same(step(x), loss_of(x, s2, b2))) << i;
    EXPECT_TRUE(same(s.grad(), s2.grad())) << i;
    EXPECT_TRUE(same(b.grad(), b2.grad())) << i;
  }
  if (!compiler::testing::can_generate_kernels()) return;
  const ExplainReport r = step.explain();
  ASSERT_FALSE(r.graphs.empty());
  const std::vector<std::string>& fused = r.graphs.back().fused;
  ASSERT_FALSE(fused.empty()) << r.to_string();
  EXPECT_EQ(fused[0],
            "mul + add + gelu (nodes 0-2): one generated kernel of 3 inputs, and 2 outputs")
      << r.to_string();
}

// A batch norm's backward reduces g and g * x_hat over [0, 2, 3] of
// [N, C, H, W]: dims with a kept one between them. Each reduction runs in
// the kernel that makes its input, as rows of the input permuted (the
// channel first), and gradients, running statistics and parameters stay
// eager's bitwise.
TEST(TrainingStep, ABatchNormsBackwardReducesItsStatisticsInGeneratedKernels) {
  struct ConvNet : nn::Module {
    nn::Conv2d conv{3, 6, 3, {.padding = 1, .bias = false}};
    nn::BatchNorm2d bn{6};
    ConvNet() {
      register_module("conv", conv);
      register_module("bn", bn);
    }
    Tensor forward(const Tensor& x) { return relu(bn(conv(x))); }
  };
  manual_seed(16);
  ConvNet net;
  manual_seed(16);
  ConvNet eager_net;
  optim::SGD opt(net.parameters(), {.lr = 0.1, .momentum = 0.9});
  optim::SGD eager_opt(eager_net.parameters(), {.lr = 0.1, .momentum = 0.9});
  const auto step_of = [](ConvNet& n, optim::Optimizer& o, const Tensor& x) {
    o.zero_grad();
    Tensor loss = n.forward(x).square().mean();
    loss.backward();
    o.step();
    return loss;
  };
  const auto step = compile([&](const Tensor& x) { return step_of(net, opt, x); },
                            {.strict = true, .name = "bn"});
  Generator gen(17);
  for (int i = 0; i < 4; ++i) {
    const Tensor x = randn({4, 3, 9, 7}, {}, &gen);
    EXPECT_TRUE(same(step(x), step_of(eager_net, eager_opt, x))) << i;
    const auto p = net.parameters(), q = eager_net.parameters();
    for (size_t k = 0; k < p.size(); ++k) {
      EXPECT_TRUE(same(p[k], q[k])) << "parameter " << k << " after step " << i;
      EXPECT_TRUE(same(p[k].grad(), q[k].grad())) << "gradient " << k << " after step " << i;
    }
    EXPECT_TRUE(same(net.bn.running_mean, eager_net.bn.running_mean)) << i;
    EXPECT_TRUE(same(net.bn.running_var, eager_net.bn.running_var)) << i;
  }
  if (!compiler::testing::can_generate_kernels()) return;
  const std::string fused = compiler::testing::explain_lines(step.explain());
  for (const char* op : {"mean", "sum"}) {
    EXPECT_NE(fused.find(detail::str_cat(
                  "one generated kernel of 2 inputs, its rows (dims [1, 0, 2, 3] of its input) "
                  "reduced by ",
                  op, " in cache")),
              std::string::npos)
        << op << "\n"
        << step.explain().to_string();
  }
}

// An optimizer's step compiled alone (its updates run under NoGradGuard)
// records no autograd, though its parameters require grad: it runs as an
// executable of generated kernels, and its updates are eager's.
TEST(TrainingStep, AnOptimizerStepCompiledAloneIsAnExecutable) {
  for (const AdamCase& c : adam_cases()) {
    SCOPED_TRACE(c.name);
    auto [net, eager_net] = twins(16);
    auto opt = c.make(net->parameters()), eager_opt = c.make(eager_net->parameters());
    const auto step = compile([&] { opt->step(); }, {.name = "step"});
    Generator gen(17);
    for (int i = 0; i < 4; ++i) {
      const Tensor x = randn({8, 6}, {}, &gen), y = randn({8, 3}, {}, &gen);
      for (Net* n : {net.get(), eager_net.get()}) {
        n->zero_grad();
        nn::functional::mse_loss(n->forward(x), y).backward();
      }
      step();
      eager_opt->step();
      expect_close_parameters(*net, *eager_net, detail::str_cat("after step ", i));
    }
    const ExplainReport r = step.explain();
    ASSERT_FALSE(r.graphs.empty());
    EXPECT_TRUE(r.graphs.back().executable) << r.to_string();
  }
}

TEST(TrainingStep, ALoadedAdamStateTracesAnew) {
  auto [net, eager_net] = twins(13);
  optim::Adam opt(net->parameters(), {.lr = 1e-2}), eager_opt(eager_net->parameters(), {.lr = 1e-2});
  const auto step = compile([&](const Tensor& x, const Tensor& y) { return train_step(*net, opt, x, y); },
                            {.name = "adam_step"});
  const Tensor x = randn({4, 6}), y = randn({4, 3});
  for (int i = 0; i < 3; ++i) (void)step(x, y), (void)train_step(*eager_net, eager_opt, x, y);
  // The state of another run replaces this one's tensors: the graph that
  // captured them is stale.
  Net third;
  optim::Adam other(third.parameters(), {.lr = 1e-2});
  (void)train_step(third, other, x, y);
  opt.load_state_dict(other.state_dict());
  eager_opt.load_state_dict(other.state_dict());
  for (int i = 0; i < 2; ++i) {
    EXPECT_TRUE(close(step(x, y), train_step(*eager_net, eager_opt, x, y))) << i;
    expect_close_parameters(*net, *eager_net, detail::str_cat("after loaded step ", i));
  }
  EXPECT_EQ(opt.state_dict().find("state.0.step")->item<double>(), 3);
  const ExplainReport r = step.explain();
  EXPECT_EQ(r.stats.traces, 3) << r.to_string();
  EXPECT_NE(r.to_string().find("Adam load_state_dict calls was 0, now 1"), std::string::npos) << r.to_string();
}

TEST(TrainingStep, CheckComparesAdamStepsWithEager) {
  auto [net, eager_net] = twins(14);
  optim::AdamW opt(net->parameters(), {.lr = 1e-2}), eager_opt(eager_net->parameters(), {.lr = 1e-2});
  const auto step = compile([&](const Tensor& x, const Tensor& y) { return train_step(*net, opt, x, y); },
                            {.check = true});
  for (int i = 0; i < 4; ++i) {
    const Tensor x = randn({3, 6}), y = randn({3, 3});
    EXPECT_TRUE(close(step(x, y), train_step(*eager_net, eager_opt, x, y))) << i;
    expect_close_parameters(*net, *eager_net, detail::str_cat("after step ", i));
  }
  EXPECT_EQ(opt.state_dict().find("state.0.step")->item<double>(), 4);
}

TEST(TrainingStep, CheckComparesEveryStepWithEager) {
  auto [net, eager_net] = twins(8);
  optim::SGD opt(net->parameters(), {.lr = 0.1}), eager_opt(eager_net->parameters(), {.lr = 0.1});
  const auto step = compile([&](const Tensor& x, const Tensor& y) { return train_step(*net, opt, x, y); },
                            {.check = true});
  for (int i = 0; i < 3; ++i) {
    const Tensor x = randn({3, 6}), y = randn({3, 3});
    EXPECT_TRUE(same(step(x, y), train_step(*eager_net, eager_opt, x, y))) << i;
    expect_same_parameters(*net, *eager_net, i);
  }
}

}  // namespace
}  // namespace kiln
