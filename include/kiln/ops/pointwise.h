// Elementwise math with broadcasting and PyTorch's type promotion.
//
//   auto y = kiln::where(x > 0, x, 0.1 * x);      // leaky relu
//   auto z = kiln::clamp(kiln::exp(x), 0.0, 6.0);
//   kiln::relu_(x);                               // in place
#pragma once

#include <optional>
#include <string_view>

#include "kiln/tensor.h"

namespace kiln {

Tensor neg(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor log1p(const Tensor& x);
Tensor expm1(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor reciprocal(const Tensor& x);
Tensor square(const Tensor& x);
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
// approximate: "none" (the erf form) or "tanh".
Tensor gelu(const Tensor& x, std::string_view approximate = "none");
Tensor silu(const Tensor& x);
// The other activations of PyTorch's nn (torch.nn.functional's defaults).
// x > 0 ? x : negative_slope * x
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);
// x clamped to [min_val, max_val] (NaN kept); relu6 is hardtanh(x, 0, 6).
Tensor hardtanh(const Tensor& x, double min_val = -1, double max_val = 1);
Tensor relu6(const Tensor& x);
// x > 0 ? x : alpha * (exp(x) - 1)
Tensor elu(const Tensor& x, double alpha = 1);
// log(1 + exp(beta x)) / beta, x itself where beta x > threshold.
Tensor softplus(const Tensor& x, double beta = 1, double threshold = 20);
// relu6(x + 3) / 6, and x times it.
Tensor hardsigmoid(const Tensor& x);
Tensor hardswish(const Tensor& x);
// x * tanh(softplus(x))
Tensor mish(const Tensor& x);
Tensor erf(const Tensor& x);
Tensor sign(const Tensor& x);
Tensor floor(const Tensor& x);
Tensor ceil(const Tensor& x);
Tensor round(const Tensor& x);  // halves to even, as PyTorch
Tensor logical_not(const Tensor& x);
Tensor isnan(const Tensor& x);
Tensor isinf(const Tensor& x);

Tensor add(const Tensor& a, const Tensor& b, Scalar alpha = 1);  // a + alpha * b
Tensor add(const Tensor& a, Scalar b, Scalar alpha = 1);
Tensor sub(const Tensor& a, const Tensor& b, Scalar alpha = 1);  // a - alpha * b
Tensor sub(const Tensor& a, Scalar b, Scalar alpha = 1);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, Scalar b);
Tensor div(const Tensor& a, const Tensor& b);  // true division: integers give float32
Tensor div(const Tensor& a, Scalar b);
Tensor pow(const Tensor& a, const Tensor& exponent);
Tensor pow(const Tensor& a, Scalar exponent);
Tensor pow(Scalar a, const Tensor& exponent);
Tensor maximum(const Tensor& a, const Tensor& b);  // propagates NaN
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor remainder(const Tensor& a, const Tensor& b);  // result has the sign of b (Python's %)
Tensor remainder(const Tensor& a, Scalar b);
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
Tensor logical_xor(const Tensor& a, const Tensor& b);
Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b);
Tensor where(const Tensor& condition, const Tensor& a, Scalar b);
Tensor where(const Tensor& condition, Scalar a, const Tensor& b);
Tensor clamp(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max);
Tensor masked_fill(const Tensor& x, const Tensor& mask, Scalar value);

// In-place forms: write into x (any view) and bump its version.
Tensor& neg_(Tensor& x);
Tensor& exp_(Tensor& x);
Tensor& sqrt_(Tensor& x);
Tensor& sigmoid_(Tensor& x);
Tensor& tanh_(Tensor& x);
Tensor& relu_(Tensor& x);
Tensor& clamp_(Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max);
// clamp with one bound, as torch.clamp_min and torch.clamp_max.
Tensor clamp_min(const Tensor& x, Scalar min);
Tensor clamp_max(const Tensor& x, Scalar max);
Tensor& masked_fill_(Tensor& x, const Tensor& mask, Scalar value);
Tensor& fill_(Tensor& x, Scalar value);
Tensor& zero_(Tensor& x);
Tensor& copy_(Tensor& dst, const Tensor& src);  // broadcasts src and converts its dtype

}  // namespace kiln
