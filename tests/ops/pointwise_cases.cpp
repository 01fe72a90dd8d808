// Consistency cases of the elementwise ops.
#include <limits>

#include "ops/consistency.h"
#include "ops/dispatch.h"

namespace kiln::testing {
namespace {

// Shapes that break naive loops: 0-dim, empty, single, odd primes, and one
// large enough to run in parallel.
const std::vector<Shape> kUnaryShapes = {{}, {0}, {1}, {7, 13}, {3, 5, 11}, {257, 131}};

void add_unary(CaseList& cases, const std::string& name, OpId op,
               std::function<Tensor(const Tensor&)> fn, std::vector<DType> dtypes, double lo = -2,
               double hi = 2) {
  for (size_t i = 0; i < kUnaryShapes.size(); ++i) {
    Shape shape = kUnaryShapes[i];
    cases.push_back(
        {.name = name + "/shape" + std::to_string(i),
         .ops = {op},
         .dtypes = dtypes,
         .make = [shape, lo, hi](DType t,
                                 Generator& g) { return TensorList{uniform(shape, t, g, lo, hi)}; },
         .run = [fn](TensorList& in) { return TensorList{fn(in[0])}; }});
  }
  cases.push_back({.name = name + "/transposed",
                   .ops = {op},
                   .dtypes = dtypes,
                   .make =
                       [lo, hi](DType t, Generator& g) {
                         return TensorList{uniform_transposed({5, 9}, t, g, lo, hi)};
                       },
                   .run = [fn](TensorList& in) { return TensorList{fn(in[0])}; }});
  cases.push_back({.name = name + "/strided",
                   .ops = {op},
                   .dtypes = dtypes,
                   .make =
                       [lo, hi](DType t, Generator& g) {
                         return TensorList{uniform_strided({4, 6}, t, g, lo, hi)};
                       },
                   .run = [fn](TensorList& in) { return TensorList{fn(in[0])}; }});
}

struct BinaryShapes {
  Shape a, b;
  bool transposed_a = false;
};
const std::vector<BinaryShapes> kBinaryShapes = {{{}, {}},
                                                 {{0}, {0}},
                                                 {{7, 13}, {7, 13}},
                                                 {{7, 13}, {13}},
                                                 {{3, 1, 5}, {4, 1}},
                                                 {{}, {5, 3}},
                                                 {{6, 5}, {}},
                                                 {{5, 7}, {5, 7}, true},
                                                 {{300, 129}, {129}},
                                                 {{300, 129}, {300, 1}}};

void add_binary(CaseList& cases, const std::string& name, OpId op,
                std::function<Tensor(const Tensor&, const Tensor&)> fn, std::vector<DType> dtypes,
                double lo = -2, double hi = 2, double lo_b = -2, double hi_b = 2) {
  for (size_t i = 0; i < kBinaryShapes.size(); ++i) {
    BinaryShapes s = kBinaryShapes[i];
    cases.push_back({.name = name + "/shapes" + std::to_string(i),
                     .ops = {op},
                     .dtypes = dtypes,
                     .make =
                         [s, lo, hi, lo_b, hi_b](DType t, Generator& g) {
                           Tensor a = s.transposed_a ? uniform_transposed(s.a, t, g, lo, hi)
                                                     : uniform(s.a, t, g, lo, hi);
                           return TensorList{a, uniform(s.b, t, g, lo_b, hi_b)};
                         },
                     .run = [fn](TensorList& in) { return TensorList{fn(in[0], in[1])}; }});
  }
}

const CaseRegistration kUnary([](CaseList& c) {
  add_unary(
      c, "neg", OpId::neg, [](auto& x) { return neg(x); }, kNumericTypes);
  add_unary(
      c, "abs", OpId::abs, [](auto& x) { return abs(x); }, kNumericTypes);
  add_unary(
      c, "exp", OpId::exp, [](auto& x) { return exp(x); }, kFloatTypes, -20, 20);
  add_unary(c, "exp_int", OpId::exp, [](auto& x) { return exp(x); }, {kInt32});
  add_unary(
      c, "log", OpId::log, [](auto& x) { return log(x); }, kFloatTypes, 0.01, 50);
  add_unary(
      c, "log1p", OpId::log1p, [](auto& x) { return log1p(x); }, kFloatTypes, -0.9, 5);
  add_unary(
      c, "expm1", OpId::expm1, [](auto& x) { return expm1(x); }, kFloatTypes);
  add_unary(
      c, "sqrt", OpId::sqrt, [](auto& x) { return sqrt(x); }, kFloatTypes, 0, 9);
  add_unary(
      c, "rsqrt", OpId::rsqrt, [](auto& x) { return rsqrt(x); }, kFloatTypes, 0.1, 9);
  add_unary(
      c, "reciprocal", OpId::reciprocal, [](auto& x) { return reciprocal(x); }, kFloatTypes, 0.5,
      3);
  add_unary(
      c, "square", OpId::square, [](auto& x) { return square(x); }, kNumericTypes);
  add_unary(
      c, "sin", OpId::sin, [](auto& x) { return sin(x); }, kFloatTypes, -6, 6);
  add_unary(
      c, "cos", OpId::cos, [](auto& x) { return cos(x); }, kFloatTypes, -6, 6);
  add_unary(
      c, "tanh", OpId::tanh, [](auto& x) { return tanh(x); }, kFloatTypes, -5, 5);
  add_unary(
      c, "sigmoid", OpId::sigmoid, [](auto& x) { return sigmoid(x); }, kFloatTypes, -10, 10);
  add_unary(
      c, "relu", OpId::relu, [](auto& x) { return relu(x); }, kNumericTypes);
  add_unary(
      c, "gelu", OpId::gelu, [](auto& x) { return gelu(x); }, kFloatTypes, -5, 5);
  add_unary(
      c, "gelu_tanh", OpId::gelu, [](auto& x) { return gelu(x, "tanh"); }, kFloatTypes, -5, 5);
  add_unary(
      c, "silu", OpId::silu, [](auto& x) { return silu(x); }, kFloatTypes, -10, 10);
  add_unary(
      c, "leaky_relu", OpId::leaky_relu, [](auto& x) { return leaky_relu(x, 0.2); }, kFloatTypes);
  add_unary(
      c, "hardtanh", OpId::hardtanh, [](auto& x) { return hardtanh(x); }, kFloatTypes);
  add_unary(
      c, "relu6", OpId::hardtanh, [](auto& x) { return relu6(x); }, kFloatTypes, -3, 9);
  add_unary(
      c, "elu", OpId::elu, [](auto& x) { return elu(x, 0.7); }, kFloatTypes, -6, 4);
  // The threshold inside the range: both sides of it.
  add_unary(
      c, "softplus", OpId::softplus, [](auto& x) { return softplus(x, 2, 5); }, kFloatTypes, -8, 8);
  add_unary(
      c, "hardsigmoid", OpId::hardsigmoid, [](auto& x) { return hardsigmoid(x); }, kFloatTypes, -5,
      5);
  add_unary(
      c, "hardswish", OpId::hardswish, [](auto& x) { return hardswish(x); }, kFloatTypes, -5, 5);
  add_unary(
      c, "mish", OpId::mish, [](auto& x) { return mish(x); }, kFloatTypes, -8, 8);
  add_unary(
      c, "erf", OpId::erf, [](auto& x) { return erf(x); }, kFloatTypes, -3, 3);
  add_unary(
      c, "sign", OpId::sign, [](auto& x) { return sign(x); }, kAllTypes);
  add_unary(
      c, "floor", OpId::floor, [](auto& x) { return floor(x); }, kNumericTypes, -9, 9);
  add_unary(
      c, "ceil", OpId::ceil, [](auto& x) { return ceil(x); }, kNumericTypes, -9, 9);
  add_unary(
      c, "round", OpId::round, [](auto& x) { return round(x * 2) / 2; }, {kFloat32, kFloat64}, -9,
      9);
  add_unary(
      c, "round_int", OpId::round, [](auto& x) { return round(x); }, kIntTypes, -9, 9);
  add_unary(
      c, "logical_not", OpId::logical_not, [](auto& x) { return logical_not(x); }, kAllTypes);
  add_unary(
      c, "isnan", OpId::isnan, [](auto& x) { return isnan(log(x)); }, kFloatTypes);
  add_unary(
      c, "isinf", OpId::isinf, [](auto& x) { return isinf(reciprocal(floor(x))); }, kFloatTypes);
});

const CaseRegistration kBinary([](CaseList& c) {
  add_binary(
      c, "add", OpId::add, [](auto& a, auto& b) { return add(a, b); }, kAllTypes);
  add_binary(
      c, "add_alpha", OpId::add, [](auto& a, auto& b) { return add(a, b, 3); }, kNumericTypes);
  add_binary(
      c, "sub", OpId::sub, [](auto& a, auto& b) { return sub(a, b, 2); }, kNumericTypes);
  add_binary(
      c, "mul", OpId::mul, [](auto& a, auto& b) { return mul(a, b); }, kAllTypes);
  add_binary(
      c, "div", OpId::div, [](auto& a, auto& b) { return div(a, b); }, kFloatTypes, -2, 2, 0.5, 3);
  add_binary(
      c, "div_int", OpId::div, [](auto& a, auto& b) { return div(a, b); }, {kInt32, kInt64}, -9, 9,
      1, 9);
  add_binary(
      c, "pow", OpId::pow, [](auto& a, auto& b) { return pow(a, b); }, kFloatTypes, 0.1, 3, -2, 2);
  add_binary(
      c, "pow_int", OpId::pow, [](auto& a, auto& b) { return pow(a, b); }, {kInt32, kInt64}, -5, 5,
      0, 6);
  add_binary(
      c, "maximum", OpId::maximum, [](auto& a, auto& b) { return maximum(a, b); }, kNumericTypes);
  add_binary(
      c, "minimum", OpId::minimum, [](auto& a, auto& b) { return minimum(a, b); }, kNumericTypes);
  add_binary(
      c, "remainder", OpId::remainder, [](auto& a, auto& b) { return remainder(a, b); },
      {kFloat32, kFloat64}, -9, 9, 0.5, 3);
  add_binary(
      c, "remainder_int", OpId::remainder, [](auto& a, auto& b) { return remainder(a, b); },
      {kInt32, kInt64, kInt8}, -20, 20, 1, 7);
  add_binary(c, "eq", OpId::eq, [](auto& a, auto& b) { return eq(round(a), round(b)); },
             {kFloat32, kFloat64});
  add_binary(
      c, "ne", OpId::ne, [](auto& a, auto& b) { return ne(a, b); }, kAllTypes);
  add_binary(
      c, "lt", OpId::lt, [](auto& a, auto& b) { return lt(a, b); }, kNumericTypes);
  add_binary(
      c, "le", OpId::le, [](auto& a, auto& b) { return le(a, b); }, kNumericTypes);
  add_binary(
      c, "gt", OpId::gt, [](auto& a, auto& b) { return gt(a, b); }, kNumericTypes);
  add_binary(
      c, "ge", OpId::ge, [](auto& a, auto& b) { return ge(a, b); }, kNumericTypes);
  add_binary(
      c, "logical_and", OpId::logical_and, [](auto& a, auto& b) { return logical_and(a, b); },
      kAllTypes);
  add_binary(
      c, "logical_or", OpId::logical_or, [](auto& a, auto& b) { return logical_or(a, b); },
      kAllTypes);
  add_binary(
      c, "logical_xor", OpId::logical_xor, [](auto& a, auto& b) { return logical_xor(a, b); },
      kAllTypes);
});

const CaseRegistration kMixed([](CaseList& c) {
  // Mixed dtypes and wrapped numbers exercise the casts dispatch inserts.
  c.push_back({.name = "add/int_plus_float_scalar",
               .ops = {OpId::add, OpId::copy},
               .dtypes = {kInt32},
               .make =
                   [](DType t, Generator& g) {
                     return TensorList{uniform({5, 4}, t, g, -9, 9)};
                   },
               .run =
                   [](TensorList& in) {
                     return TensorList{in[0] + 0.25, 2.5 * in[0], in[0] * 3};
                   }});
  c.push_back({.name = "mul/half_times_float",
               .ops = {OpId::mul},
               .dtypes = {kFloat16},
               .make =
                   [](DType t, Generator& g) {
                     return TensorList{uniform({5, 4}, t, g), uniform({4}, kFloat32, g)};
                   },
               .run = [](TensorList& in) { return TensorList{in[0] * in[1]}; }});
  c.push_back({.name = "where/broadcast",
               .ops = {OpId::where},
               .dtypes = kAllTypes,
               .make =
                   [](DType t, Generator& g) {
                     return TensorList{random_mask({4, 1, 6}, g), uniform({5, 6}, t, g),
                                       uniform({4, 5, 1}, t, g)};
                   },
               .run =
                   [](TensorList& in) {
                     return TensorList{where(in[0], in[1], in[2]), where(in[0], in[1], 7)};
                   }});
  c.push_back({.name = "clamp/bounds",
               .ops = {OpId::clamp},
               .dtypes = kNumericTypes,
               .make =
                   [](DType t, Generator& g) {
                     return TensorList{uniform({9, 7}, t, g, -9, 9)};
                   },
               .run =
                   [](TensorList& in) {
                     return TensorList{clamp(in[0], -3, 4), clamp(in[0], std::nullopt, 2),
                                       clamp(in[0], 1, std::nullopt)};
                   }});
  // The activations keep NaN, and integers become float32.
  c.push_back({.name = "activations/nan_and_integers",
               .ops = {OpId::leaky_relu, OpId::hardtanh, OpId::elu, OpId::softplus,
                       OpId::hardsigmoid, OpId::hardswish, OpId::mish},
               .dtypes = {kFloat32, kFloat64, kInt64},
               .make =
                   [](DType t, Generator& g) {
                     const Tensor x = uniform({9, 17}, t, g, -9, 9);
                     if (!is_floating(t)) return TensorList{x};
                     const double nan = std::numeric_limits<double>::quiet_NaN();
                     return TensorList{masked_fill(x, random_mask({9, 17}, g, 0.2), nan)};
                   },
               .run =
                   [](TensorList& in) {
                     const Tensor& x = in[0];
                     return TensorList{leaky_relu(x),  hardtanh(x, -2, 3), elu(x), softplus(x),
                                       hardsigmoid(x), hardswish(x),       mish(x)};
                   }});
  // NaN in either operand (a fifth of the elements of each, some in both),
  // and NaN as a clamp bound: NaN out wherever one goes in.
  c.push_back({.name = "maximum_minimum_clamp/nan",
               .ops = {OpId::maximum, OpId::minimum, OpId::clamp},
               .dtypes = kFloatTypes,
               .make =
                   [](DType t, Generator& g) {
                     const double nan = std::numeric_limits<double>::quiet_NaN();
                     const Tensor a =
                         masked_fill(uniform({33, 65}, t, g), random_mask({33, 65}, g, 0.2), nan);
                     const Tensor b =
                         masked_fill(uniform({33, 65}, t, g), random_mask({33, 65}, g, 0.2), nan);
                     return TensorList{a, b};
                   },
               .run =
                   [](TensorList& in) {
                     const double nan = std::numeric_limits<double>::quiet_NaN();
                     return TensorList{maximum(in[0], in[1]), minimum(in[0], in[1]),
                                       clamp(in[0], -1, 1), clamp(in[1], nan, 1),
                                       clamp(in[1], std::nullopt, nan)};
                   }});
  c.push_back({.name = "clamp_/strided_view",
               .ops = {OpId::clamp},
               .dtypes = {kFloat32, kInt64},
               .make =
                   [](DType t, Generator& g) {
                     return TensorList{uniform({6, 8}, t, g, -9, 9)};
                   },
               .run =
                   [](TensorList& in) {
                     Tensor v = in[0].slice(1, 1, std::nullopt, 3);
                     clamp_(v, -1, 1);
                     return TensorList{in[0]};
                   }});
  c.push_back({.name = "masked_fill/broadcast_mask",
               .ops = {OpId::masked_fill},
               .dtypes = kAllTypes,
               .make =
                   [](DType t, Generator& g) {
                     return TensorList{uniform({3, 5, 7}, t, g), random_mask({5, 1}, g)};
                   },
               .run =
                   [](TensorList& in) {
                     Tensor x = in[0].clone();
                     masked_fill_(x, in[1], 1);
                     return TensorList{masked_fill(in[0], in[1], 0), x};
                   }});
  c.push_back({.name = "copy/every_cast",
               .ops = {OpId::copy},
               .dtypes = kAllTypes,
               .make =
                   [](DType t, Generator& g) {
                     return TensorList{uniform_transposed({6, 9}, t, g, -100, 100)};
                   },
               .run =
                   [](TensorList& in) {
                     TensorList out;
                     for (DType to : kAllTypes) {
                       if (to == kUInt8 || to == kInt8)
                         continue;  // out-of-range float -> int is undefined
                       out.push_back(in[0].to(to));
                     }
                     out.push_back(in[0].contiguous());
                     return out;
                   }});
  // to_device is what Tensor::to(Device) records inside kiln::compile; here
  // it copies to the input's own device (a transposed input: gathered first).
  c.push_back({.name = "to_device/onto_its_own_device",
               .ops = {OpId::to_device},
               .dtypes = kAllTypes,
               .make =
                   [](DType t, Generator& g) {
                     return TensorList{uniform_transposed({6, 9}, t, g, -100, 100)};
                   },
               .run =
                   [](TensorList& in) {
                     return TensorList{ops::dispatch1(OpId::to_device, {in[0]}, {in[0].device()})};
                   }});
  c.push_back({.name = "copy_/into_transposed_view_with_broadcast",
               .ops = {OpId::copy},
               .dtypes = kAllTypes,
               .make =
                   [](DType t, Generator& g) {
                     return TensorList{zeros({4, 6}, {.dtype = t}), uniform({6}, t, g)};
                   },
               .run =
                   [](TensorList& in) {
                     Tensor v = in[0].t();
                     v.copy_(in[1].unsqueeze(1));
                     return TensorList{in[0]};
                   }});
  c.push_back({.name = "fill/views",
               .ops = {OpId::fill},
               .dtypes = kAllTypes,
               .make =
                   [](DType t, Generator& g) {
                     return TensorList{uniform({5, 8}, t, g)};
                   },
               .run =
                   [](TensorList& in) {
                     Tensor v = in[0].index({Slice(1, 4), Slice(0, std::nullopt, 2)});
                     v.fill_(1);
                     in[0][4].zero_();
                     return TensorList{in[0]};
                   }});
  c.push_back({.name = "add_/inplace_aliasing",
               .ops = {OpId::add, OpId::mul, OpId::relu, OpId::div},
               .dtypes = {kFloat32, kFloat64, kBFloat16},
               .make =
                   [](DType t, Generator& g) {
                     return TensorList{uniform({7, 9}, t, g)};
                   },
               .run =
                   [](TensorList& in) {
                     Tensor x = in[0];
                     x += x;
                     x.mul_(x.index({Slice(), Slice(0, 1)}));
                     relu_(x);
                     x /= 3;
                     Tensor shifted = x.index({Slice(1, std::nullopt)});
                     shifted.add_(
                         x.index({Slice(0, -1)}));  // partial overlap goes through a temporary
                     return TensorList{x};
                   },
               // relu_ saves its result and x /= 3 overwrites it: not differentiable,
               // in PyTorch either.
               .check_grad = false});
});

}  // namespace
}  // namespace kiln::testing
