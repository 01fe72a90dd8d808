// amp::GradScaler (include/kiln/amp.h): scaled losses give the unscaled
// gradients and steps of SGD, Adam and AdamW; a planted inf skips the step
// and backs the scale off; clean steps grow it; its state dict; its errors;
// a compiled forward and backward with the scale inside; the whole
// iteration compiled, skipping steps on the device.
#include <gtest/gtest.h>

#include <cmath>
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
}

// Equal values, NaN equal to NaN (a loss an inf made NaN).
bool same(const Tensor& a, const Tensor& b) {
  const auto x = a.to_vector<double>(), y = b.to_vector<double>();
  if (a.sizes() != b.sizes()) return false;
  for (size_t i = 0; i < x.size(); ++i)
    if (!(x[i] == y[i] || (std::isnan(x[i]) && std::isnan(y[i])))) return false;
  return true;
}

// The whole iteration as one compiled function: scale, backward, step and
// update inside. A scale so large that the gradients overflow, and a planted
// inf later, skip steps on the device where eager code skips them on the
// host: parameters, the optimizer's state, the scale and the skip count
// equal eager's after every call, for AdamW and for SGD with momentum and
// dampening (whose first step differs from the others).
TEST(GradScaler, TheWholeIterationCompiledSkipsStepsOnTheDeviceAsEagerSkipsThem) {
  for (int kind = 0; kind < 2; ++kind) {
    auto net = net_with_seed(7), eager_net = net_with_seed(7);
    const auto make = [&](Net& n) -> std::unique_ptr<optim::Optimizer> {
      if (kind == 0)
        return std::make_unique<optim::AdamW>(n.parameters(), optim::AdamWOptions{.lr = 1e-2});
      return std::make_unique<optim::SGD>(
          n.parameters(), optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .dampening = 0.5});
    };
    const auto opt = make(*net), eager_opt = make(*eager_net);
    const amp::GradScalerOptions options{.init_scale = 0x1p126, .growth_interval = 3};
    amp::GradScaler scaler(options), eager_scaler(options);
    const auto iteration = [](Net& n, optim::Optimizer& o, amp::GradScaler& s, const Tensor& x) {
      o.zero_grad();
      Tensor loss = n.forward(x).square().mean();
      s.scale(loss).backward();
      s.step(o);
      s.update();
      return loss;
    };
    const auto fast =
        compile([&](const Tensor& x) { return iteration(*net, *opt, scaler, x); }, {.name = "it"});
    Generator gen(8);
    for (int i = 0; i < 12; ++i) {
      Tensor x = randn({8, 4}, {}, &gen);
      if (i == 8) x = x * std::numeric_limits<double>::infinity();
      const std::string what = detail::str_cat(kind == 0 ? "AdamW" : "SGD", " call ", i);
      EXPECT_TRUE(same(fast(x), iteration(*eager_net, *eager_opt, eager_scaler, x))) << what;
      EXPECT_EQ(scaler.get_scale(), eager_scaler.get_scale()) << what;
      EXPECT_EQ(scaler.skipped_steps(), eager_scaler.skipped_steps()) << what;
      const auto p = net->parameters(), q = eager_net->parameters();
      for (size_t j = 0; j < p.size(); ++j)
        EXPECT_TRUE(equal(p[j], q[j])) << what << " param " << j;
    }
    // The overflowing scale backed off some steps, the planted inf one more.
    EXPECT_GE(eager_scaler.skipped_steps(), 3);
    EXPECT_EQ(fast.stats().graph_breaks, 0);
    // The second call traces again (its parameters hold gradients now, a
    // guard); that graph then serves taken steps and skipped ones.
    EXPECT_EQ(fast.stats().traces, 2);
    const StateDict a = opt->state_dict(), b = eager_opt->state_dict();
    for (const auto& [key, value] : b) EXPECT_TRUE(same(a.at(key), value)) << key;
  }
}

TEST(GradScaler, UnscaleAndStepInsideACompiledFunctionNeedUpdateInsideItToo) {
  auto net = net_with_seed(7);
  optim::SGD opt(net->parameters(), {.lr = 0.1});
  amp::GradScaler scaler;
  const auto inside = compile([&](const Tensor& x) {
    opt.zero_grad();
    Tensor loss = net->forward(x).square().mean();
    scaler.scale(loss).backward();
    scaler.step(opt);
    return loss;
  });
  (void)inside(randn({8, 4}));
  expect_error<ValueError>([&] { scaler.update(); }, "GradScaler.update",
                           "outside a compiled function after unscale_/step inside one");
  // step_unless takes one bool.
  expect_error<ValueError>([&] { opt.step_unless(zeros({})); }, "SGD.step_unless",
                           "one bool, got float32");
  expect_error<ValueError>([&] { opt.step_unless(Tensor()); }, "SGD.step_unless", "undefined");
}

}  // namespace
}  // namespace kiln
