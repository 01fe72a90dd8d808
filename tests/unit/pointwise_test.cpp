#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kiln/kiln.h"
#include "ops/dispatch.h"
#include "unit/expect_error.h"

using kiln::testing::expect_error;
using kiln::testing::expect_error_with;

using namespace kiln;

namespace {}  // namespace

// Every pair of the ten dtypes, against a table written out from PyTorch 2.15's
// torch.promote_types (rows a, columns b, both in the order of kOrder).
TEST(TypePromotion, FollowsPyTorchsTableForEveryPair) {
  constexpr DType kOrder[10] = {kBool,  kUInt8,   kInt8,     kInt16,   kInt32,
                                kInt64, kFloat16, kBFloat16, kFloat32, kFloat64};
  constexpr DType kTorch[10][10] = {
      {kBool, kUInt8, kInt8, kInt16, kInt32, kInt64, kFloat16, kBFloat16, kFloat32, kFloat64},
      {kUInt8, kUInt8, kInt16, kInt16, kInt32, kInt64, kFloat16, kBFloat16, kFloat32, kFloat64},
      {kInt8, kInt16, kInt8, kInt16, kInt32, kInt64, kFloat16, kBFloat16, kFloat32, kFloat64},
      {kInt16, kInt16, kInt16, kInt16, kInt32, kInt64, kFloat16, kBFloat16, kFloat32, kFloat64},
      {kInt32, kInt32, kInt32, kInt32, kInt32, kInt64, kFloat16, kBFloat16, kFloat32, kFloat64},
      {kInt64, kInt64, kInt64, kInt64, kInt64, kInt64, kFloat16, kBFloat16, kFloat32, kFloat64},
      {kFloat16, kFloat16, kFloat16, kFloat16, kFloat16, kFloat16, kFloat16, kFloat32, kFloat32,
       kFloat64},
      {kBFloat16, kBFloat16, kBFloat16, kBFloat16, kBFloat16, kBFloat16, kFloat32, kBFloat16,
       kFloat32, kFloat64},
      {kFloat32, kFloat32, kFloat32, kFloat32, kFloat32, kFloat32, kFloat32, kFloat32, kFloat32,
       kFloat64},
      {kFloat64, kFloat64, kFloat64, kFloat64, kFloat64, kFloat64, kFloat64, kFloat64, kFloat64,
       kFloat64},
  };
  for (int a = 0; a < 10; ++a) {
    for (int b = 0; b < 10; ++b) {
      EXPECT_EQ(promote_types(kOrder[a], kOrder[b]), kTorch[a][b])
          << kOrder[a] << " with " << kOrder[b];
      // And what an op makes of two tensors of those dtypes.
      const Tensor x = ones({2}, {.dtype = kOrder[a]}), y = ones({2}, {.dtype = kOrder[b]});
      EXPECT_EQ((x + y).dtype(), kTorch[a][b]) << kOrder[a] << " + " << kOrder[b];
    }
  }
}

TEST(TypePromotion, NumbersAndZeroDimTensorsRankBelowTensors) {
  auto h = ones({2}, {.dtype = kFloat16});
  EXPECT_EQ((h * 2.5).dtype(), kFloat16);
  EXPECT_EQ((h + scalar_tensor(1.0, {.dtype = kFloat64})).dtype(), kFloat16);
  auto i = ones({2}, {.dtype = kInt32});
  EXPECT_EQ((i + 1).dtype(), kInt32);
  EXPECT_EQ((i + 1.5).dtype(), kFloat32);
  EXPECT_EQ((i + scalar_tensor(1, {.dtype = kInt64})).dtype(), kInt32);
  EXPECT_EQ((i + ones({2}, {.dtype = kInt64})).dtype(), kInt64);
  EXPECT_EQ(div(i, i).dtype(), kFloat32);
  auto b = full({2}, true);
  EXPECT_EQ((b + 1).dtype(), kInt64);
  EXPECT_EQ((b + b).dtype(), kBool);
}

TEST(TypePromotion, WrappedFloatsKeepDoublePrecisionForFloat64) {
  auto d = zeros({1}, {.dtype = kFloat64});
  EXPECT_EQ((d + 0.1).item<double>(), 0.1);
}

// The type's minimum % -1 overflows the division, which traps (SIGFPE) on
// x86: remainder gives 0 there, as Python and PyTorch do, on every backend.
template <typename T>
void expect_remainder_by_minus_one_is_zero(const char* where) {
  constexpr T lo = std::numeric_limits<T>::min(), hi = std::numeric_limits<T>::max();
  const Tensor a = from_vector<T>({lo, lo, hi, -7, 7, lo});
  const Tensor b = from_vector<T>({-1, 3, -1, 3, -1, 1});
  auto on = [&](const Tensor& x, const Tensor& y) { return remainder(x, y).to(Device::cpu()); };
  const T lo_mod_3 = static_cast<T>(lo % 3 == 0 ? 0 : lo % 3 + 3);  // Python's sign: of 3
  const std::vector<T> want{0, lo_mod_3, 0, 2, 0, 0};
  for (const Device device : {Device::cpu(), Device::cuda()}) {
    if (device.is_cuda() && !cuda::is_available()) continue;
    const Tensor x = a.to(device), y = b.to(device);
    EXPECT_EQ(on(x, y).template to_vector<T>(), want) << where << " on " << device.str();
    EXPECT_EQ(remainder(x, -1).to(Device::cpu()).template to_vector<T>(), std::vector<T>(6, 0))
        << where << " on " << device.str();
  }
  ops::ReferenceModeGuard reference;
  EXPECT_EQ(on(a, b).template to_vector<T>(), want) << where << " in the reference kernels";
}

TEST(Pointwise, RemainderOfTheMinimumByMinusOneIsZero) {
  expect_remainder_by_minus_one_is_zero<int32_t>("int32");
  expect_remainder_by_minus_one_is_zero<int64_t>("int64");
  expect_remainder_by_minus_one_is_zero<int16_t>("int16");
  expect_remainder_by_minus_one_is_zero<int8_t>("int8");
}

// Integer pow wraps as the type's arithmetic does (PyTorch's result), with no
// signed overflow inside the kernel (undefined behaviour: the sanitizer
// build stops on it).
TEST(Pointwise, IntegerPowWrapsAsTheTypeDoes) {
  auto wrapped = [](uint64_t base, int e) {  // the low 64 bits of base^e
    uint64_t r = 1;
    for (int i = 0; i < e; ++i) r *= base;
    return r;
  };
  for (const Device device : {Device::cpu(), Device::cuda()}) {
    if (device.is_cuda() && !cuda::is_available()) continue;
    const Tensor big = from_vector<int64_t>({3, -7, 1000003}).to(device);
    EXPECT_EQ(pow(big, 41).to(Device::cpu()).to_vector<int64_t>(),
              (std::vector<int64_t>{static_cast<int64_t>(wrapped(3, 41)),
                                    static_cast<int64_t>(wrapped(static_cast<uint64_t>(-7), 41)),
                                    static_cast<int64_t>(wrapped(1000003, 41))}))
        << device.str();
    const Tensor mid = from_vector<int32_t>({65537, -3}).to(device);
    EXPECT_EQ(
        pow(mid, 3).to(Device::cpu()).to_vector<int32_t>(),
        (std::vector<int32_t>{static_cast<int32_t>(static_cast<uint32_t>(wrapped(65537, 3))), -27}))
        << device.str();
    const Tensor small = from_vector<int16_t>({-32768, 255}).to(device);
    EXPECT_EQ(
        pow(small, 3).to(Device::cpu()).to_vector<int16_t>(),
        (std::vector<int16_t>{0, static_cast<int16_t>(static_cast<uint16_t>(wrapped(255, 3)))}))
        << device.str();
  }
}

// As PyTorch: an integer tensor to a negative integer power is refused; a
// tensor of exponents gives 0, 1 or -1 per element, and a float exponent
// promotes.
TEST(Pointwise, IntegerToANegativeIntegerPowerIsRefused) {
  const Tensor a = from_vector<int64_t>({2, 1, -1});
  expect_error_with<ValueError>([&] { pow(a, -1); },
                                {"pow", "negative integer powers", "int64", "-1"});
  expect_error_with<ValueError>([&] { a.to(kInt8).pow(-3); }, {"pow", "int8", "-3"});
  EXPECT_EQ(pow(a, from_vector<int64_t>({-1, -2, -3})).to_vector<int64_t>(),
            (std::vector<int64_t>{0, 1, -1}));
  EXPECT_EQ(pow(a, -1.0).to_vector<float>(), (std::vector<float>{0.5f, 1.f, -1.f}));
  EXPECT_EQ(pow(a, 0).to_vector<int64_t>(), (std::vector<int64_t>{1, 1, 1}));
}

TEST(Pointwise, MatchesHandComputedValues) {
  auto x = from_vector<float>({-2.f, -0.5f, 0.f, 1.5f});
  EXPECT_EQ(relu(x).to_vector<float>(), (std::vector<float>{0, 0, 0, 1.5f}));
  EXPECT_EQ(sign(x).to_vector<float>(), (std::vector<float>{-1, -1, 0, 1}));
  EXPECT_EQ(round(from_vector<float>({0.5f, 1.5f, 2.5f, -0.5f})).to_vector<float>(),
            (std::vector<float>{0, 2, 2, -0}));
  EXPECT_EQ(remainder(from_vector<int32_t>({-7, 7, -7}), from_vector<int32_t>({3, -3, -3}))
                .to_vector<int32_t>(),
            (std::vector<int32_t>{2, -2, -1}));
  EXPECT_NEAR(gelu(from_vector<float>({1.f})).item<float>(), 0.8413447f, 1e-6);
  EXPECT_NEAR(gelu(from_vector<float>({1.f}), "tanh").item<float>(), 0.8411920f, 1e-6);
  EXPECT_NEAR(sigmoid(from_vector<float>({0.f})).item<float>(), 0.5f, 1e-7);
  EXPECT_TRUE(
      std::isnan(maximum(from_vector<float>({NAN}), from_vector<float>({1.f})).item<float>()));
  EXPECT_EQ(pow(from_vector<int64_t>({2, 3}), 10).to_vector<int64_t>(),
            (std::vector<int64_t>{1024, 59049}));
  EXPECT_EQ(clamp(from_vector<uint8_t>({0, 5, 200}), -3, 100).to_vector<uint8_t>(),
            (std::vector<uint8_t>{0, 5, 100}));
}

TEST(Pointwise, ExpIsAccurateAcrossTheFloatRange) {
  auto x = linspace(-103, 88.5, 2001);
  auto got = exp(x).to_vector<float>();
  auto in = x.to_vector<float>();
  for (size_t i = 0; i < in.size(); ++i) {
    const double want = std::exp(static_cast<double>(in[i]));
    EXPECT_NEAR(got[i], want, std::max(want * 4e-7, 1e-44)) << "x=" << in[i];
  }
  EXPECT_EQ(exp(from_vector<float>({INFINITY})).item<float>(), INFINITY);
  EXPECT_EQ(exp(from_vector<float>({-INFINITY})).item<float>(), 0.f);
  EXPECT_EQ(exp(from_vector<float>({100.f})).item<float>(), INFINITY);
  EXPECT_TRUE(std::isnan(exp(from_vector<float>({NAN})).item<float>()));
}

// tanh, sigmoid and GELU run vectorized polynomial math in float32: each stays
// within a few ulp of the float64 function over the whole range, tails included
// (GELU's left tail is tiny and must keep its relative precision).
TEST(Pointwise, TanhSigmoidAndGeluAreAccurateAcrossTheFloatRange) {
  const Tensor x = linspace(-30, 30, 6001);
  const auto in = x.to_vector<float>();
  // rel_sq widens the bound by x^2: in GELU's far left tail (x < -5, values
  // below 1e-6) the float32 rounding of x / sqrt(2) alone moves exp(-x^2 / 2)
  // by about x^2 2^-24 relative. abs_x allows an absolute error of abs_x |x|:
  // the tanh form 0.5 x (1 + tanh(.)) cancels in float32 for negative x, as
  // PyTorch's does.
  const auto check = [&](const Tensor& got, const char* name, double rel, double rel_sq,
                         double abs_x, auto want_of) {
    const auto out = got.to_vector<float>();
    for (size_t i = 0; i < in.size(); ++i) {
      const double v = in[i], want = want_of(v);
      const double bound = std::abs(want) * (rel + rel_sq * v * v) + abs_x * std::abs(v);
      EXPECT_NEAR(out[i], want, std::max(bound, 1e-37)) << name << " x=" << in[i];
    }
  };
  check(tanh(x), "tanh", 6e-7, 0, 0, [](double v) { return std::tanh(v); });
  check(sigmoid(x), "sigmoid", 6e-7, 0, 0, [](double v) { return 1 / (1 + std::exp(-v)); });
  check(gelu(x), "gelu", 2e-6, 2e-7, 0,
        [](double v) { return 0.5 * v * std::erfc(-v / std::sqrt(2.0)); });
  check(gelu(x, "tanh"), "gelu tanh", 2e-6, 0, 1.2e-7, [](double v) {
    return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
  });
  for (const float special : {INFINITY, -INFINITY}) {
    EXPECT_EQ(tanh(from_vector<float>({special})).item<float>(), special > 0 ? 1.f : -1.f);
  }
  EXPECT_TRUE(std::isnan(tanh(from_vector<float>({NAN})).item<float>()));
  EXPECT_TRUE(std::isnan(gelu(from_vector<float>({NAN})).item<float>()));
}

TEST(Pointwise, RejectsShapesThatDoNotBroadcast) {
  expect_error<ShapeError>([] { add(ones({2, 3}), ones({4})); }, "add");
  expect_error<ShapeError>([] { where(full({2}, true), ones({3}), ones({2})); }, "where");
}

TEST(Pointwise, RejectsBadDtypes) {
  auto b = full({2}, true);
  expect_error<DTypeError>([&] { neg(b); }, "neg");
  expect_error<DTypeError>([&] { sub(b, b); }, "sub");
  expect_error<DTypeError>([&] { where(ones({2}), ones({2}), ones({2})); }, "where");
  expect_error<DTypeError>([&] { masked_fill(ones({2}), ones({2}), 0); }, "masked_fill");
  expect_error<DTypeError>(
      [] { add(ones({2}, {.dtype = kInt32}), ones({2}, {.dtype = kInt32}), 0.5); }, "add");
}

TEST(Pointwise, RejectsBadArguments) {
  expect_error<ValueError>([] { gelu(ones({2}), "fast"); }, "gelu");
  expect_error<ValueError>([] { clamp(ones({2}), std::nullopt, std::nullopt); }, "clamp");
  expect_error<ValueError>(
      [] { remainder(ones({2}, {.dtype = kInt32}), zeros({2}, {.dtype = kInt32})); }, "remainder");
}

TEST(Pointwise, InPlaceChecksShapeAndCast) {
  auto x = ones({2, 3});
  expect_error<ShapeError>([&] { x.add_(ones({4, 2, 3})); }, "add_");
  auto i = ones({2}, {.dtype = kInt64});
  expect_error<DTypeError>([&] { i.mul_(1.5); }, "mul_");
  expect_error<DTypeError>([&] { i.div_(2); }, "div_");
  auto v = x.version();
  x.add_(1);
  EXPECT_GT(x.version(), v);
  EXPECT_EQ(x.to_vector<float>(), std::vector<float>(6, 2.f));
}

TEST(Pointwise, InPlaceConvertsIntoSelfDtype) {
  auto x = zeros({3}, {.dtype = kFloat16});
  x.add_(from_vector<float>({1.f, 2.f, 3.f}));
  EXPECT_EQ(x.dtype(), kFloat16);
  EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{1, 2, 3}));
  auto i = zeros({2}, {.dtype = kInt32});
  i.copy_(from_vector<double>({2.7, -1.2}));
  EXPECT_EQ(i.to_vector<int32_t>(), (std::vector<int32_t>{2, -1}));
}

TEST(Pointwise, RejectsTensorsOnDifferentDevicesOrUndefined) {
  expect_error<Error>([] { add(ones({1}), Tensor()); }, "add");
  EXPECT_THROW(ones({1}).to(Device::cuda(cuda::device_count())), DeviceError);
  EXPECT_THROW(Device::parse("tpu"), DeviceError);
  EXPECT_EQ(Device::parse("cuda:3"), Device::cuda(3));
}

// Found by the random-op test (tests/ops/random_ops_test.cpp), each checked
// here as a user meets it, with PyTorch's values.
TEST(Clamp, AppliesMaxLastAndLetsInfinitiesPastAMissingBound) {
  const double inf = std::numeric_limits<double>::infinity();
  // min > max: min(max(x, 3), 0) is 0 everywhere, as torch.clamp gives.
  EXPECT_EQ(clamp(from_vector<int64_t>({-1, 5}), 3, 0).to_vector<int64_t>(),
            (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(clamp(from_vector<float>({-1, 5}), 1e30, 0.5).to_vector<float>(),
            (std::vector<float>{0.5f, 0.5f}));
  // One bound only: infinities on the other side stay infinite.
  const Tensor x = from_vector<double>({-inf, 1, inf}).to(kFloat32);
  EXPECT_EQ(clamp(x, 0, std::nullopt).to_vector<float>(),
            (std::vector<float>{0, 1, std::numeric_limits<float>::infinity()}));
  EXPECT_EQ(clamp(x, std::nullopt, 5).to_vector<float>(),
            (std::vector<float>{-std::numeric_limits<float>::infinity(), 1, 5}));
}

// NaN in, NaN out, with PyTorch's values, on the reference kernels (the
// consistency cases hold the CPU and CUDA kernels to them, large inputs too).
TEST(Clamp, NaNInAValueOrABoundGivesNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  ops::ReferenceModeGuard reference;
  const Tensor x = from_vector<float>({-3, nan, 0.5f});
  const auto y = clamp(x, -1, 1).to_vector<float>();
  EXPECT_EQ(y[0], -1);
  EXPECT_TRUE(std::isnan(y[1]));
  EXPECT_EQ(y[2], 0.5f);
  for (const Tensor& z : {clamp(x, nan, 1), clamp(x, std::nullopt, nan), clamp(x, 0, nan)})
    for (float v : z.to_vector<float>()) EXPECT_TRUE(std::isnan(v)) << z;
  const auto m = maximum(from_vector<float>({1, nan, 3}), from_vector<float>({nan, 2, 4}));
  const auto n = minimum(from_vector<float>({1, nan, 3}), from_vector<float>({nan, 2, 4}));
  EXPECT_TRUE(std::isnan(m.to_vector<float>()[0]) && std::isnan(m.to_vector<float>()[1]));
  EXPECT_TRUE(std::isnan(n.to_vector<float>()[0]) && std::isnan(n.to_vector<float>()[1]));
  EXPECT_EQ(m.to_vector<float>()[2], 4);
  EXPECT_EQ(n.to_vector<float>()[2], 3);
}

TEST(LogicalOps, ReadEachInputAsItsOwnDtype) {
  const Tensor b = from_vector<bool>({true, false, true});
  const Tensor i = full({}, 5, {.dtype = kInt64});
  EXPECT_EQ(logical_and(b, i).to_vector<bool>(), (std::vector<bool>{true, false, true}));
  const Tensor f = from_vector<float>({0.5f, 0, -2});
  const Tensor s = from_vector<int16_t>({0, 0, 3});
  EXPECT_EQ(logical_xor(f, s).to_vector<bool>(), (std::vector<bool>{true, false, false}));
  EXPECT_EQ(logical_or(f, s).to_vector<bool>(), (std::vector<bool>{true, false, true}));
}

TEST(MaskedFill, AnyNonzeroValueIsTrueInABoolTensor) {
  const Tensor x = from_vector<bool>({false, false});
  const Tensor mask = from_vector<bool>({true, false});
  EXPECT_EQ(masked_fill(x, mask, 0.5).to_vector<bool>(), (std::vector<bool>{true, false}));
}
