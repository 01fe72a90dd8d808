// Semantics (against hand-computed, PyTorch-documented values) and error paths
// of the network functions.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>

#include "core/philox.h"
#include "kiln/kiln.h"
#include "kiln/ops/nn.h"
#include "ops/dispatch.h"
#include "unit/expect_error.h"

using kiln::testing::expect_error;
using kiln::testing::expect_error_with;

using namespace kiln;
namespace F = kiln::nn::functional;
using ops::OpId;

namespace {

// Runs f on the CPU kernels and on the reference kernels.
void on_both_backends(const std::function<void()>& f) {
  f();
  ops::ReferenceModeGuard reference;
  f();
}

void expect_near_all(const Tensor& t, const std::vector<double>& expected, double tol = 1e-5) {
  const auto v = t.to_vector<double>();
  ASSERT_EQ(v.size(), expected.size());
  for (size_t i = 0; i < v.size(); ++i) EXPECT_NEAR(v[i], expected[i], tol) << "element " << i;
}

Tensor f32(const std::vector<float>& v, Shape s) { return from_vector<float>(v, s); }
Tensor i64(const std::vector<int64_t>& v, Shape s) { return from_vector<int64_t>(v, s); }

}  // namespace

// --- batch_norm -------------------------------------------------------------------------

TEST(BatchNorm, NormalizesWithBatchStatisticsAndUpdatesRunningStats) {
  on_both_backends([] {
    auto x = f32({1, 2, 3, 4}, {4, 1});
    auto rm = zeros({1}), rv = ones({1});
    auto y = F::batch_norm(x, rm, rv, {}, {}, /*training=*/true, 0.1, 0.0);
    const double s = std::sqrt(1.25);  // biased variance of 1..4
    expect_near_all(y, {-1.5 / s, -0.5 / s, 0.5 / s, 1.5 / s});
    expect_near_all(rm, {0.25});
    expect_near_all(rv, {0.9 + 0.1 * 1.25 * 4 / 3});  // running_var takes the unbiased variance
  });
}

TEST(BatchNorm, EvalNormalizesWithRunningStatistics) {
  on_both_backends([] {
    auto x = f32({3, 5}, {2, 1});
    auto y = F::batch_norm(x, f32({1}, {1}), f32({4}, {1}), f32({2}, {1}), f32({1}, {1}), false,
                           0.1, 0.0);
    expect_near_all(y, {3, 5});  // (x - 1) / 2 * 2 + 1
  });
}

TEST(BatchNorm, OpReturnsBatchMeanAndBiasedVariance) {
  on_both_backends([] {
    auto x = f32({1, 10, 3, 20}, {2, 2});
    Tensor inputs[] = {x, Tensor(), Tensor(), Tensor(), Tensor()};
    auto out = ops::dispatch(OpId::batch_norm, inputs, {true, 1e-5});
    ASSERT_EQ(out.size(), 3u);
    expect_near_all(out[1], {2, 15});
    expect_near_all(out[2], {1, 25});
  });
}

TEST(BatchNorm, LeavesRunningStatsAloneInEval) {
  auto rm = f32({1}, {1}), rv = f32({4}, {1});
  F::batch_norm(f32({3, 5}, {2, 1}), rm, rv);
  expect_near_all(rm, {1});
  expect_near_all(rv, {4});
}

TEST(BatchNorm, RejectsEvalWithoutRunningStats) {
  expect_error<ValueError>([] { F::batch_norm(ones({2, 3}), {}, {}); }, "batch_norm");
}

TEST(BatchNorm, RejectsOneValuePerChannelWhenTraining) {
  expect_error<ValueError>(
      [] {
        F::batch_norm(ones({1, 3}), {}, {}, {}, {}, true);
      },
      "batch_norm", "more than 1 value");
}

TEST(BatchNorm, RejectsParametersOfWrongShape) {
  expect_error<ShapeError>(
      [] {
        F::batch_norm(ones({2, 3}), zeros({4}), ones({3}));
      },
      "batch_norm", "[4]");
}

TEST(BatchNorm, RejectsInputWithoutChannelDim) {
  expect_error<ShapeError>([] { F::batch_norm(ones({3}), zeros({3}), ones({3})); }, "batch_norm");
}

TEST(BatchNorm, RejectsIntegerInput) {
  expect_error<DTypeError>(
      [] {
        F::batch_norm(ones({2, 3}, {.dtype = kInt32}), zeros({3}), ones({3}));
      },
      "batch_norm");
}

// --- layer_norm and group_norm ------------------------------------------------------------

TEST(LayerNorm, NormalizesTrailingDimsWithAffine) {
  on_both_backends([] {
    auto y = F::layer_norm(f32({1, 2, 3, 4}, {1, 4}), {4}, f32({1, 1, 2, 2}, {4}),
                           f32({0, 0, 0, 1}, {4}), 0.0);
    const double s = std::sqrt(1.25);
    expect_near_all(y, {-1.5 / s, -0.5 / s, 1.0 / s, 3.0 / s + 1});
  });
}

TEST(LayerNorm, KeepsPrecisionUnderALargeOffset) {
  // float32 values 10000 + k / 8 are exact; their spread is tiny against the offset.
  std::vector<float> v;
  for (int k = 0; k < 4096; ++k) v.push_back(10000.f + static_cast<float>(k % 16) / 8.f);
  auto y = F::layer_norm(f32(v, {1, 4096}), {4096}, {}, {}, 0.0).to_vector<double>();
  double mean = 0, var = 0;
  for (float x : v) mean += x / 4096.0;
  for (float x : v) var += (x - mean) * (x - mean) / 4096.0;
  for (size_t i = 0; i < v.size(); ++i) ASSERT_NEAR(y[i], (v[i] - mean) / std::sqrt(var), 1e-4);
}

TEST(LayerNorm, RejectsNormalizedShapeNotMatchingTrailingDims) {
  expect_error<ShapeError>([] { F::layer_norm(ones({2, 3}), {2}); }, "layer_norm", "[2, 3]");
  expect_error<ShapeError>([] { F::layer_norm(ones({3}), {2, 3}); }, "layer_norm");
  expect_error<ShapeError>([] { F::layer_norm(ones({3}), {}); }, "layer_norm");
}

TEST(LayerNorm, RejectsWeightOfWrongShape) {
  expect_error<ShapeError>([] { F::layer_norm(ones({2, 3}), {3}, ones({2})); }, "layer_norm");
}

TEST(GroupNorm, NormalizesEachGroupOfChannels) {
  on_both_backends([] {
    auto y = F::group_norm(f32({1, 2, 3, 5}, {1, 4, 1}), 2, {}, f32({0, 0, 1, 1}, {4}), 0.0);
    expect_near_all(y, {-1, 1, 0, 2});
  });
}

TEST(GroupNorm, RejectsChannelsNotDivisibleByGroups) {
  expect_error<ShapeError>([] { F::group_norm(ones({2, 6, 3}), 4); }, "group_norm", "4 groups");
}

TEST(GroupNorm, RejectsNonPositiveGroups) {
  expect_error<ValueError>([] { F::group_norm(ones({2, 6, 3}), 0); }, "group_norm");
}

TEST(GroupNorm, RejectsBiasOfWrongShape) {
  expect_error<ShapeError>([] { F::group_norm(ones({2, 6}), 3, {}, ones({3})); }, "group_norm");
}

// --- embedding ------------------------------------------------------------------------------

TEST(Embedding, GathersRowsOfAnyDtype) {
  on_both_backends([] {
    auto w = arange(6).view({3, 2});
    auto y = F::embedding(from_vector<int32_t>({2, 0, 2}, Shape{3, 1}), w, /*padding_idx=*/0);
    EXPECT_EQ(y.sizes(), (Shape{3, 1, 2}));
    EXPECT_EQ(y.dtype(), kInt64);
    EXPECT_EQ(y.to_vector<int64_t>(), (std::vector<int64_t>{4, 5, 0, 1, 4, 5}));
  });
}

TEST(Embedding, RejectsIndicesOutOfRangeNamingIndexAndSize) {
  on_both_backends([] {
    expect_error<IndexError>(
        [] {
          F::embedding(i64({1, 5}, {2}), ones({3, 2}));
        },
        "embedding", "index 5 is out of range for 3");
    expect_error<IndexError>([] { F::embedding(i64({-1}, {1}), ones({3, 2})); }, "embedding", "-1");
  });
}

TEST(Embedding, RejectsABadIndexAmongManyWithoutAborting) {
  auto idx = zeros({200000}, {.dtype = kInt64});
  idx.index({Slice(199999)}).fill_(7);
  expect_error<IndexError>([&] { F::embedding(idx, ones({7, 4})); }, "embedding", "7");
}

TEST(Embedding, RejectsNonIntegerIndicesAndNonMatrixWeight) {
  expect_error<DTypeError>([] { F::embedding(ones({2}), ones({3, 2})); }, "embedding");
  expect_error<ShapeError>([] { F::embedding(i64({0}, {1}), ones({3})); }, "embedding");
}

TEST(Embedding, RejectsPaddingIdxOutOfRange) {
  expect_error<IndexError>([] { F::embedding(i64({0}, {1}), ones({3, 2}), 3); }, "embedding");
  expect_error<IndexError>([] { F::embedding(i64({0}, {1}), ones({3, 2}), -4); }, "embedding");
}

// --- dropout --------------------------------------------------------------------------------

TEST(Dropout, ReturnsInputWhenNotTrainingOrPZero) {
  auto x = ones({5});
  EXPECT_TRUE(F::dropout(x, 0.5, false).shares_storage(x));
  EXPECT_TRUE(F::dropout(x, 0.0).shares_storage(x));
}

// Sizes and offsets on both sides of the CPU's 64-element blocks of Philox
// blocks computed side by side, and p at a uniform's exact value (0.5).
TEST(Dropout, KeepsElementsWhosePhiloxUniformIsAtLeastP) {
  on_both_backends([] {
    for (const double p : {0.4, 0.5}) {
      for (const uint64_t offset : {2, 10, 12}) {  // offsets are even (Generator::advance)
        for (const int64_t n : {int64_t{64}, int64_t{67}, int64_t{300}, int64_t{40001}}) {
          Generator g(42);
          g.advance(offset);  // the op starts at this offset
          auto y = F::dropout(ones({n}), p, true, &g).to_vector<float>();
          const auto scale = static_cast<float>(1 / (1 - p));
          for (size_t i = 0; i < y.size(); ++i) {
            const bool keep = static_cast<double>(philox::uniform_f32(42, offset + i)) >= p;
            ASSERT_FLOAT_EQ(y[i], keep ? scale : 0.f)
                << "p " << p << ", offset " << offset << ", n " << n << ", element " << i;
          }
        }
      }
    }
  });
}

TEST(Dropout, ZeroesAboutAFractionPAndAdvancesTheGenerator) {
  Generator g(3);
  auto a = F::dropout(ones({100000}), 0.3, true, &g);
  auto b = F::dropout(ones({100000}), 0.3, true, &g);
  const auto va = a.to_vector<float>(), vb = b.to_vector<float>();
  int zeros_a = 0, differ = 0;
  for (size_t i = 0; i < va.size(); ++i) {
    zeros_a += va[i] == 0;
    differ += va[i] != vb[i];
  }
  EXPECT_NEAR(zeros_a / 100000.0, 0.3, 0.01);
  EXPECT_GT(differ, 10000);
}

TEST(Dropout, WithPOneGivesZeros) {
  auto y = F::dropout(full({7}, 3.0), 1.0).to_vector<float>();
  EXPECT_EQ(y, std::vector<float>(7, 0.f));
}

TEST(Dropout, RejectsProbabilityOutsideTheUnitInterval) {
  expect_error<ValueError>([] { F::dropout(ones({3}), 1.5); }, "dropout", "1.5");
  expect_error<ValueError>([] { F::dropout(ones({3}), -0.1, false); }, "dropout");
  expect_error<ValueError>(
      [] {
        ops::dispatch1(OpId::dropout, {ones({3})}, {2.0, int64_t{0}, int64_t{0}});
      },
      "dropout");
}

TEST(Dropout, RejectsIntegerInput) {
  expect_error<DTypeError>([] { F::dropout(ones({3}, {.dtype = kInt64}), 0.5); }, "dropout");
}

// --- scaled_dot_product_attention -------------------------------------------------------------

TEST(Attention, WeightsValuesBySoftmaxOfScores) {
  on_both_backends([] {
    auto q = f32({1}, {1, 1}), k = f32({0, static_cast<float>(std::log(3.0))}, {2, 1});
    auto y = F::scaled_dot_product_attention(q, k, f32({4, 8}, {2, 1}), {.scale = 1.0});
    expect_near_all(y, {0.25 * 4 + 0.75 * 8});
  });
}

TEST(Attention, DefaultScaleIsInverseSqrtOfHeadDim) {
  auto q = ones({1, 4}), k = f32({0, 0, 0, 0, 1, 1, 1, 1}, {2, 4});
  auto y = F::scaled_dot_product_attention(q, k, f32({0, 1}, {2, 1}));
  const double w1 = std::exp(2.0) / (1 + std::exp(2.0));  // scores 0 and 4 / sqrt(4)
  expect_near_all(y, {w1});
}

TEST(Attention, CausalMaskIsTopLeftAligned) {
  on_both_backends([] {
    auto y = F::scaled_dot_product_attention(zeros({2, 1}), zeros({3, 1}), f32({3, 6, 9}, {3, 1}),
                                             {.is_causal = true});
    expect_near_all(y, {3, 4.5});
  });
}

TEST(Attention, BoolMaskExcludesKeysAndAFullyMaskedRowIsZero) {
  on_both_backends([] {
    auto mask = from_vector<bool>({true, false, false, false}, Shape{2, 2});
    auto y = F::scaled_dot_product_attention(zeros({2, 1}), zeros({2, 1}), f32({5, 7}, {2, 1}),
                                             {.attn_mask = mask})
                 .to_vector<float>();
    EXPECT_FLOAT_EQ(y[0], 5.f);
    EXPECT_EQ(y[1], 0.f);  // PyTorch 2.11 on the CPU gives 0, not NaN
  });
}

TEST(Attention, FloatMaskIsAddedToScores) {
  auto mask = f32({0, static_cast<float>(std::log(3.0))}, {1, 2});
  auto y = F::scaled_dot_product_attention(zeros({1, 1}), zeros({2, 1}), f32({4, 8}, {2, 1}),
                                           {.attn_mask = mask});
  expect_near_all(y, {7});
}

TEST(Attention, BroadcastsBatchDims) {
  auto y = F::scaled_dot_product_attention(ones({3, 1, 5, 4}), ones({2, 6, 4}), ones({6, 7}));
  EXPECT_EQ(y.sizes(), (Shape{3, 2, 5, 7}));
}

TEST(Attention, RejectsCausalTogetherWithAMask) {
  expect_error<ValueError>(
      [] {
        F::scaled_dot_product_attention(ones({2, 4}), ones({3, 4}), ones({3, 4}),
                                        {.attn_mask = ones({2, 3}), .is_causal = true});
      },
      "scaled_dot_product_attention");
}

TEST(Attention, RejectsMismatchedShapes) {
  expect_error<ShapeError>(
      [] {
        F::scaled_dot_product_attention(ones({2, 4}), ones({3, 5}), ones({3, 4}));
      },
      "scaled_dot_product_attention");
  expect_error<ShapeError>(
      [] {
        F::scaled_dot_product_attention(ones({2, 4}), ones({3, 4}), ones({2, 4}));
      },
      "scaled_dot_product_attention");
  expect_error<ShapeError>(
      [] {
        F::scaled_dot_product_attention(ones({4}), ones({3, 4}), ones({3, 4}));
      },
      "scaled_dot_product_attention");
  expect_error<ShapeError>(
      [] {
        F::scaled_dot_product_attention(ones({2, 2, 4}), ones({3, 3, 4}), ones({3, 4}));
      },
      "scaled_dot_product_attention");
  expect_error<ShapeError>(
      [] {
        F::scaled_dot_product_attention(ones({2, 4}), ones({3, 4}), ones({3, 4}),
                                        {.attn_mask = ones({4, 3})});
      },
      "scaled_dot_product_attention", "attn_mask");
}

TEST(Attention, RejectsMixedDtypesAndIntegerMasks) {
  expect_error<DTypeError>(
      [] {
        F::scaled_dot_product_attention(ones({2, 4}), ones({3, 4}, {.dtype = kFloat64}),
                                        ones({3, 4}));
      },
      "scaled_dot_product_attention");
  expect_error<DTypeError>(
      [] {
        F::scaled_dot_product_attention(ones({2, 4}), ones({3, 4}), ones({3, 4}),
                                        {.attn_mask = ones({2, 3}, {.dtype = kInt32})});
      },
      "scaled_dot_product_attention");
}

// --- pad ----------------------------------------------------------------------------------------

TEST(Pad, ModesMatchPyTorch) {
  on_both_backends([] {
    auto x = f32({1, 2, 3}, {1, 3});
    expect_near_all(F::pad(x, {2, 1}), {0, 0, 1, 2, 3, 0});
    expect_near_all(F::pad(x, {2, 1}, "reflect"), {3, 2, 1, 2, 3, 2});
    expect_near_all(F::pad(x, {2, 1}, "replicate"), {1, 1, 1, 2, 3, 3});
    expect_near_all(F::pad(x, {-1, 1}, "constant", 9), {2, 3, 9});
    expect_near_all(F::pad(x, {0, 0, 1, 0}, "constant", 7), {7, 7, 7, 1, 2, 3});
  });
}

TEST(Pad, ConstantValueIsCastToTheDtype) {
  auto y = F::pad(from_vector<int32_t>({1, 2}), {1, 1}, "constant", 2.7);
  EXPECT_EQ(y.to_vector<int32_t>(), (std::vector<int32_t>{2, 1, 2, 2}));
}

TEST(Pad, RejectsMalformedPadLists) {
  expect_error<ValueError>([] { F::pad(ones({3}), {1}); }, "pad", "even");
  expect_error<ValueError>([] { F::pad(ones({3}), {1, 1, 1, 1}); }, "pad");
  expect_error<ValueError>([] { F::pad(ones({3}), {1, 1}, "circular"); }, "pad", "circular");
}

TEST(Pad, RejectsReflectPadsAsLargeAsTheDim) {
  expect_error<ValueError>([] { F::pad(ones({2, 3}), {3, 0}, "reflect"); }, "pad", "reflect");
}

TEST(Pad, RejectsReplicatingAnEmptyDim) {
  expect_error<ValueError>([] { F::pad(ones({2, 0}), {1, 0}, "replicate"); }, "pad");
}

TEST(Pad, RejectsCroppingBelowZero) {
  expect_error<ShapeError>([] { F::pad(ones({2, 3}), {-2, -2}); }, "pad", "negative");
}

// --- interpolate ----------------------------------------------------------------------------

TEST(Interpolate, NearestUsesTheLegacyFloorIndex) {
  on_both_backends([] {
    auto y = F::interpolate(f32({0, 1, 2}, {1, 1, 3}), {.size = std::vector<int64_t>{5}});
    expect_near_all(y, {0, 0, 1, 1, 2});
  });
}

TEST(Interpolate, BilinearMatchesPyTorchWithAndWithoutAlignCorners) {
  on_both_backends([] {
    auto x = f32({0, 1}, {1, 1, 1, 2});
    expect_near_all(F::interpolate(x, {.size = std::vector<int64_t>{1, 4}, .mode = "bilinear"}),
                    {0, 0.25, 0.75, 1});
    expect_near_all(
        F::interpolate(
            x, {.size = std::vector<int64_t>{1, 3}, .mode = "bilinear", .align_corners = true}),
        {0, 0.5, 1});
  });
}

TEST(Interpolate, ScaleFactorResolvesToTheFlooredSize) {
  auto y = F::interpolate(ones({1, 2, 5, 4}), {.scale_factor = std::vector<double>{1.5, 0.6}});
  EXPECT_EQ(y.sizes(), (Shape{1, 2, 7, 2}));
}

TEST(Interpolate, RejectsBothOrNeitherOfSizeAndScaleFactor) {
  expect_error<ValueError>([] { F::interpolate(ones({1, 1, 3}), {}); }, "interpolate");
  expect_error<ValueError>(
      [] {
        F::interpolate(ones({1, 1, 3}),
                       {.size = std::vector<int64_t>{4}, .scale_factor = std::vector<double>{2}});
      },
      "interpolate");
}

TEST(Interpolate, RejectsBadModesAndAlignCornersWithNearest) {
  expect_error<ValueError>(
      [] {
        F::interpolate(ones({1, 1, 3}), {.size = std::vector<int64_t>{4}, .mode = "bicubic"});
      },
      "interpolate", "bicubic");
  expect_error<ValueError>(
      [] {
        F::interpolate(ones({1, 1, 3}), {.size = std::vector<int64_t>{4}, .align_corners = false});
      },
      "interpolate");
  expect_error<ValueError>(
      [] {
        ops::dispatch1(OpId::interpolate, {ones({1, 1, 3})},
                       {std::vector<int64_t>{4}, std::string("nearest"), true, std::monostate{}});
      },
      "interpolate");
}

TEST(Interpolate, RejectsBadShapesAndSizes) {
  expect_error<ShapeError>(
      [] {
        F::interpolate(ones({1, 1, 3}), {.size = std::vector<int64_t>{4}, .mode = "bilinear"});
      },
      "interpolate", "4-D");
  expect_error<ShapeError>(
      [] {
        F::interpolate(ones({3, 3}), {.size = std::vector<int64_t>{4}});
      },
      "interpolate");
  expect_error<ShapeError>(
      [] {
        F::interpolate(ones({1, 1, 3, 3}), {.size = std::vector<int64_t>{4, 4, 4}});
      },
      "interpolate");
  expect_error<ShapeError>(
      [] {
        F::interpolate(ones({1, 1, 3}), {.size = std::vector<int64_t>{0}});
      },
      "interpolate");
  expect_error<ValueError>(
      [] {
        F::interpolate(ones({1, 1, 3}), {.scale_factor = std::vector<double>{-2}});
      },
      "interpolate");
}

TEST(Interpolate, RejectsBilinearOnIntegers) {
  expect_error<DTypeError>(
      [] {
        F::interpolate(ones({1, 1, 2, 2}, {.dtype = kInt32}),
                       {.size = std::vector<int64_t>{3, 3}, .mode = "bilinear"});
      },
      "interpolate");
}

// --- nll_loss -------------------------------------------------------------------------------

TEST(NllLoss, MeanDividesByTheWeightsOfCountedTargets) {
  on_both_backends([] {
    auto x = f32({-1, -2, -3, -4, -5, -6}, {3, 2});
    auto t = i64({0, 1, 1}, {3});
    auto w = f32({1, 2}, {2});
    expect_near_all(F::nll_loss(x, t, {.weight = w}), {(1 + 8 + 12) / 5.0});
    expect_near_all(F::nll_loss(x, t, {.weight = w, .reduction = "sum"}), {21});
    expect_near_all(F::nll_loss(x, t, {.weight = w, .ignore_index = 1, .reduction = "none"}),
                    {1, 0, 0});
    expect_near_all(F::nll_loss(x, t, {.weight = w, .ignore_index = 1}), {1});
  });
}

TEST(NllLoss, MeanOverOnlyIgnoredTargetsIsNaN) {
  on_both_backends([] {
    auto y = F::nll_loss(f32({-1, -2}, {1, 2}), i64({1}, {1}), {.ignore_index = 1});
    EXPECT_TRUE(std::isnan(y.item<float>()));
  });
}

TEST(NllLoss, RejectsTargetsOutOfRange) {
  on_both_backends([] {
    expect_error<IndexError>([] { F::nll_loss(zeros({2, 3}), i64({0, 3}, {2})); }, "nll_loss", "3");
    expect_error<IndexError>(
        [] {
          F::nll_loss(zeros({2, 3}), i64({-1, 0}, {2}));
        },
        "nll_loss", "-1");
  });
}

TEST(NllLoss, RejectsMismatchedShapesAndDtypes) {
  expect_error<ShapeError>([] { F::nll_loss(zeros({2, 3}), i64({0, 1, 2}, {3})); }, "nll_loss");
  expect_error<ShapeError>([] { F::nll_loss(zeros({}), i64({0}, {})); }, "nll_loss");
  expect_error<ShapeError>(
      [] {
        F::nll_loss(zeros({2, 3}), i64({0, 1}, {2}), {.weight = ones({2})});
      },
      "nll_loss");
  expect_error<DTypeError>(
      [] {
        F::nll_loss(zeros({2, 3}), from_vector<int32_t>({0, 1}));
      },
      "nll_loss");
  expect_error<DTypeError>(
      [] {
        F::nll_loss(zeros({2, 3}, {.dtype = kInt64}), i64({0, 1}, {2}));
      },
      "nll_loss");
}

TEST(NllLoss, RejectsUnknownReduction) {
  expect_error<ValueError>(
      [] {
        F::nll_loss(zeros({2, 3}), i64({0, 1}, {2}), {.reduction = "avg"});
      },
      "nll_loss", "avg");
}

// --- shape rules on meta tensors -------------------------------------------------------------

TEST(NnShapeRules, RunOnMetaTensorsWithoutData) {
  auto meta = [](const Shape& s) { return ops::make_tensor(s, kFloat32, Device::cpu(), true); };
  auto y = F::scaled_dot_product_attention(meta({2, 5, 8}), meta({2, 7, 8}), meta({2, 7, 3}));
  EXPECT_TRUE(y.is_meta());
  EXPECT_EQ(y.sizes(), (Shape{2, 5, 3}));
  EXPECT_EQ(F::pad(meta({2, 3}), {1, 2, 0, 1}).sizes(), (Shape{3, 6}));
  EXPECT_EQ(F::batch_norm(meta({4, 3, 2}), meta({3}), meta({3}), {}, {}, true).sizes(),
            (Shape{4, 3, 2}));
}
