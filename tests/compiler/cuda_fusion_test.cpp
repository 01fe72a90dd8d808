// Library calls with an epilogue on CUDA (backends/epilogue.h): a frozen
// net's convolution with its bias, residual add and relu as one cuDNN call
// (backends/cuda/conv.cpp). Results within float32's summation error of
// eager's (the sums are added in another order), NaN kept by the relu;
// strict keeps them apart; what cuDNN's fused call does not take (an add
// alone, a relu before the add, float64) stays apart with its reason.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "compiler/compiler_testing.h"
#include "kiln/cuda.h"
#include "kiln/kiln.h"

namespace kiln::compiler {
namespace {

#define KILN_NEEDS_GPU() \
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device: " << cuda::unavailable_reason()

// Within float32 summation error: |a - b| <= 1e-4 (1 + |b|), NaN where b has NaN.
void expect_close(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  const auto a = got.to(Device::cpu()).to_vector<double>();
  const auto b = want.to(Device::cpu()).to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(std::isnan(a[i]), std::isnan(b[i])) << what << ": element " << i;
    if (std::isnan(b[i])) continue;
    ASSERT_LE(std::abs(a[i] - b[i]), 1e-4 * (1 + std::abs(b[i])))
        << what << ": element " << i << " " << a[i] << " vs " << b[i];
  }
}

struct ConvCase {
  std::string name;
  Shape x, w;
  Conv2dOptions options;
  bool bias = true;
};

TEST(CudaFusion, ConvolutionsTakeTheirResidualAddAndReluInOneCudnnCall) {
  KILN_NEEDS_GPU();
  Tf32PolicyGuard exact({.matmul = false, .conv = false});
  const Device cuda = Device::cuda(0);
  Generator gen(21);
  const std::vector<ConvCase> cases = {
      {"3x3", {2, 8, 9, 11}, {16, 8, 3, 3}, {.padding = {1, 1}}},
      {"1x1 stride 2", {1, 16, 14, 14}, {32, 16, 1, 1}, {.stride = {2, 2}}},
      {"7x7 stride 2 no bias",
       {1, 3, 32, 32},
       {8, 3, 7, 7},
       {.stride = {2, 2}, .padding = {3, 3}},
       false},
      {"grouped, dilated",
       {2, 8, 10, 10},
       {8, 2, 3, 3},
       {.padding = {2, 2}, .dilation = {2, 2}, .groups = 4}},
      {"asymmetric padding", {1, 4, 8, 8}, {6, 4, 2, 2}, {.padding_mode = "same"}},
  };
  for (const ConvCase& c : cases) {
    const Tensor w = randn(c.w, {}, &gen).to(cuda);
    const Tensor b = c.bias ? randn({c.w[0]}, {}, &gen).to(cuda) : Tensor();
    const auto conv = [&](const Tensor& x) { return conv2d(x, w, b, c.options); };
    const auto add_relu = [&](const Tensor& x, const Tensor& r) {
      Tensor y = conv(x);
      y += r;
      return y.relu_();
    };
    const auto relu = [&](const Tensor& x, const Tensor&) { return conv(x).relu(); };
    Tensor x = randn(c.x, {}, &gen).to(cuda);
    const Tensor r = randn(conv(x).sizes(), {}, &gen).to(cuda);
    for (int form = 0; form < 2; ++form) {
      const std::string what = c.name + (form == 0 ? " add, relu" : " relu");
      const auto f = [&](const Tensor& a, const Tensor& res) {
        return form == 0 ? add_relu(a, res) : relu(a, res);
      };
      const auto fast = compile(f, {.name = "conv"});
      expect_close(fast(x, r), f(x, r), what);
      const ExplainReport report = fast.explain();
      ASSERT_EQ(report.graphs.size(), 1u) << what;
      ASSERT_EQ(report.graphs[0].fused.size(), 1u) << report.to_string();
      EXPECT_NE(report.graphs[0].fused[0].find(form == 0 ? "one conv2d call with epilogue add, relu"
                                                         : "one conv2d call with epilogue relu"),
                std::string::npos)
          << report.graphs[0].fused[0];
      EXPECT_EQ(report.graphs[0].steps, 1) << what;
      // Strict: apart, with its reason.
      const auto strict = compile(f, {.strict = true, .name = "conv_strict"});
      EXPECT_TRUE(testing::same(strict(x, r).to(Device::cpu()), f(x, r).to(Device::cpu())));
      const std::string text = strict.explain().to_string();
      EXPECT_NE(text.find("rounds otherwise than eager's"), std::string::npos) << text;
    }
  }
  // NaN in the input stays NaN through the relu, as eager's.
  const Tensor w = randn({4, 2, 3, 3}, {}, &gen).to(cuda), b = randn({4}, {}, &gen).to(cuda);
  Tensor x = randn({1, 2, 6, 6}, {}, &gen);
  x.select(0, 0).select(0, 0).select(0, 2).select(0, 2).fill_(
      std::numeric_limits<double>::quiet_NaN());
  x = x.to(cuda);
  const auto f = [&](const Tensor& a) { return conv2d(a, w, b, {.padding = {1, 1}}).relu(); };
  expect_close(compile(f)(x), f(x), "NaN");
}

TEST(CudaFusion, WhatCudnnsFusedCallDoesNotTakeStaysApartWithItsReason) {
  KILN_NEEDS_GPU();
  const Device cuda = Device::cuda(0);
  Generator gen(22);
  const Tensor w = randn({4, 2, 3, 3}, {}, &gen).to(cuda), b = randn({4}, {}, &gen).to(cuda);
  const Tensor x = randn({1, 2, 6, 6}, {}, &gen).to(cuda),
               r = randn({1, 4, 4, 4}, {}, &gen).to(cuda);
  const auto add_alone = [&](const Tensor& a, const Tensor& res) { return conv2d(a, w, b) + res; };
  const auto relu_first = [&](const Tensor& a, const Tensor& res) {
    return conv2d(a, w, b).relu() + res;
  };
  for (const auto& [f, why] :
       std::vector<std::pair<std::function<Tensor(const Tensor&, const Tensor&)>, std::string>>{
           {add_alone, "takes a relu, after a residual add or alone, not add"},
           // The relu joins the convolution; the add after it stays apart.
           {relu_first, "conv2d + relu (nodes 0-1): one conv2d call with epilogue relu"}}) {
    const auto fast = compile(f, {.name = "apart"});
    EXPECT_TRUE(testing::same(fast(x, r).to(Device::cpu()), f(x, r).to(Device::cpu())));
    const std::string text = fast.explain().to_string();
    EXPECT_NE(text.find(why), std::string::npos) << text;
  }
  const Tensor w64 = w.to(kFloat64), b64 = b.to(kFloat64);
  const auto f64 = [&](const Tensor& a) { return conv2d(a, w64, b64).relu(); };
  const auto fast = compile(f64, {.name = "float64"});
  const Tensor x64 = x.to(kFloat64);
  EXPECT_TRUE(testing::same(fast(x64).to(Device::cpu()), f64(x64).to(Device::cpu())));
  EXPECT_NE(fast.explain().to_string().find("runs it on float32, not float64"), std::string::npos)
      << fast.explain().to_string();
}

}  // namespace
}  // namespace kiln::compiler
