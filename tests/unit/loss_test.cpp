#include <gtest/gtest.h>

#include <cmath>

#include "kiln/kiln.h"

using namespace kiln;
namespace F = kiln::nn::functional;

namespace {

// -log_softmax(row)[k] in double.
double nll_of(const std::vector<double>& row, size_t k) {
  double m = row[0], s = 0;
  for (double v : row) m = std::max(m, v);
  for (double v : row) s += std::exp(v - m);
  return std::log(s) + m - row[k];
}

}  // namespace

TEST(CrossEntropy, MatchesTheFormulaForClassIndices) {
  auto logits = from_vector<double>({1, 2, 3, 0.5, -1, 2}, Shape{2, 3});
  auto target = from_vector<int64_t>({2, 0});
  const double l0 = nll_of({1, 2, 3}, 2), l1 = nll_of({0.5, -1, 2}, 0);
  EXPECT_NEAR(F::cross_entropy(logits, target).item<double>(), (l0 + l1) / 2, 1e-12);
  EXPECT_NEAR(F::cross_entropy(logits, target, {.reduction = "sum"}).item<double>(), l0 + l1,
              1e-12);
  auto none = F::cross_entropy(logits, target, {.reduction = "none"}).to_vector<double>();
  EXPECT_NEAR(none[1], l1, 1e-12);
}

TEST(CrossEntropy, WeightsIgnoreIndexAndLabelSmoothing) {
  auto logits = from_vector<double>({1, 2, 3, 0.5, -1, 2, 0, 0, 1}, Shape{3, 3});
  auto target = from_vector<int64_t>({2, -100, 1});
  auto weight = from_vector<double>({0.5, 2.0, 1.0});
  const std::vector<std::vector<double>> rows = {{1, 2, 3}, {0.5, -1, 2}, {0, 0, 1}};
  // Ignored rows drop out; the mean divides by the summed weights of the kept targets.
  const double w_nll = (1.0 * nll_of(rows[0], 2) + 2.0 * nll_of(rows[2], 1)) / 3.0;
  EXPECT_NEAR(F::cross_entropy(logits, target, {.weight = weight}).item<double>(), w_nll, 1e-12);
  // Smoothing eps mixes in eps / C of every class, weighted by the class weights.
  const double eps = 0.2;
  auto smooth_row = [&](size_t r) {
    double s = 0;
    const std::vector<double> w = {0.5, 2.0, 1.0};
    for (size_t k = 0; k < 3; ++k) s += w[k] * nll_of(rows[r], k);
    return s;
  };
  const double expected = (1 - eps) * w_nll + eps / 3 * (smooth_row(0) + smooth_row(2)) / 3.0;
  EXPECT_NEAR(
      F::cross_entropy(logits, target, {.weight = weight, .label_smoothing = eps}).item<double>(),
      expected, 1e-12);
  const double unweighted =
      (1 - eps) * (nll_of(rows[0], 2) + nll_of(rows[2], 1)) / 2 + eps / 3 * ([&] {
                                                                    double s = 0;
                                                                    for (size_t r : {0, 2})
                                                                      for (size_t k = 0; k < 3; ++k)
                                                                        s += nll_of(rows[r], k);
                                                                    return s;
                                                                  }()) /
                                                                      2;
  EXPECT_NEAR(F::cross_entropy(logits, target, {.label_smoothing = eps}).item<double>(), unweighted,
              1e-12);
}

TEST(CrossEntropy, ProbabilityTargetsAndSpatialInputs) {
  auto logits = from_vector<double>({1, 2, 3, 0.5, -1, 2}, Shape{2, 3});
  auto probs = from_vector<double>({0, 0.5, 0.5, 1, 0, 0}, Shape{2, 3});
  const double l0 = 0.5 * nll_of({1, 2, 3}, 1) + 0.5 * nll_of({1, 2, 3}, 2);
  const double l1 = nll_of({0.5, -1, 2}, 0);
  EXPECT_NEAR(F::cross_entropy(logits, probs).item<double>(), (l0 + l1) / 2, 1e-12);
  // [N, C, d] logits with [N, d] targets: the class dim is 1.
  auto spatial =
      logits.view({1, 2, 3}).transpose(1, 2).contiguous();  // [1, 3 classes, 2 positions]
  auto t = from_vector<int64_t>({2, 0}, Shape{1, 2});
  EXPECT_NEAR(F::cross_entropy(spatial, t).item<double>(),
              (nll_of({1, 2, 3}, 2) + nll_of({0.5, -1, 2}, 0)) / 2, 1e-12);
}

TEST(CrossEntropy, RejectsBadArguments) {
  auto logits = zeros({2, 3});
  auto target = from_vector<int64_t>({0, 1});
  EXPECT_THROW(F::cross_entropy(logits, target, {.reduction = "avg"}), ValueError);
  EXPECT_THROW(F::cross_entropy(logits, target, {.label_smoothing = 1.5}), ValueError);
  EXPECT_THROW(F::cross_entropy(logits, target, {.weight = ones({4})}), ShapeError);
  EXPECT_THROW(F::cross_entropy(logits, from_vector<int64_t>({0, 3})), IndexError);
  EXPECT_THROW(F::cross_entropy(logits, zeros({2, 4})), ShapeError);
  EXPECT_THROW(F::cross_entropy(scalar_tensor(1.0), target), ShapeError);
}

TEST(MseLoss, MeanSumAndNone) {
  auto a = from_vector<float>({1, 2, 3}), b = from_vector<float>({1, 0, 6});
  EXPECT_FLOAT_EQ(F::mse_loss(a, b).item<float>(), 13.f / 3);
  EXPECT_FLOAT_EQ(F::mse_loss(a, b, "sum").item<float>(), 13.f);
  EXPECT_EQ(F::mse_loss(a, b, "none").to_vector<float>(), (std::vector<float>{0, 4, 9}));
  EXPECT_THROW(F::mse_loss(a, ones({2})), ShapeError);
  EXPECT_THROW(F::mse_loss(a, b, "max"), ValueError);
}

TEST(BceWithLogits, StableForLargeLogitsAndHonoursPosWeight) {
  auto x = from_vector<double>({-100, 0, 3, 100});
  auto y = from_vector<double>({0, 1, 0.25, 1});
  auto loss = F::binary_cross_entropy_with_logits(x, y, {.reduction = "none"}).to_vector<double>();
  auto bce = [](double xv, double yv, double pw) {
    const double s = 1 / (1 + std::exp(-xv));
    return -(pw * yv * std::log(s) + (1 - yv) * std::log1p(-s));
  };
  EXPECT_NEAR(loss[0], 0.0, 1e-12);  // log(1 - sigmoid(-100)) without overflow
  EXPECT_NEAR(loss[1], bce(0, 1, 1), 1e-12);
  EXPECT_NEAR(loss[2], bce(3, 0.25, 1), 1e-12);
  EXPECT_NEAR(loss[3], 0.0, 1e-12);
  auto weighted = F::binary_cross_entropy_with_logits(
      x.index({Slice(1, 3)}), y.index({Slice(1, 3)}), {.pos_weight = from_vector<double>({3.0})});
  EXPECT_NEAR(weighted.item<double>(), (bce(0, 1, 3) + bce(3, 0.25, 3)) / 2, 1e-12);
  EXPECT_THROW(F::binary_cross_entropy_with_logits(x, ones({2})), ShapeError);
}
