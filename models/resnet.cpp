// ResNet (torchvision's architecture, "v1.5" bottlenecks) and ImageNet preprocessing.
#include "kiln/models/resnet.h"

#include <cmath>
#include <utility>

#include "kiln/autograd.h"
#include "kiln/error.h"
#include "kiln/nn/init.h"
#include "kiln/ops/factory.h"
#include "kiln/ops/nn.h"
#include "kiln/ops/pointwise.h"

namespace kiln::models {
namespace {

// Whether autograd records an op on x; when it does not, ReLU and the residual
// sum may overwrite their input (BN outputs nobody else holds).
bool records(const Tensor& x) { return is_grad_enabled() && x.requires_grad(); }

nn::Conv2d conv3x3(int64_t in, int64_t out, int64_t stride, int64_t groups, int64_t dilation) {
  return nn::Conv2d(in, out, 3,
                    {.stride = stride,
                     .padding = dilation,
                     .dilation = dilation,
                     .groups = groups,
                     .bias = false});
}

nn::Conv2d conv1x1(int64_t in, int64_t out) { return nn::Conv2d(in, out, 1, {.bias = false}); }

// out = relu(out + identity), in place when autograd is not recording.
Tensor add_relu(Tensor out, const Tensor& identity) {
  if (records(out) || records(identity)) return relu(out + identity);
  out += identity;
  return relu_(out);
}

int64_t expansion_of(ResNetBlock block) {
  return block == ResNetBlock::kBasic ? BasicBlock::kExpansion : Bottleneck::kExpansion;
}

// torchvision's checks, made before any layer is built.
const ResNetOptions& checked(ResNetBlock block, const std::array<int64_t, 4>& layers,
                             const ResNetOptions& options) {
  for (int64_t n : layers) {
    KILN_CHECK(n >= 1, ValueError, "ResNet: every stage needs at least 1 block, got layers [",
               layers[0], ", ", layers[1], ", ", layers[2], ", ", layers[3], "]");
  }
  for (int64_t w : options.widths) {
    KILN_CHECK(w >= 1, ValueError, "ResNet: widths must be positive, got [", options.widths[0],
               ", ", options.widths[1], ", ", options.widths[2], ", ", options.widths[3], "]");
  }
  KILN_CHECK(options.num_classes >= 1, ValueError, "ResNet: num_classes must be positive, got ",
             options.num_classes);
  KILN_CHECK(options.groups >= 1 && options.width_per_group >= 1, ValueError,
             "ResNet: groups and width_per_group must be positive, got ", options.groups, " and ",
             options.width_per_group);
  if (block == ResNetBlock::kBasic) {
    KILN_CHECK(options.groups == 1 && options.width_per_group == 64, ValueError,
               "ResNet: BasicBlock only supports groups=1 and width_per_group=64, got groups=",
               options.groups, " and width_per_group=", options.width_per_group);
    const auto& d = options.replace_stride_with_dilation;
    KILN_CHECK(!d[0] && !d[1] && !d[2], ValueError,
               "ResNet: BasicBlock does not support dilation (replace_stride_with_dilation [", d[0],
               ", ", d[1], ", ", d[2], "])");
  }
  return options;
}

}  // namespace

// --- InplaceReLU ---------------------------------------------------------------------------

Tensor InplaceReLU::forward(const Tensor& input) {
  if (records(input)) return relu(input);
  Tensor out = input;
  return relu_(out);
}

// --- blocks --------------------------------------------------------------------------------

BasicBlock::BasicBlock(const BlockConfig& c)
    : conv1(conv3x3(c.inplanes, c.planes, c.stride, 1, 1)),
      bn1(c.planes),
      conv2(conv3x3(c.planes, c.planes, 1, 1, 1)),
      bn2(c.planes),
      downsample(c.downsample) {
  KILN_CHECK(c.groups == 1 && c.base_width == 64, ValueError,
             "BasicBlock: only groups=1 and base_width=64 are supported, got groups=", c.groups,
             " and base_width=", c.base_width);
  KILN_CHECK(c.dilation == 1, ValueError, "BasicBlock: dilation > 1 is not supported, got ",
             c.dilation);
  register_module("conv1", conv1);
  register_module("bn1", bn1);
  register_module("relu", relu);
  register_module("conv2", conv2);
  register_module("bn2", bn2);
  if (downsample) register_module("downsample", downsample);
}

Tensor BasicBlock::forward(const Tensor& x) {
  Tensor out = relu(bn1(conv1(x)));
  out = bn2(conv2(out));
  return add_relu(std::move(out), downsample ? downsample->forward(x) : x);
}

namespace {
// torchvision: int(planes * (base_width / 64.0)) * groups.
int64_t bottleneck_width(const BlockConfig& c) {
  return static_cast<int64_t>(static_cast<double>(c.planes) *
                              (static_cast<double>(c.base_width) / 64.0)) *
         c.groups;
}
}  // namespace

Bottleneck::Bottleneck(const BlockConfig& c)
    : conv1(conv1x1(c.inplanes, bottleneck_width(c))),
      bn1(bottleneck_width(c)),
      conv2(conv3x3(bottleneck_width(c), bottleneck_width(c), c.stride, c.groups, c.dilation)),
      bn2(bottleneck_width(c)),
      conv3(conv1x1(bottleneck_width(c), c.planes * kExpansion)),
      bn3(c.planes * kExpansion),
      downsample(c.downsample) {
  register_module("conv1", conv1);
  register_module("bn1", bn1);
  register_module("conv2", conv2);
  register_module("bn2", bn2);
  register_module("conv3", conv3);
  register_module("bn3", bn3);
  register_module("relu", relu);
  if (downsample) register_module("downsample", downsample);
}

Tensor Bottleneck::forward(const Tensor& x) {
  Tensor out = relu(bn1(conv1(x)));
  out = relu(bn2(conv2(out)));
  out = bn3(conv3(out));
  return add_relu(std::move(out), downsample ? downsample->forward(x) : x);
}

// --- ResNet --------------------------------------------------------------------------------

ResNet::ResNet(ResNetBlock block_, std::array<int64_t, 4> layers, ResNetOptions options_)
    : block(block_),
      options(checked(block_, layers, options_)),
      conv1(3, options.widths[0], 7, {.stride = 2, .padding = 3, .bias = false}),
      bn1(options.widths[0]),
      maxpool(3, {.stride = 2, .padding = 1}),
      avgpool({1, 1}),
      fc(options.widths[3] * expansion_of(block_), options.num_classes),
      inplanes_(options.widths[0]) {
  const auto& dilate = options.replace_stride_with_dilation;
  layer1 = make_layer(options.widths[0], layers[0], 1, false);
  layer2 = make_layer(options.widths[1], layers[1], 2, dilate[0]);
  layer3 = make_layer(options.widths[2], layers[2], 2, dilate[1]);
  layer4 = make_layer(options.widths[3], layers[3], 2, dilate[2]);
  register_module("conv1", conv1);
  register_module("bn1", bn1);
  register_module("relu", relu);
  register_module("maxpool", maxpool);
  register_module("layer1", layer1);
  register_module("layer2", layer2);
  register_module("layer3", layer3);
  register_module("layer4", layer4);
  register_module("avgpool", avgpool);
  register_module("fc", fc);
  initialize();
}

std::shared_ptr<nn::Sequential> ResNet::make_layer(int64_t planes, int64_t blocks, int64_t stride,
                                                   bool dilate) {
  const int64_t expansion = expansion_of(block);
  const int64_t previous_dilation = dilation_;
  if (dilate) {
    dilation_ *= stride;
    stride = 1;
  }
  BlockConfig config{.inplanes = inplanes_,
                     .planes = planes,
                     .stride = stride,
                     .groups = options.groups,
                     .base_width = options.width_per_group,
                     .dilation = previous_dilation,
                     .downsample = nullptr};
  if (stride != 1 || inplanes_ != planes * expansion) {
    config.downsample = std::make_shared<nn::Sequential>(
        std::make_shared<nn::Conv2d>(inplanes_, planes * expansion, 1,
                                     nn::Conv2dOptions{.stride = stride, .bias = false}),
        std::make_shared<nn::BatchNorm2d>(planes * expansion));
  }
  auto layer = std::make_shared<nn::Sequential>();
  auto add_block = [&](const BlockConfig& c) {
    if (block == ResNetBlock::kBasic) {
      layer->emplace_back<BasicBlock>(c);
    } else {
      layer->emplace_back<Bottleneck>(c);
    }
  };
  add_block(config);
  inplanes_ = planes * expansion;
  for (int64_t i = 1; i < blocks; ++i) {
    add_block({.inplanes = inplanes_,
               .planes = planes,
               .groups = options.groups,
               .base_width = options.width_per_group,
               .dilation = dilation_,
               .downsample = nullptr});
  }
  return layer;
}

// torchvision's init: He normal (fan_out) convolutions, BatchNorm weight 1 and
// bias 0, Linear as constructed; zero_init_residual zeroes each block's last BN weight.
void ResNet::initialize() {
  for (nn::Module* m : modules()) {
    if (auto* conv = dynamic_cast<nn::Conv2d*>(m)) {
      nn::init::kaiming_normal_(conv->weight, 0, "fan_out", "relu");
    } else if (auto* bn = dynamic_cast<nn::BatchNorm2d*>(m)) {
      nn::init::ones_(bn->weight);
      nn::init::zeros_(bn->bias);
    }
  }
  if (!options.zero_init_residual) return;
  for (nn::Module* m : modules()) {
    if (auto* b = dynamic_cast<Bottleneck*>(m)) nn::init::zeros_(b->bn3.weight);
    if (auto* b = dynamic_cast<BasicBlock*>(m)) nn::init::zeros_(b->bn2.weight);
  }
}

Tensor ResNet::features(const Tensor& images) {
  KILN_CHECK(images.dim() == 4 && images.size(1) == 3, ShapeError,
             "ResNet: expected images [N, 3, H, W], got shape ", images.sizes());
  Tensor x = maxpool(relu(bn1(conv1(images))));
  x = layer4->forward(layer3->forward(layer2->forward(layer1->forward(x))));
  return avgpool(x).flatten(1);
}

Tensor ResNet::forward(const Tensor& images) { return fc(features(images)); }

// --- constructors --------------------------------------------------------------------------

std::shared_ptr<ResNet> resnet18(ResNetOptions options) {
  return std::make_shared<ResNet>(ResNetBlock::kBasic, std::array<int64_t, 4>{2, 2, 2, 2}, options);
}
std::shared_ptr<ResNet> resnet34(ResNetOptions options) {
  return std::make_shared<ResNet>(ResNetBlock::kBasic, std::array<int64_t, 4>{3, 4, 6, 3}, options);
}
std::shared_ptr<ResNet> resnet50(ResNetOptions options) {
  return std::make_shared<ResNet>(ResNetBlock::kBottleneck, std::array<int64_t, 4>{3, 4, 6, 3},
                                  options);
}
std::shared_ptr<ResNet> resnet101(ResNetOptions options) {
  return std::make_shared<ResNet>(ResNetBlock::kBottleneck, std::array<int64_t, 4>{3, 4, 23, 3},
                                  options);
}
std::shared_ptr<ResNet> resnet152(ResNetOptions options) {
  return std::make_shared<ResNet>(ResNetBlock::kBottleneck, std::array<int64_t, 4>{3, 8, 36, 3},
                                  options);
}

// --- preprocessing -------------------------------------------------------------------------

Tensor imagenet_preprocess(const Tensor& image, int64_t resize_to, int64_t crop_size) {
  KILN_CHECK(image.dim() == 3 && image.size(2) == 3, ShapeError,
             "imagenet_preprocess: expected an image [H, W, 3], got shape ", image.sizes());
  KILN_CHECK(image.dtype() == kUInt8, DTypeError,
             "imagenet_preprocess: expected a uint8 image, got ", image.dtype());
  KILN_CHECK(crop_size >= 1 && resize_to >= crop_size, ValueError,
             "imagenet_preprocess: need 1 <= crop_size <= resize_to, got crop_size ", crop_size,
             " and resize_to ", resize_to);
  const int64_t h = image.size(0), w = image.size(1);
  KILN_CHECK(h >= 1 && w >= 1, ShapeError, "imagenet_preprocess: empty image of shape ",
             image.sizes());
  // torchvision's Resize(int): the shorter side becomes resize_to, the longer
  // one int(resize_to * long / short).
  const bool tall = h > w;
  const int64_t shorter = tall ? w : h, longer = tall ? h : w;
  const auto scaled_long = static_cast<int64_t>(
      static_cast<double>(resize_to) * static_cast<double>(longer) / static_cast<double>(shorter));
  const int64_t new_h = tall ? scaled_long : resize_to, new_w = tall ? resize_to : scaled_long;
  Tensor x = image.permute({2, 0, 1}).to(kFloat32).unsqueeze(0);
  if (new_h != h || new_w != w) {
    x = nn::functional::interpolate(
        x,
        {.size = std::vector<int64_t>{new_h, new_w}, .mode = "bilinear", .align_corners = false});
  }
  // torchvision's center_crop: the offset int(round((size - crop) / 2)), halves to even.
  const auto top = static_cast<int64_t>(std::nearbyint(static_cast<double>(new_h - crop_size) / 2));
  const auto left =
      static_cast<int64_t>(std::nearbyint(static_cast<double>(new_w - crop_size) / 2));
  x = x.squeeze(0).narrow(1, top, crop_size).narrow(2, left, crop_size);
  const Tensor mean = from_vector<float>({0.485f, 0.456f, 0.406f}, Shape{3, 1, 1});
  const Tensor std = from_vector<float>({0.229f, 0.224f, 0.225f}, Shape{3, 1, 1});
  return (x / 255.0 - mean) / std;
}

}  // namespace kiln::models
