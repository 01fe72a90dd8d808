// Optimizers, schedulers and gradient clipping against PyTorch's formulas,
// recomputed here with plain doubles.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kiln/kiln.h"
#include "kiln/optim.h"
#include "unit/expect_error.h"

namespace kiln {
namespace {

using testing::expect_error;
using testing::expect_error_with;
using Values = std::vector<double>;

Tensor param(const Values& values) { return from_vector(values).requires_grad_(); }

// The gradient of sum(a_i / 2 * (p_i - t_i)^2): a quadratic with its minimum at t.
Values quadratic_grad(const Values& p) {
  static const Values a = {1.0, 0.5, 2.0}, t = {0.3, -0.7, 1.5};
  Values g(p.size());
  for (size_t i = 0; i < p.size(); ++i) g[i] = a[i % 3] * (p[i] - t[i % 3]);
  return g;
}

void set_quadratic_grad(const Tensor& p) {
  p.set_grad(from_vector(quadratic_grad(p.to_vector<double>())).to(p.dtype()));
}

void expect_close(const Values& got, const Values& expected, double tol, const char* what = "") {
  ASSERT_EQ(got.size(), expected.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], expected[i], tol * std::max(1.0, std::abs(expected[i])))
        << what << " at " << i;
}

// --- the reference formulas (torch.optim's single-tensor code paths) ------------

struct SgdReference {
  optim::SGDOptions o;
  Values buf = {};
  void step(Values& p, const Values& grad) {
    const bool first = buf.empty();
    buf.resize(p.size());
    for (size_t i = 0; i < p.size(); ++i) {
      double g = o.maximize ? -grad[i] : grad[i];
      g += o.weight_decay * p[i];
      if (o.momentum != 0) {
        buf[i] = first ? g : o.momentum * buf[i] + (1 - o.dampening) * g;
        g = o.nesterov ? g + o.momentum * buf[i] : buf[i];
      }
      p[i] -= o.lr * g;
    }
  }
};

struct AdamReference {
  optim::AdamOptions o;
  bool decoupled = false;
  int step_count = 0;
  Values m = {}, v = {}, v_max = {};
  int amsgrad_bites = 0;  // steps where v_max differed from v: amsgrad mattered
  void step(Values& p, const Values& grad) {
    m.resize(p.size()), v.resize(p.size()), v_max.resize(p.size());
    ++step_count;
    const auto [b1, b2] = o.betas;
    for (size_t i = 0; i < p.size(); ++i) {
      double g = o.maximize ? -grad[i] : grad[i];
      if (decoupled) {
        p[i] *= 1 - o.lr * o.weight_decay;
      } else {
        g += o.weight_decay * p[i];
      }
      m[i] = b1 * m[i] + (1 - b1) * g;
      v[i] = b2 * v[i] + (1 - b2) * g * g;
      v_max[i] = std::max(v_max[i], v[i]);
      if (v_max[i] != v[i]) ++amsgrad_bites;
      const double second = o.amsgrad ? v_max[i] : v[i];
      const double bc1 = 1 - std::pow(b1, step_count), bc2 = 1 - std::pow(b2, step_count);
      p[i] -= o.lr / bc1 * m[i] / (std::sqrt(second) / std::sqrt(bc2) + o.eps);
    }
  }
};

// Steps opt and the reference side by side on the quadratic and compares every step.
template <typename Reference>
void expect_trajectory(optim::Optimizer& opt, const Tensor& p, Reference& ref, int steps,
                       double tol = 1e-12) {
  Values expected = p.to_vector<double>();
  for (int s = 0; s < steps; ++s) {
    set_quadratic_grad(p);
    opt.step();
    ref.step(expected, quadratic_grad(expected));
    expect_close(p.to_vector<double>(), expected, tol, ("step " + std::to_string(s)).c_str());
  }
}

const Values kStart = {1.0, 2.0, -0.5};

// --- SGD ----------------------------------------------------------------------------

TEST(SGD, FollowsPyTorchFormulasForEveryOptionCombination) {
  const std::vector<optim::SGDOptions> configs = {
      {.lr = 0.1},
      {.lr = 0.1, .momentum = 0.9},
      {.lr = 0.05, .momentum = 0.9, .dampening = 0.3},
      {.lr = 0.1, .momentum = 0.8, .nesterov = true},
      {.lr = 0.1, .momentum = 0.5, .weight_decay = 0.2, .maximize = true},
      {.lr = 0.1, .weight_decay = 0.1, .maximize = true},
      {.lr = 0.05, .momentum = 0.7, .weight_decay = 0.3, .nesterov = true}};
  for (size_t c = 0; c < configs.size(); ++c) {
    SCOPED_TRACE("config " + std::to_string(c));
    Tensor p = param(kStart);
    optim::SGD opt({p}, configs[c]);
    SgdReference ref{configs[c]};
    expect_trajectory(opt, p, ref, 6);
  }
}

TEST(SGD, FirstMomentumStepUsesTheGradientAsBuffer) {
  // With dampening 0.5 the first step still moves by lr * grad, not lr * grad / 2.
  Tensor p = param({1.0});
  optim::SGD opt({p}, {.lr = 0.1, .momentum = 0.9, .dampening = 0.5});
  p.set_grad(from_vector(Values{2.0}));
  opt.step();
  EXPECT_DOUBLE_EQ(p.item<double>(), 1.0 - 0.1 * 2.0);
  opt.step();  // buf = 0.9 * 2 + 0.5 * 2 = 2.8
  EXPECT_DOUBLE_EQ(p.item<double>(), 0.8 - 0.1 * 2.8);
}

TEST(SGD, UpdatesParametersInPlaceAndLeavesGradientsAlone) {
  Tensor p = param(kStart);
  const TensorImpl* impl = p.impl_ptr().get();
  const void* data = p.data_ptr();
  optim::SGD opt({p}, {.lr = 0.1, .weight_decay = 0.5, .maximize = true});
  set_quadratic_grad(p);
  const Values grad = p.grad().to_vector<double>();
  opt.step();
  EXPECT_EQ(opt.param_groups()[0].params[0].impl_ptr().get(), impl);
  EXPECT_EQ(p.data_ptr(), data);
  EXPECT_NE(p.to_vector<double>(), kStart);
  EXPECT_EQ(p.grad().to_vector<double>(), grad);
  EXPECT_TRUE(p.is_leaf());
  EXPECT_TRUE(p.requires_grad());
}

TEST(SGD, SkipsParametersWithoutGradient) {
  Tensor a = param({1.0, 2.0}), b = param({3.0});
  optim::SGD opt({a, b}, {.lr = 0.1, .momentum = 0.9});
  a.set_grad(from_vector(Values{1.0, 1.0}));
  opt.step();
  EXPECT_EQ(b.to_vector<double>(), Values{3.0});
  const StateDict sd = opt.state_dict();
  EXPECT_TRUE(sd.contains("state.0.momentum_buffer"));
  EXPECT_FALSE(sd.contains("state.1.momentum_buffer"));
}

// --- Adam and AdamW ------------------------------------------------------------------

TEST(Adam, FollowsPyTorchFormulasForEveryOptionCombination) {
  const std::vector<optim::AdamOptions> configs = {
      {.lr = 0.1},
      {.lr = 0.05, .betas = {0.8, 0.9}, .eps = 1e-3},
      {.lr = 0.1, .weight_decay = 0.3},
      {.lr = 0.1, .betas = {0.5, 0.9}, .amsgrad = true},
      {.lr = 0.1, .weight_decay = 0.1, .maximize = true},
      {.lr = 0.02, .betas = {0.0, 0.5}, .eps = 0.1, .weight_decay = 0.2, .amsgrad = true}};
  for (size_t c = 0; c < configs.size(); ++c) {
    SCOPED_TRACE("config " + std::to_string(c));
    Tensor p = param(kStart);
    optim::Adam opt({p}, configs[c]);
    AdamReference ref{configs[c]};
    expect_trajectory(opt, p, ref, 8);
    if (configs[c].amsgrad) {
      EXPECT_GT(ref.amsgrad_bites, 0) << "max_exp_avg_sq never differed from exp_avg_sq";
    }
  }
}

TEST(AdamW, DecaysParametersDecoupledFromTheGradient) {
  const std::vector<optim::AdamWOptions> configs = {
      {.lr = 0.1},  // the default weight_decay, 0.01
      {.lr = 0.1, .weight_decay = 0.5},
      {.lr = 0.05, .betas = {0.5, 0.9}, .weight_decay = 0.2, .amsgrad = true, .maximize = true}};
  for (size_t c = 0; c < configs.size(); ++c) {
    SCOPED_TRACE("config " + std::to_string(c));
    Tensor p = param(kStart);
    optim::AdamW opt({p}, configs[c]);
    const auto& o = configs[c];
    AdamReference ref{{o.lr, o.betas, o.eps, o.weight_decay, o.amsgrad, o.maximize}, true};
    expect_trajectory(opt, p, ref, 8);
  }
  EXPECT_EQ(optim::AdamWOptions{}.weight_decay, 0.01);
  EXPECT_EQ(optim::AdamOptions{}.weight_decay, 0.0);
}

TEST(Adam, WorksOnFloat32Parameters) {
  Tensor p = from_vector(std::vector<float>{1.0f, 2.0f, -0.5f}).requires_grad_();
  optim::Adam opt({p}, {.lr = 0.1, .weight_decay = 0.1, .amsgrad = true});
  AdamReference ref{{.lr = 0.1, .weight_decay = 0.1, .amsgrad = true}};
  expect_trajectory(opt, p, ref, 5, 1e-5);
  EXPECT_EQ(opt.state_dict().at("state.0.exp_avg").dtype(), kFloat32);
}

// --- parameter groups and zero_grad --------------------------------------------------

TEST(Optimizer, GroupsTakeTheirOwnOptionsAndDefaultsForTheRest) {
  Tensor a = param(kStart), b = param(kStart);
  optim::SGD opt({{.params = {a}}, {.params = {b}, .options = {{"lr", 0.01}, {"nesterov", 1}}}},
                 {.lr = 0.1, .momentum = 0.9});
  EXPECT_EQ(opt.lr(0), 0.1);
  EXPECT_EQ(opt.lr(1), 0.01);
  EXPECT_EQ(opt.option(1, "momentum"), 0.9);
  EXPECT_EQ(opt.option(1, "nesterov"), 1);
  EXPECT_EQ(opt.option(0, "nesterov"), 0);
  SgdReference ref_a{{.lr = 0.1, .momentum = 0.9}};
  SgdReference ref_b{{.lr = 0.01, .momentum = 0.9, .nesterov = true}};
  Values ea = kStart, eb = kStart;
  for (int s = 0; s < 4; ++s) {
    set_quadratic_grad(a);
    set_quadratic_grad(b);
    opt.step();
    ref_a.step(ea, quadratic_grad(ea));
    ref_b.step(eb, quadratic_grad(eb));
  }
  expect_close(a.to_vector<double>(), ea, 1e-12, "group 0");
  expect_close(b.to_vector<double>(), eb, 1e-12, "group 1");
}

TEST(Optimizer, AddParamGroupAppendsAGroupWithDefaults) {
  Tensor a = param({1.0}), b = param({2.0});
  optim::Adam opt({a}, {.lr = 0.5});
  opt.add_param_group({.params = {b}, .options = {{"eps", 0.25}}});
  ASSERT_EQ(opt.param_groups().size(), 2u);
  EXPECT_EQ(opt.lr(1), 0.5);
  EXPECT_EQ(opt.option(1, "eps"), 0.25);
  EXPECT_EQ(opt.option(0, "eps"), 1e-8);
  opt.set_lr(1, 0.125);
  EXPECT_EQ(opt.lr(1), 0.125);
  EXPECT_EQ(opt.lr(0), 0.5);
}

TEST(Optimizer, ZeroGradDropsOrZeroesGradients) {
  Tensor a = param({1.0, 2.0});
  optim::SGD opt({a});
  a.set_grad(from_vector(Values{3.0, 4.0}));
  const void* storage = a.grad().data_ptr();
  opt.zero_grad(/*set_to_none=*/false);
  ASSERT_TRUE(a.grad().defined());
  EXPECT_EQ(a.grad().to_vector<double>(), (Values{0.0, 0.0}));
  EXPECT_EQ(a.grad().data_ptr(), storage);
  opt.zero_grad();
  EXPECT_FALSE(a.grad().defined());
  opt.zero_grad(false);  // no gradient: nothing to do
  EXPECT_FALSE(a.grad().defined());
}

TEST(Optimizer, ZeroGradDetachesAGradientThatHasHistory) {
  Tensor a = param({1.0, 2.0});
  optim::SGD opt({a});
  (a * a).sum().backward({}, std::nullopt, /*create_graph=*/true);
  ASSERT_TRUE(a.grad().requires_grad());
  opt.zero_grad(/*set_to_none=*/false);
  EXPECT_FALSE(a.grad().requires_grad());
  EXPECT_EQ(a.grad().to_vector<double>(), (Values{0.0, 0.0}));
}

// --- state dicts -------------------------------------------------------------------

// What a safetensors round trip gives: fresh contiguous copies of every tensor.
StateDict deep_copy(const StateDict& sd) {
  StateDict copy;
  for (const auto& [key, tensor] : sd) {
    EXPECT_TRUE(tensor.is_contiguous()) << key;
    copy.set(key, tensor.clone());
  }
  return copy;
}

// Runs 6 steps straight, and 3 steps + save + load into a fresh optimizer + 3
// steps; both must give the same bits.
template <typename Make>
void expect_resume_matches(Make make, const Tensor& start) {
  Tensor straight = start.clone().requires_grad_();
  auto opt = make(straight, false);
  for (int s = 0; s < 6; ++s) {
    set_quadratic_grad(straight);
    opt->step();
  }

  Tensor first = start.clone().requires_grad_();
  auto before = make(first, false);
  for (int s = 0; s < 3; ++s) {
    set_quadratic_grad(first);
    before->step();
  }
  const StateDict saved = deep_copy(before->state_dict());

  Tensor resumed = first.detach().clone().requires_grad_();
  auto after = make(resumed, true);  // other hyperparameters: the load must restore them
  after->load_state_dict(saved);
  for (int s = 0; s < 3; ++s) {
    set_quadratic_grad(resumed);
    after->step();
  }
  EXPECT_EQ(resumed.to_vector<double>(), straight.to_vector<double>());
}

TEST(Optimizer, StateDictRoundTripResumesBitForBit) {
  const Tensor start64 = from_vector(kStart);
  const Tensor start32 = start64.to(kFloat32);
  using Ptr = std::unique_ptr<optim::Optimizer>;
  expect_resume_matches(
      [](const Tensor& p, bool other) -> Ptr {
        return std::make_unique<optim::SGD>(
            std::vector<Tensor>{p},
            optim::SGDOptions{
                .lr = other ? 1.0 : 0.1, .momentum = other ? 0.1 : 0.9, .nesterov = !other});
      },
      start64);
  expect_resume_matches(
      [](const Tensor& p, bool other) -> Ptr {
        return std::make_unique<optim::Adam>(
            std::vector<Tensor>{p},
            optim::AdamOptions{.lr = 0.1, .betas = {other ? 0.5 : 0.8, 0.9}, .amsgrad = true});
      },
      start32);
  expect_resume_matches(
      [](const Tensor& p, bool other) -> Ptr {
        return std::make_unique<optim::AdamW>(
            std::vector<Tensor>{p},
            optim::AdamWOptions{.lr = 0.1, .weight_decay = other ? 0 : 0.3});
      },
      start64);
}

TEST(Optimizer, StateDictHasPyTorchsLayout) {
  Tensor a = param({1.0, 2.0}), b = param({3.0}), c = from_vector(Values{4.0, 5.0, 6.0});
  c.requires_grad_();
  optim::Adam opt({{.params = {a, b}}, {.params = {c}, .options = {{"lr", 0.5}}}},
                  {.betas = {0.8, 0.9}});
  a.set_grad(from_vector(Values{1.0, -1.0}));
  c.set_grad(from_vector(Values{1.0, 2.0, 3.0}));
  opt.step();
  opt.step();
  const StateDict sd = opt.state_dict();
  const std::vector<std::string> expected = {"state.0.step",
                                             "state.0.exp_avg",
                                             "state.0.exp_avg_sq",
                                             "state.2.step",
                                             "state.2.exp_avg",
                                             "state.2.exp_avg_sq",
                                             "param_groups.0.lr",
                                             "param_groups.0.betas.0",
                                             "param_groups.0.betas.1",
                                             "param_groups.0.eps",
                                             "param_groups.0.weight_decay",
                                             "param_groups.0.amsgrad",
                                             "param_groups.0.maximize",
                                             "param_groups.0.params",
                                             "param_groups.1.lr",
                                             "param_groups.1.betas.0",
                                             "param_groups.1.betas.1",
                                             "param_groups.1.eps",
                                             "param_groups.1.weight_decay",
                                             "param_groups.1.amsgrad",
                                             "param_groups.1.maximize",
                                             "param_groups.1.params"};
  EXPECT_EQ(sd.keys(), expected);
  const Tensor& step = sd.at("state.2.step");
  EXPECT_EQ(step.dim(), 0);
  EXPECT_EQ(step.dtype(), kFloat32);
  EXPECT_EQ(step.item<double>(), 2);
  EXPECT_EQ(sd.at("state.2.exp_avg").sizes(), (Shape{3}));
  const Tensor& lr = sd.at("param_groups.1.lr");
  EXPECT_EQ(lr.dim(), 0);
  EXPECT_EQ(lr.dtype(), kFloat64);
  EXPECT_EQ(lr.item<double>(), 0.5);
  EXPECT_EQ(sd.at("param_groups.0.betas.0").item<double>(), 0.8);
  EXPECT_EQ(sd.at("param_groups.0.betas.1").item<double>(), 0.9);
  EXPECT_EQ(sd.at("param_groups.0.params").dtype(), kInt64);
  EXPECT_EQ(sd.at("param_groups.0.params").to_vector<int64_t>(), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(sd.at("param_groups.1.params").to_vector<int64_t>(), (std::vector<int64_t>{2}));
}

TEST(Optimizer, LoadedStateIsACopy) {
  Tensor a = param({1.0});
  optim::SGD opt({a}, {.lr = 0.1, .momentum = 0.9});
  a.set_grad(from_vector(Values{1.0}));
  opt.step();
  StateDict sd = opt.state_dict();
  Tensor b = param({1.0});
  optim::SGD other({b}, {.lr = 0.1, .momentum = 0.9});
  other.load_state_dict(sd);
  Tensor buf = sd.at("state.0.momentum_buffer");
  buf.fill_(100.0);
  b.set_grad(from_vector(Values{0.0}));
  other.step();  // buf = 0.9 * 1 + 0 -> b = 1 - 0.1 * 0.9
  EXPECT_DOUBLE_EQ(b.item<double>(), 1.0 - 0.09);
}

TEST(Optimizer, LoadStateDictRejectsMismatchesAndNamesTheKey) {
  Tensor a = param({1.0, 2.0}), b = param({3.0});
  optim::Adam two_groups({{.params = {a}}, {.params = {b}}});
  a.set_grad(from_vector(Values{1.0, 1.0}));
  two_groups.step();
  const StateDict sd = two_groups.state_dict();

  Tensor x = param({1.0, 2.0});
  optim::Adam one_group({x}, {.lr = 0.25});
  expect_error_with<ValueError>([&] { one_group.load_state_dict(sd); },
                                {"Adam.load_state_dict", "2 parameter groups", "has 1"});

  Tensor y = param({5.0});
  optim::Adam more_params({{.params = {x, y}}, {.params = {}}});
  expect_error_with<ValueError>([&] { more_params.load_state_dict(sd); },
                                {"param_groups.0.params", "lists 1", "has 2"});

  Tensor wrong_shape = param({1.0, 2.0, 3.0}), z = param({0.0});
  optim::Adam shapes({{.params = {wrong_shape}}, {.params = {z}}});
  expect_error_with<ShapeError>([&] { shapes.load_state_dict(sd); },
                                {"state.0.exp_avg", "[2]", "[3]"});

  StateDict missing = sd;
  missing.erase("param_groups.1.eps");
  optim::Adam fine({{.params = {x}}, {.params = {y}}}, {.lr = 0.25});
  expect_error<ValueError>([&] { fine.load_state_dict(missing); }, "Adam.load_state_dict",
                           "param_groups.1.eps");
  StateDict no_state = sd;
  no_state.erase("state.0.exp_avg_sq");
  expect_error<ValueError>([&] { fine.load_state_dict(no_state); }, "state.0.exp_avg_sq");
  StateDict unknown = sd;
  unknown.set("velocity", zeros({1}));
  expect_error<ValueError>([&] { fine.load_state_dict(unknown); }, "velocity");
  StateDict orphan = sd;
  orphan.set("state.7.exp_avg", zeros({2}));
  expect_error<ValueError>([&] { fine.load_state_dict(orphan); }, "state.7.exp_avg");
  StateDict bad_value = sd;
  bad_value.set("param_groups.0.betas.1", scalar_tensor(1.5, {.dtype = kFloat64}));
  expect_error<ValueError>([&] { fine.load_state_dict(bad_value); }, "Adam", "1.5");

  optim::SGD sgd({{.params = {x}}, {.params = {y}}});
  expect_error<ValueError>([&] { sgd.load_state_dict(sd); }, "SGD.load_state_dict",
                           "param_groups.0.betas.0");

  // Nothing changed by the failed loads.
  EXPECT_EQ(fine.lr(0), 0.25);
  EXPECT_TRUE(fine.state_dict().find("state.0.step") == nullptr);
}

// --- argument errors -------------------------------------------------------------------

TEST(Optimizer, RejectsInvalidHyperparametersNamingTheValue) {
  Tensor p = param({1.0});
  expect_error<ValueError>([&] { optim::SGD({p}, {.lr = -0.5}); }, "SGD", "-0.5");
  expect_error<ValueError>([&] { optim::SGD({p}, {.momentum = -0.25}); }, "SGD", "-0.25");
  expect_error<ValueError>([&] { optim::SGD({p}, {.weight_decay = -2}); }, "SGD", "-2");
  expect_error<ValueError>([&] { optim::SGD({p}, {.nesterov = true}); }, "SGD", "nesterov");
  expect_error<ValueError>(
      [&] { optim::SGD({p}, {.momentum = 0.9, .dampening = 0.1, .nesterov = true}); }, "SGD",
      "dampening 0.1");
  expect_error<ValueError>([&] { optim::Adam({p}, {.lr = -1e-3}); }, "Adam", "-0.001");
  expect_error<ValueError>([&] { optim::Adam({p}, {.betas = {1.0, 0.9}}); }, "Adam", "beta1 1");
  expect_error<ValueError>([&] { optim::Adam({p}, {.betas = {0.9, -0.1}}); }, "Adam", "beta2 -0.1");
  expect_error<ValueError>([&] { optim::Adam({p}, {.eps = -1}); }, "Adam", "eps -1");
  expect_error<ValueError>([&] { optim::AdamW({p}, {.weight_decay = -0.01}); }, "AdamW", "-0.01");
  expect_error<ValueError>(
      [&] {
        optim::SGD({{.params = {p}, .options = {{"lr", -3}}}});
      },
      "SGD", "-3");
  expect_error<ValueError>(
      [&] {
        optim::SGD({{.params = {p}, .options = {{"lrr", 1}}}});
      },
      "SGD", "'lrr'");
  expect_error<ValueError>(
      [&] {
        optim::SGD({{.params = {p}, .options = {{"maximize", 2}}}});
      },
      "SGD", "maximize");
  optim::SGD opt({p});
  expect_error<ValueError>([&] { opt.set_lr(0, -1); }, "SGD", "-1");
  expect_error<ValueError>([&] { opt.set_option(0, "betas.0", 0.5); }, "SGD", "betas.0");
  expect_error<IndexError>([&] { opt.lr(3); }, "SGD.lr", "group 3");
  EXPECT_EQ(opt.lr(0), 1e-3);  // PyTorch's default since 2.2
}

TEST(Optimizer, RejectsParametersItCannotOptimize) {
  Tensor p = param({1.0});
  expect_error<ValueError>([&] { optim::SGD(std::vector<Tensor>{}); }, "SGD", "empty");
  expect_error<DTypeError>([&] { optim::SGD({from_vector(std::vector<int64_t>{1})}); }, "SGD",
                           "int64");
  expect_error<ValueError>([&] { optim::Adam({p * 2}); }, "Adam", "not a leaf");
  expect_error<ValueError>([&] { optim::Adam({from_vector(Values{1.0})}); }, "Adam",
                           "require grad");
  expect_error<ValueError>(
      [&] {
        optim::SGD({{.params = {p}}, {.params = {p}}});
      },
      "SGD", "parameter 0 of group 0");
  optim::SGD opt({p});
  expect_error<ValueError>([&] { opt.add_param_group({.params = {p}}); }, "SGD",
                           "parameter 0 of group 1");
  EXPECT_EQ(opt.param_groups().size(), 1u);
}

// --- schedulers -----------------------------------------------------------------------

// Two groups, lr 0.1 and 0.02.
struct TwoGroups {
  Tensor a = param({1.0}), b = param({2.0});
  optim::SGD opt{{{.params = {a}}, {.params = {b}, .options = {{"lr", 0.02}}}}, {.lr = 0.1}};
};

// get_last_lr() and the optimizer's lr, now and after each step, against expected[epoch].
void expect_lrs(optim::LRScheduler& sched, const std::vector<Values>& expected) {
  for (size_t epoch = 0; epoch < expected.size(); ++epoch) {
    if (epoch > 0) sched.step();
    SCOPED_TRACE("epoch " + std::to_string(epoch));
    EXPECT_EQ(sched.last_epoch(), static_cast<int64_t>(epoch));
    expect_close(sched.get_last_lr(), expected[epoch], 1e-14, "get_last_lr");
    expect_close({sched.optimizer().lr(0), sched.optimizer().lr(1)}, expected[epoch], 1e-14,
                 "optimizer lr");
  }
}

TEST(LRScheduler, StepLRMultipliesByGammaEveryStepSizeEpochs) {
  TwoGroups t;
  optim::StepLR sched(t.opt, {.step_size = 2, .gamma = 0.5});
  expect_lrs(sched, {{0.1, 0.02},
                     {0.1, 0.02},
                     {0.05, 0.01},
                     {0.05, 0.01},
                     {0.025, 0.005},
                     {0.025, 0.005},
                     {0.0125, 0.0025}});
}

TEST(LRScheduler, CosineAnnealingFollowsTheClosedFormAndRisesAfterTMax) {
  TwoGroups t;
  optim::CosineAnnealingLR sched(t.opt, {.t_max = 4, .eta_min = 0.01});
  expect_lrs(sched, {{0.1, 0.02},
                     {0.08681980515339464, 0.01853553390593274},
                     {0.055, 0.015},
                     {0.023180194846605363, 0.011464466094067262},
                     {0.01, 0.01},
                     {0.023180194846605356, 0.011464466094067262},
                     {0.055, 0.015}});
}

TEST(LRScheduler, LinearLRAppliesTheStartFactorAtConstruction) {
  TwoGroups t;
  optim::LinearLR sched(t.opt, {.start_factor = 0.25, .end_factor = 1.0, .total_iters = 4});
  EXPECT_EQ(t.opt.option(0, "initial_lr"), 0.1);
  EXPECT_EQ(t.opt.option(1, "initial_lr"), 0.02);
  expect_lrs(sched, {{0.025, 0.005},
                     {0.04375, 0.00875},
                     {0.0625, 0.0125},
                     {0.08125, 0.01625},
                     {0.1, 0.02},
                     {0.1, 0.02}});
  TwoGroups d;
  optim::LinearLR decay(d.opt, {.start_factor = 1.0, .end_factor = 0.5, .total_iters = 2});
  expect_lrs(decay, {{0.1, 0.02}, {0.075, 0.015}, {0.05, 0.01}, {0.05, 0.01}});
}

TEST(LRScheduler, SequentialLRWarmsUpThenAnneals) {
  TwoGroups t;
  optim::LinearLR warmup(t.opt, {.start_factor = 0.5, .total_iters = 2});
  optim::CosineAnnealingLR cosine(t.opt, {.t_max = 4});
  EXPECT_EQ(t.opt.lr(0), 0.1);  // cosine's initial step wrote base_lr
  optim::SequentialLR sched(t.opt, {warmup, cosine}, {2});
  EXPECT_EQ(warmup.last_epoch(), 0);
  EXPECT_EQ(cosine.last_epoch(), -1);
  expect_lrs(sched, {{0.05, 0.01},
                     {0.075, 0.015},
                     {0.1, 0.02},
                     {0.08535533905932738, 0.017071067811865476},
                     {0.05, 0.01},
                     {0.014644660940672627, 0.0029289321881345253},
                     {0.0, 0.0}});
  EXPECT_EQ(warmup.last_epoch(), 1);
  EXPECT_EQ(cosine.last_epoch(), 4);
}

TEST(LRScheduler, StateDictRoundTripContinuesTheSchedule) {
  TwoGroups t;
  optim::LinearLR warmup(t.opt, {.start_factor = 0.5, .total_iters = 2});
  optim::CosineAnnealingLR cosine(t.opt, {.t_max = 4});
  optim::SequentialLR sched(t.opt, {warmup, cosine}, {2});
  for (int i = 0; i < 3; ++i) sched.step();
  const StateDict saved = sched.state_dict();
  EXPECT_TRUE(saved.contains("schedulers.1.last_epoch"));
  EXPECT_EQ(saved.at("last_epoch").item<int64_t>(), 3);
  const StateDict opt_saved = t.opt.state_dict();

  TwoGroups u;
  optim::LinearLR warmup2(u.opt, {.start_factor = 0.5, .total_iters = 2});
  optim::CosineAnnealingLR cosine2(u.opt, {.t_max = 4});
  optim::SequentialLR resumed(u.opt, {warmup2, cosine2}, {2});
  u.opt.load_state_dict(opt_saved);
  resumed.load_state_dict(saved);
  EXPECT_EQ(resumed.get_last_lr(), sched.get_last_lr());
  EXPECT_EQ(cosine2.last_epoch(), 1);
  for (int i = 0; i < 3; ++i) {
    sched.step();
    resumed.step();
    EXPECT_EQ(resumed.get_last_lr(), sched.get_last_lr());
    EXPECT_EQ(u.opt.lr(1), t.opt.lr(1));
  }
}

TEST(LRScheduler, RejectsInvalidArguments) {
  TwoGroups t;
  expect_error<ValueError>([&] { optim::StepLR(t.opt, {.step_size = 0}); }, "StepLR", "0");
  expect_error<ValueError>([&] { optim::CosineAnnealingLR(t.opt, {}); }, "CosineAnnealingLR",
                           "t_max");
  expect_error<ValueError>([&] { optim::LinearLR(t.opt, {.start_factor = 0}); }, "LinearLR",
                           "start_factor");
  expect_error<ValueError>([&] { optim::LinearLR(t.opt, {.end_factor = 1.5}); }, "LinearLR", "1.5");
  optim::StepLR a(t.opt, {.step_size = 3});
  optim::StepLR b(t.opt, {.step_size = 5});
  expect_error<ValueError>(
      [&] {
        optim::SequentialLR(t.opt, {a, b}, {});
      },
      "SequentialLR", "2 schedulers need 1 milestones, got 0");
  expect_error<ValueError>(
      [&] {
        optim::SequentialLR(t.opt, {a, b, b}, {4, 4});
      },
      "SequentialLR", "[4, 4]");
  optim::SequentialLR inner(t.opt, {a}, {});
  expect_error<ValueError>(
      [&] {
        optim::SequentialLR(t.opt, {a, inner}, {2});
      },
      "SequentialLR", "scheduler 1 is a SequentialLR");
  TwoGroups other;
  expect_error<ValueError>([&] { optim::SequentialLR(other.opt, {a}, {}); }, "SequentialLR",
                           "another optimizer");

  StateDict sd = a.state_dict();
  sd.set("base_lrs", from_vector(Values{0.1}));
  expect_error_with<ValueError>([&] { a.load_state_dict(sd); },
                                {"StepLR.load_state_dict", "base_lrs", "[1]", "[2]"});
  sd.erase("base_lrs");
  expect_error<ValueError>([&] { a.load_state_dict(sd); }, "StepLR", "base_lrs");
  EXPECT_EQ(a.base_lrs(), (Values{0.1, 0.02}));
}

TEST(LRScheduler, RejectsAnOptimizerThatGainedGroups) {
  TwoGroups t;
  optim::StepLR sched(t.opt, {.step_size = 1});
  t.opt.add_param_group({.params = {param({0.0})}});
  expect_error<ValueError>([&] { sched.step(); }, "StepLR", "3 parameter groups");
  EXPECT_EQ(sched.last_epoch(), 0);
}

// --- gradient clipping ---------------------------------------------------------------------

TEST(ClipGradNorm, ScalesAllGradientsByTheTotalTwoNorm) {
  Tensor a = param({0.0, 0.0}), b = param({0.0}), c = param({0.0});
  a.set_grad(from_vector(Values{3.0, 4.0}));
  b.set_grad(from_vector(Values{12.0}));
  const Tensor total = optim::clip_grad_norm_({a, b, c}, 6.5);
  EXPECT_EQ(total.dim(), 0);
  EXPECT_EQ(total.dtype(), a.grad().dtype());
  EXPECT_DOUBLE_EQ(total.item<double>(), 13.0);
  const double coef = 6.5 / (13.0 + 1e-6);
  expect_close(a.grad().to_vector<double>(), {3 * coef, 4 * coef}, 1e-15);
  expect_close(b.grad().to_vector<double>(), {12 * coef}, 1e-15);
  EXPECT_FALSE(c.grad().defined());
}

TEST(ClipGradNorm, SupportsInfinityAndOtherNorms) {
  Tensor a = param({0.0, 0.0}), b = param({0.0});
  a.set_grad(from_vector(Values{3.0, -4.0}));
  b.set_grad(from_vector(Values{2.0}));
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_DOUBLE_EQ(optim::clip_grad_norm_({a, b}, 2.0, inf).item<double>(), 4.0);
  const double coef = 2.0 / (4.0 + 1e-6);
  expect_close(a.grad().to_vector<double>(), {3 * coef, -4 * coef}, 1e-15);
  expect_close(b.grad().to_vector<double>(), {2 * coef}, 1e-15);
  EXPECT_NEAR(optim::clip_grad_norm_({a, b}, 100.0, 1.0).item<double>(), 9 * coef, 1e-12);
}

TEST(ClipGradNorm, LeavesGradientsBelowTheMaxAlone) {
  Tensor a = param({0.0, 0.0});
  a.set_grad(from_vector(Values{3.0, 4.0}));
  EXPECT_DOUBLE_EQ(optim::clip_grad_norm_({a}, 5.0).item<double>(), 5.0);  // coef below 1: scaled
  EXPECT_LT(a.grad().to_vector<double>()[0], 3.0);
  a.set_grad(from_vector(Values{3.0, 4.0}));
  EXPECT_DOUBLE_EQ(optim::clip_grad_norm_({a}, 20.0).item<double>(), 5.0);
  EXPECT_EQ(a.grad().to_vector<double>(), (Values{3.0, 4.0}));
  EXPECT_EQ(optim::clip_grad_norm_({param({1.0})}, 1.0).item<double>(), 0.0);  // no gradients
}

// Gradients of two dtypes: each norm in its own, the total in both promoted,
// and each gradient scaled in its own dtype (as PyTorch).
TEST(ClipGradNorm, MixedDtypesPromoteTheTotal) {
  Tensor a = from_vector(Values{0.0, 0.0}).to(kFloat32).requires_grad_();
  Tensor b = param({0.0});
  a.set_grad(from_vector(Values{3.0, 4.0}).to(kFloat32));
  b.set_grad(from_vector(Values{12.0}));
  const Tensor total = optim::clip_grad_norm_({a, b}, 6.5);
  EXPECT_EQ(total.dtype(), kFloat64);
  EXPECT_DOUBLE_EQ(total.item<double>(), 13.0);
  EXPECT_EQ(a.grad().dtype(), kFloat32);
  const double coef = 6.5 / (13.0 + 1e-6);
  expect_close(a.grad().to_vector<double>(), {3 * coef, 4 * coef}, 1e-6);
  expect_close(b.grad().to_vector<double>(), {12 * coef}, 1e-15);
}

TEST(ClipGradNorm, ReportsNonFiniteNormsWhenAsked) {
  Tensor a = param({0.0, 0.0});
  a.set_grad(from_vector(Values{std::numeric_limits<double>::infinity(), 1.0}));
  expect_error<ValueError>([&] { optim::clip_grad_norm_({a}, 1.0, 2.0, true); }, "clip_grad_norm_",
                           "inf");
  EXPECT_TRUE(std::isinf(optim::clip_grad_norm_({a}, 1.0).item<double>()));
  expect_error<ValueError>([&] { optim::clip_grad_norm_({a}, -1.0); }, "clip_grad_norm_", "-1");
}

TEST(ClipGradValue, ClampsEveryGradient) {
  Tensor a = param({0.0, 0.0, 0.0});
  a.set_grad(from_vector(Values{-3.0, 0.5, 2.0}));
  optim::clip_grad_value_({a}, 1.0);
  EXPECT_EQ(a.grad().to_vector<double>(), (Values{-1.0, 0.5, 1.0}));
  expect_error<ValueError>([&] { optim::clip_grad_value_({a}, -1.0); }, "clip_grad_value_", "-1");
}

// --- end to end ------------------------------------------------------------------------------

// mean((X w - y)^2) with y = X w*, so the minimum is w* with loss 0.
double train_least_squares(optim::Optimizer& opt, const Tensor& w, int steps) {
  const Tensor x = from_vector(Values{1, 2, 0.5, -1, 3, 1, -2, 0.5}, Shape{4, 2});
  const Tensor y = matmul(x, from_vector(Values{0.7, -1.3}, Shape{2, 1}));
  double loss_value = 0;
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    Tensor loss = (matmul(x, w) - y).square().mean();
    loss.backward();
    loss_value = loss.item<double>();
    opt.step();
  }
  return loss_value;
}

TEST(Optimizer, SGDAndAdamMinimizeALeastSquaresLoss) {
  Tensor w = zeros({2, 1}, {.dtype = kFloat64}).requires_grad_();
  optim::SGD sgd({w}, {.lr = 0.05, .momentum = 0.9});
  EXPECT_LT(train_least_squares(sgd, w, 300), 1e-10);
  expect_close(w.to_vector<double>(), {0.7, -1.3}, 1e-5, "SGD");

  Tensor v = zeros({2, 1}, {.dtype = kFloat64}).requires_grad_();
  optim::Adam adam({v}, {.lr = 0.05});
  optim::CosineAnnealingLR sched(adam, {.t_max = 400});
  double loss = 0;
  for (int epoch = 0; epoch < 400; ++epoch) {
    loss = train_least_squares(adam, v, 1);
    sched.step();
  }
  EXPECT_LT(loss, 1e-6);
  expect_close(v.to_vector<double>(), {0.7, -1.3}, 1e-3, "Adam");
}

}  // namespace
}  // namespace kiln
