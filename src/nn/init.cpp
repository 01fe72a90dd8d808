// nn::init: in-place initialization schemes (PyTorch's torch.nn.init).
#include "kiln/nn/init.h"

#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include "kiln/autograd.h"
#include "kiln/ops/pointwise.h"

namespace kiln::nn::init {

namespace {

void check_floating(const Tensor& t, const char* fn) {
  KILN_CHECK(t.defined(), ValueError, fn, ": the tensor is undefined");
  KILN_CHECK(is_floating(t.dtype()), DTypeError, fn, ": expects a floating-point tensor, got ",
             t.dtype());
}

// Random values are drawn in float64 for float64 tensors and in float32 otherwise,
// then converted by copy_.
TensorOptions sample_options(const Tensor& t) {
  return {.dtype = t.dtype() == kFloat64 ? kFloat64 : kFloat32, .device = t.device()};
}

Tensor write(const Tensor& t, const Tensor& values) {
  NoGradGuard no_grad;
  Tensor dst = t;
  dst.copy_(values);
  return t;
}

int64_t fan_for(const Tensor& t, std::string_view mode, const char* fn) {
  const Fans fans = calculate_fan_in_and_fan_out(t);
  if (mode == "fan_in") return fans.fan_in;
  if (mode == "fan_out") return fans.fan_out;
  throw ValueError(
      detail::str_cat(fn, ": mode must be \"fan_in\" or \"fan_out\", got \"", mode, "\""));
}

// erf^-1(y) for y in (-1, 1): Winitzki's closed form (about 1e-3 relative
// error) polished by Newton steps on erf.
double erfinv(double y) {
  constexpr double a = 0.147;
  const double ln = std::log((1 - y) * (1 + y));
  const double first = 2 / (std::numbers::pi * a) + ln / 2;
  double x = std::copysign(std::sqrt(std::sqrt(first * first - ln / a) - first), y);
  for (int i = 0; i < 4; ++i) {
    const double slope = 2 / std::sqrt(std::numbers::pi) * std::exp(-x * x);
    if (slope == 0) break;
    x -= (std::erf(x) - y) / slope;
  }
  return x;
}

double normal_cdf(double x) { return 0.5 * (1 + std::erf(x / std::numbers::sqrt2)); }

}  // namespace

double calculate_gain(std::string_view nonlinearity, std::optional<double> param) {
  if (nonlinearity == "linear" || nonlinearity == "conv1d" || nonlinearity == "conv2d" ||
      nonlinearity == "conv3d" || nonlinearity == "conv_transpose1d" ||
      nonlinearity == "conv_transpose2d" || nonlinearity == "sigmoid") {
    return 1;
  }
  if (nonlinearity == "tanh") return 5.0 / 3.0;
  if (nonlinearity == "relu") return std::sqrt(2.0);
  if (nonlinearity == "leaky_relu") {
    const double slope = param.value_or(0.01);
    return std::sqrt(2.0 / (1 + slope * slope));
  }
  if (nonlinearity == "selu") return 0.75;
  throw ValueError(detail::str_cat("calculate_gain: unknown nonlinearity \"", nonlinearity, "\""));
}

Fans calculate_fan_in_and_fan_out(const Tensor& tensor) {
  KILN_CHECK(tensor.dim() >= 2, ValueError,
             "calculate_fan_in_and_fan_out: fans need a tensor with at least 2 dims, got shape ",
             tensor.sizes());
  int64_t receptive = 1;
  for (int64_t d = 2; d < tensor.dim(); ++d) receptive *= tensor.size(d);
  return {.fan_in = tensor.size(1) * receptive, .fan_out = tensor.size(0) * receptive};
}

Tensor uniform_(const Tensor& tensor, double a, double b, Generator* generator) {
  check_floating(tensor, "uniform_");
  KILN_CHECK(a <= b, ValueError, "uniform_: the lower bound ", a, " exceeds the upper bound ", b);
  NoGradGuard no_grad;
  return write(tensor, rand(tensor.sizes(), sample_options(tensor), generator) * (b - a) + a);
}

Tensor normal_(const Tensor& tensor, double mean, double std, Generator* generator) {
  check_floating(tensor, "normal_");
  KILN_CHECK(std >= 0, ValueError, "normal_: std must be non-negative, got ", std);
  NoGradGuard no_grad;
  return write(tensor, randn(tensor.sizes(), sample_options(tensor), generator) * std + mean);
}

Tensor trunc_normal_(const Tensor& tensor, double mean, double std, double a, double b,
                     Generator* generator) {
  check_floating(tensor, "trunc_normal_");
  KILN_CHECK(std > 0, ValueError, "trunc_normal_: std must be positive, got ", std);
  KILN_CHECK(a < b, ValueError, "trunc_normal_: the lower bound ", a,
             " must be below the upper bound ", b);
  NoGradGuard no_grad;
  // Uniform in [cdf(a), cdf(b)] mapped back through the inverse normal CDF.
  const double lo = normal_cdf((a - mean) / std), hi = normal_cdf((b - mean) / std);
  std::vector<double> values =
      rand(tensor.sizes(), {.dtype = kFloat64}, generator).to_vector<double>();
  for (double& v : values) {
    const double y = 2 * (lo + (hi - lo) * v) - 1;
    const double x = y <= -1 ? a : y >= 1 ? b : mean + std * std::numbers::sqrt2 * erfinv(y);
    v = std::fmin(std::fmax(x, a), b);
  }
  return write(tensor, from_vector(values, tensor.sizes()));
}

Tensor constant_(const Tensor& tensor, double value) {
  KILN_CHECK(tensor.defined(), ValueError, "constant_: the tensor is undefined");
  NoGradGuard no_grad;
  Tensor dst = tensor;
  dst.fill_(value);
  return tensor;
}

Tensor zeros_(const Tensor& tensor) { return constant_(tensor, 0); }
Tensor ones_(const Tensor& tensor) { return constant_(tensor, 1); }

Tensor xavier_uniform_(const Tensor& tensor, double gain, Generator* generator) {
  const Fans fans = calculate_fan_in_and_fan_out(tensor);
  if (tensor.numel() == 0) return tensor;
  const double bound = gain * std::sqrt(6.0 / static_cast<double>(fans.fan_in + fans.fan_out));
  return uniform_(tensor, -bound, bound, generator);
}

Tensor xavier_normal_(const Tensor& tensor, double gain, Generator* generator) {
  const Fans fans = calculate_fan_in_and_fan_out(tensor);
  if (tensor.numel() == 0) return tensor;
  const double std = gain * std::sqrt(2.0 / static_cast<double>(fans.fan_in + fans.fan_out));
  return normal_(tensor, 0, std, generator);
}

Tensor kaiming_uniform_(const Tensor& tensor, double a, std::string_view mode,
                        std::string_view nonlinearity, Generator* generator) {
  const int64_t fan = fan_for(tensor, mode, "kaiming_uniform_");
  if (tensor.numel() == 0) return tensor;  // nothing to fill, and the fan may be 0
  const double bound = calculate_gain(nonlinearity, a) * std::sqrt(3.0 / static_cast<double>(fan));
  return uniform_(tensor, -bound, bound, generator);
}

Tensor kaiming_normal_(const Tensor& tensor, double a, std::string_view mode,
                       std::string_view nonlinearity, Generator* generator) {
  const int64_t fan = fan_for(tensor, mode, "kaiming_normal_");
  if (tensor.numel() == 0) return tensor;
  const double std = calculate_gain(nonlinearity, a) / std::sqrt(static_cast<double>(fan));
  return normal_(tensor, 0, std, generator);
}

}  // namespace kiln::nn::init
