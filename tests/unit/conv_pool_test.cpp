// Semantics (PyTorch's, by hand) and error paths of convolution and pooling.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <thread>

#include "backends/cpu/weight_cache.h"
#include "kiln/kiln.h"
#include "kiln/ops/conv.h"
#include "unit/expect_error.h"

using kiln::testing::expect_error;
using kiln::testing::expect_error_with;

namespace kiln {
namespace {

Tensor iota(Shape shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<float> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0.f);
  return from_vector(v, shape);
}

TEST(Conv2d, SumsWindowsByHand) {
  // [[0,1,2],[3,4,5],[6,7,8]] with a 2x2 kernel of ones plus bias 1.
  Tensor y = conv2d(iota({1, 1, 3, 3}), ones({1, 1, 2, 2}), full({1}, 1.0));
  EXPECT_EQ(y.sizes(), (Shape{1, 1, 2, 2}));
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{9, 13, 21, 25}));
}

// float32 convolution runs on the layouts oneDNN prefers; without gradient
// recording the reordered weights are cached, and must follow in-place changes.
TEST(Conv2d, InferenceSeesInPlaceChangesOfACachedWeight) {
  backend::cpu::clear_weight_cache();
  manual_seed(5);
  Tensor x = randn({2, 16, 12, 10}), w = randn({32, 16, 3, 3}), b = randn({32});
  auto expect_close = [&](const Tensor& got, const char* what) {
    const Tensor want = conv2d(x.to(kFloat64), w.to(kFloat64), b.to(kFloat64), {.padding = {1}});
    const double err = (got.to(kFloat64) - want).abs().max().item<double>();
    EXPECT_LT(err, 1e-5 * want.abs().max().item<double>()) << what;
  };
  NoGradGuard no_grad;
  expect_close(conv2d(x, w, b, {.padding = {1}}), "first call");
  const size_t cached = backend::cpu::weight_cache_bytes();
  expect_close(conv2d(x, w, b, {.padding = {1}}), "cached weights");
  w.mul_(-2);  // bumps the version: the next call reorders the new values
  expect_close(conv2d(x, w, b, {.padding = {1}}), "after an in-place change");
  EXPECT_EQ(backend::cpu::weight_cache_bytes(), cached);  // replaced, not added
  x = randn({1, 16, 30, 7});  // another shape may want another layout
  expect_close(conv2d(x, w, b, {.padding = {1}}), "another input shape");
  backend::cpu::clear_weight_cache();
}

TEST(Conv2d, SamePaddingWithEvenKernelPadsTheEnd) {
  // PyTorch puts the extra pad of an even kernel after the input: output x[i] + x[i+1].
  Tensor y = conv2d(iota({1, 1, 1, 4}), ones({1, 1, 1, 2}), Tensor(), {.padding_mode = "same"});
  EXPECT_EQ(y.sizes(), (Shape{1, 1, 1, 4}));
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{1, 3, 5, 3}));
}

TEST(Conv2d, SingleIntsApplyToEveryDim) {
  Tensor y =
      conv2d(ones({1, 1, 9, 7}), ones({1, 1, 3, 3}), Tensor(), {.stride = {2}, .padding = {1}});
  EXPECT_EQ(y.sizes(), (Shape{1, 1, 5, 4}));
}

TEST(Conv2d, GroupsSeeOnlyTheirChannels) {
  Tensor x = from_vector<float>({1, 1, 1, 1, 2, 2, 2, 2}, Shape{1, 2, 2, 2});
  Tensor w = from_vector<float>({10, 100}, Shape{2, 1, 1, 1});
  Tensor y = conv2d(x, w, Tensor(), {.groups = 2});
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{10, 10, 10, 10, 200, 200, 200, 200}));
}

TEST(Conv2d, AcceptsUnbatchedInput) {
  EXPECT_EQ(conv2d(ones({3, 5, 5}), ones({2, 3, 3, 3})).sizes(), (Shape{2, 3, 3}));
}

TEST(Conv2d, RejectsChannelsNotDivisibleByGroups) {
  expect_error<ShapeError>(
      [] {
        conv2d(ones({1, 3, 5, 5}), ones({2, 1, 3, 3}), Tensor(), {.groups = 2});
      },
      "conv2d", "groups 2");
}

TEST(Conv2d, RejectsWeightChannelMismatch) {
  expect_error<ShapeError>(
      [] {
        conv2d(ones({1, 3, 5, 5}), ones({2, 4, 3, 3}));
      },
      "conv2d", "[2, 4, 3, 3]");
}

TEST(Conv2d, RejectsKernelLargerThanPaddedInput) {
  expect_error<ShapeError>([] { conv2d(ones({1, 1, 2, 2}), ones({1, 1, 3, 3})); }, "conv2d");
}

TEST(Conv2d, RejectsNonPositiveStride) {
  expect_error<ValueError>(
      [] {
        conv2d(ones({1, 1, 5, 5}), ones({1, 1, 3, 3}), Tensor(), {.stride = {0}});
      },
      "conv2d", "stride");
}

TEST(Conv2d, RejectsNonPositiveDilation) {
  expect_error<ValueError>(
      [] {
        conv2d(ones({1, 1, 5, 5}), ones({1, 1, 3, 3}), Tensor(), {.dilation = {1, -1}});
      },
      "conv2d", "dilation");
}

TEST(Conv2d, RejectsNonPositiveGroups) {
  expect_error<ValueError>(
      [] {
        conv2d(ones({1, 2, 5, 5}), ones({2, 2, 3, 3}), Tensor(), {.groups = 0});
      },
      "conv2d", "groups");
}

TEST(Conv2d, RejectsEmptyKernel) {
  expect_error<ShapeError>([] { conv2d(ones({1, 1, 5, 5}), ones({1, 1, 0, 3})); }, "conv2d");
}

TEST(Conv2d, RejectsNegativePadding) {
  expect_error<ValueError>(
      [] {
        conv2d(ones({1, 1, 5, 5}), ones({1, 1, 3, 3}), Tensor(), {.padding = {-1}});
      },
      "conv2d");
}

TEST(Conv2d, RejectsInputsOfWrongRank) {
  expect_error<ShapeError>([] { conv2d(ones({5, 5}), ones({1, 1, 3, 3})); }, "conv2d", "[5, 5]");
  expect_error<ShapeError>([] { conv2d(ones({1, 1, 5, 5}), ones({1, 3, 3})); }, "conv2d");
}

TEST(Conv2d, RejectsSamePaddingWithStride) {
  expect_error<ValueError>(
      [] {
        conv2d(ones({1, 1, 5, 5}), ones({1, 1, 3, 3}), Tensor(),
               {.stride = {2}, .padding_mode = "same"});
      },
      "conv2d", "same");
}

TEST(Conv2d, RejectsUnknownPaddingMode) {
  expect_error<ValueError>(
      [] {
        conv2d(ones({1, 1, 5, 5}), ones({1, 1, 3, 3}), Tensor(), {.padding_mode = "full"});
      },
      "conv2d", "full");
}

TEST(Conv2d, RejectsListsOfWrongLength) {
  expect_error<ValueError>(
      [] {
        conv2d(ones({1, 1, 5, 5}), ones({1, 1, 3, 3}), Tensor(), {.stride = {1, 1, 1}});
      },
      "conv2d");
}

TEST(Conv2d, RejectsBiasOfWrongShape) {
  expect_error<ShapeError>(
      [] {
        conv2d(ones({1, 1, 5, 5}), ones({2, 1, 3, 3}), ones({3}));
      },
      "conv2d");
}

TEST(Conv2d, RejectsMixedAndIntegerDtypes) {
  expect_error<DTypeError>(
      [] {
        conv2d(ones({1, 1, 5, 5}), ones({1, 1, 3, 3}, {.dtype = kFloat64}));
      },
      "conv2d");
  expect_error<DTypeError>(
      [] {
        conv2d(ones({1, 1, 5, 5}, {.dtype = kInt32}), ones({1, 1, 3, 3}, {.dtype = kInt32}));
      },
      "conv2d");
}

TEST(Conv2d, IsSafeToCallFromManyThreads) {
  Tensor x = randn({2, 8, 12, 12}), w = randn({16, 8, 3, 3}), b = randn({16});
  const auto expected = conv2d(x, w, b, {.padding = {1}}).to_vector<float>();
  std::vector<int> ok(6, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      bool same = true;
      for (int i = 0; i < 10; ++i) {
        // Two shapes per thread exercise the primitive registry concurrently.
        same = same && conv2d(x, w, b, {.padding = {1}}).to_vector<float>() == expected;
        same = same && conv2d(x, w, b, {.stride = {t + 1}}).numel() > 0;
      }
      ok[t] = same;
    });
  }
  for (auto& th : threads) th.join();
  for (int v : ok) EXPECT_TRUE(v);
}

TEST(Conv1d, SumsWindowsByHand) {
  Tensor y = conv1d(iota({1, 1, 5}), from_vector<float>({1, -1}, Shape{1, 1, 2}), Tensor(),
                    {.stride = {2}, .padding = {1}});
  // padded [0, 0,1,2,3,4, 0]: windows at 0, 2, 4 -> 0-0, 1-2, 3-4
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{0, -1, -1}));
}

TEST(Conv1d, RejectsWrongRankNamingConv1d) {
  expect_error<ShapeError>([] { conv1d(ones({1, 1, 5, 5}), ones({1, 1, 3})); }, "conv1d");
}

TEST(MaxPool2d, TakesWindowMaxima) {
  Tensor y = max_pool2d(iota({1, 1, 4, 4}), {2});
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{5, 7, 13, 15}));
}

TEST(MaxPool2d, PropagatesNaN) {
  Tensor x = iota({1, 1, 2, 2});
  Tensor nan = full({1, 1, 2, 2}, std::nan(""));
  Tensor y = max_pool2d(where(x == 1.0, nan, x), {2});
  EXPECT_TRUE(std::isnan(y.item<float>()));
}

TEST(MaxPool2d, CeilModeDropsAWindowStartingInTheRightPadding) {
  // H = 5, k = 2, s = 2, p = 1: ceil gives 4 windows, but the 4th starts at 6 >= 5 + 1.
  EXPECT_EQ(max_pool2d(ones({1, 1, 5, 5}), {2}, {2}, {1}, {1}, true).sizes(), (Shape{1, 1, 3, 3}));
  EXPECT_EQ(max_pool2d(ones({1, 1, 6, 6}), {3}, {2}, {0}, {1}, true).sizes(), (Shape{1, 1, 3, 3}));
  EXPECT_EQ(max_pool2d(ones({1, 1, 6, 6}), {3}, {2}, {0}, {1}, false).sizes(), (Shape{1, 1, 2, 2}));
}

TEST(MaxPool2d, RejectsPaddingOverHalfTheKernel) {
  expect_error<ValueError>([] { max_pool2d(ones({1, 1, 5, 5}), {2}, {2}, {2}); }, "max_pool2d");
}

TEST(MaxPool2d, RejectsInputsOfWrongRank) {
  expect_error<ShapeError>([] { max_pool2d(ones({5, 5}), {2}); }, "max_pool2d", "[5, 5]");
}

TEST(MaxPool2d, RejectsNonPositiveKernelStrideAndDilation) {
  expect_error<ValueError>([] { max_pool2d(ones({1, 5, 5}), {0}); }, "max_pool2d");
  expect_error<ValueError>([] { max_pool2d(ones({1, 5, 5}), {2}, {0}); }, "max_pool2d");
  expect_error<ValueError>([] { max_pool2d(ones({1, 5, 5}), {2}, {2}, {0}, {0}); }, "max_pool2d");
}

TEST(MaxPool2d, RejectsKernelLargerThanInput) {
  expect_error<ShapeError>([] { max_pool2d(ones({1, 2, 2}), {3}); }, "max_pool2d");
}

TEST(MaxPool2d, RejectsEmptySpatialDims) {
  expect_error<ShapeError>([] { max_pool2d(ones({1, 1, 0, 4}), {1}); }, "max_pool2d");
}

TEST(MaxPool2d, RejectsIntegerInput) {
  expect_error<DTypeError>(
      [] {
        max_pool2d(ones({1, 4, 4}, {.dtype = kInt32}), {2});
      },
      "max_pool2d");
}

TEST(AvgPool2d, CountIncludePadDecidesTheDivisor) {
  // A padded corner window of a 2x2 ones image holds one real element.
  Tensor x = ones({1, 1, 2, 2});
  EXPECT_FLOAT_EQ(avg_pool2d(x, {2}, {1}, {1}, false, true).to_vector<float>()[0], 0.25f);
  EXPECT_FLOAT_EQ(avg_pool2d(x, {2}, {1}, {1}, false, false).to_vector<float>()[0], 1.f);
}

TEST(AvgPool2d, DivisorOverrideReplacesTheCount) {
  Tensor y = avg_pool2d(iota({1, 1, 2, 2}), {2}, {}, {0}, false, true, 2);
  EXPECT_FLOAT_EQ(y.item<float>(), 3.f);
}

TEST(AvgPool2d, RejectsZeroDivisor) {
  expect_error<ValueError>(
      [] {
        avg_pool2d(ones({1, 4, 4}), {2}, {}, {0}, false, true, 0);
      },
      "avg_pool2d");
}

TEST(AvgPool2d, RejectsPaddingOverHalfTheKernel) {
  expect_error<ValueError>([] { avg_pool2d(ones({1, 4, 4}), {3}, {1}, {2}); }, "avg_pool2d");
}

TEST(AdaptiveAvgPool2d, UsesFloorAndCeilWindowEdges) {
  // W = 5 into 3 cells: [0, 2), [1, 4), [3, 5).
  Tensor y = adaptive_avg_pool2d(iota({1, 1, 1, 5}), {1, 3});
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{0.5f, 2.f, 3.5f}));
}

TEST(AdaptiveAvgPool2d, RejectsNegativeOutputSize) {
  expect_error<ValueError>(
      [] {
        adaptive_avg_pool2d(ones({1, 4, 4}), {-1});
      },
      "adaptive_avg_pool2d");
}

TEST(AdaptiveAvgPool2d, RejectsOutputSizeOfWrongLength) {
  expect_error<ValueError>(
      [] {
        adaptive_avg_pool2d(ones({1, 4, 4}), {1, 2, 3});
      },
      "adaptive_avg_pool2d");
}

}  // namespace
}  // namespace kiln
