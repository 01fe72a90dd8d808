// Upsampling layers: Upsample (over functional::interpolate), PixelShuffle and
// PixelUnshuffle.
//
//   kiln::nn::Upsample up{{.scale_factor = std::vector<double>{2}, .mode = "bilinear"}};
//   kiln::nn::PixelShuffle shuffle{2};       // [N, 4C, H, W] -> [N, C, 2H, 2W]
//   auto y = shuffle(up(x));
#pragma once

#include <cstdint>
#include <string>

#include "kiln/nn/module.h"
#include "kiln/ops/nn.h"
#include "kiln/tensor.h"

namespace kiln::nn {

// Resamples the spatial dims to options.size or by options.scale_factor.
class Upsample : public Module {
 public:
  using Options = functional::InterpolateOptions;
  explicit Upsample(Options options);
  Tensor forward(const Tensor& input);
  Tensor operator()(const Tensor& input) { return forward(input); }
  std::string extra_repr() const override;

  const Options options;
};

class PixelShuffle : public Module {
 public:
  explicit PixelShuffle(int64_t upscale_factor);
  Tensor forward(const Tensor& input);
  Tensor operator()(const Tensor& input) { return forward(input); }
  std::string extra_repr() const override;

  const int64_t upscale_factor;
};

class PixelUnshuffle : public Module {
 public:
  explicit PixelUnshuffle(int64_t downscale_factor);
  Tensor forward(const Tensor& input);
  Tensor operator()(const Tensor& input) { return forward(input); }
  std::string extra_repr() const override;

  const int64_t downscale_factor;
};

}  // namespace kiln::nn
