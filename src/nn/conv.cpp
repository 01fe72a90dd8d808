// nn::Conv1d, nn::Conv2d and the transposed convolutions.
#include "kiln/nn/conv.h"

#include <cmath>

#include "kiln/nn/init.h"
#include "kiln/ops/conv.h"
#include "kiln/ops/factory.h"
#include "kiln/ops/nn.h"
#include "kiln/ops/shape.h"

namespace kiln::nn {

namespace {

template <size_t N>
void check_options(const char* layer, int64_t in_channels, int64_t out_channels,
                   const ExpandingArray<N>& kernel_size, const ConvOptions<N>& o) {
  KILN_CHECK(in_channels > 0 && out_channels > 0, ValueError, layer,
             ": channel counts must be positive, got in_channels=", in_channels,
             ", out_channels=", out_channels);
  KILN_CHECK(o.groups > 0, ValueError, layer, ": groups must be positive, got ", o.groups);
  KILN_CHECK(in_channels % o.groups == 0 && out_channels % o.groups == 0, ValueError, layer,
             ": in_channels (", in_channels, ") and out_channels (", out_channels,
             ") must be divisible by groups (", o.groups, ")");
  for (size_t d = 0; d < N; ++d) {
    KILN_CHECK(kernel_size[d] > 0 && o.stride[d] > 0 && o.dilation[d] > 0, ValueError, layer,
               ": kernel_size, stride and dilation must be positive, got ", kernel_size.vec(), ", ",
               o.stride.vec(), ", ", o.dilation.vec());
    KILN_CHECK(o.padding.is_mode() || o.padding.sizes()[d] >= 0, ValueError, layer,
               ": padding must be non-negative, got ", o.padding.sizes().vec());
  }
  if (o.padding.is_mode()) {
    const std::string& mode = o.padding.mode();
    KILN_CHECK(mode == "same" || mode == "valid", ValueError, layer,
               ": padding must be sizes, \"same\" or \"valid\", got \"", mode, "\"");
    for (size_t d = 0; d < N; ++d) {
      KILN_CHECK(mode != "same" || o.stride[d] == 1, ValueError, layer,
                 ": padding=\"same\" needs stride 1, got stride ", o.stride.vec());
    }
  }
  const std::string& pm = o.padding_mode;
  KILN_CHECK(pm == "zeros" || pm == "reflect" || pm == "replicate" || pm == "circular", ValueError,
             layer,
             ": padding_mode must be \"zeros\", \"reflect\", \"replicate\" or \"circular\", got \"",
             pm, "\"");
}

// Pads dim of x by wrapping around: [x[L - before:], x, x[:after]].
Tensor circular_pad_dim(const Tensor& x, int64_t dim, int64_t before, int64_t after) {
  const int64_t length = x.size(dim);
  KILN_CHECK(before <= length && after <= length, ShapeError, "circular padding: pads (", before,
             ", ", after, ") exceed the input size ", length, " of dim ", dim);
  return cat({x.narrow(dim, length - before, before), x, x.narrow(dim, 0, after)}, dim);
}

// PyTorch's draw for convolution weights and biases.
void reset_conv_parameters(Tensor& weight, Tensor& bias) {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    const int64_t fan_in = init::calculate_fan_in_and_fan_out(weight).fan_in;
    const double bound = 1 / std::sqrt(static_cast<double>(fan_in));
    init::uniform_(bias, -bound, bound);
  }
}

}  // namespace

template <size_t N>
ConvNd<N>::ConvNd(int64_t in_channels_, int64_t out_channels_, ExpandingArray<N> kernel_size_,
                  Options options_)
    : in_channels(in_channels_),
      out_channels(out_channels_),
      kernel_size(kernel_size_),
      options(std::move(options_)) {
  check_options(layer_name(), in_channels, out_channels, kernel_size, options);
  Shape shape = {out_channels, in_channels / options.groups};
  for (size_t d = 0; d < N; ++d) shape.push_back(kernel_size[d]);
  weight = empty(shape);
  if (options.bias) bias = empty({out_channels});
  register_parameter("weight", weight);
  register_parameter("bias", bias);
  reset_parameters();
}

template <size_t N>
void ConvNd<N>::reset_parameters() {
  reset_conv_parameters(weight, bias);
}

template <size_t N>
std::vector<std::array<int64_t, 2>> ConvNd<N>::explicit_pads() const {
  std::vector<std::array<int64_t, 2>> pads(N);
  for (size_t d = 0; d < N; ++d) {
    if (!options.padding.is_mode()) {
      pads[d] = {options.padding.sizes()[d], options.padding.sizes()[d]};
    } else if (options.padding.mode() == "same") {
      const int64_t total = options.dilation[d] * (kernel_size[d] - 1);
      pads[d] = {total / 2, total - total / 2};
    } else {
      pads[d] = {0, 0};
    }
  }
  return pads;
}

template <size_t N>
Tensor ConvNd<N>::pad_input(const Tensor& input) const {
  const auto pads = explicit_pads();
  const int64_t first_spatial = input.dim() - static_cast<int64_t>(N);
  if (options.padding_mode == "circular") {
    Tensor x = input;
    for (size_t d = 0; d < N; ++d)
      x = circular_pad_dim(x, first_spatial + static_cast<int64_t>(d), pads[d][0], pads[d][1]);
    return x;
  }
  // F::pad lists (before, after) from the last dim backwards.
  std::vector<int64_t> flat;
  for (size_t d = N; d-- > 0;) {
    flat.push_back(pads[d][0]);
    flat.push_back(pads[d][1]);
  }
  return functional::pad(input, flat, options.padding_mode);
}

template <size_t N>
Tensor ConvNd<N>::convolve(const Tensor& input) const {
  const int64_t dims = static_cast<int64_t>(N);
  KILN_CHECK(input.dim() == dims + 1 || input.dim() == dims + 2, ShapeError, layer_name(),
             ": expected a ", dims + 1, "-D (unbatched) or ", dims + 2,
             "-D (batched) input, got shape ", input.sizes());
  const int64_t channels = input.size(input.dim() - dims - 1);
  KILN_CHECK(channels == in_channels, ShapeError, layer_name(), ": input has ", channels,
             " channels (shape ", input.sizes(), "), expected ", in_channels);
  std::vector<int64_t> padding(N, 0);
  std::string padding_mode;
  Tensor x = input;
  if (options.padding_mode != "zeros") {
    x = pad_input(input);
  } else if (options.padding.is_mode()) {
    padding_mode = options.padding.mode();
  } else {
    padding = options.padding.sizes().vec();
  }
  if constexpr (N == 1) {
    return conv1d(x, weight, bias,
                  {.stride = options.stride.vec(),
                   .padding = padding,
                   .dilation = options.dilation.vec(),
                   .groups = options.groups,
                   .padding_mode = padding_mode});
  } else {
    return conv2d(x, weight, bias,
                  {.stride = options.stride.vec(),
                   .padding = padding,
                   .dilation = options.dilation.vec(),
                   .groups = options.groups,
                   .padding_mode = padding_mode});
  }
}

template <size_t N>
std::string ConvNd<N>::extra_repr() const {
  std::string out = std::to_string(in_channels) + ", " + std::to_string(out_channels) +
                    ", kernel_size=" + repr::tuple(kernel_size.vec()) +
                    ", stride=" + repr::tuple(options.stride.vec());
  if (options.padding.is_mode()) {
    out += ", padding=" + options.padding.mode();
  } else if (options.padding.sizes() != ExpandingArray<N>(0)) {
    out += ", padding=" + repr::tuple(options.padding.sizes().vec());
  }
  if (options.dilation != ExpandingArray<N>(1))
    out += ", dilation=" + repr::tuple(options.dilation.vec());
  if (options.groups != 1) out += ", groups=" + std::to_string(options.groups);
  if (!bias.defined()) out += ", bias=False";
  if (options.padding_mode != "zeros") out += ", padding_mode=" + options.padding_mode;
  return out;
}

template class ConvNd<1>;
template class ConvNd<2>;

// --- ConvTranspose -----------------------------------------------------------------------

template <size_t N>
ConvTransposeNd<N>::ConvTransposeNd(int64_t in_channels_, int64_t out_channels_,
                                    ExpandingArray<N> kernel_size_, Options options_)
    : in_channels(in_channels_),
      out_channels(out_channels_),
      kernel_size(kernel_size_),
      options(std::move(options_)) {
  const char* layer = N == 1 ? "ConvTranspose1d" : "ConvTranspose2d";
  check_options<N>(layer, in_channels, out_channels, kernel_size,
                   {.stride = options.stride,
                    .padding = options.padding,
                    .dilation = options.dilation,
                    .groups = options.groups});
  for (size_t d = 0; d < N; ++d) {
    KILN_CHECK(options.output_padding[d] >= 0 && options.output_padding[d] < options.stride[d],
               ValueError, layer,
               ": output_padding must be non-negative and below the stride, got ",
               options.output_padding.vec(), " with stride ", options.stride.vec());
  }
  Shape shape = {in_channels, out_channels / options.groups};
  for (size_t d = 0; d < N; ++d) shape.push_back(kernel_size[d]);
  weight = empty(shape);
  if (options.bias) bias = empty({out_channels});
  register_parameter("weight", weight);
  register_parameter("bias", bias);
  reset_parameters();
}

template <size_t N>
void ConvTransposeNd<N>::reset_parameters() {
  reset_conv_parameters(weight, bias);
}

template <size_t N>
Tensor ConvTransposeNd<N>::forward(const Tensor& input) {
  if constexpr (N == 1) {
    return conv_transpose1d(input, weight, bias,
                            {.stride = options.stride.vec(),
                             .padding = options.padding.vec(),
                             .output_padding = options.output_padding.vec(),
                             .dilation = options.dilation.vec(),
                             .groups = options.groups});
  } else {
    return conv_transpose2d(input, weight, bias,
                            {.stride = options.stride.vec(),
                             .padding = options.padding.vec(),
                             .output_padding = options.output_padding.vec(),
                             .dilation = options.dilation.vec(),
                             .groups = options.groups});
  }
}

template <size_t N>
std::string ConvTransposeNd<N>::extra_repr() const {
  std::string out = std::to_string(in_channels) + ", " + std::to_string(out_channels) +
                    ", kernel_size=" + repr::tuple(kernel_size.vec()) +
                    ", stride=" + repr::tuple(options.stride.vec());
  if (options.padding != ExpandingArray<N>(0))
    out += ", padding=" + repr::tuple(options.padding.vec());
  if (options.output_padding != ExpandingArray<N>(0))
    out += ", output_padding=" + repr::tuple(options.output_padding.vec());
  if (options.dilation != ExpandingArray<N>(1))
    out += ", dilation=" + repr::tuple(options.dilation.vec());
  if (options.groups != 1) out += ", groups=" + std::to_string(options.groups);
  if (!bias.defined()) out += ", bias=False";
  return out;
}

template class ConvTransposeNd<1>;
template class ConvTransposeNd<2>;

}  // namespace kiln::nn
