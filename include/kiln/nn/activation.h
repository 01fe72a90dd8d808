// Activation layers: ReLU, LeakyReLU, GELU, SiLU, Sigmoid, Tanh, Softmax, LogSoftmax.
//
//   kiln::nn::GELU gelu{"tanh"};          // the tanh approximation
//   kiln::nn::LeakyReLU leaky{0.2};
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
