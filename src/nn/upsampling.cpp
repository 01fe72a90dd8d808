// nn::Upsample, nn::PixelShuffle and nn::PixelUnshuffle.
#include "kiln/nn/upsampling.h"

#include "kiln/ops/conv.h"

namespace kiln::nn {

Upsample::Upsample(Options options_) : options(std::move(options_)) {
  KILN_CHECK(options.size.has_value() != options.scale_factor.has_value(), ValueError,
             "Upsample: exactly one of size and scale_factor must be given");
  KILN_CHECK(options.mode == "nearest" || options.mode == "bilinear", ValueError,
             "Upsample: mode must be \"nearest\" or \"bilinear\", got \"", options.mode, "\"");
}

Tensor Upsample::forward(const Tensor& input) { return functional::interpolate(input, options); }

std::string Upsample::extra_repr() const {
  std::string out = options.size ? "size=" + repr::tuple(*options.size) : "scale_factor=";
  if (options.scale_factor) {
    const auto& f = *options.scale_factor;
    out += f.size() == 1 ? repr::number(f[0])
                         : "(" + repr::number(f[0]) + ", " + repr::number(f.back()) + ")";
  }
  return out + ", mode=\'" + options.mode + "\'";
}

PixelShuffle::PixelShuffle(int64_t upscale_factor_) : upscale_factor(upscale_factor_) {
  KILN_CHECK(upscale_factor > 0, ValueError, "PixelShuffle: upscale_factor must be positive, got ",
             upscale_factor);
}

Tensor PixelShuffle::forward(const Tensor& input) { return pixel_shuffle(input, upscale_factor); }

std::string PixelShuffle::extra_repr() const {
  return "upscale_factor=" + std::to_string(upscale_factor);
}

PixelUnshuffle::PixelUnshuffle(int64_t downscale_factor_) : downscale_factor(downscale_factor_) {
  KILN_CHECK(downscale_factor > 0, ValueError,
             "PixelUnshuffle: downscale_factor must be positive, got ", downscale_factor);
}

Tensor PixelUnshuffle::forward(const Tensor& input) {
  return pixel_unshuffle(input, downscale_factor);
}

std::string PixelUnshuffle::extra_repr() const {
  return "downscale_factor=" + std::to_string(downscale_factor);
}

}  // namespace kiln::nn
