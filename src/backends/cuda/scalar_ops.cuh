// The pointwise ops' arithmetic on one element on a CUDA device, for the
// floating compute types (float for float32, half and bfloat16; double for
// float64), in one place for the CUDA library kernels (pointwise_unary.cu,
// pointwise_binary.cu, pointwise_misc.cu) and the CUDA kernels kiln
// generates (compiler/codegen/cuda_source.h), whose NVRTC source embeds
// this file: a fused kernel computes each element as the library kernels of
// the nodes it covers do, bit for bit (docs/architecture.md, "Generated
// kernels on CUDA"). Both are compiled without contraction of a * b + c
// into one FMA (nvcc's and NVRTC's --fmad=false), as the CPU's are
// (backends/cpu/scalar_ops.h).
//
// No #include: NVRTC's source has no standard headers. CUDA's math functions
// (overloaded for float and double) are built into both compilers.
#pragma once

namespace kiln::backend::cuda::scalar {

#define KILN_DEVICE_FN __device__ __forceinline__

template <typename C>
KILN_DEVICE_FN C neg(C x) {
  return -x;
}
template <typename C>
KILN_DEVICE_FN C abs(C x) {
  return ::fabs(x);
}
template <typename C>
KILN_DEVICE_FN C exp(C x) {
  return ::exp(x);
}
template <typename C>
KILN_DEVICE_FN C log(C x) {
  return ::log(x);
}
template <typename C>
KILN_DEVICE_FN C log1p(C x) {
  return ::log1p(x);
}
template <typename C>
KILN_DEVICE_FN C expm1(C x) {
  return ::expm1(x);
}
template <typename C>
KILN_DEVICE_FN C sqrt(C x) {
  return ::sqrt(x);
}
template <typename C>
KILN_DEVICE_FN C rsqrt(C x) {
  return C(1) / ::sqrt(x);
}
template <typename C>
KILN_DEVICE_FN C reciprocal(C x) {
  return C(1) / x;
}
template <typename C>
KILN_DEVICE_FN C square(C x) {
  return x * x;
}
template <typename C>
KILN_DEVICE_FN C sin(C x) {
  return ::sin(x);
}
template <typename C>
KILN_DEVICE_FN C cos(C x) {
  return ::cos(x);
}
template <typename C>
KILN_DEVICE_FN C tanh(C x) {
  return ::tanh(x);
}
template <typename C>
KILN_DEVICE_FN C sigmoid(C x) {
  return C(1) / (C(1) + ::exp(-x));
}
template <typename C>
KILN_DEVICE_FN C silu(C x) {
  return x / (C(1) + ::exp(-x));
}
// x < 0 ? 0 : x keeps NaN.
template <typename C>
KILN_DEVICE_FN C relu(C x) {
  return x < C(0) ? C(0) : x;
}
template <typename C>
KILN_DEVICE_FN C erf(C x) {
  return ::erf(x);
}
// The activations with their attributes as the compute type; each keeps
// NaN (a comparison with NaN is false: the branch that computes from x).
template <typename C>
KILN_DEVICE_FN C leaky_relu(C x, C slope) {
  return x > C(0) ? x : slope * x;
}
template <typename C>
KILN_DEVICE_FN C hardtanh(C x, C lo, C hi) {
  return x < lo ? lo : (x > hi ? hi : x);
}
template <typename C>
KILN_DEVICE_FN C elu(C x, C alpha) {
  return x > C(0) ? x : alpha * ::expm1(x);
}
// log(1 + e^z) as max(z, 0) + log(1 + e^-|z|): no overflow for large z.
template <typename C>
KILN_DEVICE_FN C softplus(C x, C beta, C threshold) {
  const C z = x * beta;
  if (z > threshold) return x;
  return ((z > C(0) ? z : C(0)) + ::log1p(::exp(-::fabs(z)))) / beta;
}
template <typename C>
KILN_DEVICE_FN C hardsigmoid(C x) {
  return hardtanh(x + C(3), C(0), C(6)) / C(6);
}
template <typename C>
KILN_DEVICE_FN C hardswish(C x) {
  return x * hardsigmoid(x);
}
template <typename C>
KILN_DEVICE_FN C mish(C x) {
  return x * ::tanh(::log1p(::exp(x)));
}
// erfc keeps precision where 1 + erf(x) cancels (large negative x).
template <typename C>
KILN_DEVICE_FN C gelu_erf(C x) {
  return C(0.5) * x * ::erfc(x * C(-0.70710678118654752440));
}
template <typename C>
KILN_DEVICE_FN C gelu_tanh(C x) {
  return C(0.5) * x * (C(1) + ::tanh(C(0.79788456080286535588) * (x + C(0.044715) * x * x * x)));
}
template <typename C>
KILN_DEVICE_FN C sign(C x) {
  return C((C(0) < x) - (x < C(0)));
}
template <typename C>
KILN_DEVICE_FN C floor(C x) {
  return ::floor(x);
}
template <typename C>
KILN_DEVICE_FN C ceil(C x) {
  return ::ceil(x);
}
template <typename C>
KILN_DEVICE_FN C round(C x) {
  return ::rint(x);  // half to even
}

template <typename C>
KILN_DEVICE_FN C add(C a, C b) {
  return a + b;
}
template <typename C>
KILN_DEVICE_FN C sub(C a, C b) {
  return a - b;
}
template <typename C>
KILN_DEVICE_FN C mul(C a, C b) {
  return a * b;
}
// a + k b, the k of add and sub's alpha (sub: -alpha) as the compute type.
template <typename C>
KILN_DEVICE_FN C add_scaled(C a, C b, C k) {
  return a + k * b;
}
template <typename C>
KILN_DEVICE_FN C div(C a, C b) {
  return a / b;
}
template <typename C>
KILN_DEVICE_FN C pow(C a, C b) {
  return ::pow(a, b);
}
// Python's remainder of floats: the sign of the divisor (fmod's, moved by b
// where the signs differ); x % 0 is NaN.
template <typename C>
KILN_DEVICE_FN C remainder(C a, C b) {
  const C r = ::fmod(a, b);
  return (r != C(0) && ((r < C(0)) != (b < C(0)))) ? r + b : r;
}
// NaN in either gives NaN (the first NaN), as PyTorch's maximum and minimum.
template <typename C>
KILN_DEVICE_FN C maximum(C a, C b) {
  return a != a ? a : (b != b ? b : (a > b ? a : b));
}
template <typename C>
KILN_DEVICE_FN C minimum(C a, C b) {
  return a != a ? a : (b != b ? b : (a < b ? a : b));
}
// min(max(x, lo), hi) as PyTorch: hi wins where lo > hi; a NaN value or
// bound gives NaN (lo != lo only for a NaN). No bound is an infinity.
template <typename C>
KILN_DEVICE_FN C clamp(C x, C lo, C hi) {
  const C v = x < lo || lo != lo ? lo : x;
  return v > hi || hi != hi ? hi : v;
}
template <typename C>
KILN_DEVICE_FN bool isinf(C x) {
  return ::isinf(x);
}

#undef KILN_DEVICE_FN

}  // namespace kiln::backend::cuda::scalar
