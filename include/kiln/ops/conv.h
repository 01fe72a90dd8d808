// Convolution and pooling over NCHW tensors, like PyTorch's F.conv2d & co.
//
//   auto y = kiln::conv2d(x, w, b, {.stride = {2}, .padding = {1}});   // one int: all dims
//   auto s = kiln::conv2d(x, w, {}, {.padding_mode = "same"});         // exact, even kernels too
//   auto p = kiln::max_pool2d(y, {3}, {2}, {1});
//   auto g = kiln::adaptive_avg_pool2d(p, {1});                        // global average
//   auto u = kiln::conv_transpose2d(y, wt, {}, {.stride = {2}, .padding = {1},
//                                             .output_padding = {1}});  // 2x upsampling
//   auto s = kiln::pixel_shuffle(y, 2);                                // [N, C/4, 2H, 2W]
//
// Lists with one entry apply to every spatial dim. Bad shapes or attributes
// throw ShapeError or ValueError naming the op and the values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kiln/ops/reduce.h"
#include "kiln/tensor.h"

namespace kiln {

// padding: symmetric pads, one per spatial dim (or one for all). padding_mode,
// when not empty, replaces padding: "same" (output size = input size, stride 1
// only; an odd total pad puts the extra element at the end) or "valid" (none).
struct Conv1dOptions {
  std::vector<int64_t> stride{1}, padding{0}, dilation{1};
  int64_t groups = 1;
  std::string padding_mode{};
};
struct Conv2dOptions {
  std::vector<int64_t> stride{1, 1}, padding{0, 0}, dilation{1, 1};
  int64_t groups = 1;
  std::string padding_mode{};
};

// input [N, C, W] (or unbatched [C, W]), weight [O, C / groups, kW], bias [O].
Tensor conv1d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(),
              const Conv1dOptions& options = {});
// input [N, C, H, W] (or unbatched [C, H, W]), weight [O, C / groups, kH, kW], bias [O].
Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(),
              const Conv2dOptions& options = {});

// The transposed convolutions (the adjoint of conv1d/conv2d with the same
// arguments): input [N, C_in, ...] (or unbatched), weight [C_in, C_out / groups,
// k...], bias [C_out]; output size (in - 1) * stride - 2 padding + dilation *
// (k - 1) + output_padding + 1, with output_padding < stride.
struct ConvTranspose1dOptions {
  std::vector<int64_t> stride{1}, padding{0}, output_padding{0}, dilation{1};
  int64_t groups = 1;
};
struct ConvTranspose2dOptions {
  std::vector<int64_t> stride{1, 1}, padding{0, 0}, output_padding{0, 0}, dilation{1, 1};
  int64_t groups = 1;
};
Tensor conv_transpose1d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(),
                        const ConvTranspose1dOptions& options = {});
Tensor conv_transpose2d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(),
                        const ConvTranspose2dOptions& options = {});

// Pools take [N, C, H, W] or [C, H, W]. stride empty = kernel_size; padding is
// symmetric and at most half the kernel. ceil_mode rounds the output size up,
// but the last window must start inside the input or the left padding.
Tensor max_pool2d(const Tensor& input, std::vector<int64_t> kernel_size,
                  std::vector<int64_t> stride = {}, std::vector<int64_t> padding = {0},
                  std::vector<int64_t> dilation = {1}, bool ceil_mode = false);
// max_pool2d's values, and the int64 indices h * W + w of each chosen element
// within its [H, W] plane (the first maximum of a window, or its first NaN).
ValuesIndices max_pool2d_with_indices(const Tensor& input, std::vector<int64_t> kernel_size,
                                      std::vector<int64_t> stride = {},
                                      std::vector<int64_t> padding = {0},
                                      std::vector<int64_t> dilation = {1}, bool ceil_mode = false);
Tensor avg_pool2d(const Tensor& input, std::vector<int64_t> kernel_size,
                  std::vector<int64_t> stride = {}, std::vector<int64_t> padding = {0},
                  bool ceil_mode = false, bool count_include_pad = true,
                  std::optional<int64_t> divisor_override = std::nullopt);
// Output [.., oH, oW]: cell i averages input rows floor(i * H / oH) to ceil((i + 1) * H / oH).
Tensor adaptive_avg_pool2d(const Tensor& input, std::vector<int64_t> output_size);
// The same cells' maxima (NaN when a cell holds one).
Tensor adaptive_max_pool2d(const Tensor& input, std::vector<int64_t> output_size);

// The pools over [N, C, L] (or [C, L]): the 2-D pools over a height of 1.
Tensor max_pool1d(const Tensor& input, int64_t kernel_size, std::optional<int64_t> stride = {},
                  int64_t padding = 0, int64_t dilation = 1, bool ceil_mode = false);
Tensor avg_pool1d(const Tensor& input, int64_t kernel_size, std::optional<int64_t> stride = {},
                  int64_t padding = 0, bool ceil_mode = false, bool count_include_pad = true);

// [..., C * r * r, H, W] -> [..., C, H * r, W * r], and back.
Tensor pixel_shuffle(const Tensor& input, int64_t upscale_factor);
Tensor pixel_unshuffle(const Tensor& input, int64_t downscale_factor);

}  // namespace kiln
