// The pointwise ops' arithmetic on one element of a floating compute type
// (float for float32, half and bfloat16; double for float64), in one place
// for the CPU's library kernels (pointwise_unary.cpp, pointwise_binary.cpp,
// pointwise.cpp) and the kernels kiln generates (compiler/codegen/), whose
// source embeds this file and vec_math.h: a fused kernel computes each
// element as the library kernels of the nodes it covers do, bit for bit
// (docs/architecture.md, "Generated kernels and their cache"). Both are
// compiled without floating-point contraction (-ffp-contract=off).
//
// Only standard headers may be included here besides vec_math.h: the
// generated source has no other.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "backends/cpu/vec_math.h"

namespace kiln::backend::cpu::scalar {

// Always inlined: a call inside an element loop keeps it from vectorizing.
#define KILN_SCALAR_FN [[gnu::always_inline]] inline

template <typename C>
KILN_SCALAR_FN C neg(C x) {
  return -x;
}
template <typename C>
KILN_SCALAR_FN C abs(C x) {
  return std::fabs(x);
}
template <typename C>
KILN_SCALAR_FN C exp(C x) {
  return exp_f32(x);
}
template <typename C>
KILN_SCALAR_FN C log(C x) {
  return std::log(x);
}
template <typename C>
KILN_SCALAR_FN C log1p(C x) {
  return std::log1p(x);
}
template <typename C>
KILN_SCALAR_FN C expm1(C x) {
  return std::expm1(x);
}
template <typename C>
KILN_SCALAR_FN C sqrt(C x) {
  return std::sqrt(x);
}
template <typename C>
KILN_SCALAR_FN C rsqrt(C x) {
  return C(1) / std::sqrt(x);
}
template <typename C>
KILN_SCALAR_FN C reciprocal(C x) {
  return C(1) / x;
}
template <typename C>
KILN_SCALAR_FN C square(C x) {
  return x * x;
}
template <typename C>
KILN_SCALAR_FN C sin(C x) {
  return std::sin(x);
}
template <typename C>
KILN_SCALAR_FN C cos(C x) {
  return std::cos(x);
}
template <typename C>
KILN_SCALAR_FN C tanh(C x) {
  return tanh_f32(x);
}
template <typename C>
KILN_SCALAR_FN C sigmoid(C x) {
  return C(1) / (C(1) + exp_f32(-x));
}
// x < 0 ? 0 : x keeps NaN (any compute type).
template <typename C>
KILN_SCALAR_FN C relu(C x) {
  return x < C(0) ? C(0) : x;
}
template <typename C>
KILN_SCALAR_FN C gelu_erf(C x) {
  // erfc keeps precision where 1 + erf(x) cancels (large negative x).
  return C(0.5) * x * erfc_f32(x * C(-0.70710678118654752440));
}
template <typename C>
KILN_SCALAR_FN C gelu_tanh(C x) {
  const C inner = C(0.79788456080286535588) * (x + C(0.044715) * x * x * x);
  return C(0.5) * x * (C(1) + tanh_f32(inner));
}
template <typename C>
KILN_SCALAR_FN C silu(C x) {
  return x * sigmoid(x);
}
// The activations with their attributes as the compute type. Each keeps
// NaN: a comparison with NaN is false, so it takes the branch that computes
// from x.
template <typename C>
KILN_SCALAR_FN C leaky_relu(C x, C slope) {
  return x > C(0) ? x : slope * x;
}
template <typename C>
KILN_SCALAR_FN C hardtanh(C x, C lo, C hi) {
  return x < lo ? lo : (x > hi ? hi : x);
}
template <typename C>
KILN_SCALAR_FN C elu(C x, C alpha) {
  return x > C(0) ? x : alpha * std::expm1(x);
}
// log(1 + e^z) as max(z, 0) + log(1 + e^-|z|): no overflow for large z.
template <typename C>
KILN_SCALAR_FN C softplus(C x, C beta, C threshold) {
  const C z = x * beta;
  if (z > threshold) return x;
  return ((z > C(0) ? z : C(0)) + std::log1p(exp_f32(-std::fabs(z)))) / beta;
}
template <typename C>
KILN_SCALAR_FN C hardsigmoid(C x) {
  return hardtanh(x + C(3), C(0), C(6)) / C(6);
}
template <typename C>
KILN_SCALAR_FN C hardswish(C x) {
  return x * hardsigmoid(x);
}
template <typename C>
KILN_SCALAR_FN C mish(C x) {
  return x * tanh_f32(std::log1p(exp_f32(x)));
}
template <typename C>
KILN_SCALAR_FN C erf(C x) {
  return erf_f32(x);
}
template <typename C>
KILN_SCALAR_FN C sign(C x) {
  return C((C(0) < x) - (x < C(0)));
}
template <typename C>
KILN_SCALAR_FN C floor(C x) {
  return std::floor(x);
}
template <typename C>
KILN_SCALAR_FN C ceil(C x) {
  return std::ceil(x);
}
template <typename C>
KILN_SCALAR_FN C round(C x) {
  return std::nearbyint(x);  // half to even
}

template <typename C>
KILN_SCALAR_FN C add(C a, C b) {
  return a + b;
}
template <typename C>
KILN_SCALAR_FN C sub(C a, C b) {
  return a - b;
}
template <typename C>
KILN_SCALAR_FN C mul(C a, C b) {
  return a * b;
}
// a + k b, the k of add and sub's alpha (sub: -alpha) as the compute type.
template <typename C>
KILN_SCALAR_FN C add_scaled(C a, C b, C k) {
  return a + k * b;
}
template <typename C>
KILN_SCALAR_FN C div(C a, C b) {
  return a / b;
}
template <typename C>
KILN_SCALAR_FN C pow(C a, C b) {
  return std::pow(a, b);
}
// Python's remainder of floats: the sign of the divisor (fmod's, moved by b
// where the signs differ); x % 0 is NaN.
template <typename C>
KILN_SCALAR_FN C remainder(C a, C b) {
  const C r = std::fmod(a, b);
  return (r != C(0) && ((r < C(0)) != (b < C(0)))) ? r + b : r;
}
// NaN in either gives NaN (the first NaN), as PyTorch's maximum and minimum.
template <typename C>
KILN_SCALAR_FN C maximum(C a, C b) {
  return a != a ? a : (b != b ? b : (a > b ? a : b));
}
template <typename C>
KILN_SCALAR_FN C minimum(C a, C b) {
  return a != a ? a : (b != b ? b : (a < b ? a : b));
}
// min(max(x, lo), hi) as PyTorch: hi wins where lo > hi; a NaN value or
// bound gives NaN (lo != lo only for a NaN). No bound is an infinity.
template <typename C>
KILN_SCALAR_FN C clamp(C x, C lo, C hi) {
  const C v = x < lo || lo != lo ? lo : x;
  return v > hi || hi != hi ? hi : v;
}

// dropout of x at an element whose Philox value is `bits`: kept, and
// scaled, iff the value's uniform (bits >> 8) 2^-24 is at least p, which is
// iff bits >> 8 >= threshold = ceil(p 2^24): one integer comparison, which
// vectorizes. scale is 1 / (1 - p) in C (0 where p is 1).
template <typename C>
KILN_SCALAR_FN C dropout(C x, uint32_t bits, uint32_t threshold, C scale) {
  return (bits >> 8) >= threshold ? x * scale : C(0);
}

// dropout(p)'s threshold and scale, for the kernels and the code generator.
inline uint32_t dropout_threshold(double p) {
  return static_cast<uint32_t>(std::ceil(p * 16777216.0));
}
template <typename C>
C dropout_scale(double p) {
  return p < 1 ? static_cast<C>(1 / (1 - p)) : C(0);
}

#undef KILN_SCALAR_FN

}  // namespace kiln::backend::cpu::scalar
