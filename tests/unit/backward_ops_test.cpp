// The ops that backward rules need: each adjoint checked against its forward
// through sum(F(x) * g) == sum(x * F_backward(g)) in float64 (on the CPU
// kernels and the reference kernels), the convolution gradients against
// finite differences, scatter_add and max_pool2d_with_indices against values
// by hand, and every error path of their shape rules.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <thread>

#include "kiln/kiln.h"
#include "kiln/ops/conv.h"
#include "ops/api/backward_ops.h"
#include "ops/dispatch.h"
#include "unit/expect_error.h"

using kiln::testing::expect_error;
using kiln::testing::expect_error_with;

namespace kiln {
namespace {

namespace F = nn::functional;
using ops::OpId;

Tensor random64(const Shape& shape, uint64_t seed) {
  Generator g(seed);
  return randn(shape, {.dtype = kFloat64}, &g);
}

double dot(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.sizes(), b.sizes());
  return (a * b).sum().item<double>();
}

// Runs check() on the CPU kernels, then on the reference kernels.
void on_both_backends(const std::function<void()>& check) {
  {
    SCOPED_TRACE("cpu kernels");
    check();
  }
  ops::ReferenceModeGuard reference;
  SCOPED_TRACE("reference kernels");
  check();
}

// sum(forward(x) * g) against sum(x * backward(g)) for random x and g.
void expect_adjoint(const Shape& x_shape, const std::function<Tensor(const Tensor&)>& forward,
                    const std::function<Tensor(const Tensor&)>& backward) {
  on_both_backends([&] {
    const Tensor x = random64(x_shape, 11);
    const Tensor y = forward(x);
    const Tensor g = random64(y.sizes(), 12);
    const double lhs = dot(y, g), rhs = dot(x, backward(g));
    EXPECT_NEAR(lhs, rhs, 1e-10 * (1 + std::abs(lhs)));
  });
}

// --- convolution ------------------------------------------------------------------------

struct ConvSpec {
  Shape input, weight, stride, padding, dilation;
  int64_t groups = 1;
};

// conv1d or conv2d by the weight's rank, with the row's padding (begins, then ends).
Tensor conv(const Tensor& x, const Tensor& w, const ConvSpec& s) {
  return ops::dispatch1(w.dim() == 3 ? OpId::conv1d : OpId::conv2d, {x, w, Tensor()},
                        {s.stride, s.padding, s.dilation, s.groups});
}

void expect_conv_adjoints(const ConvSpec& s) {
  const Tensor w = random64(s.weight, 21), x = random64(s.input, 22);
  expect_adjoint(
      s.input, [&](const Tensor& t) { return conv(t, w, s); },
      [&](const Tensor& g) {
        return ops::conv_backward_input(g, w, s.input, s.stride, s.padding, s.dilation, s.groups);
      });
  expect_adjoint(
      s.weight, [&](const Tensor& t) { return conv(x, t, s); },
      [&](const Tensor& g) {
        return ops::conv_backward_weight(g, x, s.weight, s.stride, s.padding, s.dilation, s.groups);
      });
}

TEST(ConvBackward, IsTheAdjointOfConv2dWithStrideDilationGroupsAndUnevenPadding) {
  expect_conv_adjoints({{2, 6, 11, 9}, {4, 3, 3, 2}, {2, 3}, {1, 0, 2, 1}, {2, 1}, 2});
}

TEST(ConvBackward, IsTheAdjointOfConv2dWhenTheStrideSkipsTheLastRows) {
  expect_conv_adjoints({{1, 2, 8, 10}, {3, 2, 3, 3}, {2, 4}, {0, 0, 0, 0}, {1, 1}});
}

TEST(ConvBackward, IsTheAdjointOfDepthwiseAndUnbatchedConv2d) {
  expect_conv_adjoints({{1, 5, 7, 7}, {5, 1, 3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, 5});
  expect_conv_adjoints({{3, 5, 6}, {2, 3, 3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}});
}

TEST(ConvBackward, IsTheAdjointOfConv1d) {
  expect_conv_adjoints({{2, 4, 13}, {6, 2, 3}, {2}, {2, 1}, {3}, 2});
  expect_conv_adjoints({{3, 9}, {2, 3, 1}, {3}, {0, 0}, {1}});
  expect_conv_adjoints({{1, 1, 1}, {1, 1, 1}, {1}, {0, 0}, {1}});
}

// Central differences of sum(conv(x, w) * g) in each element of x and of w.
TEST(ConvBackward, MatchesFiniteDifferencesOfConv2d) {
  const ConvSpec s{{1, 2, 4, 5}, {2, 1, 2, 3}, {2, 1}, {1, 0, 0, 1}, {1, 2}, 2};
  const Tensor x = random64(s.input, 31), w = random64(s.weight, 32);
  const Tensor g = random64(conv(x, w, s).sizes(), 33);
  const double eps = 1e-6;
  auto check = [&](const Tensor& t, const Tensor& grad, const std::function<double()>& loss) {
    auto values = t.data<double>();
    const auto expected = grad.to_vector<double>();
    for (int64_t i = 0; i < t.numel(); ++i) {
      const double keep = values[i];
      values[i] = keep + eps;
      const double up = loss();
      values[i] = keep - eps;
      const double down = loss();
      values[i] = keep;
      EXPECT_NEAR((up - down) / (2 * eps), expected[static_cast<size_t>(i)], 1e-6)
          << "element " << i;
    }
  };
  auto loss = [&] { return dot(conv(x, w, s), g); };
  check(x, ops::conv_backward_input(g, w, s.input, s.stride, s.padding, s.dilation, s.groups),
        loss);
  check(w, ops::conv_backward_weight(g, x, s.weight, s.stride, s.padding, s.dilation, s.groups),
        loss);
}

TEST(ConvBackward, AcceptsForwardStyleAttributesAndFloat32) {
  const Tensor g = ones({1, 1, 2, 2}), w = ones({1, 1, 2, 2});
  // One padding entry for all sides, one stride for both dims.
  const Tensor gx = ops::conv_backward_input(g, w, {1, 1, 3, 3}, {1}, {0}, {1}, 1);
  EXPECT_EQ(gx.to_vector<float>(), (std::vector<float>{1, 2, 1, 2, 4, 2, 1, 2, 1}));
  const Tensor gw = ops::conv_backward_weight(
      g, from_vector<float>({0, 1, 2, 3, 4, 5, 6, 7, 8}, Shape{1, 1, 3, 3}), {1, 1, 2, 2}, {1}, {0},
      {1}, 1);
  EXPECT_EQ(gw.to_vector<float>(), (std::vector<float>{8, 12, 20, 24}));
}

TEST(ConvBackward, GivesTheSameFloat32ResultsFromManyThreads) {
  Generator gen(51);
  const Tensor x = randn({2, 16, 12, 12}, {}, &gen), w = randn({32, 16, 3, 3}, {}, &gen);
  const Tensor gy = randn({2, 32, 12, 12}, {}, &gen);
  const ConvSpec s{x.sizes(), w.sizes(), {1, 1}, {1, 1, 1, 1}, {1, 1}};
  auto grad_input = [&] {
    return ops::conv_backward_input(gy, w, s.input, s.stride, s.padding, s.dilation, 1);
  };
  auto grad_weight = [&] {
    return ops::conv_backward_weight(gy, x, s.weight, s.stride, s.padding, s.dilation, 1);
  };
  const auto expected_input = grad_input().to_vector<float>();
  const auto expected_weight = grad_weight().to_vector<float>();
  std::vector<int> ok(6, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      bool same = true;
      for (int i = 0; i < 5; ++i) {
        same = same && grad_input().to_vector<float>() == expected_input;
        same = same && grad_weight().to_vector<float>() == expected_weight;
        // Another geometry per thread fills the primitive registries concurrently.
        const Shape stride = {t + 1, 1};
        const Tensor y = conv(x, w, {x.sizes(), w.sizes(), stride, {0}, {1, 1}});
        same = same && ops::conv_backward_weight(y, x, w.sizes(), stride, {0}, {1, 1}, 1).numel() ==
                           w.numel();
      }
      ok[t] = same;
    });
  }
  for (auto& th : threads) th.join();
  for (int v : ok) EXPECT_TRUE(v);
}

TEST(ConvBackward, RejectsAGradientOfTheWrongShape) {
  const Tensor w = ones({4, 3, 3, 3});
  expect_error_with<ShapeError>(
      [&] {
        ops::conv_backward_input(ones({1, 4, 5, 5}), w, {1, 3, 8, 8}, {1}, {0}, {1}, 1);
      },
      {"conv_backward_input", "[1, 4, 5, 5]", "[1, 4, 6, 6]"});
  expect_error_with<ShapeError>(
      [&] {
        ops::conv_backward_weight(ones({1, 4, 5, 5}), ones({1, 3, 8, 8}), {4, 3, 3, 3}, {1}, {0},
                                  {1}, 1);
      },
      {"conv_backward_weight", "[1, 4, 5, 5]", "[1, 4, 6, 6]"});
}

TEST(ConvBackward, RejectsBadSizesRanksDtypesAndAttributes) {
  const Tensor g = ones({1, 4, 6, 6});
  expect_error<ValueError>(
      [&] {
        ops::conv_backward_input(g, ones({4, 3, 3, 3}), {1, -3, 8, 8}, {1}, {0}, {1}, 1);
      },
      "conv_backward_input", "input_size");
  expect_error<ShapeError>(
      [&] {
        ops::conv_backward_input(g, ones({4, 3, 3}), {1, 3, 8, 8}, {1}, {0}, {1}, 1);
      },
      "conv_backward_input", "[1, 3, 8, 8]");
  expect_error<ShapeError>(
      [&] {
        ops::conv_backward_weight(g, ones({1, 3, 8, 8}), {4, 3, 3, 3, 1}, {1}, {0}, {1}, 1);
      },
      "conv_backward_weight", "weight");
  expect_error<DTypeError>(
      [&] {
        ops::conv_backward_input(g, ones({4, 3, 3, 3}, {.dtype = kFloat64}), {1, 3, 8, 8}, {1}, {0},
                                 {1}, 1);
      },
      "conv_backward_input", "float64");
  expect_error<DTypeError>(
      [&] {
        ops::conv_backward_weight(g, ones({1, 3, 8, 8}, {.dtype = kFloat64}), {4, 3, 3, 3}, {1},
                                  {0}, {1}, 1);
      },
      "conv_backward_weight", "float64");
  expect_error<ValueError>(
      [&] {
        ops::conv_backward_input(g, ones({4, 3, 3, 3}), {1, 3, 8, 8}, {0}, {0}, {1}, 1);
      },
      "conv_backward_input", "stride");
  expect_error<ShapeError>(
      [&] {
        ops::conv_backward_input(g, ones({4, 3, 3, 3}), {1, 6, 8, 8}, {1}, {0}, {1}, 1);
      },
      "conv_backward_input", "channels");
}

// --- scatter_add -------------------------------------------------------------------------

TEST(ScatterAdd, AddsEveryDuplicateAlongDim0AndDim1ByHand) {
  on_both_backends([] {
    const Tensor x = zeros({3, 2});
    const Tensor index = from_vector<int64_t>({0, 2, 0, 0, 1, 2}, Shape{3, 2});
    const Tensor src = from_vector<float>({1, 2, 3, 4, 5, 6}, Shape{3, 2});
    // out[index[i][j]][j] += src[i][j]
    EXPECT_EQ(scatter_add(x, 0, index, src).to_vector<float>(),
              (std::vector<float>{4, 4, 5, 0, 0, 8}));
    // out[i][index[i][j]] += src[i][j], index narrower than src: [[0, 2]] of a 2-wide x is out of
    // range, so use a 1-column index.
    const Tensor idx1 = from_vector<int64_t>({1, 0, 1}, Shape{3, 1});
    EXPECT_EQ(scatter_add(ones({3, 2}), 1, idx1, src).to_vector<float>(),
              (std::vector<float>{1, 2, 4, 1, 1, 6}));
  });
}

TEST(ScatterAdd, WorksInPlaceOnIntegers) {
  Tensor x = from_vector<int32_t>({10, 20, 30}, Shape{3});
  scatter_add_(x, 0, from_vector<int64_t>({2, 2, 0, 2}, Shape{4}),
               from_vector<int32_t>({1, 2, 3, 4}, Shape{4}));
  EXPECT_EQ(x.to_vector<int32_t>(), (std::vector<int32_t>{13, 20, 37}));
}

TEST(ScatterAdd, RejectsOutOfRangeIndicesFromTheCallingThread) {
  on_both_backends([] {
    expect_error_with<IndexError>(
        [] {
          scatter_add(zeros({4, 3}), 0, from_vector<int64_t>({0, 4, 1}, Shape{1, 3}), ones({1, 3}));
        },
        {"scatter_add", "4", "size 4"});
    expect_error<IndexError>(
        [] { scatter_add(zeros({50000}), 0, full({50000}, -1, {.dtype = kInt64}), ones({50000})); },
        "scatter_add", "-1");
  });
}

TEST(ScatterAdd, RejectsBadShapesAndDtypes) {
  expect_error<DTypeError>(
      [] {
        scatter_add(zeros({3}, {.dtype = kBool}), 0, zeros({1}, {.dtype = kInt64}),
                    zeros({1}, {.dtype = kBool}));
      },
      "scatter_add", "bool");
  expect_error<DTypeError>(
      [] {
        scatter_add(zeros({3}), 0, zeros({1}, {.dtype = kInt64}), zeros({1}, {.dtype = kFloat64}));
      },
      "scatter_add", "float64");
  expect_error<DTypeError>([] { scatter_add(zeros({3}), 0, zeros({1}), zeros({1})); },
                           "scatter_add", "int64");
  expect_error<ShapeError>(
      [] {
        scatter_add(zeros({3, 2}), 0, zeros({2, 3}, {.dtype = kInt64}), zeros({2, 3}));
      },
      "scatter_add", "[2, 3]");
  expect_error<IndexError>(
      [] {
        scatter_add(zeros({3, 2}), 2, zeros({1, 1}, {.dtype = kInt64}), zeros({1, 1}));
      },
      "scatter_add");
}

// --- max_pool2d_with_indices -----------------------------------------------------------------

TEST(MaxPool2dWithIndices, PicksTheFirstMaximumOfEachWindowByHand) {
  on_both_backends([] {
    // [[1, 3, 3, 0],
    //  [3, 2, 5, 5],
    //  [0, 1, 2, 4]]   kernel 2, stride 1 horizontally, 2 vertically, ceil_mode.
    const Tensor x = from_vector<float>({1, 3, 3, 0, 3, 2, 5, 5, 0, 1, 2, 4}, Shape{1, 1, 3, 4});
    auto [values, indices] = max_pool2d_with_indices(x, {2}, {2, 1}, {0}, {1}, true);
    EXPECT_EQ(values.sizes(), (Shape{1, 1, 2, 3}));
    EXPECT_EQ(values.to_vector<float>(), (std::vector<float>{3, 5, 5, 1, 2, 4}));
    EXPECT_EQ(indices.to_vector<int64_t>(), (std::vector<int64_t>{1, 6, 6, 9, 10, 11}));
    EXPECT_EQ(indices.dtype(), kInt64);
  });
}

TEST(MaxPool2dWithIndices, IndexesWithinThePlaneWithPaddingAndDilation) {
  on_both_backends([] {
    const Tensor x = arange(0, 2 * 16, 1, {.dtype = kFloat32}).view({2, 4, 4}) * -1.0;
    auto [values, indices] = max_pool2d_with_indices(x, {3}, {2}, {1}, {2});
    // Dilation 2 and padding 1: the windows read rows/cols {-1, 1, 3}; the largest
    // (least negative) element read is the first in-bounds one, (1, 1) = 5.
    EXPECT_EQ(indices.sizes(), (Shape{2, 1, 1}));
    EXPECT_EQ(indices.to_vector<int64_t>(), (std::vector<int64_t>{5, 5}));
    EXPECT_EQ(values.to_vector<float>(), (std::vector<float>{-5, -21}));
  });
}

TEST(MaxPool2dWithIndices, PointsAtTheNaNThatPropagates) {
  on_both_backends([] {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const Tensor x = from_vector<float>({1, nan, 7, 2}, Shape{1, 1, 2, 2});
    auto [values, indices] = max_pool2d_with_indices(x, {2});
    EXPECT_TRUE(std::isnan(values.item<float>()));
    EXPECT_EQ(indices.item<int64_t>(), 1);
    EXPECT_TRUE(std::isnan(max_pool2d(x, {2}).item<float>()));
  });
}

TEST(MaxPool2dWithIndices, ValuesEqualMaxPool2d) {
  const Tensor x = random64({2, 3, 9, 11}, 41);
  auto [values, indices] = max_pool2d_with_indices(x, {3, 2}, {2, 3}, {1, 1}, {1, 2}, true);
  EXPECT_EQ(values.to_vector<double>(),
            max_pool2d(x, {3, 2}, {2, 3}, {1, 1}, {1, 2}, true).to_vector<double>());
  // Each value is the input element its index names.
  const Tensor gathered = gather(x.flatten(2), 2, indices.flatten(2));
  EXPECT_EQ(gathered.to_vector<double>(), values.to_vector<double>());
}

TEST(MaxPool2dWithIndices, RejectsWhatMaxPool2dRejects) {
  expect_error<ShapeError>(
      [] {
        max_pool2d_with_indices(zeros({4, 4}), {2});
      },
      "max_pool2d_with_indices", "[4, 4]");
  expect_error<ValueError>(
      [] {
        max_pool2d_with_indices(zeros({1, 4, 4}), {2}, {}, {2});
      },
      "max_pool2d_with_indices", "padding");
  expect_error<DTypeError>(
      [] {
        max_pool2d_with_indices(zeros({1, 4, 4}, {.dtype = kInt32}), {2});
      },
      "max_pool2d_with_indices", "int32");
}

// --- pool adjoints ------------------------------------------------------------------------

struct AvgSpec {
  Shape input, kernel, stride, padding;
  bool ceil_mode, count_include_pad;
  std::optional<int64_t> divisor;
};

void expect_avg_pool_adjoint(const AvgSpec& s) {
  expect_adjoint(
      s.input,
      [&](const Tensor& x) {
        return avg_pool2d(x, s.kernel, s.stride, s.padding, s.ceil_mode, s.count_include_pad,
                          s.divisor);
      },
      [&](const Tensor& g) {
        return ops::avg_pool2d_backward(g, s.input, s.kernel, s.stride, s.padding, s.ceil_mode,
                                        s.count_include_pad, s.divisor);
      });
}

TEST(AvgPool2dBackward, IsTheAdjointOfAvgPool2d) {
  expect_avg_pool_adjoint({{2, 3, 11, 13}, {3, 2}, {2, 3}, {1, 1}, false, true, {}});
  expect_avg_pool_adjoint({{1, 2, 10, 7}, {3}, {2}, {1}, true, true, {}});
  expect_avg_pool_adjoint({{1, 2, 10, 7}, {3}, {2}, {1}, true, false, {}});
  expect_avg_pool_adjoint({{2, 9, 9}, {3}, {2}, {1}, true, false, 5});
  expect_avg_pool_adjoint({{1, 1, 1, 1}, {1}, {}, {0}, false, true, {}});
  expect_avg_pool_adjoint({{1, 1, 5, 6}, {4, 5}, {3}, {2}, true, true, -3});
}

TEST(AvgPool2dBackward, RejectsAGradientOfTheWrongShape) {
  expect_error_with<ShapeError>(
      [] {
        ops::avg_pool2d_backward(zeros({1, 2, 4, 4}), {1, 2, 10, 9}, {2}, {}, {0}, false, true, {});
      },
      {"avg_pool2d_backward", "[1, 2, 4, 4]", "[1, 2, 5, 4]", "[1, 2, 10, 9]"});
  expect_error<ValueError>(
      [] {
        ops::avg_pool2d_backward(zeros({1, 2, 4, 4}), {1, 2, 8, 8}, {2}, {}, {0}, false, true, 0);
      },
      "avg_pool2d_backward", "divisor_override");
  expect_error<ValueError>(
      [] {
        ops::avg_pool2d_backward(zeros({1, 2, 4, 4}), {1, 2, -8, 8}, {2}, {}, {0}, false, true, {});
      },
      "avg_pool2d_backward", "input_size");
}

TEST(AdaptiveAvgPool2dBackward, IsTheAdjointOfAdaptiveAvgPool2d) {
  for (const auto& [input, output] : std::vector<std::pair<Shape, Shape>>{{{2, 3, 10, 7}, {4, 3}},
                                                                          {{3, 5, 4}, {7, 9}},
                                                                          {{1, 1, 1, 1}, {1, 1}},
                                                                          {{2, 2, 6, 6}, {1, 1}}}) {
    expect_adjoint(
        input, [&](const Tensor& x) { return adaptive_avg_pool2d(x, output); },
        [&](const Tensor& g) { return ops::adaptive_avg_pool2d_backward(g, input); });
  }
}

TEST(AdaptiveAvgPool2dBackward, RejectsBadShapes) {
  expect_error<ShapeError>(
      [] {
        ops::adaptive_avg_pool2d_backward(zeros({4}), {1, 4, 4});
      },
      "adaptive_avg_pool2d_backward", "[4]");
  expect_error<ShapeError>(
      [] {
        ops::adaptive_avg_pool2d_backward(zeros({2, 3, 2, 2}), {2, 4, 8, 8});
      },
      "adaptive_avg_pool2d_backward", "[2, 3, 2, 2]");
  expect_error<ShapeError>(
      [] {
        ops::adaptive_avg_pool2d_backward(zeros({3, 2, 2}), {3, 8});
      },
      "adaptive_avg_pool2d_backward", "[3, 8]");
}

// --- interpolate and pad adjoints ------------------------------------------------------------

void expect_interpolate_adjoint(const Shape& input, const Shape& size, const std::string& mode,
                                bool align_corners) {
  expect_adjoint(
      input,
      [&](const Tensor& x) {
        F::InterpolateOptions options{.size = size, .mode = mode};
        if (mode == "bilinear") options.align_corners = align_corners;
        return F::interpolate(x, options);
      },
      [&](const Tensor& g) { return ops::interpolate_backward(g, input, mode, align_corners); });
}

TEST(InterpolateBackward, IsTheAdjointOfNearest) {
  expect_interpolate_adjoint({2, 3, 7}, {12}, "nearest", false);
  expect_interpolate_adjoint({2, 3, 7, 5}, {3, 11}, "nearest", false);
  expect_interpolate_adjoint({1, 2, 3, 4, 5}, {5, 3, 7}, "nearest", false);
  expect_interpolate_adjoint({1, 1, 1, 1}, {3, 1}, "nearest", false);
}

TEST(InterpolateBackward, IsTheAdjointOfBilinearWithAndWithoutAlignCorners) {
  for (bool align : {false, true}) {
    expect_interpolate_adjoint({2, 3, 5, 7}, {9, 11}, "bilinear", align);
    expect_interpolate_adjoint({2, 3, 7, 11}, {3, 4}, "bilinear", align);
    expect_interpolate_adjoint({1, 2, 5, 4}, {1, 1}, "bilinear", align);
    expect_interpolate_adjoint({1, 2, 1, 1}, {3, 2}, "bilinear", align);
  }
}

TEST(InterpolateBackward, RejectsBadModesShapesAndDtypes) {
  expect_error<ValueError>(
      [] {
        ops::interpolate_backward(zeros({1, 1, 4, 4}), {1, 1, 2, 2}, "bicubic", false);
      },
      "interpolate_backward", "bicubic");
  expect_error<ValueError>(
      [] {
        ops::interpolate_backward(zeros({1, 1, 4, 4}), {1, 1, 2, 2}, "nearest", true);
      },
      "interpolate_backward", "align_corners");
  expect_error<ShapeError>(
      [] {
        ops::interpolate_backward(zeros({1, 2, 4, 4}), {1, 1, 2, 2}, "nearest", false);
      },
      "interpolate_backward", "[1, 2, 4, 4]");
  expect_error<ShapeError>(
      [] {
        ops::interpolate_backward(zeros({1, 1, 4, 4}), {1, 1, 2}, "bilinear", false);
      },
      "interpolate_backward", "[1, 1, 2]");
  expect_error<ShapeError>(
      [] {
        ops::interpolate_backward(zeros({4, 4}), {4, 2}, "nearest", false);
      },
      "interpolate_backward", "[4, 4]");
  expect_error<DTypeError>(
      [] {
        ops::interpolate_backward(zeros({1, 1, 4}, {.dtype = kInt32}), {1, 1, 2}, "nearest", false);
      },
      "interpolate_backward", "int32");
}

void expect_pad_adjoint(const Shape& input, const Shape& pad, const std::string& mode) {
  expect_adjoint(
      input, [&](const Tensor& x) { return F::pad(x, pad, mode, 0.0); },
      [&](const Tensor& g) { return ops::pad_backward(g, input, pad, mode); });
}

TEST(PadBackward, IsTheAdjointOfReflectReplicateAndConstantPadding) {
  expect_pad_adjoint({2, 3, 7}, {3, 2}, "reflect");
  expect_pad_adjoint({3, 4}, {2, 3, 1, 2}, "reflect");
  expect_pad_adjoint({2, 5}, {-2, 3}, "reflect");
  expect_pad_adjoint({2, 2}, {5, 6, 4, 3}, "replicate");
  expect_pad_adjoint({1, 1, 1}, {2, 3, 1, 0, 4, 1}, "replicate");
  expect_pad_adjoint({6, 7}, {-1, 3, 2, -3}, "replicate");
  expect_pad_adjoint({3, 6, 7}, {-1, 2, 1, -2}, "constant");
  expect_pad_adjoint({}, {}, "constant");
}

TEST(PadBackward, RejectsBadModesPadsAndShapes) {
  expect_error<ValueError>(
      [] {
        ops::pad_backward(zeros({4}), {4}, {0, 0}, "circular");
      },
      "pad_backward", "circular");
  expect_error<ValueError>(
      [] {
        ops::pad_backward(zeros({9}), {4}, {4, 1}, "reflect");
      },
      "pad_backward", "reflect");
  expect_error<ValueError>([] { ops::pad_backward(zeros({5}), {4}, {1}, "constant"); },
                           "pad_backward", "[1]");
  expect_error_with<ShapeError>(
      [] {
        ops::pad_backward(zeros({5}), {4}, {1, 1}, "replicate");
      },
      {"pad_backward", "[5]", "[6]"});
  expect_error<DTypeError>(
      [] {
        ops::pad_backward(zeros({6}, {.dtype = kInt64}), {4}, {1, 1}, "replicate");
      },
      "pad_backward", "int64");
}

}  // namespace
}  // namespace kiln
