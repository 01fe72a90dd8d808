// nn::Conv1d, nn::Conv2d, nn::ConvTranspose1d, nn::ConvTranspose2d, and ExpandingArray, the "one
// int or one per dim" argument that convolutions and pools take.
//
//   kiln::nn::Conv2d conv{3, 16, 3, {.padding = 1}};          // weight [16, 3, 3, 3]
//   kiln::nn::Conv2d down{16, 32, {3, 5}, {.stride = 2, .bias = false}};
//   kiln::nn::Conv2d same{16, 16, 4, {.padding = "same"}};    // output size = input size
//   kiln::nn::Conv1d wave{1, 8, 9, {.padding = 4, .padding_mode = "reflect"}};
//   auto y = conv(kiln::randn({8, 3, 32, 32}));               // [8, 16, 32, 32]
//   kiln::nn::ConvTranspose2d up{16, 8, 4, {.stride = 2, .padding = 1}};  // 2x: [8, 8, 64, 64]
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "kiln/nn/module.h"
#include "kiln/tensor.h"

namespace kiln::nn {

// N sizes written as one int for all dims (3) or one per dim ({3, 5}); a list of
// one entry also applies to every dim.
template <size_t N>
class ExpandingArray {
 public:
  ExpandingArray(int64_t value) : scalar_(true) { values_.fill(value); }     // NOLINT: implicit
  ExpandingArray(std::initializer_list<int64_t> values);                     // NOLINT: implicit
  ExpandingArray(const std::array<int64_t, N>& values) : values_(values) {}  // NOLINT

  int64_t operator[](size_t i) const { return values_[i]; }
  const std::array<int64_t, N>& values() const noexcept { return values_; }
  std::vector<int64_t> vec() const { return {values_.begin(), values_.end()}; }
  bool operator==(const ExpandingArray& other) const { return values_ == other.values_; }
  // As PyTorch prints the argument: 3 when it was given as one int, (3, 5) otherwise.
  std::string repr() const;

 private:
  std::array<int64_t, N> values_{};
  bool scalar_ = false;
};

// A convolution's padding: sizes (an ExpandingArray) or "same" / "valid".
template <size_t N>
class ConvPadding {
 public:
  ConvPadding(int64_t value) : value_(ExpandingArray<N>(value)) {}  // NOLINT: implicit
  ConvPadding(std::initializer_list<int64_t> values)                // NOLINT: implicit
      : value_(ExpandingArray<N>(values)) {}
  ConvPadding(const ExpandingArray<N>& sizes) : value_(sizes) {}  // NOLINT: implicit
  template <size_t M>
  ConvPadding(const char (&mode)[M]) : value_(std::string(mode)) {}  // NOLINT: implicit
  ConvPadding(std::string mode) : value_(std::move(mode)) {}         // NOLINT: implicit

  bool is_mode() const noexcept { return std::holds_alternative<std::string>(value_); }
  const std::string& mode() const { return std::get<std::string>(value_); }
  const ExpandingArray<N>& sizes() const { return std::get<ExpandingArray<N>>(value_); }

 private:
  std::variant<ExpandingArray<N>, std::string> value_;
};

template <size_t N>
struct ConvOptions {
  ExpandingArray<N> stride = 1;
  // Sizes, or "same" (stride 1 only; an odd total pad puts the extra element at
  // the end) or "valid" (no padding).
  ConvPadding<N> padding = 0;
  ExpandingArray<N> dilation = 1;
  int64_t groups = 1;
  bool bias = true;
  // What the padding holds: "zeros", "reflect", "replicate" or "circular".
  std::string padding_mode = "zeros";
};
using Conv1dOptions = ConvOptions<1>;
using Conv2dOptions = ConvOptions<2>;

// What Conv1d and Conv2d share: weight [out, in / groups, k...], bias [out], both
// drawn as PyTorch does (kaiming_uniform_ with a = sqrt(5); bias from
// U(-1/sqrt(fan_in), 1/sqrt(fan_in))).
template <size_t N>
class ConvNd : public Module {
 public:
  using Options = ConvOptions<N>;
  ConvNd(int64_t in_channels, int64_t out_channels, ExpandingArray<N> kernel_size, Options options);

  void reset_parameters();
  std::string extra_repr() const override;

  const int64_t in_channels, out_channels;
  const ExpandingArray<N> kernel_size;
  const Options options;
  Tensor weight, bias;

 protected:
  // input [batch, in_channels, spatial...] or unbatched [in_channels, spatial...].
  Tensor convolve(const Tensor& input) const;

 private:
  const char* layer_name() const noexcept { return N == 1 ? "Conv1d" : "Conv2d"; }
  // (before, after) pads per spatial dim, for the padding modes other than zeros.
  std::vector<std::array<int64_t, 2>> explicit_pads() const;
  Tensor pad_input(const Tensor& input) const;
};

extern template class ConvNd<1>;
extern template class ConvNd<2>;

// input [N, C_in, W] (or [C_in, W]) -> [N, C_out, W_out].
class Conv1d : public ConvNd<1> {
 public:
  Conv1d(int64_t in_channels, int64_t out_channels, ExpandingArray<1> kernel_size,
         Options options = {})
      : ConvNd(in_channels, out_channels, kernel_size, std::move(options)) {}
  Tensor forward(const Tensor& input) { return convolve(input); }
  Tensor operator()(const Tensor& input) { return forward(input); }
};

// input [N, C_in, H, W] (or [C_in, H, W]) -> [N, C_out, H_out, W_out].
class Conv2d : public ConvNd<2> {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, ExpandingArray<2> kernel_size,
         Options options = {})
      : ConvNd(in_channels, out_channels, kernel_size, std::move(options)) {}
  Tensor forward(const Tensor& input) { return convolve(input); }
  Tensor operator()(const Tensor& input) { return forward(input); }
};

template <size_t N>
struct ConvTransposeOptions {
  ExpandingArray<N> stride = 1;
  ExpandingArray<N> padding = 0;         // removed from each side of the output
  ExpandingArray<N> output_padding = 0;  // added to one side; below the stride
  ExpandingArray<N> dilation = 1;
  int64_t groups = 1;
  bool bias = true;
};

// What ConvTranspose1d and ConvTranspose2d share: weight [in, out / groups,
// k...], bias [out], drawn as PyTorch does (as ConvNd's, with the fan-in of
// the weight's dims 1 and up).
template <size_t N>
class ConvTransposeNd : public Module {
 public:
  using Options = ConvTransposeOptions<N>;
  ConvTransposeNd(int64_t in_channels, int64_t out_channels, ExpandingArray<N> kernel_size,
                  Options options);

  Tensor forward(const Tensor& input);
  Tensor operator()(const Tensor& input) { return forward(input); }
  void reset_parameters();
  std::string extra_repr() const override;

  const int64_t in_channels, out_channels;
  const ExpandingArray<N> kernel_size;
  const Options options;
  Tensor weight, bias;
};

extern template class ConvTransposeNd<1>;
extern template class ConvTransposeNd<2>;

// input [N, C_in, W] (or [C_in, W]) -> [N, C_out, W_out].
class ConvTranspose1d : public ConvTransposeNd<1> {
 public:
  ConvTranspose1d(int64_t in_channels, int64_t out_channels, ExpandingArray<1> kernel_size,
                  Options options = {})
      : ConvTransposeNd(in_channels, out_channels, kernel_size, std::move(options)) {}
};

// input [N, C_in, H, W] (or [C_in, H, W]) -> [N, C_out, H_out, W_out].
class ConvTranspose2d : public ConvTransposeNd<2> {
 public:
  ConvTranspose2d(int64_t in_channels, int64_t out_channels, ExpandingArray<2> kernel_size,
                  Options options = {})
      : ConvTransposeNd(in_channels, out_channels, kernel_size, std::move(options)) {}
};

// --- ExpandingArray ------------------------------------------------------------------

template <size_t N>
ExpandingArray<N>::ExpandingArray(std::initializer_list<int64_t> values) {
  if (values.size() == 1) {
    values_.fill(*values.begin());
  } else if (values.size() == N) {
    std::copy(values.begin(), values.end(), values_.begin());
  } else {
    throw ValueError(kiln::detail::str_cat("ExpandingArray: expected 1 or ", N, " values, got ",
                                           std::vector<int64_t>(values)));
  }
}

template <size_t N>
std::string ExpandingArray<N>::repr() const {
  return scalar_ ? std::to_string(values_[0]) : repr::tuple(vec());
}

}  // namespace kiln::nn
