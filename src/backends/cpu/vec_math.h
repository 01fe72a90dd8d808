// Branch-free float math that GCC vectorizes under kiln's flags
// (-fno-math-errno -fno-trapping-math; std::exp does not vectorize
// without -ffast-math). Accurate to about 2 ulp; NaN and infinities propagate.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace kiln::backend::cpu {

// exp(x - n ln2) for n = round(x / ln2): ln2 split in two for an exact
// reduction, then a degree-6 polynomial (Cephes' expf coefficients). These
// helpers are always inlined: a call inside a loop would keep it from vectorizing.
[[gnu::always_inline]] inline float exp_of_remainder(float x, float n) noexcept {
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  return p * r * r + r + 1.0f;
}

// exp(x) by range reduction x = n ln2 + r, |r| <= ln2/2. 2^n is applied in two
// halves so that results in the subnormal range and overflow to inf are right.
[[gnu::always_inline]] inline float exp_f32(float x) noexcept {
  const float xc = x < -104.0f ? -104.0f : (x > 89.0f ? 89.0f : x);
  // Round to nearest by adding and removing 1.5 * 2^23 (std::floor does not
  // vectorize under these flags); |r| <= ln2 / 2 either way.
  const float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const float p = exp_of_remainder(xc, n);
  const int32_t ni = static_cast<int32_t>(n);
  const int32_t n1 = ni >> 1;
  const int32_t n2 = ni - n1;
  const float s1 = std::bit_cast<float>((n1 + 127) << 23);
  const float s2 = std::bit_cast<float>((n2 + 127) << 23);
  const float out = p * s1 * s2;
  return x != x ? x : out;
}

inline double exp_f32(double x) noexcept { return std::exp(x); }

// tanh(x): an odd polynomial below |x| = 0.625 (Cephes' tanhf coefficients),
// 1 - 2 / (exp(2|x|) + 1) above, where it keeps full relative precision; both
// computed and one selected, so the loop stays branch-free. About 2 ulp.
[[gnu::always_inline]] inline float tanh_f32(float x) noexcept {
  const float a = std::fabs(x);
  const float z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const float small = p * z * x + x;
  const float large = 1.0f - 2.0f / (exp_f32(2.0f * a) + 1.0f);
  const float out = a < 0.625f ? small : std::copysign(large, x);
  return x != x ? x : out;
}

inline double tanh_f32(double x) noexcept { return std::tanh(x); }

// exp(x) for x below about 88 (no overflow handling), flushing results under
// 2^-126 to zero: exp_f32 with one 2^n scale, for erfc's exponent, which is at
// most about 0. NaN gives an unspecified value: the caller checks its input.
[[gnu::always_inline]] inline float exp_normal_f32(float x) noexcept {
  const float xc = x < -87.0f ? -87.0f : x;
  const float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const float p = exp_of_remainder(xc, n);
  const float scale = std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
  return x < -87.0f ? 0.0f : p * scale;
}

// erfc(x) with a relative error below 1e-6 down to 1e-38 (a Chebyshev fit of
// erfc(z) exp(z^2) in t = 1 / (1 + z/2), Numerical Recipes' erfcc), so
// GELU's tail 0.5 x erfc(-x / sqrt 2) stays accurate for large negative x;
// below that (x > 9.3) it flushes to zero, a fifth cheaper than keeping
// subnormal results.
[[gnu::always_inline]] inline float erfc_f32(float x) noexcept {
  const float z = std::fabs(x);
  const float t = 1.0f / (1.0f + 0.5f * z);
  float p = 0.17087277f;
  p = p * t - 0.82215223f;
  p = p * t + 1.48851587f;
  p = p * t - 1.13520398f;
  p = p * t + 0.27886807f;
  p = p * t - 0.18628806f;
  p = p * t + 0.09678418f;
  p = p * t + 0.37409196f;
  p = p * t + 1.00002368f;
  p = p * t - 1.26551223f;
  // One exp of p - z^2, rounded once by the FMA: that rounding, a relative
  // error of about z^2 2^-24, is of the size of what the float32 rounding of
  // GELU's x / sqrt(2) already costs in the far tail.
  const float r = t * exp_normal_f32(std::fma(-z, z, p));
  const float out = x >= 0.0f ? r : 2.0f - r;
  return x != x ? x : out;
}

inline double erfc_f32(double x) noexcept { return std::erfc(x); }

// erf(x): x P(x^2) below |x| = 1 (a least-squares fit of erf(x) / x in x^2
// on Chebyshev nodes, relative error weighted; about 2 ulp in float32), and
// 1 - erfc(|x|) with x's sign above, where erfc's relative error of 1e-6 is
// under 3 ulp of the result; both computed and one selected, so the loop
// stays branch-free (std::erf does not vectorize: a GELU's backward spent
// 12% of a training step in it).
[[gnu::always_inline]] inline float erf_f32(float x) noexcept {
  const float a = std::fabs(x);
  const float z = x * x;
  float p = -5.625396152e-4f;
  p = p * z + 4.916023463e-3f;
  p = p * z - 2.670994960e-2f;
  p = p * z + 1.128013059e-1f;
  p = p * z - 3.761231899e-1f;
  p = p * z + 1.128379107e+0f;
  const float small = p * x;
  const float large = std::copysign(1.0f - erfc_f32(a), x);
  const float out = a < 1.0f ? small : large;
  return x != x ? x : out;
}

inline double erf_f32(double x) noexcept { return std::erf(x); }

}  // namespace kiln::backend::cpu
