// Pooling layers and Flatten.
#include "kiln/nn/pooling.h"

#include "kiln/ops/conv.h"

namespace kiln::nn {

namespace {

void check_positive(const char* layer, const char* what, const ExpandingArray<2>& sizes) {
  KILN_CHECK(sizes[0] > 0 && sizes[1] > 0, ValueError, layer, ": ", what, " must be positive, got ",
             sizes.vec());
}

}  // namespace

MaxPool2d::MaxPool2d(ExpandingArray<2> kernel_size_, Options options_)
    : kernel_size(kernel_size_), stride(options_.stride.value_or(kernel_size_)), options(options_) {
  check_positive("MaxPool2d", "kernel_size", kernel_size);
  check_positive("MaxPool2d", "stride", stride);
  check_positive("MaxPool2d", "dilation", options.dilation);
}

Tensor MaxPool2d::forward(const Tensor& input) {
  return max_pool2d(input, kernel_size.vec(), stride.vec(), options.padding.vec(),
                    options.dilation.vec(), options.ceil_mode);
}

std::string MaxPool2d::extra_repr() const {
  return "kernel_size=" + kernel_size.repr() + ", stride=" + stride.repr() +
         ", padding=" + options.padding.repr() + ", dilation=" + options.dilation.repr() +
         ", ceil_mode=" + repr::boolean(options.ceil_mode);
}

AvgPool2d::AvgPool2d(ExpandingArray<2> kernel_size_, Options options_)
    : kernel_size(kernel_size_), stride(options_.stride.value_or(kernel_size_)), options(options_) {
  check_positive("AvgPool2d", "kernel_size", kernel_size);
  check_positive("AvgPool2d", "stride", stride);
  KILN_CHECK(!options.divisor_override || *options.divisor_override != 0, ValueError,
             "AvgPool2d: divisor_override must not be zero");
}

Tensor AvgPool2d::forward(const Tensor& input) {
  return avg_pool2d(input, kernel_size.vec(), stride.vec(), options.padding.vec(),
                    options.ceil_mode, options.count_include_pad, options.divisor_override);
}

std::string AvgPool2d::extra_repr() const {
  return "kernel_size=" + kernel_size.repr() + ", stride=" + stride.repr() +
         ", padding=" + options.padding.repr();
}

AdaptiveAvgPool2d::AdaptiveAvgPool2d(ExpandingArray<2> output_size_) : output_size(output_size_) {
  check_positive("AdaptiveAvgPool2d", "output_size", output_size);
}

Tensor AdaptiveAvgPool2d::forward(const Tensor& input) {
  return adaptive_avg_pool2d(input, output_size.vec());
}

std::string AdaptiveAvgPool2d::extra_repr() const { return "output_size=" + output_size.repr(); }

AdaptiveMaxPool2d::AdaptiveMaxPool2d(ExpandingArray<2> output_size_) : output_size(output_size_) {
  check_positive("AdaptiveMaxPool2d", "output_size", output_size);
}

Tensor AdaptiveMaxPool2d::forward(const Tensor& input) {
  return adaptive_max_pool2d(input, output_size.vec());
}

std::string AdaptiveMaxPool2d::extra_repr() const { return "output_size=" + output_size.repr(); }

MaxPool1d::MaxPool1d(int64_t kernel_size_, Options options_)
    : kernel_size(kernel_size_), stride(options_.stride.value_or(kernel_size_)), options(options_) {
  KILN_CHECK(kernel_size > 0 && stride > 0 && options.dilation > 0, ValueError,
             "MaxPool1d: kernel_size, stride and dilation must be positive, got ", kernel_size,
             ", ", stride, ", ", options.dilation);
}

Tensor MaxPool1d::forward(const Tensor& input) {
  return max_pool1d(input, kernel_size, stride, options.padding, options.dilation,
                    options.ceil_mode);
}

std::string MaxPool1d::extra_repr() const {
  return "kernel_size=" + std::to_string(kernel_size) + ", stride=" + std::to_string(stride) +
         ", padding=" + std::to_string(options.padding) +
         ", dilation=" + std::to_string(options.dilation) +
         ", ceil_mode=" + repr::boolean(options.ceil_mode);
}

AvgPool1d::AvgPool1d(int64_t kernel_size_, Options options_)
    : kernel_size(kernel_size_), stride(options_.stride.value_or(kernel_size_)), options(options_) {
  KILN_CHECK(kernel_size > 0 && stride > 0, ValueError,
             "AvgPool1d: kernel_size and stride must be positive, got ", kernel_size, ", ", stride);
}

Tensor AvgPool1d::forward(const Tensor& input) {
  return avg_pool1d(input, kernel_size, stride, options.padding, options.ceil_mode,
                    options.count_include_pad);
}

std::string AvgPool1d::extra_repr() const {
  return "kernel_size=(" + std::to_string(kernel_size) + ",), stride=(" + std::to_string(stride) +
         ",), padding=(" + std::to_string(options.padding) + ",)";
}

std::string Flatten::extra_repr() const {
  return "start_dim=" + std::to_string(start_dim) + ", end_dim=" + std::to_string(end_dim);
}

}  // namespace kiln::nn
