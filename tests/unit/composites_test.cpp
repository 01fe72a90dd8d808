// kiln's composite functions (rms_norm, rotary embeddings, instance_norm, the
// transposed convolutions, 1-D and adaptive max pools, pixel (un)shuffle and
// the losses smooth_l1, huber and kl_div) against PyTorch's values and
// gradients, saved by tests/parity/make_composite_references.py.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <set>
#include <string>

#include "kiln/kiln.h"
#include "unit/expect_error.h"

namespace kiln::testing {
namespace {

namespace F = kiln::nn::functional;

const StateDict& torch_answers() {
  // The environment's KILN_TEST_DATA_DIR wins: a build run from another checkout.
  const char* env = std::getenv("KILN_TEST_DATA_DIR");
  static const StateDict answers = load_safetensors(
      std::string(env && *env ? env : KILN_TEST_DATA_DIR) + "/composites/torch.safetensors");
  return answers;
}

// Element by element, |actual - expected| <= tol * max(1, |expected|).
void expect_close(const Tensor& expected, const Tensor& actual, double tol,
                  const std::string& what) {
  ASSERT_EQ(expected.sizes(), actual.sizes()) << what;
  const auto e = expected.to(kFloat64).contiguous().to_vector<double>();
  const auto a = actual.to(kFloat64).contiguous().to_vector<double>();
  double worst = 0;
  for (size_t i = 0; i < e.size(); ++i) {
    worst = std::max(worst, std::abs(a[i] - e[i]) / std::max(1.0, std::abs(e[i])));
  }
  EXPECT_LE(worst, tol) << what << ": the largest relative difference from PyTorch";
}

// Same shape and every element within tol.
bool near(const Tensor& a, const Tensor& b, double tol = 1e-6) {
  return a.sizes() == b.sizes() &&
         (a.numel() == 0 || amax(abs(a.to(kFloat64) - b.to(kFloat64))).item<double>() <= tol);
}
bool same(const Tensor& a, const Tensor& b) { return near(a, b, 0); }

// How often each of n categories occurs in int64 draws.
std::vector<int64_t> bincount_of(const Tensor& draws, int64_t n) {
  std::vector<int64_t> counts(static_cast<size_t>(n), 0);
  for (int64_t v : draws.to_vector<int64_t>()) ++counts.at(static_cast<size_t>(v));
  return counts;
}

using CompositeFn = std::function<TensorList(const TensorList&)>;

// Runs fn on the case's inputs, the floating ones (but constant's) as leaves,
// and compares its outputs and the gradients of sum_j sum(out_j * w_j) with
// PyTorch's. tol: float64 outputs; float32 outputs get 1e-6.
void check_against_torch(const std::string& name, const CompositeFn& fn,
                         const std::set<size_t>& constant = {}, double tol = 1e-12) {
  const StateDict& d = torch_answers();
  TensorList inputs;
  for (size_t i = 0; d.contains(name + ".in" + std::to_string(i)); ++i) {
    Tensor t = d.at(name + ".in" + std::to_string(i)).clone();
    if (is_floating(t.dtype()) && !constant.count(i)) t.requires_grad_();
    inputs.push_back(t);
  }
  ASSERT_FALSE(inputs.empty()) << "no case " << name << " in the PyTorch answers";
  const TensorList outs = fn(inputs);
  Tensor loss;
  for (size_t j = 0; j < outs.size(); ++j) {
    const std::string key = name + ".out" + std::to_string(j);
    ASSERT_TRUE(d.contains(key)) << name << " returns more outputs than PyTorch's";
    expect_close(d.at(key), outs[j].detach(), outs[j].dtype() == kFloat32 ? 1e-6 : tol, key);
    const std::string w = name + ".w" + std::to_string(j);
    if (d.contains(w)) {
      Tensor term = sum(outs[j].to(kFloat64) * d.at(w));
      loss = loss.defined() ? loss + term : term;
    }
  }
  EXPECT_FALSE(d.contains(name + ".out" + std::to_string(outs.size())))
      << name << " returns fewer outputs than PyTorch's";
  if (!loss.defined()) return;
  loss.backward();
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string key = name + ".grad" + std::to_string(i);
    if (!d.contains(key)) continue;
    ASSERT_TRUE(inputs[i].grad().defined()) << key << ": no gradient reached the input";
    expect_close(d.at(key), inputs[i].grad(), tol, key);
  }
}

TEST(Composites, RmsNormMatchesPyTorch) {
  check_against_torch("rms_norm_weight", [](const TensorList& in) {
    return TensorList{F::rms_norm(in[0], {8}, in[1], 1e-6)};
  });
  check_against_torch("rms_norm_two_dims", [](const TensorList& in) {
    return TensorList{F::rms_norm(in[0], {5, 6})};
  });
  // Half precision normalizes in float32: close to the float64 result.
  Tensor x = randn({4, 64});
  Tensor half = F::rms_norm(x.to(kBFloat16), {64});
  EXPECT_EQ(half.dtype(), kBFloat16);
  EXPECT_TRUE(near(half.to(kFloat32), F::rms_norm(x, {64}), 3e-2));
  nn::RMSNorm module{64, {.eps = 1e-5}};
  EXPECT_TRUE(near(module(x), F::rms_norm(x, {64}, {}, 1e-5)));
  EXPECT_EQ(module.extra_repr(), "(64,), eps=1e-05, elementwise_affine=True");
}

TEST(Composites, RmsNormRejectsBadArguments) {
  Tensor x = randn({2, 3});
  expect_error_with<ShapeError>([&] { F::rms_norm(x, {4}); }, {"rms_norm", "[2, 3]", "[4]"});
  expect_error_with<ShapeError>([&] { F::rms_norm(x, {3}, ones({2})); }, {"rms_norm", "[2]"});
  expect_error_with<DTypeError>(
      [&] {
        F::rms_norm(ones({2, 3}, {.dtype = kInt64}), {3});
      },
      {"rms_norm", "int64"});
  expect_error_with<ValueError>([&] { nn::RMSNorm(Shape{}); }, {"RMSNorm", "empty"});
}

TEST(Composites, InstanceNormMatchesPyTorch) {
  check_against_torch("instance_norm", [](const TensorList& in) {
    Tensor rm = zeros({3}, {.dtype = kFloat64}), rv = ones({3}, {.dtype = kFloat64});
    Tensor y = F::instance_norm(in[0], rm, rv, in[1], in[2], true, 0.2, 1e-5);
    return TensorList{y, rm, rv};
  });
  check_against_torch("instance_norm_eval",
                      [](const TensorList& in) {
                        return TensorList{F::instance_norm(in[0], in[1], in[2], {}, {}, false)};
                      },
                      {1, 2});
}

TEST(Composites, InstanceNormModulesTrackStatisticsAndTakeUnbatchedInput) {
  nn::InstanceNorm2d norm{3, {.affine = true, .track_running_stats = true}};
  Tensor x = randn({2, 3, 4, 5}, {.dtype = kFloat32});
  Tensor y = norm(x);
  EXPECT_EQ(norm.num_batches_tracked.item<int64_t>(), 1);
  EXPECT_FALSE(near(norm.running_mean, zeros({3}), 0));
  norm.eval();
  Tensor eval = norm(x);
  EXPECT_TRUE(near(
      eval, F::batch_norm(x, norm.running_mean, norm.running_var, norm.weight, norm.bias, false)));
  nn::InstanceNorm1d plain{3};
  Tensor seq = randn({3, 7});
  EXPECT_TRUE(near(plain(seq), plain(seq.unsqueeze(0)).squeeze(0)));
  EXPECT_TRUE(plain.named_parameters().empty());
  expect_error_with<ShapeError>([&] { plain(randn({2, 4, 7})); }, {"InstanceNorm1d", "4"});
  expect_error_with<ShapeError>([&] { plain(randn({7})); }, {"InstanceNorm1d", "[7]"});
}

TEST(Composites, RotaryEmbeddingsMatchTheCheckpointsCode) {
  // The tables are float32: their cosines may differ from PyTorch's in the last bit.
  check_against_torch(
      "rotary",
      [](const TensorList& in) {
        auto [cos, sin] = F::rotary_embedding(in[1], in[0].size(-1));
        return TensorList{cos, sin, F::apply_rotary_emb(in[0], cos, sin)};
      },
      {}, 1e-6);
  // Rotating by the angles of position p then of position -p gives x back.
  Tensor x = randn({2, 5, 16}, {.dtype = kFloat64});
  auto [c, s] = F::rotary_embedding(arange(5), 16, 500.0);
  Tensor back = F::apply_rotary_emb(F::apply_rotary_emb(x, c, s), c, neg(s));
  EXPECT_TRUE(near(back, x, 1e-5));
  expect_error_with<ValueError>([&] { F::rotary_embedding(arange(3), 7); },
                                {"rotary_embedding", "7"});
  expect_error_with<ShapeError>([&] { F::apply_rotary_emb(x, c.narrow(-1, 0, 8), s); },
                                {"apply_rotary_emb"});
  expect_error_with<ShapeError>([&] { F::rotate_half(randn({3})); }, {"rotate_half", "[3]"});
}

TEST(Composites, LossesMatchPyTorch) {
  check_against_torch("smooth_l1", [](const TensorList& in) {
    return TensorList{F::smooth_l1_loss(in[0], in[1], "mean", 0.5),
                      F::smooth_l1_loss(in[0], in[1], "none"),
                      F::smooth_l1_loss(in[0], in[1], "sum", 0.0)};
  });
  check_against_torch("huber", [](const TensorList& in) {
    return TensorList{F::huber_loss(in[0], in[1], "mean", 0.7),
                      F::huber_loss(in[0], in[1], "none", 2.5)};
  });
  check_against_torch("kl_div", [](const TensorList& in) {
    return TensorList{F::kl_div(in[0], in[1], "batchmean"), F::kl_div(in[0], in[1], "none"),
                      F::kl_div(in[0], log(clamp_min(in[1], 1e-9)), "sum", true)};
  });
  Tensor a = randn({3}), b = randn({4});
  expect_error_with<ShapeError>([&] { F::huber_loss(a, b); }, {"huber_loss", "[3]", "[4]"});
  expect_error_with<ValueError>([&] { F::huber_loss(a, a, "mean", 0); }, {"huber_loss", "0"});
  expect_error_with<ValueError>([&] { F::smooth_l1_loss(a, a, "mean", -1); },
                                {"smooth_l1_loss", "-1"});
  expect_error_with<ValueError>([&] { F::kl_div(a, a, "avg"); }, {"kl_div", "avg"});
}

TEST(Composites, TransposedConvolutionsMatchPyTorch) {
  check_against_torch("conv_transpose2d", [](const TensorList& in) {
    return TensorList{conv_transpose2d(in[0], in[1], in[2],
                                       {.stride = {2}, .padding = {1}, .output_padding = {1}})};
  });
  check_against_torch("conv_transpose2d_groups", [](const TensorList& in) {
    return TensorList{conv_transpose2d(
        in[0], in[1], {}, {.stride = {2, 1}, .padding = {0, 1}, .dilation = {1, 2}, .groups = 2})};
  });
  check_against_torch("conv_transpose2d_unbatched", [](const TensorList& in) {
    return TensorList{conv_transpose2d(in[0], in[1], in[2], {.stride = {2}})};
  });
  check_against_torch("conv_transpose1d", [](const TensorList& in) {
    return TensorList{conv_transpose1d(in[0], in[1], in[2],
                                       {.stride = {3}, .padding = {2}, .output_padding = {1}})};
  });
}

TEST(Composites, TransposedConvolutionModulesAndErrors) {
  nn::ConvTranspose2d up{4, 6, 4, {.stride = 2, .padding = 1, .groups = 2}};
  EXPECT_EQ(up.weight.sizes(), (Shape{4, 3, 4, 4}));
  Tensor y = up(randn({2, 4, 8, 8}));
  EXPECT_EQ(y.sizes(), (Shape{2, 6, 16, 16}));
  EXPECT_EQ(up.extra_repr(), "4, 6, kernel_size=(4, 4), stride=(2, 2), padding=(1, 1), groups=2");
  Tensor x = randn({1, 4, 5, 5}), w = randn({4, 3, 3, 3});
  expect_error_with<ShapeError>(
      [&] {
        conv_transpose2d(randn({1, 5, 5, 5}), w);
      },
      {"conv_transpose2d", "5"});
  expect_error_with<ValueError>(
      [&] { conv_transpose2d(x, w, {}, {.stride = {2}, .output_padding = {2}}); },
      {"conv_transpose2d", "output_padding"});
  expect_error_with<ShapeError>([&] { conv_transpose2d(x, w, ones({4})); },
                                {"conv_transpose2d", "bias", "[3]"});
  expect_error_with<ShapeError>([&] { conv_transpose2d(x, w, {}, {.padding = {5}}); },
                                {"conv_transpose2d", "size"});
  expect_error_with<ValueError>([&] { nn::ConvTranspose1d(2, 2, 3, {.output_padding = 1}); },
                                {"ConvTranspose1d", "output_padding"});
}

TEST(Composites, PoolsAndPixelShuffleMatchPyTorch) {
  check_against_torch("pools_1d", [](const TensorList& in) {
    return TensorList{max_pool1d(in[0], 3, 2, 1), max_pool1d(in[0], 4, 3, 2, 1, true),
                      avg_pool1d(in[0], 3, 2, 1), avg_pool1d(in[0], 4, 3, 1, true, false)};
  });
  check_against_torch("adaptive_max_pool2d", [](const TensorList& in) {
    Tensor cropped = in[0].narrow(2, 0, 6).narrow(3, 0, 6);
    return TensorList{adaptive_max_pool2d(in[0], {3, 4}), adaptive_max_pool2d(in[0], {7, 2}),
                      adaptive_max_pool2d(in[0], {1}), adaptive_max_pool2d(cropped, {3, 2})};
  });
  check_against_torch("pixel_shuffle", [](const TensorList& in) {
    return TensorList{pixel_shuffle(in[0], 3), pixel_unshuffle(in[1], 3),
                      pixel_shuffle(in[0].select(0, 0), 3)};
  });
  nn::PixelShuffle shuffle{2};
  nn::PixelUnshuffle unshuffle{2};
  Tensor x = randn({2, 8, 3, 5});
  EXPECT_TRUE(same(unshuffle(shuffle(x)), x));
  nn::MaxPool1d pool{3, {.stride = 2}};
  nn::AdaptiveMaxPool2d gmp{1};
  EXPECT_EQ(pool(randn({2, 3, 9})).sizes(), (Shape{2, 3, 4}));
  EXPECT_TRUE(same(gmp(x).flatten(), amax(x, {2, 3}).flatten()));
  nn::Upsample up{{.scale_factor = std::vector<double>{2}, .mode = "nearest"}};
  EXPECT_EQ(up(x).sizes(), (Shape{2, 8, 6, 10}));
  expect_error_with<ShapeError>(
      [&] {
        pixel_shuffle(randn({2, 7, 3, 3}), 2);
      },
      {"pixel_shuffle", "[2, 7, 3, 3]"});
  expect_error_with<ShapeError>(
      [&] {
        pixel_unshuffle(randn({2, 7, 3, 4}), 2);
      },
      {"pixel_unshuffle", "[2, 7, 3, 4]"});
  expect_error_with<ShapeError>([&] { max_pool1d(randn({4}), 2); }, {"max_pool1d", "[4]"});
  expect_error_with<ValueError>(
      [&] {
        adaptive_max_pool2d(x, {0, 2});
      },
      {"adaptive_max_pool2d", "[0, 2]"});
  expect_error_with<ValueError>([&] { nn::Upsample({.mode = "nearest"}); }, {"Upsample"});
}

TEST(Composites, CumprodMatchesPyTorchWithZerosAndIntegers) {
  check_against_torch("cumprod", [](const TensorList& in) {
    return TensorList{cumprod(in[0], 1), cumprod(in[1], 0), cumprod(in[2], -1), cumprod(in[0], 0)};
  });
  EXPECT_EQ(cumprod(ones({3}, {.dtype = kBool}), 0).dtype(), kInt64);
  EXPECT_EQ(cumprod(ones({3}), 0, kFloat64).dtype(), kFloat64);
  expect_error<IndexError>([&] { cumprod(ones({3}), 1); }, "cumprod");
}

TEST(Composites, EinsumMatchesPyTorch) {
  check_against_torch("einsum", [](const TensorList& in) {
    const Tensor &a = in[0], &b = in[1], &q = in[2], &k = in[3], &sq = in[4], &v = in[5];
    return TensorList{einsum("ij,jk->ik", {a, b}),
                      einsum("ij,jk", {a, b}),
                      einsum("bhqd,bhkd->bhqk", {q, k}),
                      einsum("ii->i", {sq}),
                      einsum("ii", {sq}),
                      einsum("...ij->...ji", {q}),
                      einsum("i,j->ij", {v, v}),
                      einsum("ij,ij->", {a, a}),
                      einsum("hqd,hkd->qk", {q.select(0, 0), k.select(0, 0)}),
                      einsum("ab, bc , cd -> ad", {a, b, in[6]})};
  });
}

TEST(Composites, EinsumRejectsBadEquations) {
  Tensor a = randn({2, 3}), b = randn({3, 4});
  expect_error_with<ValueError>([&] { einsum("ij,jk", {a}); }, {"einsum", "ij,jk"});
  expect_error_with<ValueError>([&] { einsum("ijk,jk", {a, b}); }, {"einsum", "2 dims"});
  expect_error_with<ValueError>([&] { einsum("ij,jk->iz", {a, b}); }, {"einsum", "z"});
  expect_error_with<ValueError>([&] { einsum("i1,jk", {a, b}); }, {"einsum", "1"});
  expect_error_with<ShapeError>([&] { einsum("ij,ik->jk", {a, b}); }, {"einsum", "2", "3"});
}

TEST(Composites, IndexingMatchesPyTorch) {
  check_against_torch("index_ops", [](const TensorList& in) {
    return TensorList{index_add(in[0], 0, in[2], in[1], 2.0), index_copy(in[0], 0, in[2], in[1]),
                      index_add(in[0], 1, from_vector<int64_t>({3, 3, 1}), in[3])};
  });
  check_against_torch("advanced_index", [](const TensorList& in) {
    const Tensor &x = in[0], &i = in[1], &j = in[2], &m = in[3];
    return TensorList{index(x, {i}),
                      index(x, {{}, j}),
                      index(x, {i, {}, j}),
                      index(x, {{}, i, j}),
                      index(x, {m}),
                      index(x, {m.select(2, 0)}),
                      index(x.narrow(1, 1, 2), {{}, j})};
  });
  check_against_torch("advanced_index_put", [](const TensorList& in) {
    const Tensor &x = in[0], &i = in[1], &v = in[2], &row = in[3];
    return TensorList{index_put(x, {i, from_vector<int64_t>({0, 4, 0})}, v, true),
                      index_put(x, {from_vector<int64_t>({2})}, row),
                      index_put(x, {x > 1.0}, scalar_tensor(0.0, {.dtype = kFloat64})),
                      index_put(x, {{}, from_vector<int64_t>({1, 2})}, row.reshape({1, 1, 6}) * 2)};
  });
  check_against_torch("nonzero", [](const TensorList& in) {
    return TensorList{nonzero(in[0]),
                      nonzero(in[0].select(0, 0)),
                      masked_select(in[1], in[2]),
                      masked_select(in[1], in[2].select(0, 0)),
                      nonzero(zeros({2, 3})),
                      repeat_interleave(in[1], from_vector<int64_t>({2, 0, 1}), 0),
                      repeat_interleave(in[1], from_vector<int64_t>({3}))};
  });
  Tensor x = zeros({3, 2});
  index_put_(x, {from_vector<int64_t>({0, 2})}, ones({2}));
  EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{1, 1, 0, 0, 1, 1}));
  index_add_(x, 1, from_vector<int64_t>({1}), ones({3, 1}));
  EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{1, 2, 0, 1, 1, 2}));
  EXPECT_EQ(nonzero(scalar_tensor(2.0)).sizes(), (Shape{1, 0}));
}

TEST(Composites, IndexingRejectsBadIndices) {
  Tensor x = zeros({3, 4});
  expect_error_with<ShapeError>(
      [&] {
        index_add(x, 0, from_vector<int64_t>({0}), ones({2, 4}));
      },
      {"index_add", "[1, 4]", "[2, 4]"});
  expect_error_with<IndexError>(
      [&] {
        index_copy(x, 0, ones({1}), ones({1, 4}));
      },
      {"index_copy", "float32"});
  expect_error_with<IndexError>(
      [&] {
        index(x, {ones({2, 2}, {.dtype = kBool})});
      },
      {"index", "[2, 2]"});
  expect_error_with<IndexError>(
      [&] {
        index(x, {{}, {}, from_vector<int64_t>({0})});
      },
      {"index", "3 indices"});
  expect_error<IndexError>([&] { index(x, {from_vector<int64_t>({5})}); }, "index_select");
  expect_error_with<DTypeError>([&] { masked_select(x, x); }, {"masked_select", "float32"});
  expect_error_with<ValueError>(
      [&] {
        repeat_interleave(x, from_vector<int64_t>({1, -1, 1}), 0);
      },
      {"repeat_interleave", "non-negative"});
  expect_error_with<ValueError>(
      [&] {
        repeat_interleave(x, from_vector<int64_t>({1, 2}), 0);
      },
      {"repeat_interleave", "3", "[2]"});
}

TEST(Composites, IndexingThatDependsOnDataIsAGraphBreakNamingTheOp) {
  auto f = compile([](const Tensor& x) { return nonzero(x > 0).to(kFloat32).sum() + x.sum(); });
  Tensor x = from_vector<float>({1, -2, 3});
  EXPECT_TRUE(near(f(x), nonzero(x > 0).to(kFloat32).sum() + x.sum()));
  const std::string report = f.explain().to_string();
  EXPECT_NE(report.find("nonzero()"), std::string::npos) << report;
}

TEST(Sampling, MultinomialDrawsInProportionAndIsReproducible) {
  Tensor probs = from_vector<float>({0.1f, 0.0f, 0.6f, 0.3f});
  Generator g(7);
  Tensor draws = multinomial(probs, 20000, true, &g);
  EXPECT_EQ(draws.sizes(), (Shape{20000}));
  const auto counts = bincount_of(draws, 4);
  EXPECT_EQ(counts[1], 0);
  EXPECT_NEAR(counts[2] / 20000.0, 0.6, 0.02);
  EXPECT_NEAR(counts[3] / 20000.0, 0.3, 0.02);
  Generator again(7);
  EXPECT_TRUE(same(multinomial(probs, 20000, true, &again), draws));
  // Without replacement: distinct categories, the zero-weight one never.
  Tensor rows = from_vector<float>({1, 0, 5, 2, 3, 3, 0, 1}, Shape{2, 4});
  for (int trial = 0; trial < 20; ++trial) {
    auto picked = multinomial(rows, 3, false, &g).to_vector<int64_t>();
    for (int r = 0; r < 2; ++r) {
      std::set<int64_t> distinct(picked.begin() + 3 * r, picked.begin() + 3 * r + 3);
      EXPECT_EQ(distinct.size(), 3u);
      EXPECT_EQ(distinct.count(r == 0 ? 1 : 2), 0u);
    }
  }
  // The first draw without replacement follows the weights too.
  Tensor first =
      multinomial(from_vector<float>({1, 3}).expand({20000, 2}).contiguous(), 1, false, &g);
  EXPECT_NEAR(first.to(kFloat64).mean().item<double>(), 0.75, 0.02);
}

TEST(Sampling, MultinomialAndBernoulliRejectBadArguments) {
  expect_error_with<ValueError>(
      [&] {
        multinomial(from_vector<float>({1, -1}), 1);
      },
      {"multinomial", "non-negative"});
  expect_error_with<ValueError>([&] { multinomial(zeros({2, 3}), 1); }, {"multinomial", "0"});
  expect_error_with<ValueError>(
      [&] {
        multinomial(from_vector<float>({1, 0, 0}), 2);
      },
      {"multinomial", "2", "1 positive"});
  expect_error_with<ValueError>([&] { multinomial(ones({3}), 4); }, {"multinomial", "4", "3"});
  expect_error_with<ShapeError>(
      [&] {
        multinomial(ones({1, 2, 3}), 1);
      },
      {"multinomial", "[1, 2, 3]"});
  expect_error_with<DTypeError>([&] { multinomial(ones({3}, {.dtype = kInt64}), 1); },
                                {"multinomial", "int64"});
  expect_error_with<ValueError>([&] { bernoulli(ones({3}), 1.5); }, {"bernoulli", "1.5"});
  Generator g(3);
  Tensor p = full({40000}, 0.25);
  EXPECT_NEAR(bernoulli(p, &g).mean().item<double>(), 0.25, 0.01);
  EXPECT_EQ(bernoulli(ones({2}, {.dtype = kFloat64}), 0.0, &g).to_vector<double>(),
            (std::vector<double>{0, 0}));
}

}  // namespace
}  // namespace kiln::testing
