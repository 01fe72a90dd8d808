// Classifies an image with ResNet-50 and prints the top-K ImageNet classes.
//
//   classify_image IMAGE [--weights FILE.safetensors] [--top K] [--labels FILE] [--resize N]
//
// The weights are torchvision's, saved once from Python:
//   from safetensors.torch import save_file
//   import torchvision
//   m = torchvision.models.resnet50(weights="IMAGENET1K_V2")
//   save_file(m.state_dict(), "resnet50.safetensors")
// Without --weights the network keeps its random initialization (a smoke test).
// --resize is the shorter side before the 224 x 224 centre crop: 232 (the
// default) as torchvision's IMAGENET1K_V2 transforms, 256 for IMAGENET1K_V1.
// Unlike torchvision, the resize does not antialias (see imagenet_preprocess).
// Exit status: 0 after printing, 1 when a file cannot be read or the
// probabilities are not a distribution, 2 for bad arguments.
#include <stb_image.h>

#include <kiln/kiln.h>
#include <kiln/models/resnet.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#ifndef KILN_IMAGENET_CLASSES
#define KILN_IMAGENET_CLASSES "imagenet_classes.txt"
#endif

using namespace kiln;

namespace {

struct Args {
  std::string image;
  std::string weights;
  std::string labels = KILN_IMAGENET_CLASSES;
  int64_t top = 5;
  int64_t resize = 232;
};

constexpr int64_t kClasses = 1000;

void print_usage() {
  std::fprintf(stderr,
               "usage: classify_image IMAGE [--weights FILE.safetensors] [--top K] "
               "[--labels FILE] [--resize N]\n"
               "  K in 1..%lld (default 5); N in 224..4096 (default 232);\n"
               "  labels default to %s\n",
               static_cast<long long>(kClasses), KILN_IMAGENET_CLASSES);
}

// An integer in [low, high], or nullopt.
std::optional<int64_t> parse_int(const std::string& text, int64_t low, int64_t high) {
  try {
    size_t used = 0;
    const long long k = std::stoll(text, &used);
    if (used == text.size() && k >= low && k <= high) return k;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

std::optional<Args> parse_args(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--weights" && has_value) {
      args.weights = argv[++i];
    } else if (arg == "--labels" && has_value) {
      args.labels = argv[++i];
    } else if (arg == "--top" && has_value) {
      const auto k = parse_int(argv[++i], 1, kClasses);
      if (!k) return std::nullopt;
      args.top = *k;
    } else if (arg == "--resize" && has_value) {
      const auto n = parse_int(argv[++i], 224, 4096);
      if (!n) return std::nullopt;
      args.resize = *n;
    } else if (arg.rfind("--", 0) != 0 && args.image.empty()) {
      args.image = arg;
    } else {
      return std::nullopt;
    }
  }
  if (args.image.empty()) return std::nullopt;
  return args;
}

// The image as uint8 [H, W, 3]; IOError naming the file when stb cannot decode it.
Tensor load_image(const std::string& path) {
  int width = 0, height = 0, channels = 0;
  unsigned char* pixels = stbi_load(path.c_str(), &width, &height, &channels, 3);
  if (!pixels) {
    throw IOError("classify_image: cannot read image '" + path + "': " + stbi_failure_reason());
  }
  return from_blob(pixels, {height, width, 3}, kUInt8, [](void* p) { stbi_image_free(p); });
}

std::vector<std::string> load_labels(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw IOError("classify_image: cannot open labels file '" + path + "'");
  std::vector<std::string> labels;
  for (std::string line; std::getline(in, line);) labels.push_back(line);
  if (static_cast<int64_t>(labels.size()) != kClasses) {
    throw IOError("classify_image: labels file '" + path + "' has " +
                  std::to_string(labels.size()) + " lines, expected " + std::to_string(kClasses));
  }
  return labels;
}

std::vector<float> class_probabilities(const Args& args, const Tensor& image) {
  auto net = models::resnet50();
  if (args.weights.empty()) {
    std::printf(
        "warning: no --weights given: the network is randomly initialized and the "
        "classes below are meaningless\n");
  } else {
    net->load_state_dict(load_safetensors(args.weights));
  }
  net->eval();
  InferenceModeGuard inference;
  const Tensor batch = models::imagenet_preprocess(image, args.resize, 224).unsqueeze(0);
  return softmax((*net)(batch), 1).to_vector<float>();
}

// A softmax over finite logits sums to 1; anything else is a broken network.
bool is_distribution(const std::vector<float>& probs) {
  double total = 0;
  for (float p : probs) {
    if (!(p >= 0 && p <= 1)) return false;
    total += p;
  }
  return std::abs(total - 1) < 1e-3;
}

int run(const Args& args) {
  const std::vector<std::string> labels = load_labels(args.labels);
  const Tensor image = load_image(args.image);
  std::printf("%s: %lld x %lld pixels\n", args.image.c_str(), static_cast<long long>(image.size(1)),
              static_cast<long long>(image.size(0)));
  const std::vector<float> probs = class_probabilities(args, image);
  if (static_cast<int64_t>(probs.size()) != kClasses || !is_distribution(probs)) {
    std::fprintf(stderr, "classify_image: the class probabilities do not form a distribution\n");
    return 1;
  }
  std::vector<int64_t> order(kClasses);
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + args.top, order.end(),
                    [&](int64_t a, int64_t b) { return probs[a] > probs[b]; });
  for (int64_t rank = 0; rank < args.top; ++rank) {
    const int64_t c = order[rank];
    std::printf("%3lld. %8.5f  %s (class %lld)\n", static_cast<long long>(rank + 1), probs[c],
                labels[c].c_str(), static_cast<long long>(c));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::optional<Args> args = parse_args(argc, argv);
  if (!args) {
    print_usage();
    return 2;
  }
  try {
    return run(*args);
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
