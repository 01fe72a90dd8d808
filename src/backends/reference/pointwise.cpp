// Reference kernels of the elementwise ops: double for floating types, int64
// for integers, one element at a time.
#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "backends/device_copy.h"
#include "backends/reference/ref_util.h"
#include "backends/reference/reference.h"

namespace kiln::backend {
namespace {

// int64 arithmetic that wraps in two's complement (what storing into the
// output dtype keeps), where the plain operators are undefined on overflow.
int64_t wrapped_add(int64_t a, int64_t b) {
  int64_t r = 0;
  (void)__builtin_add_overflow(a, b, &r);
  return r;
}
int64_t wrapped_mul(int64_t a, int64_t b) {
  int64_t r = 0;
  (void)__builtin_mul_overflow(a, b, &r);
  return r;
}
int64_t wrapped_neg(int64_t a) {
  int64_t r = 0;
  (void)__builtin_sub_overflow(int64_t{0}, a, &r);
  return r;
}

// The values an integer dtype holds.
std::pair<int64_t, int64_t> int_range(DType t) {
  switch (t) {
    case kBool:
      return {0, 1};
    case kUInt8:
      return {0, 255};
    case kInt8:
      return {-128, 127};
    case kInt16:
      return {-32768, 32767};
    case kInt32:
      return {std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()};
    default:
      return {std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()};
  }
}

using ops::OpId;
using Args = std::vector<double>;
using IArgs = std::vector<int64_t>;

std::vector<Tensor> inputs_of(const KernelCall& c) {
  return std::vector<Tensor>(c.inputs.begin(), c.inputs.end());
}

// f on doubles for floating outputs, g on int64 for integer and bool outputs.
template <typename F, typename G>
void map_typed(const KernelCall& c, F f, G g) {
  if (is_floating(c.out().dtype()))
    ref::map<double>(c.out(), inputs_of(c), f);
  else
    ref::map<int64_t>(c.out(), inputs_of(c), g);
}

// An attribute in the precision an op of dtype t computes in, as PyTorch:
// float below float64 (a value past float's range is infinite there).
double in_compute_precision(double v, DType t) {
  if (t == kFloat64 || !std::isfinite(v)) return v;
  return std::fabs(v) > std::numeric_limits<float>::max()
             ? std::copysign(std::numeric_limits<double>::infinity(), v)
             : static_cast<double>(static_cast<float>(v));
}

// A float-only op (the shape rule promotes its inputs to floating types).
template <typename F>
void map_float(const KernelCall& c, F f) {
  ref::map<double>(c.out(), inputs_of(c), [&](const Args& a) { return f(a[0]); });
}

// A predicate over the input's values: doubles for floating inputs, int64 otherwise.
template <typename F>
void map_predicate(const KernelCall& c, F f) {
  if (is_floating(c.in(0).dtype())) {
    ref::map<double>(c.out(), inputs_of(c), [&](const Args& a) { return f(a) ? 1.0 : 0.0; });
  } else {
    ref::map<int64_t>(c.out(), inputs_of(c), [&](const IArgs& a) { return int64_t(f(a)); });
  }
}

double python_fmod(double a, double b) {
  double r = std::fmod(a, b);
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

int64_t python_imod(int64_t a, int64_t b) {
  if (b == -1) return 0;  // INT64_MIN % -1 traps
  int64_t r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

int64_t ipow(int64_t base, int64_t e) {
  if (e < 0) return base == 1 ? 1 : base == -1 ? ((e % 2) ? -1 : 1) : 0;
  // Square and multiply, wrapping (a loop of e products would run 2^62 times).
  int64_t r = 1;
  for (; e > 0; e >>= 1) {
    if (e & 1) r = wrapped_mul(r, base);
    base = wrapped_mul(base, base);
  }
  return r;
}

// Integers are stored back wrapped to the output's width, as a cast would.
void register_unary(KernelTable& t) {
  t.set(OpId::neg, [](const KernelCall& c) {
    map_typed(
        c, [](const Args& a) { return -a[0]; }, [](const IArgs& a) { return wrapped_neg(a[0]); });
  });
  t.set(OpId::abs, [](const KernelCall& c) {
    map_typed(
        c, [](const Args& a) { return std::fabs(a[0]); },
        [](const IArgs& a) { return a[0] < 0 ? wrapped_neg(a[0]) : a[0]; });
  });
  t.set(OpId::exp, [](const KernelCall& c) { map_float(c, [](double x) { return std::exp(x); }); });
  t.set(OpId::log, [](const KernelCall& c) { map_float(c, [](double x) { return std::log(x); }); });
  t.set(OpId::log1p,
        [](const KernelCall& c) { map_float(c, [](double x) { return std::log1p(x); }); });
  t.set(OpId::expm1,
        [](const KernelCall& c) { map_float(c, [](double x) { return std::expm1(x); }); });
  t.set(OpId::sqrt,
        [](const KernelCall& c) { map_float(c, [](double x) { return std::sqrt(x); }); });
  t.set(OpId::rsqrt,
        [](const KernelCall& c) { map_float(c, [](double x) { return 1 / std::sqrt(x); }); });
  t.set(OpId::reciprocal,
        [](const KernelCall& c) { map_float(c, [](double x) { return 1 / x; }); });
  t.set(OpId::square, [](const KernelCall& c) {
    map_typed(
        c, [](const Args& a) { return a[0] * a[0]; },
        [](const IArgs& a) { return wrapped_mul(a[0], a[0]); });
  });
  t.set(OpId::sin, [](const KernelCall& c) { map_float(c, [](double x) { return std::sin(x); }); });
  t.set(OpId::cos, [](const KernelCall& c) { map_float(c, [](double x) { return std::cos(x); }); });
  t.set(OpId::tanh,
        [](const KernelCall& c) { map_float(c, [](double x) { return std::tanh(x); }); });
  t.set(OpId::sigmoid,
        [](const KernelCall& c) { map_float(c, [](double x) { return 1 / (1 + std::exp(-x)); }); });
  t.set(OpId::relu, [](const KernelCall& c) {
    map_typed(
        c, [](const Args& a) { return a[0] < 0 ? 0.0 : a[0]; },
        [](const IArgs& a) { return a[0] < 0 ? int64_t{0} : a[0]; });
  });
  t.set(OpId::gelu, [](const KernelCall& c) {
    if (c.attrs.str(0) == "tanh") {
      map_float(c, [](double x) {
        return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
      });
    } else {
      map_float(c, [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); });
    }
  });
  t.set(OpId::silu,
        [](const KernelCall& c) { map_float(c, [](double x) { return x / (1 + std::exp(-x)); }); });
  t.set(OpId::erf, [](const KernelCall& c) { map_float(c, [](double x) { return std::erf(x); }); });
  // The activations' attributes in the precision they compute in, as the
  // kernels take them.
  const auto attr = [](const KernelCall& c, size_t k) {
    return in_compute_precision(c.attrs.f(k), c.out().dtype());
  };
  t.set(OpId::leaky_relu, [attr](const KernelCall& c) {
    const double slope = attr(c, 0);
    map_float(c, [slope](double x) { return x > 0 ? x : slope * x; });
  });
  t.set(OpId::hardtanh, [attr](const KernelCall& c) {
    const double lo = attr(c, 0), hi = attr(c, 1);
    map_float(c, [lo, hi](double x) { return x < lo ? lo : x > hi ? hi : x; });
  });
  t.set(OpId::elu, [attr](const KernelCall& c) {
    const double alpha = attr(c, 0);
    map_float(c, [alpha](double x) { return x > 0 ? x : alpha * std::expm1(x); });
  });
  t.set(OpId::softplus, [attr](const KernelCall& c) {
    const double beta = attr(c, 0), threshold = attr(c, 1);
    map_float(c, [beta, threshold](double x) {
      const double z = x * beta;  // log(1 + e^z), without overflow for large z
      return z > threshold ? x : (std::max(z, 0.0) + std::log1p(std::exp(-std::fabs(z)))) / beta;
    });
  });
  const auto hardsigmoid = [](double x) {
    return std::isnan(x) ? x : std::clamp(x + 3, 0.0, 6.0) / 6;
  };
  t.set(OpId::hardsigmoid, [hardsigmoid](const KernelCall& c) { map_float(c, hardsigmoid); });
  t.set(OpId::hardswish, [hardsigmoid](const KernelCall& c) {
    map_float(c, [hardsigmoid](double x) { return x * hardsigmoid(x); });
  });
  t.set(OpId::mish, [](const KernelCall& c) {
    map_float(c, [](double x) { return x * std::tanh(std::log1p(std::exp(x))); });
  });
  t.set(OpId::sign, [](const KernelCall& c) {
    map_typed(
        c, [](const Args& a) { return double((0 < a[0]) - (a[0] < 0)); },
        [](const IArgs& a) { return int64_t((0 < a[0]) - (a[0] < 0)); });
  });
  auto same_for_integers = [](auto f) {
    return [f](const KernelCall& c) {
      map_typed(
          c, [&](const Args& a) { return f(a[0]); }, [](const IArgs& a) { return a[0]; });
    };
  };
  t.set(OpId::floor, same_for_integers([](double x) { return std::floor(x); }));
  t.set(OpId::ceil, same_for_integers([](double x) { return std::ceil(x); }));
  t.set(OpId::round, same_for_integers([](double x) { return std::nearbyint(x); }));
  t.set(OpId::logical_not,
        [](const KernelCall& c) { map_predicate(c, [](const auto& a) { return a[0] == 0; }); });
  t.set(OpId::isnan,
        [](const KernelCall& c) { map_predicate(c, [](const auto& a) { return a[0] != a[0]; }); });
  t.set(OpId::isinf, [](const KernelCall& c) {
    map_predicate(c, [](const auto& a) { return std::isinf(static_cast<double>(a[0])); });
  });
}

void register_binary(KernelTable& t) {
  auto add_like = [](double sign) {
    return [sign](const KernelCall& c) {
      const Scalar alpha = c.attrs.scalar(0);
      if (c.out().dtype() == kBool) {
        ref::map<int64_t>(c.out(), inputs_of(c), [&](const IArgs& a) {
          return int64_t(a[0] || (alpha.to<bool>() && a[1]));
        });
        return;
      }
      const double scale = in_compute_precision(alpha.to_double(), c.out().dtype());
      map_typed(
          c, [&](const Args& a) { return a[0] + sign * scale * a[1]; },
          [&](const IArgs& a) {
            return wrapped_add(a[0], wrapped_mul(wrapped_mul(int64_t(sign), alpha.to_int()), a[1]));
          });
    };
  };
  t.set(OpId::add, add_like(1.0));
  t.set(OpId::sub, add_like(-1.0));
  t.set(OpId::mul, [](const KernelCall& c) {
    map_typed(
        c, [](const Args& a) { return a[0] * a[1]; },
        [](const IArgs& a) { return wrapped_mul(a[0], a[1]); });
  });
  t.set(OpId::div, [](const KernelCall& c) {
    ref::map<double>(c.out(), inputs_of(c), [](const Args& a) { return a[0] / a[1]; });
  });
  t.set(OpId::pow, [](const KernelCall& c) {
    map_typed(
        c, [](const Args& a) { return std::pow(a[0], a[1]); },
        [](const IArgs& a) { return ipow(a[0], a[1]); });
  });
  auto nan_or = [](auto pick) {
    return [pick](const Args& a) {
      return a[0] != a[0] ? a[0] : a[1] != a[1] ? a[1] : pick(a[0], a[1]);
    };
  };
  t.set(OpId::maximum, [nan_or](const KernelCall& c) {
    map_typed(c, nan_or([](double x, double y) { return std::max(x, y); }),
              [](const IArgs& a) { return std::max(a[0], a[1]); });
  });
  t.set(OpId::minimum, [nan_or](const KernelCall& c) {
    map_typed(c, nan_or([](double x, double y) { return std::min(x, y); }),
              [](const IArgs& a) { return std::min(a[0], a[1]); });
  });
  t.set(OpId::remainder, [](const KernelCall& c) {
    map_typed(
        c, [](const Args& a) { return python_fmod(a[0], a[1]); },
        [](const IArgs& a) {
          if (a[1] == 0) throw ValueError("remainder: integer division by zero");
          return python_imod(a[0], a[1]);
        });
  });
  auto compare = [](auto pred) {
    return [pred](const KernelCall& c) {
      map_predicate(c, [&](const auto& a) { return pred(a[0], a[1]); });
    };
  };
  t.set(OpId::eq, compare([](auto x, auto y) { return x == y; }));
  t.set(OpId::ne, compare([](auto x, auto y) { return x != y; }));
  t.set(OpId::lt, compare([](auto x, auto y) { return x < y; }));
  t.set(OpId::le, compare([](auto x, auto y) { return x <= y; }));
  t.set(OpId::gt, compare([](auto x, auto y) { return x > y; }));
  t.set(OpId::ge, compare([](auto x, auto y) { return x >= y; }));
  t.set(OpId::logical_and, compare([](auto x, auto y) { return x != 0 && y != 0; }));
  t.set(OpId::logical_or, compare([](auto x, auto y) { return x != 0 || y != 0; }));
  t.set(OpId::logical_xor, compare([](auto x, auto y) { return (x != 0) != (y != 0); }));
}

// Read exactly (double holds every floating value, int64 every integer) and
// round once on the write.
void copy_elements(const KernelCall& c) {
  if (is_floating(c.in(0).dtype())) {
    ref::map<double>(c.out(), inputs_of(c), [](const Args& a) { return a[0]; });
  } else {
    ref::map<int64_t>(c.out(), inputs_of(c), [](const IArgs& a) { return a[0]; });
  }
}

void register_misc(KernelTable& t) {
  t.set(OpId::where, [](const KernelCall& c) {
    map_typed(
        c, [](const Args& a) { return a[0] != 0 ? a[1] : a[2]; },
        [](const IArgs& a) { return a[0] != 0 ? a[1] : a[2]; });
  });
  t.set(OpId::clamp, [](const KernelCall& c) {
    const bool has_lo = c.attrs.has(0), has_hi = c.attrs.has(1);
    const Scalar lo = has_lo ? c.attrs.scalar(0) : Scalar(0),
                 hi = has_hi ? c.attrs.scalar(1) : Scalar(0);
    map_typed(
        c,
        [&](const Args& a) {
          // A NaN bound gives NaN, as a NaN value does.
          double v = a[0];
          if (has_lo && (v < lo.to_double() || std::isnan(lo.to_double()))) v = lo.to_double();
          if (has_hi && (v > hi.to_double() || std::isnan(hi.to_double()))) v = hi.to_double();
          return v;
        },
        [&](const IArgs& a) {
          // Bounds past the dtype's range saturate to it (uint8 max=-1 is 0).
          const auto [least, most] = int_range(c.out().dtype());
          int64_t v = a[0];
          if (has_lo && v < lo.to_int()) v = std::clamp(lo.to_int(), least, most);
          if (has_hi && v > hi.to_int()) v = std::clamp(hi.to_int(), least, most);
          return v;
        });
  });
  t.set(OpId::masked_fill, [](const KernelCall& c) {
    const Scalar v = c.attrs.scalar(0);
    // Into bool any nonzero value is true (0.5 too), as PyTorch.
    const int64_t as_int = c.out().dtype() == kBool ? int64_t{v.to_double() != 0} : v.to_int();
    map_typed(
        c, [&](const Args& a) { return a[1] != 0 ? v.to_double() : a[0]; },
        [&](const IArgs& a) { return a[1] != 0 ? as_int : a[0]; });
  });
  t.set(OpId::copy, copy_elements);
  t.set(OpId::to_device, [](const KernelCall& c) {
    // Between CPU tensors (every call the reference kernels see but a real
    // device transfer), element by element: not the backends' shared
    // gather-then-copy-bytes kernel that it checks.
    if (c.out().device().is_cpu() && c.in(0).device().is_cpu()) {
      copy_elements(c);
    } else {
      copy_between_devices(c);
    }
  });
  t.set(OpId::fill, [](const KernelCall& c) {
    const Scalar v = c.attrs.scalar(0);
    if (c.out().dtype() == kBool) {
      ref::map<int64_t>(c.out(), {}, [&](const IArgs&) { return int64_t(v.to<bool>()); });
    } else {
      map_typed(
          c, [&](const Args&) { return v.to_double(); }, [&](const IArgs&) { return v.to_int(); });
    }
  });
}

}  // namespace

void register_reference_pointwise_kernels(KernelTable& table) {
  register_unary(table);
  register_binary(table);
  register_misc(table);
}

}  // namespace kiln::backend
