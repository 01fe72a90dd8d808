// nn::Dropout: zeroes elements with probability p while training, and passes
// the input through after eval().
//
//   kiln::nn::Dropout drop{0.1};
//   auto y = drop(x);        // training: zeros, the rest scaled by 1 / (1 - p)
//   drop.eval();
//   auto z = drop(x);        // z is x
#pragma once

#include <string>

#include "kiln/nn/module.h"
#include "kiln/ops/factory.h"
#include "kiln/tensor.h"

namespace kiln::nn {

class Dropout : public Module {
 public:
  // generator: where the masks are drawn from (the default generator when null).
  explicit Dropout(double p = 0.5, Generator* generator = nullptr);
  Tensor forward(const Tensor& input);
  Tensor operator()(const Tensor& input) { return forward(input); }
  std::string extra_repr() const override;

  const double p;

 private:
  Generator* generator_;
};

}  // namespace kiln::nn
