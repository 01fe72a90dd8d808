// nn::Linear: y = x W^T + b over the last dim, and nn::Identity.
//
//   kiln::nn::Linear fc{512, 10};                  // weight [10, 512], bias [10]
//   kiln::nn::Linear proj{512, 512, {.bias = false}};
//   auto y = fc(kiln::randn({8, 512}));            // [8, 10]
#pragma once

#include <cstdint>
#include <string>

#include "kiln/nn/module.h"
#include "kiln/tensor.h"

namespace kiln::nn {

struct LinearOptions {
  bool bias = true;
};

// Weight [out_features, in_features] and bias [out_features], both drawn from
// U(-1/sqrt(in_features), 1/sqrt(in_features)) as PyTorch does.
class Linear : public Module {
 public:
  using Options = LinearOptions;
  Linear(int64_t in_features, int64_t out_features, Options options = {});

  // input [..., in_features] -> [..., out_features].
  Tensor forward(const Tensor& input);
  Tensor operator()(const Tensor& input) { return forward(input); }
  // Draws the weight and bias again with the default initialization.
  void reset_parameters();
  std::string extra_repr() const override;

  const int64_t in_features, out_features;
  Tensor weight, bias;  // bias undefined without options.bias
};

// Returns its input: stands in where a layer is optional.
class Identity : public Module {
 public:
  Tensor forward(const Tensor& input) { return input; }
  Tensor operator()(const Tensor& input) { return forward(input); }
};

}  // namespace kiln::nn
