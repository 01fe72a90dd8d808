// Pooling layers over [N, C, H, W] (or [C, H, W]): MaxPool2d, AvgPool2d,
// AdaptiveAvgPool2d, AdaptiveMaxPool2d; over [N, C, L] (or [C, L]): MaxPool1d,
// AvgPool1d; and Flatten.
//
//   kiln::nn::MaxPool2d pool{2};                          // stride defaults to kernel_size
//   kiln::nn::AvgPool2d avg{3, {.stride = 1, .padding = 1}};
//   kiln::nn::AdaptiveAvgPool2d gap{1};                   // global average: [N, C, 1, 1]
//   kiln::nn::MaxPool1d pool1{3, {.stride = 2}};
//   kiln::nn::Flatten flat;                               // [N, C, 1, 1] -> [N, C]
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "kiln/nn/conv.h"
#include "kiln/nn/module.h"
#include "kiln/tensor.h"

namespace kiln::nn {

struct MaxPool2dOptions {
  std::optional<ExpandingArray<2>> stride = std::nullopt;  // default: kernel_size
  ExpandingArray<2> padding = 0;                           // at most half the kernel
  ExpandingArray<2> dilation = 1;
  bool ceil_mode = false;  // round the output size up
};

class MaxPool2d : public Module {
 public:
  using Options = MaxPool2dOptions;
  explicit MaxPool2d(ExpandingArray<2> kernel_size, Options options = {});
  Tensor forward(const Tensor& input);
  Tensor operator()(const Tensor& input) { return forward(input); }
  std::string extra_repr() const override;

  const ExpandingArray<2> kernel_size;
  const ExpandingArray<2> stride;
  const Options options;
};

struct AvgPool2dOptions {
  std::optional<ExpandingArray<2>> stride = std::nullopt;  // default: kernel_size
  ExpandingArray<2> padding = 0;
  bool ceil_mode = false;
  bool count_include_pad = true;  // padded zeros count in the divisor
  std::optional<int64_t> divisor_override = std::nullopt;
};

class AvgPool2d : public Module {
 public:
  using Options = AvgPool2dOptions;
  explicit AvgPool2d(ExpandingArray<2> kernel_size, Options options = {});
  Tensor forward(const Tensor& input);
  Tensor operator()(const Tensor& input) { return forward(input); }
  std::string extra_repr() const override;

  const ExpandingArray<2> kernel_size;
  const ExpandingArray<2> stride;
  const Options options;
};

// Averages each channel into output_size cells, whatever the input size.
class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(ExpandingArray<2> output_size);
  Tensor forward(const Tensor& input);
  Tensor operator()(const Tensor& input) { return forward(input); }
  std::string extra_repr() const override;

  const ExpandingArray<2> output_size;
};

// The maxima of the same cells as AdaptiveAvgPool2d's.
class AdaptiveMaxPool2d : public Module {
 public:
  explicit AdaptiveMaxPool2d(ExpandingArray<2> output_size);
  Tensor forward(const Tensor& input);
  Tensor operator()(const Tensor& input) { return forward(input); }
  std::string extra_repr() const override;

  const ExpandingArray<2> output_size;
};

struct MaxPool1dOptions {
  std::optional<int64_t> stride = std::nullopt;  // default: kernel_size
  int64_t padding = 0;                           // at most half the kernel
  int64_t dilation = 1;
  bool ceil_mode = false;
};

class MaxPool1d : public Module {
 public:
  using Options = MaxPool1dOptions;
  explicit MaxPool1d(int64_t kernel_size, Options options = {});
  Tensor forward(const Tensor& input);
  Tensor operator()(const Tensor& input) { return forward(input); }
  std::string extra_repr() const override;

  const int64_t kernel_size, stride;
  const Options options;
};

struct AvgPool1dOptions {
  std::optional<int64_t> stride = std::nullopt;  // default: kernel_size
  int64_t padding = 0;
  bool ceil_mode = false;
  bool count_include_pad = true;
};

class AvgPool1d : public Module {
 public:
  using Options = AvgPool1dOptions;
  explicit AvgPool1d(int64_t kernel_size, Options options = {});
  Tensor forward(const Tensor& input);
  Tensor operator()(const Tensor& input) { return forward(input); }
  std::string extra_repr() const override;

  const int64_t kernel_size, stride;
  const Options options;
};

// Flattens dims start_dim..end_dim into one.
class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1)
      : start_dim(start_dim), end_dim(end_dim) {}
  Tensor forward(const Tensor& input) { return input.flatten(start_dim, end_dim); }
  Tensor operator()(const Tensor& input) { return forward(input); }
  std::string extra_repr() const override;

  const int64_t start_dim, end_dim;
};

}  // namespace kiln::nn
