// The public elementwise functions, operators and in-place Tensor methods.
#include "kiln/ops/pointwise.h"

#include "kiln/ops/shape.h"
#include "ops/dispatch.h"

namespace kiln {

using ops::Attrs;
using ops::dispatch1;
using ops::dispatch_inplace;
using ops::OpId;

namespace {

ops::AttrValue opt_attr(std::optional<Scalar> s) {
  return s ? ops::AttrValue(*s) : ops::AttrValue(std::monostate{});
}

}  // namespace

#define KILN_UNARY(name) \
  Tensor name(const Tensor& x) { return dispatch1(OpId::name, {x}); }
KILN_UNARY(neg)
KILN_UNARY(abs)
KILN_UNARY(exp)
KILN_UNARY(log)
KILN_UNARY(log1p)
KILN_UNARY(expm1)
KILN_UNARY(sqrt)
KILN_UNARY(rsqrt)
KILN_UNARY(reciprocal)
KILN_UNARY(square)
KILN_UNARY(sin)
KILN_UNARY(cos)
KILN_UNARY(tanh)
KILN_UNARY(sigmoid)
KILN_UNARY(relu)
KILN_UNARY(silu)
KILN_UNARY(hardsigmoid)
KILN_UNARY(hardswish)
KILN_UNARY(mish)
KILN_UNARY(erf)
KILN_UNARY(sign)
KILN_UNARY(floor)
KILN_UNARY(ceil)
KILN_UNARY(round)
KILN_UNARY(logical_not)
KILN_UNARY(isnan)
KILN_UNARY(isinf)
#undef KILN_UNARY

Tensor gelu(const Tensor& x, std::string_view approximate) {
  return dispatch1(OpId::gelu, {x}, {std::string(approximate)});
}

Tensor leaky_relu(const Tensor& x, double negative_slope) {
  return dispatch1(OpId::leaky_relu, {x}, {negative_slope});
}
Tensor hardtanh(const Tensor& x, double min_val, double max_val) {
  return dispatch1(OpId::hardtanh, {x}, {min_val, max_val});
}
Tensor relu6(const Tensor& x) { return hardtanh(x, 0, 6); }
Tensor clamp_min(const Tensor& x, Scalar min) { return clamp(x, min, std::nullopt); }
Tensor clamp_max(const Tensor& x, Scalar max) { return clamp(x, std::nullopt, max); }
Tensor Tensor::clamp_min(Scalar min) const { return kiln::clamp_min(*this, min); }
Tensor Tensor::clamp_max(Scalar max) const { return kiln::clamp_max(*this, max); }
Tensor Tensor::gelu(std::string_view approximate) const { return kiln::gelu(*this, approximate); }
Tensor elu(const Tensor& x, double alpha) { return dispatch1(OpId::elu, {x}, {alpha}); }
Tensor softplus(const Tensor& x, double beta, double threshold) {
  return dispatch1(OpId::softplus, {x}, {beta, threshold});
}

Tensor add(const Tensor& a, const Tensor& b, Scalar alpha) { return dispatch1(OpId::add, {a, b}, {alpha}); }
Tensor add(const Tensor& a, Scalar b, Scalar alpha) { return add(a, wrapped_scalar(b), alpha); }
Tensor sub(const Tensor& a, const Tensor& b, Scalar alpha) { return dispatch1(OpId::sub, {a, b}, {alpha}); }
Tensor sub(const Tensor& a, Scalar b, Scalar alpha) { return sub(a, wrapped_scalar(b), alpha); }
Tensor mul(const Tensor& a, const Tensor& b) { return dispatch1(OpId::mul, {a, b}); }
Tensor mul(const Tensor& a, Scalar b) { return mul(a, wrapped_scalar(b)); }
Tensor div(const Tensor& a, const Tensor& b) { return dispatch1(OpId::div, {a, b}); }
Tensor div(const Tensor& a, Scalar b) { return div(a, wrapped_scalar(b)); }
Tensor pow(const Tensor& a, const Tensor& e) { return dispatch1(OpId::pow, {a, e}); }
Tensor pow(const Tensor& a, Scalar e) {
  // As PyTorch: a negative integer exponent of an integer tensor is refused
  // (a tensor of exponents gives 0, 1 or -1 per element, as the kernels do).
  if (e.is_integral() && e.to<int64_t>() < 0 && is_integral(a.dtype())) {
    throw ValueError(detail::str_cat("pow: integers to negative integer powers are not allowed (",
                                     dtype_name(a.dtype()), " tensor to the power ",
                                     e.to<int64_t>(), ")"));
  }
  return pow(a, wrapped_scalar(e));
}
Tensor pow(Scalar a, const Tensor& e) { return pow(wrapped_scalar(a), e); }
Tensor maximum(const Tensor& a, const Tensor& b) { return dispatch1(OpId::maximum, {a, b}); }
Tensor minimum(const Tensor& a, const Tensor& b) { return dispatch1(OpId::minimum, {a, b}); }
Tensor remainder(const Tensor& a, const Tensor& b) { return dispatch1(OpId::remainder, {a, b}); }
Tensor remainder(const Tensor& a, Scalar b) { return remainder(a, wrapped_scalar(b)); }
Tensor eq(const Tensor& a, const Tensor& b) { return dispatch1(OpId::eq, {a, b}); }
Tensor ne(const Tensor& a, const Tensor& b) { return dispatch1(OpId::ne, {a, b}); }
Tensor lt(const Tensor& a, const Tensor& b) { return dispatch1(OpId::lt, {a, b}); }
Tensor le(const Tensor& a, const Tensor& b) { return dispatch1(OpId::le, {a, b}); }
Tensor gt(const Tensor& a, const Tensor& b) { return dispatch1(OpId::gt, {a, b}); }
Tensor ge(const Tensor& a, const Tensor& b) { return dispatch1(OpId::ge, {a, b}); }
Tensor logical_and(const Tensor& a, const Tensor& b) { return dispatch1(OpId::logical_and, {a, b}); }
Tensor logical_or(const Tensor& a, const Tensor& b) { return dispatch1(OpId::logical_or, {a, b}); }
Tensor logical_xor(const Tensor& a, const Tensor& b) { return dispatch1(OpId::logical_xor, {a, b}); }
Tensor where(const Tensor& c, const Tensor& a, const Tensor& b) { return dispatch1(OpId::where, {c, a, b}); }
Tensor where(const Tensor& c, const Tensor& a, Scalar b) { return where(c, a, wrapped_scalar(b)); }
Tensor where(const Tensor& c, Scalar a, const Tensor& b) { return where(c, wrapped_scalar(a), b); }
Tensor clamp(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max) {
  return dispatch1(OpId::clamp, {x}, {opt_attr(min), opt_attr(max)});
}
Tensor masked_fill(const Tensor& x, const Tensor& mask, Scalar value) {
  return dispatch1(OpId::masked_fill, {x, mask}, {value});
}

Tensor& neg_(Tensor& x) { return dispatch_inplace(OpId::neg, x, {x}); }
Tensor& exp_(Tensor& x) { return dispatch_inplace(OpId::exp, x, {x}); }
Tensor& sqrt_(Tensor& x) { return dispatch_inplace(OpId::sqrt, x, {x}); }
Tensor& sigmoid_(Tensor& x) { return dispatch_inplace(OpId::sigmoid, x, {x}); }
Tensor& tanh_(Tensor& x) { return dispatch_inplace(OpId::tanh, x, {x}); }
Tensor& relu_(Tensor& x) { return dispatch_inplace(OpId::relu, x, {x}); }
Tensor& clamp_(Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max) {
  return dispatch_inplace(OpId::clamp, x, {x}, {opt_attr(min), opt_attr(max)});
}
Tensor& masked_fill_(Tensor& x, const Tensor& mask, Scalar value) {
  return dispatch_inplace(OpId::masked_fill, x, {x, mask}, {value});
}
Tensor& fill_(Tensor& x, Scalar value) { return dispatch_inplace(OpId::fill, x, {x}, {value}); }
Tensor& zero_(Tensor& x) { return fill_(x, 0); }
Tensor& copy_(Tensor& dst, const Tensor& src) {
  Tensor s = src.sizes() == dst.sizes() ? src : expand(src, dst.sizes());
  return dispatch_inplace(OpId::copy, dst, {s}, {dst.dtype()});
}

// --- Tensor methods and operators --------------------------------------------

Tensor Tensor::neg() const { return kiln::neg(*this); }
Tensor Tensor::abs() const { return kiln::abs(*this); }
Tensor Tensor::exp() const { return kiln::exp(*this); }
Tensor Tensor::log() const { return kiln::log(*this); }
Tensor Tensor::sqrt() const { return kiln::sqrt(*this); }
Tensor Tensor::rsqrt() const { return kiln::rsqrt(*this); }
Tensor Tensor::square() const { return kiln::square(*this); }
Tensor Tensor::sin() const { return kiln::sin(*this); }
Tensor Tensor::cos() const { return kiln::cos(*this); }
Tensor Tensor::tanh() const { return kiln::tanh(*this); }
Tensor Tensor::sigmoid() const { return kiln::sigmoid(*this); }
Tensor Tensor::relu() const { return kiln::relu(*this); }
Tensor Tensor::pow(const Tensor& e) const { return kiln::pow(*this, e); }
Tensor Tensor::pow(Scalar e) const { return kiln::pow(*this, e); }
Tensor Tensor::clamp(std::optional<Scalar> lo, std::optional<Scalar> hi) const {
  return kiln::clamp(*this, lo, hi);
}
Tensor Tensor::masked_fill(const Tensor& mask, Scalar v) const { return kiln::masked_fill(*this, mask, v); }

Tensor& Tensor::add_(const Tensor& o, Scalar alpha) { return dispatch_inplace(OpId::add, *this, {*this, o}, {alpha}); }
Tensor& Tensor::add_(Scalar o) { return add_(wrapped_scalar(o)); }
Tensor& Tensor::sub_(const Tensor& o, Scalar alpha) { return dispatch_inplace(OpId::sub, *this, {*this, o}, {alpha}); }
Tensor& Tensor::sub_(Scalar o) { return sub_(wrapped_scalar(o)); }
Tensor& Tensor::mul_(const Tensor& o) { return dispatch_inplace(OpId::mul, *this, {*this, o}); }
Tensor& Tensor::mul_(Scalar o) { return mul_(wrapped_scalar(o)); }
Tensor& Tensor::div_(const Tensor& o) { return dispatch_inplace(OpId::div, *this, {*this, o}); }
Tensor& Tensor::div_(Scalar o) { return div_(wrapped_scalar(o)); }
Tensor& Tensor::relu_() { return kiln::relu_(*this); }
Tensor& Tensor::clamp_(std::optional<Scalar> lo, std::optional<Scalar> hi) { return kiln::clamp_(*this, lo, hi); }
Tensor& Tensor::fill_(Scalar v) { return kiln::fill_(*this, v); }
Tensor& Tensor::zero_() { return kiln::zero_(*this); }
Tensor& Tensor::copy_(const Tensor& src) { return kiln::copy_(*this, src); }

Tensor operator-(const Tensor& a) { return neg(a); }
Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator+(const Tensor& a, Scalar b) { return add(a, b); }
Tensor operator-(const Tensor& a, Scalar b) { return sub(a, b); }
Tensor operator*(const Tensor& a, Scalar b) { return mul(a, b); }
Tensor operator/(const Tensor& a, Scalar b) { return div(a, b); }
Tensor operator+(Scalar a, const Tensor& b) { return add(wrapped_scalar(a), b); }
Tensor operator-(Scalar a, const Tensor& b) { return sub(wrapped_scalar(a), b); }
Tensor operator*(Scalar a, const Tensor& b) { return mul(wrapped_scalar(a), b); }
Tensor operator/(Scalar a, const Tensor& b) { return div(wrapped_scalar(a), b); }
Tensor operator==(const Tensor& a, const Tensor& b) { return eq(a, b); }
Tensor operator!=(const Tensor& a, const Tensor& b) { return ne(a, b); }
Tensor operator<(const Tensor& a, const Tensor& b) { return lt(a, b); }
Tensor operator<=(const Tensor& a, const Tensor& b) { return le(a, b); }
Tensor operator>(const Tensor& a, const Tensor& b) { return gt(a, b); }
Tensor operator>=(const Tensor& a, const Tensor& b) { return ge(a, b); }
Tensor operator==(const Tensor& a, Scalar b) { return eq(a, wrapped_scalar(b)); }
Tensor operator!=(const Tensor& a, Scalar b) { return ne(a, wrapped_scalar(b)); }
Tensor operator<(const Tensor& a, Scalar b) { return lt(a, wrapped_scalar(b)); }
Tensor operator<=(const Tensor& a, Scalar b) { return le(a, wrapped_scalar(b)); }
Tensor operator>(const Tensor& a, Scalar b) { return gt(a, wrapped_scalar(b)); }
Tensor operator>=(const Tensor& a, Scalar b) { return ge(a, wrapped_scalar(b)); }
Tensor operator&&(const Tensor& a, const Tensor& b) { return logical_and(a, b); }
Tensor operator||(const Tensor& a, const Tensor& b) { return logical_or(a, b); }
Tensor operator!(const Tensor& a) { return logical_not(a); }
Tensor& operator+=(Tensor& a, const Tensor& b) { return a.add_(b); }
Tensor& operator-=(Tensor& a, const Tensor& b) { return a.sub_(b); }
Tensor& operator*=(Tensor& a, const Tensor& b) { return a.mul_(b); }
Tensor& operator/=(Tensor& a, const Tensor& b) { return a.div_(b); }
Tensor& operator+=(Tensor& a, Scalar b) { return a.add_(b); }
Tensor& operator-=(Tensor& a, Scalar b) { return a.sub_(b); }
Tensor& operator*=(Tensor& a, Scalar b) { return a.mul_(b); }
Tensor& operator/=(Tensor& a, Scalar b) { return a.div_(b); }

}  // namespace kiln
