// nn::init: filling parameters in place with PyTorch's initialization schemes.
//
//   namespace init = kiln::nn::init;
//   init::kaiming_normal_(conv.weight, 0, "fan_out", "relu");
//   init::zeros_(conv.bias);
//   kiln::Generator gen(42);
//   init::xavier_uniform_(fc.weight, init::calculate_gain("tanh"), &gen);
//
// Every function writes into the tensor's storage under NoGradGuard (so it works
// on parameters that require grad) and returns the same tensor. Random ones draw
// from generator, or from the default generator when it is null.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "kiln/ops/factory.h"
#include "kiln/tensor.h"

namespace kiln::nn::init {

// The recommended gain for a nonlinearity: "linear", "conv1d", "conv2d",
// "sigmoid" -> 1, "tanh" -> 5/3, "relu" -> sqrt(2), "leaky_relu" ->
// sqrt(2 / (1 + slope^2)) (param is the slope, default 0.01), "selu" -> 3/4.
double calculate_gain(std::string_view nonlinearity, std::optional<double> param = std::nullopt);

struct Fans {
  int64_t fan_in = 0;   // size(1) * the receptive field (the product of dims from 2 on)
  int64_t fan_out = 0;  // size(0) * the receptive field
};
// ValueError for tensors with fewer than 2 dims.
Fans calculate_fan_in_and_fan_out(const Tensor& tensor);

Tensor uniform_(const Tensor& tensor, double a = 0, double b = 1, Generator* generator = nullptr);
Tensor normal_(const Tensor& tensor, double mean = 0, double std = 1,
               Generator* generator = nullptr);
// Normal(mean, std) restricted to [a, b] (drawn by inverting the normal CDF).
Tensor trunc_normal_(const Tensor& tensor, double mean = 0, double std = 1, double a = -2,
                     double b = 2, Generator* generator = nullptr);
Tensor constant_(const Tensor& tensor, double value);
Tensor zeros_(const Tensor& tensor);
Tensor ones_(const Tensor& tensor);

// Glorot: U(-b, b) with b = gain * sqrt(6 / (fan_in + fan_out)).
Tensor xavier_uniform_(const Tensor& tensor, double gain = 1, Generator* generator = nullptr);
// Glorot: N(0, std^2) with std = gain * sqrt(2 / (fan_in + fan_out)).
Tensor xavier_normal_(const Tensor& tensor, double gain = 1, Generator* generator = nullptr);

// He: U(-b, b) with b = gain * sqrt(3 / fan), gain = calculate_gain(nonlinearity, a),
// fan = fan_in or fan_out by mode ("fan_in" keeps the forward variance,
// "fan_out" the backward one).
Tensor kaiming_uniform_(const Tensor& tensor, double a = 0, std::string_view mode = "fan_in",
                        std::string_view nonlinearity = "leaky_relu",
                        Generator* generator = nullptr);
// He: N(0, std^2) with std = gain / sqrt(fan).
Tensor kaiming_normal_(const Tensor& tensor, double a = 0, std::string_view mode = "fan_in",
                       std::string_view nonlinearity = "leaky_relu",
                       Generator* generator = nullptr);

}  // namespace kiln::nn::init
