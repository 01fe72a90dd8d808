// Activation layers: ReLU, LeakyReLU, GELU, SiLU, Sigmoid, Tanh, Softmax,
// LogSoftmax, Hardtanh, ReLU6, ELU, Softplus, Hardsigmoid, Hardswish, Mish.
//
//   kiln::nn::GELU gelu{"tanh"};          // the tanh approximation
//   kiln::nn::LeakyReLU leaky{0.2};
//   kiln::nn::Hardswish hardswish;        // MobileNetV3's
//   kiln::nn::Softmax softmax{-1};
//   auto p = softmax(gelu(x));
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "kiln/nn/module.h"
#include "kiln/tensor.h"

namespace kiln::nn {

class ReLU : public Module {
 public:
  Tensor forward(const Tensor& input);
  Tensor operator()(const Tensor& input) { return forward(input); }
};

// x for x > 0, negative_slope * x otherwise.
class LeakyReLU : public Module {
 public:
  explicit LeakyReLU(double negative_slope = 0.01) : negative_slope(negative_slope) {}
  Tensor forward(const Tensor& input);
  Tensor operator()(const Tensor& input) { return forward(input); }
  std::string extra_repr() const override;

  const double negative_slope;
};

// x clamped to [min_val, max_val]; ReLU6 is Hardtanh(0, 6).
class Hardtanh : public Module {
 public:
  explicit Hardtanh(double min_val = -1, double max_val = 1);
  Tensor forward(const Tensor& input);
  Tensor operator()(const Tensor& input) { return forward(input); }
  std::string extra_repr() const override;

  const double min_val, max_val;
};

class ReLU6 : public Hardtanh {
 public:
  ReLU6() : Hardtanh(0, 6) {}
  std::string extra_repr() const override { return ""; }
};

// x for x > 0, alpha * (exp(x) - 1) otherwise.
class ELU : public Module {
 public:
  explicit ELU(double alpha = 1) : alpha(alpha) {}
  Tensor forward(const Tensor& input);
  Tensor operator()(const Tensor& input) { return forward(input); }
  std::string extra_repr() const override;

  const double alpha;
};

// log(1 + exp(beta x)) / beta, x where beta x > threshold.
class Softplus : public Module {
 public:
  explicit Softplus(double beta = 1, double threshold = 20) : beta(beta), threshold(threshold) {}
  Tensor forward(const Tensor& input);
  Tensor operator()(const Tensor& input) { return forward(input); }
  std::string extra_repr() const override;

  const double beta, threshold;
};

// relu6(x + 3) / 6.
class Hardsigmoid : public Module {
 public:
  Tensor forward(const Tensor& input);
  Tensor operator()(const Tensor& input) { return forward(input); }
};

// x * relu6(x + 3) / 6.
class Hardswish : public Module {
 public:
  Tensor forward(const Tensor& input);
  Tensor operator()(const Tensor& input) { return forward(input); }
};

// x * tanh(softplus(x)).
class Mish : public Module {
 public:
  Tensor forward(const Tensor& input);
  Tensor operator()(const Tensor& input) { return forward(input); }
};

// approximate: "none" (the erf form) or "tanh".
class GELU : public Module {
 public:
  explicit GELU(std::string_view approximate = "none");
  Tensor forward(const Tensor& input);
  Tensor operator()(const Tensor& input) { return forward(input); }
  std::string extra_repr() const override;

  const std::string approximate;
};

// x * sigmoid(x).
class SiLU : public Module {
 public:
  Tensor forward(const Tensor& input);
  Tensor operator()(const Tensor& input) { return forward(input); }
};

class Sigmoid : public Module {
 public:
  Tensor forward(const Tensor& input);
  Tensor operator()(const Tensor& input) { return forward(input); }
};

class Tanh : public Module {
 public:
  Tensor forward(const Tensor& input);
  Tensor operator()(const Tensor& input) { return forward(input); }
};

class Softmax : public Module {
 public:
  explicit Softmax(int64_t dim) : dim(dim) {}
  Tensor forward(const Tensor& input);
  Tensor operator()(const Tensor& input) { return forward(input); }
  std::string extra_repr() const override;

  const int64_t dim;
};

class LogSoftmax : public Module {
 public:
  explicit LogSoftmax(int64_t dim) : dim(dim) {}
  Tensor forward(const Tensor& input);
  Tensor operator()(const Tensor& input) { return forward(input); }
  std::string extra_repr() const override;

  const int64_t dim;
};

}  // namespace kiln::nn
