// Branch-free float math that GCC vectorizes (std::exp does not vectorize
// without -ffast-math). Accurate to about 2 ulp; NaN and infinities propagate.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace kiln::backend::cpu {

// exp(x) by range reduction x = n ln2 + r, |r| <= ln2/2, and a degree-6
// polynomial for exp(r) (Cephes' expf coefficients). 2^n is applied in two
// halves so that results in the subnormal range and overflow to inf are right.
// Always inlined: a call inside a loop would keep the loop from vectorizing.
[[gnu::always_inline]] inline float exp_f32(float x) noexcept {
  const float xc = x < -104.0f ? -104.0f : (x > 89.0f ? 89.0f : x);
  // Round to nearest by adding and removing 1.5 * 2^23 (std::floor does not
  // vectorize under these flags); |r| <= ln2 / 2 either way.
  const float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t ni = static_cast<int32_t>(n);
  const int32_t n1 = ni >> 1;
  const int32_t n2 = ni - n1;
  const float s1 = std::bit_cast<float>((n1 + 127) << 23);
  const float s2 = std::bit_cast<float>((n2 + 127) << 23);
  const float out = p * s1 * s2;
  return x != x ? x : out;
}

inline double exp_f32(double x) noexcept { return std::exp(x); }

}  // namespace kiln::backend::cpu
