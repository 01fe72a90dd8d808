// MultiheadAttention against projections, per-head softmax(QK^T / sqrt(d)) V and
// the output projection written out in plain double loops.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "expect_error.h"
#include "kiln/autograd.h"
#include "kiln/cuda.h"
#include "kiln/nn/attention.h"
#include "kiln/ops/factory.h"
#include "kiln/ops/nn.h"
#include "kiln/ops/pointwise.h"
#include "kiln/ops/shape.h"
#include "ops/dispatch.h"

namespace kiln {
namespace {

using Values = std::vector<double>;
constexpr double kInf = std::numeric_limits<double>::infinity();

Values values(const Tensor& t) { return t.to(kFloat64).to_vector<double>(); }

std::vector<std::pair<std::string, Shape>> names_and_shapes(const nn::Module& module) {
  std::vector<std::pair<std::string, Shape>> out;
  for (const auto& [n, p] : module.named_parameters()) out.emplace_back(n, p.sizes());
  return out;
}

void expect_near(const Values& got, const Values& want, double tol = 1e-5) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "at " << i;
}

// The shapes of a reference call, sequence-first: query [L, N, E], key [S, N, kdim].
struct Sizes {
  int64_t L, S, N, E, H, kdim, vdim;
};

struct Reference {
  Values output;   // [L, N, E]
  Values weights;  // [N, H, L, S], per head
};

// y [T, N, out] = x [T, N, in] W^T + b with W's rows from w_first and b's from b_first.
Values project(const Values& x, const Values& w, const Values& b, int64_t T, int64_t N, int64_t in,
               int64_t out, int64_t w_first, int64_t b_first) {
  Values y(static_cast<size_t>(T * N * out));
  for (int64_t t = 0; t < T * N; ++t) {
    for (int64_t o = 0; o < out; ++o) {
      double s = b.empty() ? 0 : b[static_cast<size_t>(b_first + o)];
      for (int64_t i = 0; i < in; ++i)
        s += w[static_cast<size_t>((w_first + o) * in + i)] * x[static_cast<size_t>(t * in + i)];
      y[static_cast<size_t>(t * out + o)] = s;
    }
  }
  return y;
}

// mask(n, h, l, s) is the additive mask of that score.
template <typename Mask>
Reference reference(const nn::MultiheadAttention& m, const Sizes& z, const Values& q_in,
                    const Values& k_in, const Values& v_in, Mask mask) {
  const bool packed = m.in_proj_weight.defined();
  const Values wq = values(packed ? m.in_proj_weight : m.q_proj_weight);
  const Values wk = packed ? wq : values(m.k_proj_weight);
  const Values wv = packed ? wq : values(m.v_proj_weight);
  const Values b = m.in_proj_bias.defined() ? values(m.in_proj_bias) : Values();
  const int64_t E = z.E, d = E / z.H;
  // in_proj_bias holds the q, k, v biases at 0, E and 2E even when the weights are separate.
  const Values q = project(q_in, wq, b, z.L, z.N, E, E, 0, 0);
  const Values k = project(k_in, wk, b, z.S, z.N, z.kdim, E, packed ? E : 0, E);
  const Values v = project(v_in, wv, b, z.S, z.N, z.vdim, E, packed ? 2 * E : 0, 2 * E);
  auto at = [&](const Values& x, int64_t t, int64_t n, int64_t j) {
    return x[static_cast<size_t>((t * z.N + n) * E + j)];
  };
  Values heads(static_cast<size_t>(z.L * z.N * E));
  Values weights(static_cast<size_t>(z.N * z.H * z.L * z.S));
  for (int64_t n = 0; n < z.N; ++n) {
    for (int64_t h = 0; h < z.H; ++h) {
      for (int64_t l = 0; l < z.L; ++l) {
        Values p(static_cast<size_t>(z.S));
        double top = -kInf, total = 0;
        for (int64_t s = 0; s < z.S; ++s) {
          double dot = 0;
          for (int64_t j = 0; j < d; ++j) dot += at(q, l, n, h * d + j) * at(k, s, n, h * d + j);
          p[static_cast<size_t>(s)] = dot / std::sqrt(static_cast<double>(d)) + mask(n, h, l, s);
          top = std::max(top, p[static_cast<size_t>(s)]);
        }
        for (auto& x : p) total += (x = std::exp(x - top));
        for (int64_t s = 0; s < z.S; ++s) {
          const double w = p[static_cast<size_t>(s)] / total;
          weights[static_cast<size_t>(((n * z.H + h) * z.L + l) * z.S + s)] = w;
          for (int64_t j = 0; j < d; ++j)
            heads[static_cast<size_t>((l * z.N + n) * E + h * d + j)] += w * at(v, s, n, h * d + j);
        }
      }
    }
  }
  const Values bo = m.out_proj.bias.defined() ? values(m.out_proj.bias) : Values();
  return {project(heads, values(m.out_proj.weight), bo, z.L, z.N, E, E, 0, 0), std::move(weights)};
}

Values average_heads(const Values& w, const Sizes& z) {
  Values out(static_cast<size_t>(z.N * z.L * z.S));
  for (int64_t n = 0; n < z.N; ++n)
    for (int64_t h = 0; h < z.H; ++h)
      for (int64_t i = 0; i < z.L * z.S; ++i)
        out[static_cast<size_t>(n * z.L * z.S + i)] +=
            w[static_cast<size_t>((n * z.H + h) * z.L * z.S + i)] / static_cast<double>(z.H);
  return out;
}

auto no_mask = [](int64_t, int64_t, int64_t, int64_t) { return 0.0; };

// Random biases, so that the reference checks where each bias goes.
void randomize_biases(nn::MultiheadAttention& m) {
  NoGradGuard no_grad;
  if (m.in_proj_bias.defined()) m.in_proj_bias.copy_(randn(m.in_proj_bias.sizes()));
  if (m.out_proj.bias.defined()) m.out_proj.bias.copy_(randn(m.out_proj.bias.sizes()));
}

TEST(MultiheadAttention, ListsParametersInPyTorchsOrderAndShapes) {
  const std::vector<std::pair<std::string, Shape>> packed = {{"in_proj_weight", {24, 8}},
                                                             {"in_proj_bias", {24}},
                                                             {"out_proj.weight", {8, 8}},
                                                             {"out_proj.bias", {8}}};
  EXPECT_EQ(names_and_shapes(nn::MultiheadAttention(8, 2)), packed);
  const std::vector<std::pair<std::string, Shape>> separate = {
      {"q_proj_weight", {8, 8}}, {"k_proj_weight", {8, 3}},   {"v_proj_weight", {8, 5}},
      {"in_proj_bias", {24}},    {"out_proj.weight", {8, 8}}, {"out_proj.bias", {8}}};
  EXPECT_EQ(names_and_shapes(nn::MultiheadAttention(8, 2, {.kdim = 3, .vdim = 5})), separate);
  const std::vector<std::pair<std::string, Shape>> no_bias = {{"in_proj_weight", {24, 8}},
                                                              {"out_proj.weight", {8, 8}}};
  EXPECT_EQ(names_and_shapes(nn::MultiheadAttention(8, 4, {.bias = false})), no_bias);
}

TEST(MultiheadAttention, PrintsItsOutputProjection) {
  EXPECT_EQ(
      nn::MultiheadAttention(8, 2).repr(),
      "MultiheadAttention(\n  (out_proj): Linear(in_features=8, out_features=8, bias=True)\n)");
}

TEST(MultiheadAttention, StartsWithXavierProjectionsAndZeroBiases) {
  nn::MultiheadAttention m(16, 4);
  const double bound = std::sqrt(6.0 / (16 + 48));
  const double biggest = m.in_proj_weight.abs().max().item<double>();
  EXPECT_LE(biggest, bound);
  EXPECT_GT(biggest, 0.8 * bound);
  EXPECT_EQ(m.in_proj_bias.abs().max().item<double>(), 0);
  EXPECT_EQ(m.out_proj.bias.abs().max().item<double>(), 0);
  // out_proj.weight keeps Linear's own initialization.
  EXPECT_LE(m.out_proj.weight.abs().max().item<double>(), 1 / std::sqrt(16.0));
}

TEST(MultiheadAttention, SelfAttentionMatchesExplicitComputation) {
  manual_seed(1);
  nn::MultiheadAttention m(8, 2);
  randomize_biases(m);
  const Sizes z{5, 5, 3, 8, 2, 8, 8};
  const Tensor x = randn({z.L, z.N, z.E});
  const Reference want = reference(m, z, values(x), values(x), values(x), no_mask);
  auto [output, weights] = m(x, x, x);
  ASSERT_EQ(output.sizes(), (Shape{z.L, z.N, z.E}));
  ASSERT_EQ(weights.sizes(), (Shape{z.N, z.L, z.S}));
  expect_near(values(output), want.output);
  expect_near(values(weights), average_heads(want.weights, z));

  auto per_head = m(x, x, x, {.average_attn_weights = false}).weights;
  ASSERT_EQ(per_head.sizes(), (Shape{z.N, z.H, z.L, z.S}));
  expect_near(values(per_head), want.weights);

  // Without weights and without a graph to record, the fused attention op runs.
  NoGradGuard no_grad;
  auto fused = m(x, x, x, {.need_weights = false});
  EXPECT_FALSE(fused.weights.defined());
  expect_near(values(fused.output), want.output);
}

TEST(MultiheadAttention, AppliesBoolMasksWithTrueMeaningBlocked) {
  manual_seed(2);
  nn::MultiheadAttention m(6, 3, {.batch_first = true, .kdim = 4, .vdim = 5});
  randomize_biases(m);
  const Sizes z{3, 4, 2, 6, 3, 4, 5};
  const Tensor q = randn({z.N, z.L, z.E}), k = randn({z.N, z.S, z.kdim}),
               v = randn({z.N, z.S, z.vdim});
  // Block key 1 for every query, and key 3 of batch 1 by padding.
  const Tensor attn_mask =
      from_vector<float>({0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0}, Shape{z.L, z.S}) != 0.0;
  const Tensor padding = from_vector<float>({0, 0, 0, 0, 0, 0, 0, 1}, Shape{z.N, z.S}) != 0.0;
  const auto mask = [](int64_t n, int64_t, int64_t, int64_t s) {
    return s == 1 || (n == 1 && s == 3) ? -kInf : 0.0;
  };
  const Reference want = reference(m, z, values(q.transpose(0, 1)), values(k.transpose(0, 1)),
                                   values(v.transpose(0, 1)), mask);
  for (bool need_weights : {true, false}) {
    SCOPED_TRACE(need_weights ? "explicit softmax" : "fused op");
    NoGradGuard no_grad;
    auto [output, weights] =
        m(q, k, v,
          {.key_padding_mask = padding, .need_weights = need_weights, .attn_mask = attn_mask});
    ASSERT_EQ(output.sizes(), (Shape{z.N, z.L, z.E}));
    expect_near(values(output.transpose(0, 1)), want.output);
    if (need_weights) expect_near(values(weights), average_heads(want.weights, z));
  }
}

TEST(MultiheadAttention, AddsFloatMasksPerHead) {
  manual_seed(3);
  nn::MultiheadAttention m(4, 2);
  randomize_biases(m);
  const Sizes z{3, 2, 2, 4, 2, 4, 4};
  const Tensor q = randn({z.L, z.N, z.E}), k = randn({z.S, z.N, z.E}), v = randn({z.S, z.N, z.E});
  const Tensor attn_mask = randn({z.N * z.H, z.L, z.S});
  const Tensor padding = randn({z.N, z.S});
  const Values a = values(attn_mask), p = values(padding);
  const auto mask = [&](int64_t n, int64_t h, int64_t l, int64_t s) {
    return a[static_cast<size_t>(((n * z.H + h) * z.L + l) * z.S + s)] +
           p[static_cast<size_t>(n * z.S + s)];
  };
  const Reference want = reference(m, z, values(q), values(k), values(v), mask);
  auto [output, weights] = m(q, k, v, {.key_padding_mask = padding, .attn_mask = attn_mask});
  expect_near(values(output), want.output);
  expect_near(values(weights), average_heads(want.weights, z));
}

TEST(MultiheadAttention, IsCausalBuildsTheCausalMask) {
  manual_seed(4);
  nn::MultiheadAttention m(4, 1);
  const Sizes z{4, 4, 1, 4, 1, 4, 4};
  const Tensor x = randn({z.L, z.N, z.E});
  const auto mask = [](int64_t, int64_t, int64_t l, int64_t s) { return s > l ? -kInf : 0.0; };
  const Reference want = reference(m, z, values(x), values(x), values(x), mask);
  auto [output, weights] = m(x, x, x, {.is_causal = true});
  expect_near(values(output), want.output);
  expect_near(values(weights), want.weights);
  NoGradGuard no_grad;
  expect_near(values(m(x, x, x, {.need_weights = false, .is_causal = true}).output), want.output);
}

TEST(MultiheadAttention, TakesUnbatchedInput) {
  manual_seed(5);
  nn::MultiheadAttention m(6, 2, {.kdim = 3});
  randomize_biases(m);
  const Sizes z{3, 5, 1, 6, 2, 3, 6};
  const Tensor q = randn({z.L, z.E}), k = randn({z.S, z.kdim}), v = randn({z.S, z.vdim});
  const Tensor padding = from_vector<float>({0, 0, 1, 0, 0}, Shape{z.S}) != 0.0;
  const auto mask = [](int64_t, int64_t, int64_t, int64_t s) { return s == 2 ? -kInf : 0.0; };
  const Reference want = reference(m, z, values(q), values(k), values(v), mask);
  auto [output, weights] = m(q, k, v, {.key_padding_mask = padding});
  ASSERT_EQ(output.sizes(), (Shape{z.L, z.E}));
  ASSERT_EQ(weights.sizes(), (Shape{z.L, z.S}));
  expect_near(values(output), want.output);
  expect_near(values(weights), average_heads(want.weights, z));
}

TEST(MultiheadAttention, DropsAttentionWeightsOnlyWhenTraining) {
  manual_seed(6);
  nn::MultiheadAttention m(4, 2, {.dropout = 1.0});
  randomize_biases(m);
  const Sizes z{3, 3, 2, 4, 2, 4, 4};
  const Tensor x = randn({z.L, z.N, z.E});
  m.train();
  auto [dropped, dropped_weights] = m(x, x, x);
  // Every weight dropped: only the output projection's bias remains.
  expect_near(values(dropped_weights), Values(static_cast<size_t>(z.N * z.L * z.S), 0.0));
  expect_near(values(dropped), values(m.out_proj.bias.expand({z.L, z.N, z.E})));
  m.eval();
  const Reference want = reference(m, z, values(x), values(x), values(x), no_mask);
  expect_near(values(m(x, x, x).output), want.output);
}

TEST(MultiheadAttention, BackwardReachesEveryParameter) {
  manual_seed(7);
  for (bool separate : {false, true}) {
    SCOPED_TRACE(separate ? "separate projections" : "packed projection");
    nn::MultiheadAttention m(4, 2, {.kdim = separate ? 3 : 4});
    const Tensor q = randn({2, 3, 4}), k = randn({5, 3, m.kdim}).requires_grad_(),
                 v = randn({5, 3, 4});
    for (bool need_weights : {true, false}) {
      auto [output, weights] = m(q, k, v, {.need_weights = need_weights});
      output.square().sum().backward();
    }
    for (const auto& [name, p] : m.named_parameters()) {
      SCOPED_TRACE(name);
      ASSERT_TRUE(p.grad().defined());
      EXPECT_GT(p.grad().abs().sum().item<double>(), 0);
    }
    ASSERT_TRUE(k.grad().defined());
  }
}

TEST(MultiheadAttention, RejectsInvalidOptions) {
  testing::expect_error_with<ValueError>([] { nn::MultiheadAttention(10, 3); },
                                         {"MultiheadAttention", "10", "3"});
  testing::expect_error<ValueError>([] { nn::MultiheadAttention(0, 1); }, "MultiheadAttention");
  testing::expect_error<ValueError>([] { nn::MultiheadAttention(4, 2, {.dropout = -0.5}); },
                                    "MultiheadAttention", "-0.5");
  testing::expect_error<ValueError>([] { nn::MultiheadAttention(4, 2, {.kdim = 0}); },
                                    "MultiheadAttention", "kdim");
}

TEST(MultiheadAttention, RejectsInputsOfWrongShape) {
  nn::MultiheadAttention m(4, 2, {.vdim = 6});
  const Tensor q = randn({3, 2, 4}), k = randn({5, 2, 4}), v = randn({5, 2, 6});
  using testing::expect_error_with;
  expect_error_with<ShapeError>([&] { m(randn({4}), k, v); }, {"MultiheadAttention", "[4]"});
  expect_error_with<ShapeError>(
      [&] {
        m(q, randn({5, 4}), v);
      },
      {"MultiheadAttention", "[5, 4]", "[5, 2, 6]"});
  expect_error_with<ShapeError>(
      [&] {
        m(randn({3, 2, 5}), k, v);
      },
      {"MultiheadAttention", "query has 5", "embed_dim 4"});
  expect_error_with<ShapeError>(
      [&] {
        m(q, randn({5, 2, 3}), v);
      },
      {"MultiheadAttention", "key has 3", "kdim 4"});
  expect_error_with<ShapeError>(
      [&] {
        m(q, k, randn({5, 2, 4}));
      },
      {"MultiheadAttention", "value has 4", "vdim 6"});
  expect_error_with<ShapeError>(
      [&] {
        m(q, k, randn({6, 2, 6}));
      },
      {"MultiheadAttention", "sequence lengths", "[6, 2, 6]"});
  expect_error_with<ShapeError>(
      [&] {
        m(q, randn({5, 3, 4}), randn({5, 3, 6}));
      },
      {"MultiheadAttention", "batch sizes", "[5, 3, 4]"});
}

TEST(MultiheadAttention, RejectsMasksOfWrongShapeOrDType) {
  nn::MultiheadAttention m(4, 2);
  const Tensor x = randn({3, 2, 4});
  using testing::expect_error_with;
  expect_error_with<ShapeError>(
      [&] {
        m(x, x, x, {.key_padding_mask = zeros({3, 2})});
      },
      {"MultiheadAttention", "key_padding_mask", "[2, 3]", "[3, 2]"});
  expect_error_with<ShapeError>(
      [&] {
        m(x, x, x, {.attn_mask = zeros({3, 4})});
      },
      {"MultiheadAttention", "attn_mask", "[3, 3]", "[4, 3, 3]", "[3, 4]"});
  expect_error_with<ShapeError>(
      [&] {
        m(x, x, x, {.attn_mask = zeros({2, 3, 3})});
      },
      {"MultiheadAttention", "attn_mask", "[2, 3, 3]"});
  expect_error_with<DTypeError>(
      [&] {
        m(x, x, x, {.attn_mask = zeros({3, 3}, {.dtype = kInt64})});
      },
      {"MultiheadAttention", "attn_mask", "int64"});
}

// NaN in, NaN out, as PyTorch: a NaN query row gives a NaN output row (the
// other rows are untouched), a NaN scale NaN everywhere. Fully masked rows
// stay zeros. The CPU's row-at-a-time and blocked kernels, the reference
// kernels and CUDA's.
TEST(ScaledDotProductAttention, NaNInGivesNaNOut) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  auto check = [&](const std::string& where, Device device, DType dtype, int64_t l) {
    manual_seed(8);
    const TensorOptions o{.dtype = dtype};
    Tensor q = randn({2, l, 16}, o), k = randn({2, l + 3, 16}, o), v = randn({2, l + 3, 8}, o);
    q.select(0, 1).select(0, 1).fill_(nan);  // batch 1, query 1
    q = q.to(device), k = k.to(device), v = v.to(device);
    const Tensor y = nn::functional::scaled_dot_product_attention(q, k, v).to(Device::cpu());
    for (int64_t b = 0; b < 2; ++b) {
      for (int64_t i = 0; i < l; ++i) {
        const Values row = values(y.select(0, b).select(0, i));
        const bool want_nan = b == 1 && i == 1;
        for (const double x : row) {
          EXPECT_EQ(std::isnan(x), want_nan) << where << ": batch " << b << ", query " << i;
        }
      }
    }
    const Tensor all = nn::functional::scaled_dot_product_attention(q.select(0, 0), k.select(0, 0),
                                                                    v.select(0, 0), {.scale = nan});
    for (const double x : values(all)) EXPECT_TRUE(std::isnan(x)) << where << ": a NaN scale";
    // Every key of query 0 masked: zeros, NaN elsewhere untouched.
    Tensor keep = full({l, l + 3}, true, {.dtype = kBool});
    keep.select(0, 0).fill_(false);
    const Tensor masked = nn::functional::scaled_dot_product_attention(
        q.select(0, 0), k.select(0, 0), v.select(0, 0), {.attn_mask = keep.to(device)});
    for (const double x : values(masked.select(0, 0))) EXPECT_EQ(x, 0.0) << where;
  };
  for (const DType dtype : {kFloat32, kFloat64}) {
    for (const int64_t l : {3, 70}) {
      const std::string what = std::string(dtype_name(dtype)) + " L=" + std::to_string(l);
      check("cpu " + what, Device::cpu(), dtype, l);
      if (cuda::is_available()) check("cuda " + what, Device::cuda(), dtype, l);
      ops::ReferenceModeGuard reference;
      check("reference " + what, Device::cpu(), dtype, l);
    }
  }
}

}  // namespace
}  // namespace kiln
