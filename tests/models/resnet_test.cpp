// ResNet: torchvision's structure, names and shapes, initialization, modes,
// errors, and the ImageNet preprocessing on hand-made images.
#include "kiln/models/resnet.h"

#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/autograd.h"
#include "kiln/ops/factory.h"
#include "kiln/ops/pointwise.h"
#include "kiln/ops/reduce.h"
#include "unit/expect_error.h"

namespace kiln::models {
namespace {

// state_dict() of torchvision.models.resnet18() and resnet50() (torchvision
// 0.29), one "name [shape]" per line, in torchvision's order.
constexpr const char* kResNet18StateDict = R"(
conv1.weight [64, 3, 7, 7]
bn1.weight [64]
bn1.bias [64]
bn1.running_mean [64]
bn1.running_var [64]
bn1.num_batches_tracked []
layer1.0.conv1.weight [64, 64, 3, 3]
layer1.0.bn1.weight [64]
layer1.0.bn1.bias [64]
layer1.0.bn1.running_mean [64]
layer1.0.bn1.running_var [64]
layer1.0.bn1.num_batches_tracked []
layer1.0.conv2.weight [64, 64, 3, 3]
layer1.0.bn2.weight [64]
layer1.0.bn2.bias [64]
layer1.0.bn2.running_mean [64]
layer1.0.bn2.running_var [64]
layer1.0.bn2.num_batches_tracked []
layer1.1.conv1.weight [64, 64, 3, 3]
layer1.1.bn1.weight [64]
layer1.1.bn1.bias [64]
layer1.1.bn1.running_mean [64]
layer1.1.bn1.running_var [64]
layer1.1.bn1.num_batches_tracked []
layer1.1.conv2.weight [64, 64, 3, 3]
layer1.1.bn2.weight [64]
layer1.1.bn2.bias [64]
layer1.1.bn2.running_mean [64]
layer1.1.bn2.running_var [64]
layer1.1.bn2.num_batches_tracked []
layer2.0.conv1.weight [128, 64, 3, 3]
layer2.0.bn1.weight [128]
layer2.0.bn1.bias [128]
layer2.0.bn1.running_mean [128]
layer2.0.bn1.running_var [128]
layer2.0.bn1.num_batches_tracked []
layer2.0.conv2.weight [128, 128, 3, 3]
layer2.0.bn2.weight [128]
layer2.0.bn2.bias [128]
layer2.0.bn2.running_mean [128]
layer2.0.bn2.running_var [128]
layer2.0.bn2.num_batches_tracked []
layer2.0.downsample.0.weight [128, 64, 1, 1]
layer2.0.downsample.1.weight [128]
layer2.0.downsample.1.bias [128]
layer2.0.downsample.1.running_mean [128]
layer2.0.downsample.1.running_var [128]
layer2.0.downsample.1.num_batches_tracked []
layer2.1.conv1.weight [128, 128, 3, 3]
layer2.1.bn1.weight [128]
layer2.1.bn1.bias [128]
layer2.1.bn1.running_mean [128]
layer2.1.bn1.running_var [128]
layer2.1.bn1.num_batches_tracked []
layer2.1.conv2.weight [128, 128, 3, 3]
layer2.1.bn2.weight [128]
layer2.1.bn2.bias [128]
layer2.1.bn2.running_mean [128]
layer2.1.bn2.running_var [128]
layer2.1.bn2.num_batches_tracked []
layer3.0.conv1.weight [256, 128, 3, 3]
layer3.0.bn1.weight [256]
layer3.0.bn1.bias [256]
layer3.0.bn1.running_mean [256]
layer3.0.bn1.running_var [256]
layer3.0.bn1.num_batches_tracked []
layer3.0.conv2.weight [256, 256, 3, 3]
layer3.0.bn2.weight [256]
layer3.0.bn2.bias [256]
layer3.0.bn2.running_mean [256]
layer3.0.bn2.running_var [256]
layer3.0.bn2.num_batches_tracked []
layer3.0.downsample.0.weight [256, 128, 1, 1]
layer3.0.downsample.1.weight [256]
layer3.0.downsample.1.bias [256]
layer3.0.downsample.1.running_mean [256]
layer3.0.downsample.1.running_var [256]
layer3.0.downsample.1.num_batches_tracked []
layer3.1.conv1.weight [256, 256, 3, 3]
layer3.1.bn1.weight [256]
layer3.1.bn1.bias [256]
layer3.1.bn1.running_mean [256]
layer3.1.bn1.running_var [256]
layer3.1.bn1.num_batches_tracked []
layer3.1.conv2.weight [256, 256, 3, 3]
layer3.1.bn2.weight [256]
layer3.1.bn2.bias [256]
layer3.1.bn2.running_mean [256]
layer3.1.bn2.running_var [256]
layer3.1.bn2.num_batches_tracked []
layer4.0.conv1.weight [512, 256, 3, 3]
layer4.0.bn1.weight [512]
layer4.0.bn1.bias [512]
layer4.0.bn1.running_mean [512]
layer4.0.bn1.running_var [512]
layer4.0.bn1.num_batches_tracked []
layer4.0.conv2.weight [512, 512, 3, 3]
layer4.0.bn2.weight [512]
layer4.0.bn2.bias [512]
layer4.0.bn2.running_mean [512]
layer4.0.bn2.running_var [512]
layer4.0.bn2.num_batches_tracked []
layer4.0.downsample.0.weight [512, 256, 1, 1]
layer4.0.downsample.1.weight [512]
layer4.0.downsample.1.bias [512]
layer4.0.downsample.1.running_mean [512]
layer4.0.downsample.1.running_var [512]
layer4.0.downsample.1.num_batches_tracked []
layer4.1.conv1.weight [512, 512, 3, 3]
layer4.1.bn1.weight [512]
layer4.1.bn1.bias [512]
layer4.1.bn1.running_mean [512]
layer4.1.bn1.running_var [512]
layer4.1.bn1.num_batches_tracked []
layer4.1.conv2.weight [512, 512, 3, 3]
layer4.1.bn2.weight [512]
layer4.1.bn2.bias [512]
layer4.1.bn2.running_mean [512]
layer4.1.bn2.running_var [512]
layer4.1.bn2.num_batches_tracked []
fc.weight [1000, 512]
fc.bias [1000]
)";
constexpr const char* kResNet50StateDict = R"(
conv1.weight [64, 3, 7, 7]
bn1.weight [64]
bn1.bias [64]
bn1.running_mean [64]
bn1.running_var [64]
bn1.num_batches_tracked []
layer1.0.conv1.weight [64, 64, 1, 1]
layer1.0.bn1.weight [64]
layer1.0.bn1.bias [64]
layer1.0.bn1.running_mean [64]
layer1.0.bn1.running_var [64]
layer1.0.bn1.num_batches_tracked []
layer1.0.conv2.weight [64, 64, 3, 3]
layer1.0.bn2.weight [64]
layer1.0.bn2.bias [64]
layer1.0.bn2.running_mean [64]
layer1.0.bn2.running_var [64]
layer1.0.bn2.num_batches_tracked []
layer1.0.conv3.weight [256, 64, 1, 1]
layer1.0.bn3.weight [256]
layer1.0.bn3.bias [256]
layer1.0.bn3.running_mean [256]
layer1.0.bn3.running_var [256]
layer1.0.bn3.num_batches_tracked []
layer1.0.downsample.0.weight [256, 64, 1, 1]
layer1.0.downsample.1.weight [256]
layer1.0.downsample.1.bias [256]
layer1.0.downsample.1.running_mean [256]
layer1.0.downsample.1.running_var [256]
layer1.0.downsample.1.num_batches_tracked []
layer1.1.conv1.weight [64, 256, 1, 1]
layer1.1.bn1.weight [64]
layer1.1.bn1.bias [64]
layer1.1.bn1.running_mean [64]
layer1.1.bn1.running_var [64]
layer1.1.bn1.num_batches_tracked []
layer1.1.conv2.weight [64, 64, 3, 3]
layer1.1.bn2.weight [64]
layer1.1.bn2.bias [64]
layer1.1.bn2.running_mean [64]
layer1.1.bn2.running_var [64]
layer1.1.bn2.num_batches_tracked []
layer1.1.conv3.weight [256, 64, 1, 1]
layer1.1.bn3.weight [256]
layer1.1.bn3.bias [256]
layer1.1.bn3.running_mean [256]
layer1.1.bn3.running_var [256]
layer1.1.bn3.num_batches_tracked []
layer1.2.conv1.weight [64, 256, 1, 1]
layer1.2.bn1.weight [64]
layer1.2.bn1.bias [64]
layer1.2.bn1.running_mean [64]
layer1.2.bn1.running_var [64]
layer1.2.bn1.num_batches_tracked []
layer1.2.conv2.weight [64, 64, 3, 3]
layer1.2.bn2.weight [64]
layer1.2.bn2.bias [64]
layer1.2.bn2.running_mean [64]
layer1.2.bn2.running_var [64]
layer1.2.bn2.num_batches_tracked []
layer1.2.conv3.weight [256, 64, 1, 1]
layer1.2.bn3.weight [256]
layer1.2.bn3.bias [256]
layer1.2.bn3.running_mean [256]
layer1.2.bn3.running_var [256]
layer1.2.bn3.num_batches_tracked []
layer2.0.conv1.weight [128, 256, 1, 1]
layer2.0.bn1.weight [128]
layer2.0.bn1.bias [128]
layer2.0.bn1.running_mean [128]
layer2.0.bn1.running_var [128]
layer2.0.bn1.num_batches_tracked []
layer2.0.conv2.weight [128, 128, 3, 3]
layer2.0.bn2.weight [128]
layer2.0.bn2.bias [128]
layer2.0.bn2.running_mean [128]
layer2.0.bn2.running_var [128]
layer2.0.bn2.num_batches_tracked []
layer2.0.conv3.weight [512, 128, 1, 1]
layer2.0.bn3.weight [512]
layer2.0.bn3.bias [512]
layer2.0.bn3.running_mean [512]
layer2.0.bn3.running_var [512]
layer2.0.bn3.num_batches_tracked []
layer2.0.downsample.0.weight [512, 256, 1, 1]
layer2.0.downsample.1.weight [512]
layer2.0.downsample.1.bias [512]
layer2.0.downsample.1.running_mean [512]
layer2.0.downsample.1.running_var [512]
layer2.0.downsample.1.num_batches_tracked []
layer2.1.conv1.weight [128, 512, 1, 1]
layer2.1.bn1.weight [128]
layer2.1.bn1.bias [128]
layer2.1.bn1.running_mean [128]
layer2.1.bn1.running_var [128]
layer2.1.bn1.num_batches_tracked []
layer2.1.conv2.weight [128, 128, 3, 3]
layer2.1.bn2.weight [128]
layer2.1.bn2.bias [128]
layer2.1.bn2.running_mean [128]
layer2.1.bn2.running_var [128]
layer2.1.bn2.num_batches_tracked []
layer2.1.conv3.weight [512, 128, 1, 1]
layer2.1.bn3.weight [512]
layer2.1.bn3.bias [512]
layer2.1.bn3.running_mean [512]
layer2.1.bn3.running_var [512]
layer2.1.bn3.num_batches_tracked []
layer2.2.conv1.weight [128, 512, 1, 1]
layer2.2.bn1.weight [128]
layer2.2.bn1.bias [128]
layer2.2.bn1.running_mean [128]
layer2.2.bn1.running_var [128]
layer2.2.bn1.num_batches_tracked []
layer2.2.conv2.weight [128, 128, 3, 3]
layer2.2.bn2.weight [128]
layer2.2.bn2.bias [128]
layer2.2.bn2.running_mean [128]
layer2.2.bn2.running_var [128]
layer2.2.bn2.num_batches_tracked []
layer2.2.conv3.weight [512, 128, 1, 1]
layer2.2.bn3.weight [512]
layer2.2.bn3.bias [512]
layer2.2.bn3.running_mean [512]
layer2.2.bn3.running_var [512]
layer2.2.bn3.num_batches_tracked []
layer2.3.conv1.weight [128, 512, 1, 1]
layer2.3.bn1.weight [128]
layer2.3.bn1.bias [128]
layer2.3.bn1.running_mean [128]
layer2.3.bn1.running_var [128]
layer2.3.bn1.num_batches_tracked []
layer2.3.conv2.weight [128, 128, 3, 3]
layer2.3.bn2.weight [128]
layer2.3.bn2.bias [128]
layer2.3.bn2.running_mean [128]
layer2.3.bn2.running_var [128]
layer2.3.bn2.num_batches_tracked []
layer2.3.conv3.weight [512, 128, 1, 1]
layer2.3.bn3.weight [512]
layer2.3.bn3.bias [512]
layer2.3.bn3.running_mean [512]
layer2.3.bn3.running_var [512]
layer2.3.bn3.num_batches_tracked []
layer3.0.conv1.weight [256, 512, 1, 1]
layer3.0.bn1.weight [256]
layer3.0.bn1.bias [256]
layer3.0.bn1.running_mean [256]
layer3.0.bn1.running_var [256]
layer3.0.bn1.num_batches_tracked []
layer3.0.conv2.weight [256, 256, 3, 3]
layer3.0.bn2.weight [256]
layer3.0.bn2.bias [256]
layer3.0.bn2.running_mean [256]
layer3.0.bn2.running_var [256]
layer3.0.bn2.num_batches_tracked []
layer3.0.conv3.weight [1024, 256, 1, 1]
layer3.0.bn3.weight [1024]
layer3.0.bn3.bias [1024]
layer3.0.bn3.running_mean [1024]
layer3.0.bn3.running_var [1024]
layer3.0.bn3.num_batches_tracked []
layer3.0.downsample.0.weight [1024, 512, 1, 1]
layer3.0.downsample.1.weight [1024]
layer3.0.downsample.1.bias [1024]
layer3.0.downsample.1.running_mean [1024]
layer3.0.downsample.1.running_var [1024]
layer3.0.downsample.1.num_batches_tracked []
layer3.1.conv1.weight [256, 1024, 1, 1]
layer3.1.bn1.weight [256]
layer3.1.bn1.bias [256]
layer3.1.bn1.running_mean [256]
layer3.1.bn1.running_var [256]
layer3.1.bn1.num_batches_tracked []
layer3.1.conv2.weight [256, 256, 3, 3]
layer3.1.bn2.weight [256]
layer3.1.bn2.bias [256]
layer3.1.bn2.running_mean [256]
layer3.1.bn2.running_var [256]
layer3.1.bn2.num_batches_tracked []
layer3.1.conv3.weight [1024, 256, 1, 1]
layer3.1.bn3.weight [1024]
layer3.1.bn3.bias [1024]
layer3.1.bn3.running_mean [1024]
layer3.1.bn3.running_var [1024]
layer3.1.bn3.num_batches_tracked []
layer3.2.conv1.weight [256, 1024, 1, 1]
layer3.2.bn1.weight [256]
layer3.2.bn1.bias [256]
layer3.2.bn1.running_mean [256]
layer3.2.bn1.running_var [256]
layer3.2.bn1.num_batches_tracked []
layer3.2.conv2.weight [256, 256, 3, 3]
layer3.2.bn2.weight [256]
layer3.2.bn2.bias [256]
layer3.2.bn2.running_mean [256]
layer3.2.bn2.running_var [256]
layer3.2.bn2.num_batches_tracked []
layer3.2.conv3.weight [1024, 256, 1, 1]
layer3.2.bn3.weight [1024]
layer3.2.bn3.bias [1024]
layer3.2.bn3.running_mean [1024]
layer3.2.bn3.running_var [1024]
layer3.2.bn3.num_batches_tracked []
layer3.3.conv1.weight [256, 1024, 1, 1]
layer3.3.bn1.weight [256]
layer3.3.bn1.bias [256]
layer3.3.bn1.running_mean [256]
layer3.3.bn1.running_var [256]
layer3.3.bn1.num_batches_tracked []
layer3.3.conv2.weight [256, 256, 3, 3]
layer3.3.bn2.weight [256]
layer3.3.bn2.bias [256]
layer3.3.bn2.running_mean [256]
layer3.3.bn2.running_var [256]
layer3.3.bn2.num_batches_tracked []
layer3.3.conv3.weight [1024, 256, 1, 1]
layer3.3.bn3.weight [1024]
layer3.3.bn3.bias [1024]
layer3.3.bn3.running_mean [1024]
layer3.3.bn3.running_var [1024]
layer3.3.bn3.num_batches_tracked []
layer3.4.conv1.weight [256, 1024, 1, 1]
layer3.4.bn1.weight [256]
layer3.4.bn1.bias [256]
layer3.4.bn1.running_mean [256]
layer3.4.bn1.running_var [256]
layer3.4.bn1.num_batches_tracked []
layer3.4.conv2.weight [256, 256, 3, 3]
layer3.4.bn2.weight [256]
layer3.4.bn2.bias [256]
layer3.4.bn2.running_mean [256]
layer3.4.bn2.running_var [256]
layer3.4.bn2.num_batches_tracked []
layer3.4.conv3.weight [1024, 256, 1, 1]
layer3.4.bn3.weight [1024]
layer3.4.bn3.bias [1024]
layer3.4.bn3.running_mean [1024]
layer3.4.bn3.running_var [1024]
layer3.4.bn3.num_batches_tracked []
layer3.5.conv1.weight [256, 1024, 1, 1]
layer3.5.bn1.weight [256]
layer3.5.bn1.bias [256]
layer3.5.bn1.running_mean [256]
layer3.5.bn1.running_var [256]
layer3.5.bn1.num_batches_tracked []
layer3.5.conv2.weight [256, 256, 3, 3]
layer3.5.bn2.weight [256]
layer3.5.bn2.bias [256]
layer3.5.bn2.running_mean [256]
layer3.5.bn2.running_var [256]
layer3.5.bn2.num_batches_tracked []
layer3.5.conv3.weight [1024, 256, 1, 1]
layer3.5.bn3.weight [1024]
layer3.5.bn3.bias [1024]
layer3.5.bn3.running_mean [1024]
layer3.5.bn3.running_var [1024]
layer3.5.bn3.num_batches_tracked []
layer4.0.conv1.weight [512, 1024, 1, 1]
layer4.0.bn1.weight [512]
layer4.0.bn1.bias [512]
layer4.0.bn1.running_mean [512]
layer4.0.bn1.running_var [512]
layer4.0.bn1.num_batches_tracked []
layer4.0.conv2.weight [512, 512, 3, 3]
layer4.0.bn2.weight [512]
layer4.0.bn2.bias [512]
layer4.0.bn2.running_mean [512]
layer4.0.bn2.running_var [512]
layer4.0.bn2.num_batches_tracked []
layer4.0.conv3.weight [2048, 512, 1, 1]
layer4.0.bn3.weight [2048]
layer4.0.bn3.bias [2048]
layer4.0.bn3.running_mean [2048]
layer4.0.bn3.running_var [2048]
layer4.0.bn3.num_batches_tracked []
layer4.0.downsample.0.weight [2048, 1024, 1, 1]
layer4.0.downsample.1.weight [2048]
layer4.0.downsample.1.bias [2048]
layer4.0.downsample.1.running_mean [2048]
layer4.0.downsample.1.running_var [2048]
layer4.0.downsample.1.num_batches_tracked []
layer4.1.conv1.weight [512, 2048, 1, 1]
layer4.1.bn1.weight [512]
layer4.1.bn1.bias [512]
layer4.1.bn1.running_mean [512]
layer4.1.bn1.running_var [512]
layer4.1.bn1.num_batches_tracked []
layer4.1.conv2.weight [512, 512, 3, 3]
layer4.1.bn2.weight [512]
layer4.1.bn2.bias [512]
layer4.1.bn2.running_mean [512]
layer4.1.bn2.running_var [512]
layer4.1.bn2.num_batches_tracked []
layer4.1.conv3.weight [2048, 512, 1, 1]
layer4.1.bn3.weight [2048]
layer4.1.bn3.bias [2048]
layer4.1.bn3.running_mean [2048]
layer4.1.bn3.running_var [2048]
layer4.1.bn3.num_batches_tracked []
layer4.2.conv1.weight [512, 2048, 1, 1]
layer4.2.bn1.weight [512]
layer4.2.bn1.bias [512]
layer4.2.bn1.running_mean [512]
layer4.2.bn1.running_var [512]
layer4.2.bn1.num_batches_tracked []
layer4.2.conv2.weight [512, 512, 3, 3]
layer4.2.bn2.weight [512]
layer4.2.bn2.bias [512]
layer4.2.bn2.running_mean [512]
layer4.2.bn2.running_var [512]
layer4.2.bn2.num_batches_tracked []
layer4.2.conv3.weight [2048, 512, 1, 1]
layer4.2.bn3.weight [2048]
layer4.2.bn3.bias [2048]
layer4.2.bn3.running_mean [2048]
layer4.2.bn3.running_var [2048]
layer4.2.bn3.num_batches_tracked []
fc.weight [1000, 2048]
fc.bias [1000]
)";

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) lines.push_back(line);
  return lines;
}

std::vector<std::string> names_and_shapes(const nn::Module& model) {
  std::vector<std::string> lines;
  for (const auto& [name, tensor] : model.state_dict()) {
    std::ostringstream os;
    os << name << " " << tensor.sizes();
    lines.push_back(os.str());
  }
  return lines;
}

int64_t parameter_count(const nn::Module& model) {
  int64_t n = 0;
  for (const Tensor& p : model.parameters()) n += p.numel();
  return n;
}

// Narrow nets keep the tests fast: planes 8, 16, 32, 64.
constexpr std::array<int64_t, 4> kNarrow = {8, 16, 32, 64};

TEST(ResNet, Resnet18StateDictHasTorchvisionNamesShapesAndOrder) {
  EXPECT_EQ(names_and_shapes(*resnet18()), lines_of(kResNet18StateDict));
}

TEST(ResNet, Resnet50StateDictHasTorchvisionNamesShapesAndOrder) {
  EXPECT_EQ(names_and_shapes(*resnet50()), lines_of(kResNet50StateDict));
}

TEST(ResNet, ParameterCountsMatchTorchvision) {
  EXPECT_EQ(parameter_count(*resnet18()), 11'689'512);
  EXPECT_EQ(parameter_count(*resnet50()), 25'557'032);
  // resnext50_32x4d
  EXPECT_EQ(parameter_count(*resnet50({.groups = 32, .width_per_group = 4})), 25'028'904);
}

TEST(ResNet, DeepVariantsHaveTorchvisionBlockCounts) {
  auto blocks = [](const ResNet& net) {
    return std::vector<size_t>{net.layer1->size(), net.layer2->size(), net.layer3->size(),
                               net.layer4->size()};
  };
  EXPECT_EQ(blocks(*resnet34({.widths = kNarrow})), (std::vector<size_t>{3, 4, 6, 3}));
  EXPECT_EQ(blocks(*resnet101({.widths = kNarrow})), (std::vector<size_t>{3, 4, 23, 3}));
  EXPECT_EQ(blocks(*resnet152({.widths = kNarrow})), (std::vector<size_t>{3, 8, 36, 3}));
  EXPECT_EQ(resnet152({.widths = kNarrow})->fc.in_features, 64 * 4);
}

TEST(ResNet, ForwardGivesLogitsAndFeaturesOfTheDocumentedShapes) {
  auto basic = resnet18({.num_classes = 10, .widths = kNarrow});
  const Tensor x = randn({2, 3, 64, 48});
  EXPECT_EQ(basic->forward(x).sizes(), (Shape{2, 10}));
  EXPECT_EQ(basic->features(x).sizes(), (Shape{2, 64}));
  auto bottleneck = resnet50({.num_classes = 7, .widths = kNarrow});
  EXPECT_EQ((*bottleneck)(randn({1, 3, 33, 47})).sizes(), (Shape{1, 7}));
  EXPECT_EQ(bottleneck->features(randn({1, 3, 33, 47})).sizes(), (Shape{1, 256}));
}

TEST(ResNet, FeaturesAreWhatFcReads) {
  auto net = resnet18({.num_classes = 5, .widths = kNarrow});
  net->eval();
  const Tensor x = randn({2, 3, 40, 40});
  const Tensor expected = net->fc(net->features(x));
  EXPECT_TRUE(all(net->forward(x) == expected).item<bool>());
}

TEST(ResNet, PrintsLikeTorchvision) {
  auto net = resnet18();
  const std::string text = net->repr();
  EXPECT_EQ(text.rfind("ResNet(\n  (conv1): Conv2d(3, 64, kernel_size=", 0), 0u) << text;
  for (const char* line : {
           "\n  (relu): ReLU(inplace=True)\n",
           "\n  (maxpool): MaxPool2d(kernel_size=3, stride=2, padding=1, dilation=1, "
           "ceil_mode=False)\n",
           "\n  (layer1): Sequential(\n    (0): BasicBlock(\n      (conv1): Conv2d(64, 64,",
           "\n      (relu): ReLU(inplace=True)\n      (conv2): Conv2d(",
           "\n      (downsample): Sequential(\n        (0): Conv2d(64, 128, kernel_size=",
           "\n  (avgpool): AdaptiveAvgPool2d(output_size=(1, 1))\n",
           "\n  (fc): Linear(in_features=512, out_features=1000, bias=True)\n)",
       }) {
    EXPECT_NE(text.find(line), std::string::npos) << "missing: " << line << "\nin:\n" << text;
  }
  EXPECT_NE(resnet50({.widths = kNarrow})->repr().find("    (0): Bottleneck(\n"),
            std::string::npos);
}

TEST(ResNet, DilationReplacesStrideAsTorchvision) {
  auto net = resnet50({.widths = kNarrow, .replace_stride_with_dilation = {false, true, true}});
  auto conv2_of = [](const nn::Sequential& layer, size_t i) -> const nn::Conv2d& {
    return layer.at<Bottleneck>(i).conv2;
  };
  // The first block of a dilated stage keeps the previous dilation.
  EXPECT_EQ(conv2_of(*net->layer3, 0).options.dilation.vec(), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(conv2_of(*net->layer3, 1).options.dilation.vec(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(conv2_of(*net->layer4, 0).options.dilation.vec(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(conv2_of(*net->layer4, 1).options.dilation.vec(), (std::vector<int64_t>{4, 4}));
  EXPECT_EQ(conv2_of(*net->layer4, 1).options.padding.sizes().vec(), (std::vector<int64_t>{4, 4}));
  EXPECT_EQ(conv2_of(*net->layer4, 0).options.stride.vec(), (std::vector<int64_t>{1, 1}));
  const auto& down = net->layer4->at<Bottleneck>(0).downsample->at<nn::Conv2d>(0);
  EXPECT_EQ(down.options.stride.vec(), (std::vector<int64_t>{1, 1}));
  // Output stride 8 instead of 32: a 64x64 image keeps 8x8 cells in layer4.
  net->eval();
  NoGradGuard no_grad;
  Tensor x = randn({1, 3, 64, 64});
  x = net->maxpool(net->relu(net->bn1(net->conv1(x))));
  x = net->layer4->forward(net->layer3->forward(net->layer2->forward(net->layer1->forward(x))));
  EXPECT_EQ(x.sizes(), (Shape{1, 256, 8, 8}));
}

TEST(ResNet, GroupsAndWidthPerGroupShapeTheBottleneck) {
  auto net = resnet50({.groups = 4, .width_per_group = 8, .widths = kNarrow});
  const auto& b = net->layer2->at<Bottleneck>(0);
  // width = int(planes * width_per_group / 64) * groups = int(16 * 8 / 64) * 4 = 8
  EXPECT_EQ(b.conv2.weight.sizes(), (Shape{8, 2, 3, 3}));
  EXPECT_EQ(b.conv2.options.groups, 4);
  EXPECT_EQ(b.conv3.weight.sizes(), (Shape{64, 8, 1, 1}));
}

TEST(ResNet, InitializesAsTorchvision) {
  auto net = resnet18({.widths = {8, 16, 32, 256}});
  // He normal with fan_out: std = sqrt(2 / (256 * 3 * 3)).
  const Tensor w = net->layer4->at<BasicBlock>(1).conv2.weight;
  const double expected_std = std::sqrt(2.0 / (256 * 9));
  EXPECT_NEAR(stddev(w).item<double>(), expected_std, 0.01 * expected_std);
  EXPECT_NEAR(mean(w).item<double>(), 0.0, 0.01 * expected_std);
  const auto& bn = net->layer4->at<BasicBlock>(1).bn2;
  EXPECT_TRUE(all(bn.weight == 1).item<bool>());
  EXPECT_TRUE(all(bn.bias == 0).item<bool>());
  // fc keeps Linear's default: U(-1/sqrt(256), 1/sqrt(256)).
  EXPECT_LE(amax(abs(net->fc.weight)).item<double>(), 1 / std::sqrt(256.0));
  EXPECT_GT(amax(abs(net->fc.weight)).item<double>(), 0.9 / std::sqrt(256.0));
}

TEST(ResNet, ZeroInitResidualZeroesTheLastNormOfEachBlock) {
  auto basic = resnet18({.widths = kNarrow, .zero_init_residual = true});
  for (nn::Sequential* layer : {basic->layer1.get(), basic->layer4.get()}) {
    for (size_t i = 0; i < layer->size(); ++i) {
      EXPECT_TRUE(all(layer->at<BasicBlock>(i).bn2.weight == 0).item<bool>());
      EXPECT_TRUE(all(layer->at<BasicBlock>(i).bn1.weight == 1).item<bool>());
    }
  }
  auto bottleneck = resnet50({.widths = kNarrow, .zero_init_residual = true});
  const auto& b = bottleneck->layer3->at<Bottleneck>(2);
  EXPECT_TRUE(all(b.bn3.weight == 0).item<bool>());
  EXPECT_TRUE(all(b.bn2.weight == 1).item<bool>());
  // So a block without downsample starts as the identity on ReLU outputs.
  bottleneck->eval();
  NoGradGuard no_grad;
  const Tensor x = relu(randn({2, 32 * 4, 6, 6}));
  EXPECT_TRUE(all(bottleneck->layer3->at<Bottleneck>(1).forward(x) == x).item<bool>());
}

TEST(ResNet, BlockAddsItsIdentityBeforeTheLastRelu) {
  // All convolutions zero: every block computes relu(bn(0) + identity) = relu(identity),
  // and with bn bias b the block gives relu(b + identity).
  auto net = resnet18({.widths = kNarrow});
  net->eval();
  NoGradGuard no_grad;
  auto& block = net->layer2->at<BasicBlock>(1);
  block.conv1.weight.zero_();
  block.conv2.weight.zero_();
  block.bn2.bias.fill_(-0.5);
  const Tensor x = randn({1, 16, 5, 5});
  const Tensor expected = relu(x - 0.5);
  EXPECT_LT(amax(abs(block.forward(x) - expected)).item<double>(), 1e-6);
}

TEST(ResNet, InferenceGivesTheSameLogitsAsRecordingAndLeavesTheInputAlone) {
  auto net = resnet50({.num_classes = 6, .widths = kNarrow});
  // Non-trivial running statistics, so eval differs from training.
  for (int i = 0; i < 2; ++i) net->forward(randn({2, 3, 32, 32}));
  net->eval();
  const Tensor x = randn({2, 3, 40, 36});
  const Tensor copy = x.clone();
  const Tensor recorded = net->forward(x);  // out-of-place ReLUs (parameters require grad)
  EXPECT_TRUE(recorded.requires_grad());
  Tensor inferred;
  {
    InferenceModeGuard inference;  // in-place ReLUs and residual sums
    inferred = net->forward(x);
  }
  EXPECT_TRUE(all(inferred == recorded.detach()).item<bool>());
  EXPECT_TRUE(all(x == copy).item<bool>());
}

TEST(ResNet, TrainsAndUpdatesRunningStatistics) {
  auto net = resnet18({.num_classes = 3, .widths = kNarrow});
  const Tensor logits = net->forward(randn({4, 3, 32, 32}));
  logits.sum().backward();
  EXPECT_TRUE(net->conv1.weight.grad().defined());
  EXPECT_TRUE(net->layer1->at<BasicBlock>(0).conv2.weight.grad().defined());
  EXPECT_TRUE(net->fc.bias.grad().defined());
  EXPECT_EQ(net->bn1.num_batches_tracked.item<int64_t>(), 1);
  EXPECT_FALSE(all(net->bn1.running_mean == 0).item<bool>());
}

TEST(ResNet, LoadsItsOwnStateDict) {
  auto a = resnet18({.num_classes = 4, .widths = kNarrow});
  auto b = resnet18({.num_classes = 4, .widths = kNarrow});
  b->load_state_dict(a->state_dict());
  a->eval();
  b->eval();
  const Tensor x = randn({1, 3, 32, 32});
  NoGradGuard no_grad;
  EXPECT_TRUE(all(a->forward(x) == b->forward(x)).item<bool>());
}

TEST(ResNet, RejectsImagesThatAreNotBatchesOfThreeChannels) {
  auto net = resnet18({.widths = kNarrow});
  testing::expect_error<ShapeError>(
      [&] {
        net->forward(randn({3, 32, 32}));
      },
      "ResNet", "[3, 32, 32]");
  testing::expect_error<ShapeError>(
      [&] {
        net->forward(randn({1, 4, 32, 32}));
      },
      "ResNet", "[1, 4, 32, 32]");
  testing::expect_error<ShapeError>(
      [&] {
        net->features(randn({1, 1, 32, 32}));
      },
      "ResNet", "[1, 1, 32, 32]");
}

TEST(ResNet, RejectsInvalidOptions) {
  using testing::expect_error;
  expect_error<ValueError>(
      [] {
        ResNet(ResNetBlock::kBasic, {2, 0, 2, 2}, {.widths = kNarrow});
      },
      "ResNet", "[2, 0, 2, 2]");
  expect_error<ValueError>([] { resnet18({.groups = 2}); }, "ResNet", "groups=2");
  expect_error<ValueError>([] { resnet34({.width_per_group = 128}); }, "ResNet",
                           "width_per_group=128");
  expect_error<ValueError>(
      [] {
        resnet18({.replace_stride_with_dilation = {false, false, true}});
      },
      "ResNet", "dilation");
  expect_error<ValueError>([] { resnet50({.num_classes = 0}); }, "ResNet", "num_classes");
  expect_error<ValueError>(
      [] {
        resnet50({.widths = {8, 16, 0, 64}});
      },
      "ResNet", "[8, 16, 0, 64]");
  expect_error<ValueError>([] { resnet50({.groups = 0}); }, "ResNet", "groups");
}

// --- imagenet_preprocess ---------------------------------------------------------------------

// An image [h, w, 3] whose channel c holds value(y, x, c).
template <typename F>
Tensor make_image(int64_t h, int64_t w, F value) {
  std::vector<uint8_t> pixels;
  pixels.reserve(h * w * 3);
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x)
      for (int64_t c = 0; c < 3; ++c) pixels.push_back(static_cast<uint8_t>(value(y, x, c)));
  return from_vector(pixels, Shape{h, w, 3});
}

constexpr double kMean[3] = {0.485, 0.456, 0.406};
constexpr double kStd[3] = {0.229, 0.224, 0.225};

double normalized(double pixel, int c) { return (pixel / 255.0 - kMean[c]) / kStd[c]; }

TEST(ImagenetPreprocess, NormalizesAConstantImage) {
  const Tensor out =
      imagenet_preprocess(make_image(300, 400, [](auto, auto, auto c) { return 100 + 50 * c; }));
  ASSERT_EQ(out.sizes(), (Shape{3, 224, 224}));
  EXPECT_EQ(out.dtype(), kFloat32);
  for (int c = 0; c < 3; ++c) {
    const Tensor plane = out.select(0, c);
    EXPECT_NEAR(amax(plane).item<double>(), normalized(100 + 50 * c, c), 1e-5);
    EXPECT_NEAR(amin(plane).item<double>(), normalized(100 + 50 * c, c), 1e-5);
  }
}

TEST(ImagenetPreprocess, CropsTheCentreWithoutResizingWhenTheShortSideFits) {
  // 256 x 300: no resize; the crop starts at row 16 and column round(76 / 2) = 38.
  const Tensor out = imagenet_preprocess(make_image(
      256, 300, [](auto y, auto x, auto c) { return c == 0 ? x % 256 : (c == 1 ? y : 7); }));
  ASSERT_EQ(out.sizes(), (Shape{3, 224, 224}));
  for (int64_t i : {0, 100, 223}) {
    for (int64_t j : {0, 57, 223}) {
      EXPECT_NEAR(out.index({0, i, j}).item<double>(), normalized(double((j + 38) % 256), 0), 1e-5);
      EXPECT_NEAR(out.index({1, i, j}).item<double>(), normalized(double(i + 16), 1), 1e-5);
      EXPECT_NEAR(out.index({2, i, j}).item<double>(), normalized(7, 2), 1e-5);
    }
  }
}

TEST(ImagenetPreprocess, RoundsAHalfCropOffsetToEvenAsTorchvision) {
  // 301 x 256 (portrait): the crop starts at row round(77 / 2) = round(38.5) = 38.
  const Tensor out =
      imagenet_preprocess(make_image(301, 256, [](auto y, auto, auto) { return y / 2; }));
  for (int64_t i : {0, 1, 2, 101, 223}) {
    EXPECT_NEAR(out.index({1, i, 5}).item<double>(), normalized(double((i + 38) / 2), 1), 1e-5);
  }
}

TEST(ImagenetPreprocess, ResizesBilinearlyWithHalfPixelCentres) {
  // 128 x 128 -> 256 x 256, crop at 16: a ramp stays a ramp, sampled at
  // source x = (x_out + 0.5) / 2 - 0.5 (align_corners false).
  const Tensor out =
      imagenet_preprocess(make_image(128, 128, [](auto, auto x, auto) { return x; }));
  for (int64_t j : {0, 1, 100, 223}) {
    const double source = (double(j + 16) + 0.5) / 2 - 0.5;
    EXPECT_NEAR(out.index({2, 40, j}).item<double>(), normalized(source, 2), 1e-4);
  }
  // Landscape 100 x 150: the short side becomes 256 and the long one int(256 * 1.5) = 384.
  EXPECT_EQ(imagenet_preprocess(make_image(100, 150, [](auto, auto, auto) { return 0; }), 256, 200)
                .sizes(),
            (Shape{3, 200, 200}));
}

TEST(ImagenetPreprocess, RejectsWrongImagesAndSizes) {
  using testing::expect_error;
  expect_error<ShapeError>(
      [] {
        imagenet_preprocess(zeros({8, 8, 4}, {.dtype = kUInt8}));
      },
      "imagenet_preprocess", "[8, 8, 4]");
  expect_error<ShapeError>(
      [] {
        imagenet_preprocess(zeros({3, 8, 8}, {.dtype = kUInt8}));
      },
      "imagenet_preprocess", "[3, 8, 8]");
  expect_error<DTypeError>(
      [] {
        imagenet_preprocess(zeros({8, 8, 3}));
      },
      "imagenet_preprocess", "uint8");
  expect_error<ValueError>(
      [] {
        imagenet_preprocess(zeros({8, 8, 3}, {.dtype = kUInt8}), 200, 224);
      },
      "imagenet_preprocess", "224");
}

}  // namespace
}  // namespace kiln::models
