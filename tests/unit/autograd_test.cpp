// Autograd semantics: accumulation, retain_graph, double backward, grad mode,
// hooks, in-place rules and views.
#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "kiln/autograd.h"
#include "kiln/kiln.h"
#include "unit/expect_error.h"

namespace kiln {
namespace {

using testing::expect_error_with;

Tensor vec(std::vector<double> v) { return from_vector(v); }

void expect_values(const Tensor& t, std::vector<double> expected) {
  ASSERT_TRUE(t.defined());
  auto got = t.to_vector<double>();
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], 1e-9) << "at " << i;
}

TEST(Autograd, SquareSumGivesTwiceTheInput) {
  Tensor x = vec({1, -2, 3}).requires_grad_();
  Tensor y = (x * x).sum();
  EXPECT_TRUE(y.requires_grad());
  EXPECT_FALSE(y.is_leaf());
  EXPECT_EQ(y.grad_fn()->name(), "sum");
  y.backward();
  expect_values(x.grad(), {2, -4, 6});
}

TEST(Autograd, GradientsAccumulateAcrossBackwardCalls) {
  Tensor x = vec({1, 2}).requires_grad_();
  Tensor y = (x * 3).sum();
  y.backward({}, /*retain_graph=*/true);
  y.backward();
  expect_values(x.grad(), {6, 6});
  x.set_grad({});
  EXPECT_FALSE(x.grad().defined());
}

TEST(Autograd, SecondBackwardWithoutRetainGraphNamesTheOp) {
  Tensor x = vec({1, 2}).requires_grad_();
  Tensor y = x.exp().sum();
  y.backward();
  expect_error_with<Error>([&] { y.backward(); }, {"exp", "retain_graph"});
}

TEST(Autograd, BroadcastGradientsAreSummedToTheInputShape) {
  Tensor a = ones({2, 3}, {.dtype = kFloat64}).requires_grad_();
  Tensor b = vec({1, 2, 3}).requires_grad_();
  (a * b).sum().backward();
  expect_values(b.grad(), {2, 2, 2});
  expect_values(a.grad(), {1, 2, 3, 1, 2, 3});
}

TEST(Autograd, CreateGraphAllowsDoubleBackward) {
  Tensor x = vec({2, -1}).requires_grad_();
  Tensor y = (x * x * x).sum();
  Tensor g = autograd::grad({y}, {x}, {}, {.create_graph = true})[0];
  expect_values(g, {12, 3});  // 3x^2
  EXPECT_TRUE(g.requires_grad());
  Tensor gg = autograd::grad({g.sum()}, {x})[0];
  expect_values(gg, {12, -6});  // 6x
}

TEST(Autograd, DoubleBackwardThroughSavedOutputs) {
  Tensor x = vec({0.5, -1}).requires_grad_();
  Tensor g = autograd::grad({x.exp().sum()}, {x}, {}, {.create_graph = true})[0];
  Tensor gg = autograd::grad({g.sum()}, {x})[0];
  expect_values(gg, {std::exp(0.5), std::exp(-1.0)});
}

TEST(Autograd, NoGradGuardRecordsNothing) {
  Tensor x = vec({1, 2}).requires_grad_();
  {
    NoGradGuard no_grad;
    EXPECT_FALSE(is_grad_enabled());
    Tensor y = x * 2;
    EXPECT_FALSE(y.requires_grad());
    {
      EnableGradGuard enable;
      EXPECT_TRUE((x * 2).requires_grad());
    }
  }
  EXPECT_TRUE(is_grad_enabled());
}

TEST(Autograd, InferenceTensorsCannotJoinAGraph) {
  Tensor t;
  {
    InferenceModeGuard inference;
    t = vec({1, 2}) * 2;
  }
  expect_error_with<Error>([&] { t.requires_grad_(); }, {"requires_grad_", "InferenceModeGuard"});
  Tensor w = vec({1, 1}).requires_grad_();
  expect_error_with<Error>([&] { (t * w).sum(); }, {"InferenceModeGuard"});
}

TEST(Autograd, ModulesCanBeBuiltAndRunInsideInferenceMode) {
  InferenceModeGuard inference;
  nn::Linear layer(3, 2);  // its parameters are inference tensors that require grad
  EXPECT_TRUE(layer.weight.requires_grad());
  const Tensor y = layer(ones({3}));
  EXPECT_FALSE(y.requires_grad());
  EXPECT_EQ(y.sizes(), (Shape{2}));
}

TEST(Autograd, DetachCutsTheGraphButSharesData) {
  Tensor x = vec({1, 2}).requires_grad_();
  Tensor y = x * 2;
  Tensor d = y.detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_TRUE(d.shares_storage(y));
}

TEST(Autograd, TensorHooksSeeAndReplaceGradients) {
  Tensor x = vec({1, 2}).requires_grad_();
  Tensor y = x * 3;
  std::vector<double> seen;
  y.register_hook([&](const Tensor& g) {
    seen = g.to_vector<double>();
    return g * 10;
  });
  const int64_t handle = x.register_hook([](const Tensor& g) { return g + 1; });
  y.sum().backward();
  EXPECT_EQ(seen, (std::vector<double>{1, 1}));
  expect_values(x.grad(), {31, 31});
  x.remove_hook(handle);
  x.set_grad({});
  (x * 3).sum().backward();
  expect_values(x.grad(), {3, 3});
  expect_error_with<ValueError>([&] { x.remove_hook(handle); }, {"remove_hook"});
}

TEST(Autograd, RetainGradKeepsANonLeafGradient) {
  Tensor x = vec({1, 2}).requires_grad_();
  Tensor y = x * 2;
  y.retain_grad();
  y.register_hook([](const Tensor& g) { return g * 5; });  // runs before retain_grad stores
  (y * y).sum().backward();
  expect_values(y.grad(), {20, 40});
  expect_values(x.grad(), {40, 80});
}

TEST(Autograd, UsingATensorModifiedInPlaceAfterSavingIsAnError) {
  Tensor x = vec({1, 2}).requires_grad_();
  Tensor y = sigmoid(x * 1);
  Tensor z = y.sum();
  y.mul_(2);
  expect_error_with<Error>([&] { z.backward(); }, {"sigmoid", "in-place"});
}

TEST(Autograd, InPlaceOnALeafThatRequiresGradIsAnError) {
  Tensor x = vec({1, 2}).requires_grad_();
  expect_error_with<Error>([&] { x.add_(1); }, {"add_", "leaf"});
  NoGradGuard no_grad;
  x.add_(1);  // parameter updates are fine without recording
  expect_values(x, {2, 3});
}

TEST(Autograd, InPlaceOpsOnNonLeavesAreDifferentiated) {
  Tensor x = vec({1, 2}).requires_grad_();
  Tensor y = x * 1;
  y.mul_(y);  // saves the old y: gradient 2y
  y.relu_();
  y.sum().backward();
  expect_values(x.grad(), {2, 4});
}

TEST(Autograd, InPlaceWriteThroughAViewReachesTheBase) {
  Tensor x = vec({1, 2, 3, 4}).requires_grad_();
  Tensor w = vec({10}).requires_grad_();
  Tensor base = x * 1;
  Tensor part = base.slice(0, 1, 3);
  part.mul_(w);  // base = [x0, 10 x1, 10 x2, x3]
  EXPECT_EQ(base.grad_fn()->name(), "CopySlices(mul)");
  (base * vec({1, 2, 3, 4})).sum().backward();
  expect_values(x.grad(), {1, 20, 30, 4});
  expect_values(w.grad(), {2 * 2 + 3 * 3});
}

TEST(Autograd, CopyIntoAViewDropsTheOverwrittenGradient) {
  Tensor x = vec({1, 2, 3}).requires_grad_();
  Tensor s = vec({7}).requires_grad_();
  Tensor base = x * 1;
  base.slice(0, 0, 1).copy_(s * 2);
  base.sum().backward();
  expect_values(x.grad(), {0, 1, 1});
  expect_values(s.grad(), {2});
}

TEST(Autograd, OldViewsSeeInPlaceWritesToTheirBase) {
  Tensor x = vec({1, 2}).requires_grad_();
  Tensor base = x * 1;
  Tensor v = base.view({2, 1});
  base.mul_(3);
  v.sum().backward();
  expect_values(x.grad(), {3, 3});
}

TEST(Autograd, GradReturnsWithoutAccumulating) {
  Tensor x = vec({1, 2}).requires_grad_();
  Tensor u = vec({5}).requires_grad_();
  Tensor y = (x * x).sum();
  Tensor g = autograd::grad({y}, {x}, {}, {.retain_graph = true})[0];
  expect_values(g, {2, 4});
  EXPECT_FALSE(x.grad().defined());
  expect_error_with<Error>([&] { autograd::grad({y}, {x, u}, {}, {.retain_graph = true}); },
                           {"grad", "not used"});
  auto both = autograd::grad({y}, {x, u}, {}, {.allow_unused = true});
  EXPECT_FALSE(both[1].defined());
}

// As PyTorch's: threads may run backward passes into shared leaves at once
// (each thread's graph links the leaf's accumulator, then adds to its grad).
TEST(Autograd, ThreadsBackpropagateIntoSharedLeavesAtOnce) {
  Tensor w = vec({1, 2, 3}).requires_grad_();
  constexpr int kThreads = 8, kRounds = 50;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&w, t] {
      for (int i = 0; i < kRounds; ++i) (w * static_cast<double>(t + 1)).sum().backward();
    });
  }
  for (auto& th : threads) th.join();
  // Whole numbers: every order of the additions gives the same sum.
  const double each = kRounds * kThreads * (kThreads + 1) / 2.0;
  expect_values(w.grad(), {each, each, each});
}

TEST(Autograd, BackwardOnANonScalarNeedsAGradient) {
  Tensor x = vec({1, 2}).requires_grad_();
  Tensor y = x * 2;
  expect_error_with<ShapeError>([&] { y.backward(); }, {"backward", "[2]"});
  y.backward(vec({1, 10}));
  expect_values(x.grad(), {2, 20});
  expect_error_with<Error>([&] { vec({1}).backward(); }, {"backward", "does not require grad"});
}

TEST(Autograd, BackwardIntoChosenInputsOnly) {
  Tensor a = vec({1}).requires_grad_();
  Tensor b = vec({2}).requires_grad_();
  Tensor h = a * b;
  (h * 3).sum().backward({}, std::nullopt, false, {a, h});
  expect_values(a.grad(), {6});
  EXPECT_FALSE(b.grad().defined());
  expect_values(h.grad(), {3});
}

TEST(Autograd, OnlyFloatingTensorsRequireGrad) {
  expect_error_with<DTypeError>([] { arange(0, 3).requires_grad_(); },
                                {"requires_grad_", "int64"});
  Tensor x = vec({1, 2}).requires_grad_();
  EXPECT_FALSE((x > 1).requires_grad());
  EXPECT_FALSE(argmax(x).requires_grad());
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

namespace F = kiln::nn::functional;

// Hessian-vector products through create_graph against central differences of
// the gradient: the backward rules are themselves differentiable.
void expect_hvp_matches(const std::string& what, const std::function<Tensor(const Tensor&)>& f,
                        const Shape& shape) {
  SCOPED_TRACE(what);
  Generator gen(5);
  Tensor x0 = rand(shape, {.dtype = kFloat64}, &gen) * 2 - 1;
  Tensor v = rand(shape, {.dtype = kFloat64}, &gen) * 2 - 1;
  auto gradient_at = [&](const Tensor& point, bool create) {
    Tensor x = point.detach().clone().requires_grad_();
    Tensor g = autograd::grad({f(x).sum()}, {x}, {}, {.create_graph = create})[0];
    return std::pair{x, g};
  };
  auto [x, g] = gradient_at(x0, true);
  Tensor hvp = autograd::grad({(g * v).sum()}, {x}, {}, {.allow_unused = true})[0];
  if (!hvp.defined()) hvp = zeros_like(x0);
  const double h = 1e-6;
  Tensor numeric = (gradient_at(x0 + v * h, false).second - gradient_at(x0 - v * h, false).second) / (2 * h);
  auto a = hvp.to_vector<double>(), n = numeric.to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], n[i], 1e-5 + 1e-4 * std::abs(n[i])) << i;
}

TEST(Autograd, DoubleBackwardMatchesFiniteDifferencesOfTheGradient) {
  Generator gen(11);
  const Tensor w = rand({5, 4}, {.dtype = kFloat64}, &gen) - 0.5;
  const Tensor kernel = rand({3, 2, 3, 3}, {.dtype = kFloat64}, &gen) - 0.5;
  expect_hvp_matches("tanh * sigmoid", [](const Tensor& x) { return tanh(x) * sigmoid(x); }, {7});
  expect_hvp_matches("exp / (1 + x^2)", [](const Tensor& x) { return exp(x) / (x * x + 1); }, {6});
  expect_hvp_matches("gelu", [](const Tensor& x) { return gelu(x) + gelu(x, "tanh"); }, {9});
  expect_hvp_matches("softmax cubed", [](const Tensor& x) { return pow(softmax(x, 1), 3); }, {3, 4});
  expect_hvp_matches("log_softmax weighted",
                     [](const Tensor& x) { return log_softmax(x, 0) * arange(0, 4, 1, {.dtype = kFloat64}).unsqueeze(1); }, {4, 2});
  expect_hvp_matches("matmul, squared", [&](const Tensor& x) { return square(matmul(x, w)); }, {3, 5});
  expect_hvp_matches("layer_norm", [](const Tensor& x) {
    return square(F::layer_norm(x, {4}, {}, {}, 1e-5)) * arange(0, 4, 1, {.dtype = kFloat64});
  }, {3, 4});
  expect_hvp_matches("batch_norm, training", [](const Tensor& x) {
    return pow(F::batch_norm(x, {}, {}, {}, {}, true), 3);
  }, {4, 3});
  expect_hvp_matches("conv2d, squared", [&](const Tensor& x) {
    return square(conv2d(x, kernel, {}, {.padding = {1}}));
  }, {1, 2, 4, 5});
  expect_hvp_matches("max_pool2d of a square", [](const Tensor& x) {
    return max_pool2d(square(x), {2});
  }, {1, 1, 4, 4});
  expect_hvp_matches("std and norm", [](const Tensor& x) {
    return stddev(x, {1}) * norm(x, 3, {1});
  }, {2, 5});
}

TEST(Autograd, MaxPoolRowAndIndicesPathGiveTheSameGradient) {
  Generator gen(2);
  Tensor x = rand({2, 3, 7, 6}, {.dtype = kFloat64}, &gen).requires_grad_();
  Tensor via_indices = autograd::grad({max_pool2d(x, {3}, {2}, {1}).sum()}, {x})[0];
  EXPECT_EQ(max_pool2d(x, {3}, {2}, {1}).grad_fn()->name(), "max_pool2d_with_indices");
  Tensor direct;
  {
    NoGradGuard no_grad;
    direct = max_pool2d(x, {3}, {2}, {1});
  }
  EXPECT_EQ(via_indices.sum().item<double>(), static_cast<double>(direct.numel()));
}

}  // namespace
}  // namespace kiln
