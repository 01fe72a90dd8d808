// ResNet image classifiers with torchvision's architecture and parameter names,
// so torchvision's weights load as they are.
//
//   auto net = kiln::models::resnet50();                    // 1000 ImageNet classes
//   net->load_state_dict(kiln::load_safetensors("resnet50.safetensors"));
//   net->eval();
//   kiln::InferenceModeGuard inference;
//   kiln::Tensor x = kiln::models::imagenet_preprocess(image_hwc_uint8).unsqueeze(0);
//   kiln::Tensor probs = (*net)(x).softmax(1);              // [1, 1000]
//
//   // A narrow net for tests: planes 8, 16, 32, 64 and 10 classes.
//   auto tiny = kiln::models::resnet18({.num_classes = 10, .widths = {8, 16, 32, 64}});
//
// The blocks follow torchvision's "v1.5": a Bottleneck strides in its 3x3
// convolution. ReLUs run in place when no autograd history is recorded (as
// torchvision's ReLU(inplace=True)).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "kiln/nn/activation.h"
#include "kiln/nn/container.h"
#include "kiln/nn/conv.h"
#include "kiln/nn/linear.h"
#include "kiln/nn/module.h"
#include "kiln/nn/norm.h"
#include "kiln/nn/pooling.h"
#include "kiln/tensor.h"

namespace kiln::models {

struct ResNetOptions {
  int64_t num_classes = 1000;
  int64_t groups = 1;            // ResNeXt: groups of the 3x3 convolutions (Bottleneck only)
  int64_t width_per_group = 64;  // Wide ResNet: 128 (Bottleneck only)
  // Planes of layer1..layer4; the stem has widths[0] channels.
  std::array<int64_t, 4> widths = {64, 128, 256, 512};
  // Dilate layer2..layer4 instead of striding them (Bottleneck only).
  std::array<bool, 3> replace_stride_with_dilation = {false, false, false};
  // Zero the last BatchNorm weight of each block, so every block starts as the identity.
  bool zero_init_residual = false;
};

// nn::ReLU printed as torchvision's ReLU(inplace=True): it overwrites its input
// unless autograd records the call (grad enabled and the input requires grad).
class InplaceReLU : public nn::ReLU {
 public:
  std::string name() const override { return "ReLU"; }
  std::string extra_repr() const override { return "inplace=True"; }
  Tensor forward(const Tensor& input);
  Tensor operator()(const Tensor& input) { return forward(input); }
};

// The shape of one block, as torchvision's block constructors take it.
struct BlockConfig {
  int64_t inplanes = 0;
  int64_t planes = 0;
  int64_t stride = 1;
  int64_t groups = 1;
  int64_t base_width = 64;
  int64_t dilation = 1;
  // 1x1 convolution + BatchNorm matching the identity to the block's output; may be null.
  std::shared_ptr<nn::Sequential> downsample;
};

// Two 3x3 convolutions: conv1 bn1 relu conv2 bn2 (+ downsample(x)) relu.
class BasicBlock : public nn::Module {
 public:
  static constexpr int64_t kExpansion = 1;
  explicit BasicBlock(const BlockConfig& config);
  Tensor forward(const Tensor& x);
  Tensor operator()(const Tensor& x) { return forward(x); }

  nn::Conv2d conv1;
  nn::BatchNorm2d bn1;
  InplaceReLU relu;
  nn::Conv2d conv2;
  nn::BatchNorm2d bn2;
  std::shared_ptr<nn::Sequential> downsample;  // null when the identity fits
};

// 1x1 reduce, 3x3 (strided, grouped, dilated), 1x1 expand to planes * 4.
class Bottleneck : public nn::Module {
 public:
  static constexpr int64_t kExpansion = 4;
  explicit Bottleneck(const BlockConfig& config);
  Tensor forward(const Tensor& x);
  Tensor operator()(const Tensor& x) { return forward(x); }

  nn::Conv2d conv1;
  nn::BatchNorm2d bn1;
  nn::Conv2d conv2;
  nn::BatchNorm2d bn2;
  nn::Conv2d conv3;
  nn::BatchNorm2d bn3;
  InplaceReLU relu;
  std::shared_ptr<nn::Sequential> downsample;  // null when the identity fits
};

enum class ResNetBlock { kBasic, kBottleneck };

class ResNet : public nn::Module {
 public:
  // layers: blocks per stage, each >= 1. Invalid options are a ValueError (as
  // torchvision: groups, width_per_group and dilation need Bottleneck).
  ResNet(ResNetBlock block, std::array<int64_t, 4> layers, ResNetOptions options = {});

  // images [N, 3, H, W] float -> logits [N, num_classes].
  Tensor forward(const Tensor& images);
  Tensor operator()(const Tensor& images) { return forward(images); }
  // The pooled features fc reads: [N, widths[3] * expansion].
  Tensor features(const Tensor& images);

  const ResNetBlock block;
  const ResNetOptions options;
  nn::Conv2d conv1;
  nn::BatchNorm2d bn1;
  InplaceReLU relu;
  nn::MaxPool2d maxpool;
  std::shared_ptr<nn::Sequential> layer1, layer2, layer3, layer4;
  nn::AdaptiveAvgPool2d avgpool;
  nn::Linear fc;

 private:
  std::shared_ptr<nn::Sequential> make_layer(int64_t planes, int64_t blocks, int64_t stride,
                                             bool dilate);
  void initialize();

  int64_t inplanes_;
  int64_t dilation_ = 1;
};

std::shared_ptr<ResNet> resnet18(ResNetOptions options = {});   // BasicBlock [2, 2, 2, 2]
std::shared_ptr<ResNet> resnet34(ResNetOptions options = {});   // BasicBlock [3, 4, 6, 3]
std::shared_ptr<ResNet> resnet50(ResNetOptions options = {});   // Bottleneck [3, 4, 6, 3]
std::shared_ptr<ResNet> resnet101(ResNetOptions options = {});  // Bottleneck [3, 4, 23, 3]
std::shared_ptr<ResNet> resnet152(ResNetOptions options = {});  // Bottleneck [3, 8, 36, 3]

// ImageNet preprocessing as torchvision's ResNet weights transforms, for an
// image uint8 [H, W, 3] (as stb_image loads it): resize the shorter side to
// resize_to (bilinear, align_corners false, in float and WITHOUT antialiasing,
// i.e. torchvision's resize(image.float(), resize_to, antialias=False)), crop
// the centre crop_size square, scale to [0, 1] and normalize with the ImageNet
// mean and std. Returns float32 [3, crop_size, crop_size].
Tensor imagenet_preprocess(const Tensor& image_hwc_uint8, int64_t resize_to = 256,
                           int64_t crop_size = 224);

}  // namespace kiln::models
