// The nn layers and nn::init: parameter names, shapes and default
// initialization like PyTorch's, values against the functional forms or hand
// computations, modes, gradients and printing.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <numbers>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/nn.h"
#include "unit/expect_error.h"

namespace kiln {
namespace {

namespace F = nn::functional;
using testing::expect_error;
using testing::expect_error_with;
using Names = std::vector<std::string>;

Tensor f32(std::vector<float> values, Shape shape) { return from_vector(values, shape); }

void expect_close(const Tensor& got, const Tensor& want, double tol = 1e-5) {
  ASSERT_EQ(got.sizes(), want.sizes());
  auto g = got.to_vector<double>(), w = want.to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], w[i], tol) << "at " << i;
}

void expect_values(const Tensor& got, std::vector<double> want, double tol = 1e-5) {
  auto g = got.to_vector<double>();
  ASSERT_EQ(g.size(), want.size());
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], want[i], tol) << "at " << i;
}

Names names_of(const std::vector<std::pair<std::string, Tensor>>& named) {
  Names out;
  for (const auto& [name, t] : named) out.push_back(name);
  return out;
}

double max_abs(const Tensor& t) { return amax(abs(t)).item<double>(); }
double mean_of(const Tensor& t) { return mean(t.to(kFloat64)).item<double>(); }
double std_of(const Tensor& t) { return stddev(t.to(kFloat64).flatten()).item<double>(); }

std::string printed(const nn::Module& m) {
  std::ostringstream os;
  os << m;
  return os.str();
}

// --- Linear ----------------------------------------------------------------------------

TEST(NnLinear, HasPyTorchsParametersAndDefaultInitBounds) {
  manual_seed(1);
  nn::Linear fc(256, 512);
  EXPECT_EQ(names_of(fc.named_parameters()), (Names{"weight", "bias"}));
  EXPECT_EQ(fc.weight.sizes(), (Shape{512, 256}));
  EXPECT_EQ(fc.bias.sizes(), (Shape{512}));
  // U(-1/16, 1/16): inside the bound, spread over it, variance bound^2 / 3.
  const double bound = 1.0 / 16;
  EXPECT_LE(max_abs(fc.weight), bound);
  EXPECT_GT(max_abs(fc.weight), 0.99 * bound);
  EXPECT_NEAR(std_of(fc.weight), bound / std::sqrt(3.0), 0.02 * bound);
  EXPECT_NEAR(mean_of(fc.weight), 0, 0.01 * bound);
  EXPECT_LE(max_abs(fc.bias), bound);
  EXPECT_GT(max_abs(fc.bias), 0.9 * bound);
}

TEST(NnLinear, ComputesInputTimesWeightTransposedPlusBias) {
  nn::Linear fc(3, 2);
  {
    NoGradGuard no_grad;
    fc.weight.copy_(f32({1, 2, 3, -1, 0, 1}, {2, 3}));
    fc.bias.copy_(f32({0.5, -0.5}, {2}));
  }
  Tensor y = fc(f32({1, 1, 1, 2, 0, -1}, {2, 3}));
  expect_values(y, {6.5, -0.5, -0.5, -3.5});
  nn::Linear no_bias(3, 2, {.bias = false});
  EXPECT_FALSE(no_bias.bias.defined());
  EXPECT_EQ(names_of(no_bias.named_parameters()), (Names{"weight"}));
  Tensor x = randn({4, 5, 3});
  expect_close(no_bias(x), matmul(x, no_bias.weight.t()));
}

TEST(NnLinear, GradientsReachWeightAndBias) {
  nn::Linear fc(3, 2);
  Tensor x = f32({1, 2, 3, 4, 5, 6}, {2, 3});
  fc(x).sum().backward();
  expect_values(fc.weight.grad(), {5, 7, 9, 5, 7, 9});
  expect_values(fc.bias.grad(), {2, 2});
}

TEST(NnLinear, RejectsWrongFeatureCount) {
  nn::Linear fc(16, 4);
  expect_error_with<ShapeError>([&] { fc(zeros({2, 7})); }, {"Linear", "7", "16"});
  EXPECT_EQ(printed(fc), "Linear(in_features=16, out_features=4, bias=True)");
  EXPECT_EQ(printed(nn::Linear(1, 1, {.bias = false})),
            "Linear(in_features=1, out_features=1, bias=False)");
}

TEST(NnIdentity, ReturnsItsInput) {
  nn::Identity id;
  Tensor x = randn({2});
  EXPECT_EQ(id(x).impl_ptr(), x.impl_ptr());
  EXPECT_EQ(printed(id), "Identity()");
}

// --- convolutions --------------------------------------------------------------------

TEST(NnConv2d, HasPyTorchsParametersAndDefaultInitBounds) {
  manual_seed(2);
  nn::Conv2d conv(8, 64, 3, {.padding = 1});
  EXPECT_EQ(names_of(conv.named_parameters()), (Names{"weight", "bias"}));
  EXPECT_EQ(conv.weight.sizes(), (Shape{64, 8, 3, 3}));
  EXPECT_EQ(conv.bias.sizes(), (Shape{64}));
  const double bound = 1 / std::sqrt(8.0 * 9);  // fan_in = in_channels * kH * kW
  EXPECT_LE(max_abs(conv.weight), bound);
  EXPECT_GT(max_abs(conv.weight), 0.99 * bound);
  EXPECT_NEAR(std_of(conv.weight), bound / std::sqrt(3.0), 0.03 * bound);
  EXPECT_LE(max_abs(conv.bias), bound);
  nn::Conv2d grouped(8, 4, {3, 5}, {.groups = 2, .bias = false});
  EXPECT_EQ(grouped.weight.sizes(), (Shape{4, 4, 3, 5}));
  EXPECT_FALSE(grouped.bias.defined());
}

TEST(NnConv2d, MatchesTheFunctionalConvolution) {
  nn::Conv2d conv(4, 6, {3, 2},
                  {.stride = {2, 1}, .padding = {1, 0}, .dilation = {1, 2}, .groups = 2});
  Tensor x = randn({2, 4, 9, 8});
  Tensor want = conv2d(x, conv.weight, conv.bias,
                       {.stride = {2, 1}, .padding = {1, 0}, .dilation = {1, 2}, .groups = 2});
  expect_close(conv(x), want);
  EXPECT_EQ(conv(randn({4, 9, 8})).sizes(), (Shape{6, 5, 6}));  // unbatched
}

TEST(NnConv2d, SameAndValidPaddingKeepOrShrinkTheSize) {
  nn::Conv2d same(2, 3, 4, {.padding = "same"});
  nn::Conv2d valid(2, 3, 4, {.padding = "valid"});
  Tensor x = randn({1, 2, 7, 6});
  EXPECT_EQ(same(x).sizes(), (Shape{1, 3, 7, 6}));
  EXPECT_EQ(valid(x).sizes(), (Shape{1, 3, 4, 3}));
  expect_error_with<ValueError>([] { nn::Conv2d(2, 3, 3, {.stride = 2, .padding = "same"}); },
                                {"Conv2d", "same", "stride"});
  expect_error_with<ValueError>([] { nn::Conv2d(2, 3, 3, {.padding = "full"}); },
                                {"Conv2d", "full"});
}

TEST(NnConv2d, ReflectPaddingModePadsBeforeConvolving) {
  nn::Conv2d conv(2, 3, 3, {.padding = {1, 2}, .padding_mode = "reflect"});
  Tensor x = randn({1, 2, 5, 6});
  Tensor want = conv2d(F::pad(x, {2, 2, 1, 1}, "reflect"), conv.weight, conv.bias);
  expect_close(conv(x), want);
  nn::Conv2d replicate(2, 3, 2, {.padding = "same", .padding_mode = "replicate"});
  // An even kernel pads 0 before and 1 after, as the zeros mode does.
  Tensor want_same = conv2d(F::pad(x, {0, 1, 0, 1}, "replicate"), replicate.weight, replicate.bias);
  expect_close(replicate(x), want_same);
}

TEST(NnConv1d, CircularPaddingWrapsAround) {
  nn::Conv1d conv(1, 1, 3, {.padding = 1, .bias = false, .padding_mode = "circular"});
  EXPECT_EQ(conv.weight.sizes(), (Shape{1, 1, 3}));
  nn::init::ones_(conv.weight);
  // [4 | 1 2 3 4 | 1] summed over windows of 3.
  expect_values(conv(f32({1, 2, 3, 4}, {1, 1, 4})), {7, 6, 9, 8});
}

TEST(NnConv2d, GradientsReachWeightAndBias) {
  nn::Conv2d conv(2, 3, 3, {.padding = 1});
  Tensor x = randn({2, 2, 4, 4}), m = randn({2, 3, 4, 4});
  (conv(x) * m).sum().backward();
  ASSERT_TRUE(conv.weight.grad().defined());
  EXPECT_EQ(conv.weight.grad().sizes(), conv.weight.sizes());
  expect_close(conv.bias.grad(), sum(m, {0, 2, 3}), 1e-4);
  // d/dw of sum(conv(x, w) * m) is linear in m: doubling m doubles it.
  Tensor once = conv.weight.grad().clone();
  conv.zero_grad();
  (conv(x) * (m * 2)).sum().backward();
  expect_close(conv.weight.grad(), once * 2, 1e-4);
}

TEST(NnConv2d, RejectsBadChannelsAndGroups) {
  expect_error_with<ValueError>([] { nn::Conv2d(3, 4, 3, {.groups = 2}); },
                                {"Conv2d", "3", "groups (2)"});
  expect_error_with<ValueError>([] { nn::Conv1d(2, 4, 0); }, {"Conv1d", "kernel_size"});
  expect_error_with<ValueError>([] { nn::Conv2d(2, 4, 3, {.padding_mode = "mirror"}); },
                                {"Conv2d", "padding_mode", "mirror"});
  nn::Conv2d conv(3, 4, 3);
  expect_error_with<ShapeError>(
      [&] {
        conv(zeros({1, 5, 8, 8}));
      },
      {"Conv2d", "5 channels", "expected 3"});
  expect_error_with<ShapeError>([&] { conv(zeros({8, 8})); }, {"Conv2d", "[8, 8]"});
  expect_error_with<ValueError>([] { nn::Conv2d(3, 4, {3, 3, 3}); }, {"ExpandingArray", "3"});
}

TEST(NnConv2d, PrintsLikePyTorch) {
  EXPECT_EQ(printed(nn::Conv2d(3, 16, 3, {.padding = 1})),
            "Conv2d(3, 16, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))");
  EXPECT_EQ(printed(nn::Conv2d(4, 8, {1, 3},
                               {.stride = 2, .dilation = {1, 2}, .groups = 4, .bias = false})),
            "Conv2d(4, 8, kernel_size=(1, 3), stride=(2, 2), dilation=(1, 2), groups=4, "
            "bias=False)");
  EXPECT_EQ(printed(nn::Conv1d(1, 8, 9, {.padding = 4, .padding_mode = "reflect"})),
            "Conv1d(1, 8, kernel_size=(9,), stride=(1,), padding=(4,), padding_mode=reflect)");
  EXPECT_EQ(printed(nn::Conv2d(2, 2, 3, {.padding = "same"})),
            "Conv2d(2, 2, kernel_size=(3, 3), stride=(1, 1), padding=same)");
}

// --- normalization ---------------------------------------------------------------------

TEST(NnBatchNorm, HasPyTorchsParametersBuffersAndStateDict) {
  nn::BatchNorm2d bn(3);
  EXPECT_EQ(names_of(bn.named_parameters()), (Names{"weight", "bias"}));
  EXPECT_EQ(names_of(bn.named_buffers()),
            (Names{"running_mean", "running_var", "num_batches_tracked"}));
  EXPECT_EQ(bn.state_dict().keys(),
            (Names{"weight", "bias", "running_mean", "running_var", "num_batches_tracked"}));
  expect_values(bn.weight, {1, 1, 1});
  expect_values(bn.bias, {0, 0, 0});
  expect_values(bn.running_mean, {0, 0, 0});
  expect_values(bn.running_var, {1, 1, 1});
  EXPECT_EQ(bn.num_batches_tracked.dtype(), kInt64);
  EXPECT_EQ(bn.num_batches_tracked.dim(), 0);
  nn::BatchNorm1d bare(3, {.affine = false, .track_running_stats = false});
  EXPECT_TRUE(bare.parameters().empty());
  EXPECT_TRUE(bare.buffers().empty());
  EXPECT_EQ(bare.state_dict().size(), 0u);
}

TEST(NnBatchNorm, TrainingUpdatesRunningStatisticsAndEvalUsesThem) {
  nn::BatchNorm1d bn(1);
  Tensor x = f32({1, 2, 3, 4}, {4, 1});
  const double s = std::sqrt(1.25 + 1e-5);  // biased variance of 1..4
  expect_values(bn(x), {-1.5 / s, -0.5 / s, 0.5 / s, 1.5 / s});
  expect_values(bn.running_mean, {0.25});
  expect_values(bn.running_var, {0.9 + 0.1 * 1.25 * 4 / 3});  // the unbiased variance
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 1);
  bn.eval();
  const double rv = 0.9 + 0.1 * 1.25 * 4 / 3;
  expect_values(bn(f32({2, 3}, {2, 1})),
                {(2 - 0.25) / std::sqrt(rv + 1e-5), (3 - 0.25) / std::sqrt(rv + 1e-5)});
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 1);  // eval counts nothing
  expect_values(bn.running_mean, {0.25});
}

TEST(NnBatchNorm, NoMomentumAveragesEveryBatchSeen) {
  nn::BatchNorm2d bn(2, {.momentum = std::nullopt});
  Tensor a = randn({3, 2, 4, 4}), b = randn({5, 2, 2, 2}) + 3;
  bn(a);
  bn(b);
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 2);
  Tensor want = (mean(a, {0, 2, 3}) + mean(b, {0, 2, 3})) / 2;
  expect_close(bn.running_mean, want);
  Tensor want_var = (var(a, {0, 2, 3}) + var(b, {0, 2, 3})) / 2;
  expect_close(bn.running_var, want_var, 1e-4);
}

TEST(NnBatchNorm, WithoutRunningStatsEvalNormalizesWithTheBatch) {
  nn::BatchNorm2d bn(2, {.track_running_stats = false});
  bn.eval();
  Tensor x = randn({4, 2, 3, 3});
  expect_close(bn(x), F::batch_norm(x, {}, {}, bn.weight, bn.bias, true));
}

TEST(NnBatchNorm, AffineParametersScaleAndShift) {
  nn::BatchNorm2d bn(2);
  nn::init::constant_(bn.weight, 2);
  nn::init::constant_(bn.bias, 1);
  Tensor x = randn({4, 2, 3, 3});
  Tensor plain = F::batch_norm(x, {}, {}, {}, {}, true);
  expect_close(bn(x), plain * 2 + 1, 1e-5);
}

TEST(NnBatchNorm, RejectsWrongDimsChannelsAndSingleValues) {
  nn::BatchNorm2d bn(3);
  expect_error_with<ShapeError>([&] { bn(zeros({2, 3, 4})); }, {"BatchNorm2d", "4-D", "[2, 3, 4]"});
  expect_error_with<ShapeError>([&] { bn(zeros({2, 4, 2, 2})); }, {"BatchNorm2d", "4", "3"});
  expect_error_with<ValueError>(
      [&] {
        bn(zeros({1, 3, 1, 1}));
      },
      {"BatchNorm2d", "more than 1 value"});
  nn::BatchNorm1d bn1(3);
  expect_error_with<ShapeError>([&] { bn1(zeros({2, 3, 4, 5})); }, {"BatchNorm1d", "2-D or 3-D"});
  expect_error_with<ValueError>([] { nn::BatchNorm1d(3, {.momentum = 2}); },
                                {"BatchNorm", "momentum"});
}

TEST(NnBatchNorm, ToFloat64KeepsTheBatchCounterAnInteger) {
  nn::BatchNorm1d bn(2);
  bn.to(kFloat64);
  EXPECT_EQ(bn.weight.dtype(), kFloat64);
  EXPECT_EQ(bn.running_var.dtype(), kFloat64);
  EXPECT_EQ(bn.num_batches_tracked.dtype(), kInt64);
  Tensor x = randn({4, 2}, {.dtype = kFloat64});
  EXPECT_EQ(bn(x).dtype(), kFloat64);
  expect_close(bn.running_mean, mean(x, {0}) * 0.1);
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 1);
}

TEST(NnBatchNorm, PrintsLikePyTorch) {
  EXPECT_EQ(printed(nn::BatchNorm2d(16)),
            "BatchNorm2d(16, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)");
  EXPECT_EQ(printed(nn::BatchNorm1d(4, {.eps = 1e-3, .momentum = std::nullopt, .affine = false})),
            "BatchNorm1d(4, eps=0.001, momentum=None, affine=False, track_running_stats=True)");
}

TEST(NnLayerNorm, NormalizesTheTrailingDimsWithItsParameters) {
  nn::LayerNorm ln(3);
  EXPECT_EQ(names_of(ln.named_parameters()), (Names{"weight", "bias"}));
  EXPECT_EQ(ln.weight.sizes(), (Shape{3}));
  nn::init::constant_(ln.weight, 2);
  nn::init::constant_(ln.bias, 1);
  // Row [1, 2, 3]: mean 2, biased variance 2/3.
  const double s = std::sqrt(2.0 / 3 + 1e-5);
  expect_values(ln(f32({1, 2, 3}, {1, 3})), {1 - 2 / s, 1, 1 + 2 / s});
  nn::LayerNorm two({2, 3}, {.eps = 1e-6});
  EXPECT_EQ(two.bias.sizes(), (Shape{2, 3}));
  Tensor x = randn({4, 2, 3});
  expect_close(two(x), F::layer_norm(x, {2, 3}, {}, {}, 1e-6));
  nn::LayerNorm bare(3, {.elementwise_affine = false});
  EXPECT_TRUE(bare.parameters().empty());
  nn::LayerNorm no_bias(3, {.bias = false});
  EXPECT_EQ(names_of(no_bias.named_parameters()), (Names{"weight"}));
  expect_error_with<ShapeError>([&] { ln(zeros({2, 4})); }, {"LayerNorm", "[2, 4]", "[3]"});
  EXPECT_EQ(printed(two), "LayerNorm((2, 3), eps=1e-06, elementwise_affine=True)");
  EXPECT_EQ(printed(ln), "LayerNorm((3,), eps=1e-05, elementwise_affine=True)");
}

// d/d bias of sum(y * m) is m summed over the normalized positions; d/d weight
// is x_hat * m summed the same way (x_hat: the normalized input).
TEST(NnLayerNorm, GradientsReachWeightAndBias) {
  nn::LayerNorm ln(3);
  Tensor x = randn({4, 3}), m = randn({4, 3});
  (ln(x) * m).sum().backward();
  ASSERT_TRUE(ln.weight.grad().defined());
  ASSERT_TRUE(ln.bias.grad().defined());
  Tensor x_hat;
  {
    NoGradGuard no_grad;
    x_hat = F::layer_norm(x, {3});
  }
  expect_close(ln.bias.grad(), sum(m, {0}));
  expect_close(ln.weight.grad(), sum(x_hat * m, {0}));
}

TEST(NnBatchNorm, GradientsReachWeightAndBias) {
  nn::BatchNorm2d bn(2);
  Tensor x = randn({3, 2, 2, 2}), m = randn({3, 2, 2, 2});
  (bn(x) * m).sum().backward();
  Tensor x_hat;
  {
    NoGradGuard no_grad;
    x_hat = F::batch_norm(x, {}, {}, {}, {}, true);
  }
  expect_close(bn.bias.grad(), sum(m, {0, 2, 3}));
  expect_close(bn.weight.grad(), sum(x_hat * m, {0, 2, 3}), 1e-4);
}

TEST(NnGroupNorm, MatchesTheFunctionalForm) {
  nn::GroupNorm gn(2, 4);
  EXPECT_EQ(names_of(gn.named_parameters()), (Names{"weight", "bias"}));
  expect_values(gn.weight, {1, 1, 1, 1});
  nn::init::uniform_(gn.weight);
  Tensor x = randn({3, 4, 5});
  expect_close(gn(x), F::group_norm(x, 2, gn.weight, gn.bias));
  expect_error_with<ValueError>([] { nn::GroupNorm(3, 4); }, {"GroupNorm", "4", "3"});
  expect_error_with<ShapeError>([&] { gn(zeros({2, 6, 2})); }, {"GroupNorm", "[2, 6, 2]"});
  EXPECT_EQ(printed(gn), "GroupNorm(2, 4, eps=1e-05, affine=True)");
  EXPECT_TRUE(nn::GroupNorm(2, 4, {.affine = false}).parameters().empty());
}

// --- embedding, dropout -----------------------------------------------------------------

TEST(NnEmbedding, LooksUpRowsAndStartsFromAStandardNormal) {
  manual_seed(3);
  nn::Embedding emb(1000, 16);
  EXPECT_EQ(names_of(emb.named_parameters()), (Names{"weight"}));
  EXPECT_EQ(emb.weight.sizes(), (Shape{1000, 16}));
  EXPECT_NEAR(mean_of(emb.weight), 0, 0.05);
  EXPECT_NEAR(std_of(emb.weight), 1, 0.05);
  Tensor idx = from_vector<int64_t>({3, 0, 3, 999}, Shape{2, 2});
  Tensor y = emb(idx);
  EXPECT_EQ(y.sizes(), (Shape{2, 2, 16}));
  expect_close(y.select(0, 0).select(0, 0), emb.weight.select(0, 3));
  expect_close(y.select(0, 1).select(0, 1), emb.weight.select(0, 999));
  EXPECT_EQ(printed(emb), "Embedding(1000, 16)");
}

TEST(NnEmbedding, GradientsSkipThePaddingRow) {
  nn::Embedding emb(4, 2, {.padding_idx = 0});
  emb(from_vector<int64_t>({0, 2, 2, 3})).sum().backward();
  expect_values(emb.weight.grad(), {0, 0, 0, 0, 2, 2, 1, 1});
}

TEST(NnEmbedding, PaddingRowStartsAtZero) {
  nn::Embedding emb(5, 3, {.padding_idx = -1});
  EXPECT_EQ(emb.padding_idx, 4);
  expect_values(emb.weight.select(0, 4), {0, 0, 0});
  EXPECT_GT(max_abs(emb.weight.select(0, 0)), 0);
  EXPECT_EQ(printed(emb), "Embedding(5, 3, padding_idx=4)");
  expect_error_with<ValueError>([] { nn::Embedding(5, 3, {.padding_idx = 5}); },
                                {"Embedding", "padding_idx", "5"});
}

TEST(NnEmbedding, FromPretrainedSharesTheDataAndFreezesByDefault) {
  Tensor vectors = f32({1, 2, 3, 4, 5, 6}, {3, 2});
  nn::Embedding frozen = nn::Embedding::from_pretrained(vectors);
  EXPECT_EQ(frozen.num_embeddings, 3);
  EXPECT_EQ(frozen.embedding_dim, 2);
  EXPECT_TRUE(frozen.weight.shares_storage(vectors));
  EXPECT_FALSE(frozen.weight.requires_grad());
  EXPECT_EQ(frozen.parameters().size(), 1u);
  expect_values(frozen(from_vector<int64_t>({2, 0})), {5, 6, 1, 2});
  nn::Embedding tuned =
      nn::Embedding::from_pretrained(vectors, {.freeze = false, .padding_idx = 0});
  EXPECT_TRUE(tuned.weight.requires_grad());
  expect_values(tuned.weight.select(0, 0), {1, 2});  // pretrained rows are kept
  expect_error_with<ShapeError>([] { nn::Embedding::from_pretrained(zeros({4})); },
                                {"from_pretrained", "[4]"});
}

TEST(NnDropout, ZeroesAndScalesWhenTrainingAndPassesThroughInEval) {
  nn::Dropout drop(0.25);
  Tensor x = ones({4000});
  Tensor y = drop(x);
  auto values = y.to_vector<float>();
  int64_t zeros_seen = 0;
  for (float v : values) {
    if (v == 0) {
      ++zeros_seen;
    } else {
      EXPECT_FLOAT_EQ(v, 1 / 0.75f);
    }
  }
  EXPECT_NEAR(static_cast<double>(zeros_seen) / 4000, 0.25, 0.03);
  drop.eval();
  EXPECT_EQ(drop(x).impl_ptr(), x.impl_ptr());
  EXPECT_EQ(printed(drop), "Dropout(p=0.25)");
  expect_error_with<ValueError>([] { nn::Dropout(1.5); }, {"Dropout", "1.5"});
}

TEST(NnDropout, GradientIsTheMaskScaled) {
  nn::Dropout drop(0.5);
  Tensor x = ones({256}).requires_grad_();
  Tensor y = drop(x);
  y.sum().backward();
  expect_close(x.grad(), y.detach());  // 0 where dropped, 2 where kept
}

TEST(NnDropout, DrawsFromItsGenerator) {
  Generator a(7), b(7);
  nn::Dropout first(0.5, &a), second(0.5, &b);
  Tensor x = ones({64});
  expect_close(first(x), second(x));
}

// --- activations -------------------------------------------------------------------------

TEST(NnActivations, ComputeTheirFunctions) {
  Tensor x = f32({-2, -0.5, 0, 1.5}, {4});
  expect_values(nn::ReLU()(x), {0, 0, 0, 1.5});
  expect_values(nn::LeakyReLU(0.1)(x), {-0.2, -0.05, 0, 1.5});
  expect_values(nn::Sigmoid()(x),
                {1 / (1 + std::exp(2.0)), 1 / (1 + std::exp(0.5)), 0.5, 1 / (1 + std::exp(-1.5))});
  expect_values(nn::Tanh()(x), {std::tanh(-2.0), std::tanh(-0.5), 0, std::tanh(1.5)});
  expect_values(nn::SiLU()(x), {-2 / (1 + std::exp(2.0)), -0.5 / (1 + std::exp(0.5)), 0,
                                1.5 / (1 + std::exp(-1.5))});
  auto gelu_erf = [](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); };
  expect_values(nn::GELU()(x), {gelu_erf(-2), gelu_erf(-0.5), 0, gelu_erf(1.5)});
  auto gelu_tanh = [](double v) {
    return 0.5 * v * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (v + 0.044715 * v * v * v)));
  };
  expect_values(nn::GELU("tanh")(x), {gelu_tanh(-2), gelu_tanh(-0.5), 0, gelu_tanh(1.5)});
  Tensor m = f32({0, std::log(3.0f), 1, 1}, {2, 2});
  expect_values(nn::Softmax(1)(m), {0.25, 0.75, 0.5, 0.5});
  expect_values(nn::LogSoftmax(-1)(m),
                {std::log(0.25), std::log(0.75), std::log(0.5), std::log(0.5)});
}

// The activations PyTorch's mobile and vision nets use, against their
// formulas in double; NaN kept.
TEST(NnActivations, ComputeTheOtherActivationsOfPyTorch) {
  const std::vector<double> v = {-4, -2, -0.5, 0, 1.5, 3.5, 7};
  Tensor x = f32({-4, -2, -0.5, 0, 1.5, 3.5, 7}, {7});
  const auto each = [&](auto f) {
    std::vector<double> out;
    for (double e : v) out.push_back(f(e));
    return out;
  };
  const auto relu6 = [](double e) { return std::min(std::max(e, 0.0), 6.0); };
  expect_values(nn::Hardtanh()(x), each([](double e) { return std::min(std::max(e, -1.0), 1.0); }));
  expect_values(nn::Hardtanh(-2, 0.5)(x),
                each([](double e) { return std::min(std::max(e, -2.0), 0.5); }));
  expect_values(nn::ReLU6()(x), each(relu6));
  expect_values(nn::ELU(0.5)(x), each([](double e) { return e > 0 ? e : 0.5 * std::expm1(e); }));
  expect_values(nn::Softplus()(x), each([](double e) { return std::log1p(std::exp(e)); }));
  expect_values(nn::Softplus(2, 3)(x),
                each([](double e) { return 2 * e > 3 ? e : std::log1p(std::exp(2 * e)) / 2; }));
  expect_values(nn::Hardsigmoid()(x), each([&](double e) { return relu6(e + 3) / 6; }));
  expect_values(nn::Hardswish()(x), each([&](double e) { return e * relu6(e + 3) / 6; }));
  expect_values(nn::Mish()(x),
                each([](double e) { return e * std::tanh(std::log1p(std::exp(e))); }));
  const Tensor nan = f32({std::nanf("")}, {1});
  for (const Tensor& y :
       {nn::Hardtanh()(nan), nn::ReLU6()(nan), nn::ELU()(nan), nn::Softplus()(nan),
        nn::Hardsigmoid()(nan), nn::Hardswish()(nan), nn::Mish()(nan), nn::LeakyReLU()(nan)})
    EXPECT_TRUE(std::isnan(y.item<double>()));
  expect_error_with<ValueError>([] { nn::Hardtanh(2, 1); }, {"Hardtanh", "min_val 2", "1"});
  expect_error_with<ValueError>([&] { hardtanh(x, 1, -1); },
                                {"hardtanh", "min_val 1", "max_val -1"});
}

TEST(NnActivations, LeakyReLUPassesGradientsThroughBothBranches) {
  Tensor x = f32({-2, 3}, {2}).requires_grad_();
  nn::LeakyReLU(0.2)(x).sum().backward();
  expect_values(x.grad(), {0.2, 1});
}

TEST(NnActivations, PrintLikePyTorch) {
  EXPECT_EQ(printed(nn::ReLU()), "ReLU()");
  EXPECT_EQ(printed(nn::GELU("tanh")), "GELU(approximate='tanh')");
  EXPECT_EQ(printed(nn::LeakyReLU()), "LeakyReLU(negative_slope=0.01)");
  EXPECT_EQ(printed(nn::Hardtanh()), "Hardtanh(min_val=-1.0, max_val=1.0)");
  EXPECT_EQ(printed(nn::ReLU6()), "ReLU6()");
  EXPECT_EQ(printed(nn::ELU()), "ELU(alpha=1.0)");
  EXPECT_EQ(printed(nn::Softplus()), "Softplus(beta=1.0, threshold=20.0)");
  EXPECT_EQ(printed(nn::Hardswish()), "Hardswish()");
  EXPECT_EQ(printed(nn::Mish()), "Mish()");
  EXPECT_EQ(printed(nn::Softmax(1)), "Softmax(dim=1)");
  EXPECT_EQ(printed(nn::LogSoftmax(-1)), "LogSoftmax(dim=-1)");
  expect_error_with<ValueError>([] { nn::GELU("fast"); }, {"GELU", "fast"});
}

// --- pooling, flatten ---------------------------------------------------------------------

TEST(NnPooling, MatchTheFunctionalForms) {
  Tensor x = arange(0, 16, 1, {.dtype = kFloat32}).reshape({1, 1, 4, 4});
  expect_values(nn::MaxPool2d(2)(x), {5, 7, 13, 15});
  expect_values(nn::AvgPool2d(2)(x), {2.5, 4.5, 10.5, 12.5});
  expect_values(nn::AdaptiveAvgPool2d(1)(x), {7.5});
  Tensor y = randn({2, 3, 7, 6});
  expect_close(nn::MaxPool2d({3, 2}, {.stride = 2, .padding = 1})(y),
               max_pool2d(y, {3, 2}, {2}, {1}));
  expect_close(nn::AvgPool2d(3, {.stride = 1, .padding = 1, .count_include_pad = false})(y),
               avg_pool2d(y, {3}, {1}, {1}, false, false));
  expect_close(nn::AdaptiveAvgPool2d({2, 3})(y), adaptive_avg_pool2d(y, {2, 3}));
  EXPECT_EQ(nn::Flatten()(y).sizes(), (Shape{2, 126}));
  EXPECT_EQ(nn::Flatten(0, 1)(y).sizes(), (Shape{6, 7, 6}));
}

TEST(NnPooling, PrintLikePyTorch) {
  EXPECT_EQ(printed(nn::MaxPool2d(2)),
            "MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)");
  EXPECT_EQ(printed(nn::MaxPool2d({3, 2}, {.stride = 1, .ceil_mode = true})),
            "MaxPool2d(kernel_size=(3, 2), stride=1, padding=0, dilation=1, ceil_mode=True)");
  EXPECT_EQ(printed(nn::AvgPool2d(3, {.padding = 1})),
            "AvgPool2d(kernel_size=3, stride=3, padding=1)");
  EXPECT_EQ(printed(nn::AdaptiveAvgPool2d({2, 3})), "AdaptiveAvgPool2d(output_size=(2, 3))");
  EXPECT_EQ(printed(nn::Flatten()), "Flatten(start_dim=1, end_dim=-1)");
  expect_error_with<ValueError>([] { nn::MaxPool2d(0); }, {"MaxPool2d", "kernel_size"});
}

// --- containers -----------------------------------------------------------------------------

TEST(NnSequential, ChainsItsModulesAndNamesThemByPosition) {
  nn::Linear member(4, 8);
  nn::Sequential seq(std::make_shared<nn::ReLU>());
  seq.push_back(member);
  seq.emplace_back<nn::Linear>(8, 2);
  EXPECT_EQ(seq.size(), 3u);
  EXPECT_EQ(names_of(seq.named_parameters()), (Names{"1.weight", "1.bias", "2.weight", "2.bias"}));
  Tensor x = randn({3, 4});
  auto& last = seq.at<nn::Linear>(2);
  expect_close(seq(x), last(member(relu(x))));
  EXPECT_EQ(&seq[1], &member);
  expect_error_with<IndexError>([&] { seq[3]; }, {"Sequential", "3"});
  expect_error_with<ValueError>([&] { seq.at<nn::Conv2d>(0); }, {"Sequential", "ReLU", "Conv2d"});
  EXPECT_EQ(printed(seq),
            "Sequential(\n"
            "  (0): ReLU()\n"
            "  (1): Linear(in_features=4, out_features=8, bias=True)\n"
            "  (2): Linear(in_features=8, out_features=2, bias=True)\n"
            ")");
}

TEST(NnSequential, NestsAndPropagatesTheMode) {
  nn::Sequential outer;
  auto& inner = outer.emplace_back<nn::Sequential>(std::make_shared<nn::Linear>(2, 2),
                                                   std::make_shared<nn::Dropout>(0.5));
  outer.eval();
  EXPECT_FALSE(inner.at<nn::Dropout>(1).is_training());
  EXPECT_EQ(names_of(outer.named_parameters()), (Names{"0.0.weight", "0.0.bias"}));
  Tensor x = ones({1, 2});
  expect_close(outer(x), inner.at<nn::Linear>(0)(x));
}

TEST(NnModuleList, HoldsModulesWithoutAForward) {
  nn::ModuleList list;
  for (int i = 0; i < 3; ++i) list.emplace_back<nn::Linear>(2, 2);
  EXPECT_EQ(list.size(), 3u);
  EXPECT_EQ(names_of(list.named_parameters()).back(), "2.bias");
  Tensor x = randn({1, 2}), y = x;
  for (nn::Module* m : list) y = static_cast<nn::Linear*>(m)->forward(y);
  Tensor want = list.at<nn::Linear>(2)(list.at<nn::Linear>(1)(list.at<nn::Linear>(0)(x)));
  expect_close(y, want);
  expect_error_with<IndexError>([&] { list[5]; }, {"ModuleList", "5"});
}

TEST(NnModuleList, PrintsRunsOfEqualModulesOnceAsPyTorchDoes) {
  nn::ModuleList list;
  EXPECT_EQ(printed(list), "ModuleList()");
  for (int i = 0; i < 3; ++i) list.emplace_back<nn::Linear>(2, 2);
  list.emplace_back<nn::ReLU>();
  list.emplace_back<nn::Sequential>(std::make_shared<nn::ReLU>());
  EXPECT_EQ(printed(list),
            "ModuleList(\n"
            "  (0-2): 3 x Linear(in_features=2, out_features=2, bias=True)\n"
            "  (3): ReLU()\n"
            "  (4): Sequential(\n"
            "    (0): ReLU()\n"
            "  )\n"
            ")");
}

TEST(NnModuleDict, KeepsInsertionOrderAndFindsByName) {
  nn::ModuleDict dict;
  nn::ReLU act;
  dict.emplace<nn::Linear>("proj", 3, 4);
  dict.insert("act", act);
  dict.insert("norm", std::make_shared<nn::LayerNorm>(4));
  EXPECT_EQ(dict.keys(), (Names{"proj", "act", "norm"}));
  EXPECT_TRUE(dict.contains("act"));
  EXPECT_FALSE(dict.contains("head"));
  EXPECT_EQ(&dict["act"], &act);
  EXPECT_EQ(dict.at<nn::Linear>("proj").out_features, 4);
  EXPECT_EQ(names_of(dict.named_parameters()),
            (Names{"proj.weight", "proj.bias", "norm.weight", "norm.bias"}));
  expect_error_with<ValueError>([&] { dict["head"]; }, {"ModuleDict", "head", "proj"});
  expect_error_with<ValueError>([&] { dict.emplace<nn::ReLU>("act"); }, {"act", "already"});
  EXPECT_EQ(dict.size(), 3u);
}

// --- the design's example network --------------------------------------------------------

struct DesignNet : nn::Module {
  nn::Conv2d conv{3, 16, 3, {.padding = 1}};
  nn::BatchNorm2d bn{16};
  nn::Linear fc{16, 10};
  DesignNet() {
    register_module("conv", conv);
    register_module("bn", bn);
    register_module("fc", fc);
  }
  Tensor forward(const Tensor& x) {
    return fc(adaptive_avg_pool2d(relu(bn(conv(x))), {1}).flatten(1));
  }
};

TEST(NnDesignNet, RunsAndPrintsLikePyTorch) {
  DesignNet net;
  EXPECT_EQ(net.forward(randn({2, 3, 8, 8})).sizes(), (Shape{2, 10}));
  EXPECT_EQ(net.state_dict().size(), 2u + 5u + 2u);
  EXPECT_EQ(printed(net),
            "DesignNet(\n"
            "  (conv): Conv2d(3, 16, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))\n"
            "  (bn): BatchNorm2d(16, eps=1e-05, momentum=0.1, affine=True, "
            "track_running_stats=True)\n"
            "  (fc): Linear(in_features=16, out_features=10, bias=True)\n"
            ")");
}

TEST(NnDesignNet, BackwardReachesEveryParameter) {
  DesignNet net;
  Tensor loss =
      F::cross_entropy(net.forward(randn({4, 3, 6, 6})), from_vector<int64_t>({0, 3, 9, 1}));
  loss.backward();
  for (const auto& [name, p] : net.named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << name;
    EXPECT_EQ(p.grad().sizes(), p.sizes()) << name;
    // Training-mode BatchNorm subtracts the batch mean, so the conv bias before
    // it cannot change the loss: its gradient vanishes.
    if (name == "conv.bias") {
      EXPECT_LT(max_abs(p.grad()), 1e-5);
    } else {
      EXPECT_GT(max_abs(p.grad()), 0) << name;
    }
  }
}

// --- nn::init ------------------------------------------------------------------------------

TEST(NnInit, GainsAndFansFollowPyTorch) {
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain("linear"), 1);
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain("conv2d"), 1);
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain("tanh"), 5.0 / 3);
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain("relu"), std::sqrt(2.0));
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain("leaky_relu"), std::sqrt(2 / (1 + 1e-4)));
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain("leaky_relu", std::sqrt(5.0)), std::sqrt(1.0 / 3));
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain("selu"), 0.75);
  expect_error_with<ValueError>([] { nn::init::calculate_gain("swish"); },
                                {"calculate_gain", "swish"});
  auto fans = nn::init::calculate_fan_in_and_fan_out(empty({16, 3, 5, 5}));
  EXPECT_EQ(fans.fan_in, 75);
  EXPECT_EQ(fans.fan_out, 400);
  expect_error_with<ValueError>([] { nn::init::calculate_fan_in_and_fan_out(empty({4})); },
                                {"calculate_fan_in_and_fan_out", "[4]"});
}

TEST(NnInit, UniformAndNormalHaveTheirMoments) {
  Tensor t = empty({200, 100});
  nn::init::uniform_(t, -3, 1);
  EXPECT_GE(amin(t).item<double>(), -3);
  EXPECT_LT(amax(t).item<double>(), 1);
  EXPECT_NEAR(mean_of(t), -1, 0.05);
  nn::init::normal_(t, 2, 0.5);
  EXPECT_NEAR(mean_of(t), 2, 0.02);
  EXPECT_NEAR(std_of(t), 0.5, 0.02);
  Tensor d = empty({1000}, {.dtype = kFloat64});
  nn::init::normal_(d);
  EXPECT_EQ(d.dtype(), kFloat64);
  EXPECT_NEAR(std_of(d), 1, 0.1);
  expect_error_with<DTypeError>([] { nn::init::uniform_(zeros({2}, {.dtype = kInt64})); },
                                {"uniform_", "int64"});
}

TEST(NnInit, XavierAndKaimingUseTheirBoundsAndStds) {
  Tensor w = empty({300, 200});
  nn::init::xavier_uniform_(w, 2);
  const double xb = 2 * std::sqrt(6.0 / 500);
  EXPECT_LE(max_abs(w), xb);
  EXPECT_GT(max_abs(w), 0.99 * xb);
  nn::init::xavier_normal_(w);
  EXPECT_NEAR(std_of(w), std::sqrt(2.0 / 500), 0.002);
  nn::init::kaiming_uniform_(w, 0, "fan_in", "relu");
  const double kb = std::sqrt(2.0) * std::sqrt(3.0 / 200);
  EXPECT_LE(max_abs(w), kb);
  EXPECT_GT(max_abs(w), 0.99 * kb);
  nn::init::kaiming_normal_(w, 0, "fan_out", "relu");
  EXPECT_NEAR(std_of(w), std::sqrt(2.0 / 300), 0.002);
  expect_error_with<ValueError>([&] { nn::init::kaiming_normal_(w, 0, "fan_avg"); },
                                {"kaiming_normal_", "fan_avg"});
}

TEST(NnInit, TruncNormalStaysInsideItsBounds) {
  Tensor t = empty({20000});
  nn::init::trunc_normal_(t, 1, 2, -1, 2);
  EXPECT_GE(amin(t).item<double>(), -1);
  EXPECT_LE(amax(t).item<double>(), 2);
  // N(0, 1) cut to [-2, 2] has variance 1 - 4 phi(2) / (2 Phi(2) - 1) = 0.7737.
  nn::init::trunc_normal_(t);
  EXPECT_NEAR(mean_of(t), 0, 0.02);
  EXPECT_NEAR(std_of(t), std::sqrt(0.7737), 0.01);
  EXPECT_LE(amax(abs(t)).item<double>(), 2);
}

TEST(NnInit, WorksOnParametersAndFollowsTheGenerator) {
  nn::Linear fc(4, 4);
  Generator a(11), b(11);
  nn::init::kaiming_normal_(fc.weight, 0, "fan_in", "leaky_relu", &a);
  Tensor first = fc.weight.clone();
  nn::init::kaiming_normal_(fc.weight, 0, "fan_in", "leaky_relu", &b);
  expect_close(fc.weight, first, 0);
  EXPECT_TRUE(fc.weight.requires_grad());
  EXPECT_TRUE(fc.weight.is_leaf());
  nn::init::constant_(fc.bias, 0.5);
  expect_values(fc.bias, {0.5, 0.5, 0.5, 0.5});
  nn::init::zeros_(fc.weight);
  EXPECT_EQ(max_abs(fc.weight), 0);
}

}  // namespace
}  // namespace kiln
