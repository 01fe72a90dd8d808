// amp::GradScaler (include/kiln/amp.h): scaled losses give the unscaled
// gradients and steps of SGD, Adam and AdamW; a planted inf skips the step
// and backs the scale off; clean steps grow it; its state dict; its errors;
// a compiled forward and backward with the scale inside.
#include <gtest/gtest.h>

#include <limits>
#include <memory>

#include "kiln/amp.h"
#include "kiln/kiln.h"
#include "unit/expect_error.h"

namespace kiln {
namespace {

using kiln::testing::expect_error;

struct Net : nn::Module {
  nn::Linear a{4, 8}, b{8, 2};
  Net() {
    register_module("a", a);
    register_module("b", b);
  }
  Tensor forward(const Tensor& x) { return b(a(x).tanh()); }
};

std::unique_ptr<Net> net_with_seed(uint64_t seed) {
  manual_seed(seed);
  return std::make_unique<Net>();
}

bool equal(const Tensor& a, const Tensor& b) {
  return a.sizes() == b.sizes() && a.to_vector<double>() == b.to_vector<double>();
}

template <class Opt, class Options>
void expect_scaled_steps_equal_plain(Options options) {
  auto scaled = net_with_seed(3), plain = net_with_seed(3);
  Opt opt(scaled->parameters(), options), plain_opt(plain->parameters(), options);
  amp::GradScaler scaler({.init_scale = 1024});  // a power of two: scaling is exact
  Generator gen(5);
  for (int i = 0; i < 4; ++i) {
    const Tensor x = randn({16, 4}, {}, &gen), y = randn({16, 2}, {}, &gen);
    opt.zero_grad();
    plain_opt.zero_grad();
    scaler.scale(nn::functional::mse_loss(scaled->forward(x), y)).backward();
    nn::functional::mse_loss(plain->forward(x), y).backward();
    EXPECT_TRUE(scaler.step(opt));
    scaler.update();
    plain_opt.step();
  }
  const auto p = scaled->parameters(), q = plain->parameters();
  for (size_t i = 0; i < p.size(); ++i) EXPECT_TRUE(equal(p[i], q[i])) << i;
  EXPECT_EQ(scaler.get_scale(), 1024);
  EXPECT_EQ(scaler.skipped_steps(), 0);
}

TEST(GradScaler, ScaledStepsEqualPlainStepsForSgdAdamAndAdamW) {
  expect_scaled_steps_equal_plain<optim::SGD>(optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
  expect_scaled_steps_equal_plain<optim::Adam>(optim::AdamOptions{.lr = 1e-2});
  expect_scaled_steps_equal_plain<optim::AdamW>(optim::AdamWOptions{.lr = 1e-2});
}

TEST(GradScaler, AnInfGradientSkipsTheStepAndBacksTheScaleOff) {
  auto net = net_with_seed(1);
  optim::Adam opt(net->parameters(), {.lr = 1e-2});
  amp::GradScaler scaler({.init_scale = 256});
  const Tensor x = randn({8, 4});
  opt.zero_grad();
  scaler.scale(net->forward(x).sum()).backward();
  // A planted overflow in one gradient.
  net->b.weight.grad().fill_(std::numeric_limits<float>::infinity());
  std::vector<Tensor> before;
  for (const Tensor& p : net->parameters()) before.push_back(p.clone());
  EXPECT_FALSE(scaler.step(opt));
  scaler.update();
  const auto after = net->parameters();
  for (size_t i = 0; i < after.size(); ++i) EXPECT_TRUE(equal(after[i], before[i])) << i;
  EXPECT_TRUE(opt.state_dict().empty() || !opt.state_dict().contains("state.0.exp_avg"));
  EXPECT_EQ(scaler.get_scale(), 128);
  EXPECT_EQ(scaler.skipped_steps(), 1);
  // The next clean step steps.
  opt.zero_grad();
  scaler.scale(net->forward(x).sum()).backward();
  EXPECT_TRUE(scaler.step(opt));
  scaler.update();
  EXPECT_FALSE(equal(net->parameters()[0], before[0]));
}

TEST(GradScaler, TheScaleGrowsAfterGrowthIntervalCleanSteps) {
  auto net = net_with_seed(2);
  optim::SGD opt(net->parameters(), {.lr = 1e-3});
  amp::GradScaler scaler({.init_scale = 8, .growth_factor = 4, .growth_interval = 3});
  const Tensor x = randn({4, 4});
  for (int i = 1; i <= 7; ++i) {
    opt.zero_grad();
    scaler.scale(net->forward(x).sum()).backward();
    scaler.unscale_(opt);  // gradients are true ones here (to clip them)
    scaler.step(opt);
    scaler.update();
    EXPECT_EQ(scaler.get_scale(), i < 3 ? 8 : i < 6 ? 32 : 128) << i;
  }
}

TEST(GradScaler, StateDictRoundTripsAndNamesBadValues) {
  amp::GradScaler a({.init_scale = 16, .growth_interval = 5});
  a.update(64);
  const StateDict sd = a.state_dict();
  EXPECT_EQ(sd.at("scale").item<float>(), 64);
  EXPECT_EQ(sd.at("growth_interval").item<int64_t>(), 5);
  amp::GradScaler b;
  b.load_state_dict(sd);
  EXPECT_EQ(b.get_scale(), 64);
  EXPECT_EQ(b.state_dict().at("growth_interval").item<int64_t>(), 5);
  StateDict bad = sd;
  bad.set("backoff_factor", full({}, 1.5, {.dtype = kFloat64}));
  expect_error<ValueError>([&] { b.load_state_dict(bad); }, "load_state_dict", "backoff_factor");
  StateDict missing = sd;
  missing.erase("_growth_tracker");
  expect_error<ValueError>([&] { b.load_state_dict(missing); }, "_growth_tracker");
}

TEST(GradScaler, MisuseIsAValueErrorNamingTheCall) {
  expect_error<ValueError>([] { amp::GradScaler({.init_scale = 0}); }, "GradScaler", "init_scale");
  expect_error<ValueError>([] { amp::GradScaler({.growth_factor = 1}); }, "growth_factor");
  expect_error<ValueError>([] { amp::GradScaler({.backoff_factor = 1}); }, "backoff_factor");
  expect_error<ValueError>([] { amp::GradScaler({.growth_interval = 0}); }, "growth_interval");
  auto net = net_with_seed(4);
  optim::SGD opt(net->parameters(), {.lr = 0.1});
  amp::GradScaler scaler;
  expect_error<ValueError>([&] { scaler.step(opt); }, "GradScaler.step", "scale(loss)");
  scaler.scale(net->forward(randn({2, 4})).sum()).backward();
  expect_error<ValueError>([&] { scaler.update(); }, "GradScaler.update", "no step()");
  scaler.unscale_(opt);
  expect_error<ValueError>([&] { scaler.unscale_(opt); }, "GradScaler.unscale_", "again");
  scaler.step(opt);
  expect_error<ValueError>([&] { scaler.step(opt); }, "GradScaler.step", "again");
  scaler.update();
  expect_error<DTypeError>([&] { scaler.scale(ones({1}, {.dtype = kInt32})); }, "GradScaler.scale");
}

TEST(GradScaler, DisabledItPassesEverythingThrough) {
  auto net = net_with_seed(6);
  optim::SGD opt(net->parameters(), {.lr = 0.1});
  amp::GradScaler scaler({.enabled = false});
  const Tensor loss = net->forward(randn({2, 4})).sum();
  EXPECT_TRUE(equal(scaler.scale(loss), loss));
  loss.backward();
  EXPECT_TRUE(scaler.step(opt));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 1);
  EXPECT_TRUE(scaler.state_dict().empty());
}

TEST(GradScaler, ACompiledForwardAndBackwardScaleInsideStepsOutside) {
  auto net = net_with_seed(7), eager_net = net_with_seed(7);
  optim::AdamW opt(net->parameters(), {.lr = 1e-2}),
      eager_opt(eager_net->parameters(), {.lr = 1e-2});
  amp::GradScaler scaler({.init_scale = 64, .growth_interval = 2});
  amp::GradScaler eager_scaler({.init_scale = 64, .growth_interval = 2});
  auto forward_backward = [](Net& n, optim::Optimizer& o, amp::GradScaler& s, const Tensor& x) {
    o.zero_grad();
    Tensor loss = n.forward(x).square().mean();
    s.scale(loss).backward();
    return loss;
  };
  const auto fast = compile([&](const Tensor& x) { return forward_backward(*net, opt, scaler, x); },
                            {.name = "fb"});
  Generator gen(8);
  for (int i = 0; i < 5; ++i) {
    const Tensor x = randn({8, 4}, {}, &gen);
    EXPECT_TRUE(equal(fast(x), forward_backward(*eager_net, eager_opt, eager_scaler, x))) << i;
    scaler.step(opt);
    scaler.update();
    eager_scaler.step(eager_opt);
    eager_scaler.update();
    EXPECT_EQ(scaler.get_scale(), eager_scaler.get_scale()) << i;
  }
  EXPECT_EQ(scaler.get_scale(), 256);  // grown twice: the graph reads the scale where it is
  const auto p = net->parameters(), q = eager_net->parameters();
  for (size_t i = 0; i < p.size(); ++i) EXPECT_TRUE(equal(p[i], q[i])) << i;
  EXPECT_EQ(fast.explain().stats.graph_breaks, 0);
  // Steps inside a compiled function are refused: a replay would not repeat them.
  const auto inside = compile([&](const Tensor& x) {
    forward_backward(*net, opt, scaler, x);
    return Tensor(scaler.step(opt) ? ones({1}) : zeros({1}));
  });
  expect_error<ValueError>(
      [&] {
        inside(randn({8, 4}));
      },
      "GradScaler.step", "inside a compiled function");
}

}  // namespace
}  // namespace kiln
