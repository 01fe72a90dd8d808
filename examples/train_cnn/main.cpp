// Trains a small CNN to recognize which of four strokes (horizontal,
// vertical, diagonal, anti-diagonal) is drawn in a noisy 16x16 image.
//
//   train_cnn [steps] [--bf16]   exits with status 1 when the final loss is not below 0.05
//
// --bf16 trains under bfloat16 autocast (docs/optim.md, "Autocast"): the
// convolutions and the linear layer in bfloat16, the loss and the batch norms'
// statistics in float32, the parameters and their updates in float32.
#include <kiln/amp.h>
#include <kiln/kiln.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string_view>

using namespace kiln;
namespace F = kiln::nn::functional;

struct Cnn : nn::Module {
  nn::Conv2d conv1{1, 8, 3, {.padding = 1}};
  nn::BatchNorm2d bn1{8};
  nn::Conv2d conv2{8, 16, 3, {.padding = 1}};
  nn::BatchNorm2d bn2{16};
  nn::Linear fc{16, 4};
  Cnn() {
    register_module("conv1", conv1);
    register_module("bn1", bn1);
    register_module("conv2", conv2);
    register_module("bn2", bn2);
    register_module("fc", fc);
  }
  Tensor forward(const Tensor& x) {
    Tensor y = max_pool2d(relu(bn1(conv1(x))), {2});
    y = relu(bn2(conv2(y)));
    return fc(adaptive_avg_pool2d(y, {1}).flatten(1));
  }
};

constexpr int64_t kSize = 16;

// A batch of images, each a stroke of one of four orientations at a random offset.
std::pair<Tensor, Tensor> strokes(int64_t batch, Generator& gen) {
  Tensor labels = randint(0, 4, {batch}, {}, &gen);
  Tensor offsets = randint(-4, 5, {batch}, {}, &gen);
  Tensor rows = arange(0, kSize).reshape({1, kSize, 1});
  Tensor cols = arange(0, kSize).reshape({1, 1, kSize});
  Tensor c = kSize / 2 + offsets.reshape({batch, 1, 1});
  Tensor l = labels.reshape({batch, 1, 1});
  Tensor on = where(l == 0, rows == c,
              where(l == 1, cols == c,
              where(l == 2, (rows - cols) == offsets.reshape({batch, 1, 1}),
                            (rows + cols) == c + kSize / 2 - 1)));
  Tensor images = on.to(kFloat32) + randn({batch, kSize, kSize}, {}, &gen) * 0.3;
  return {images.unsqueeze(1), labels};
}

int main(int argc, char** argv) {
  int steps = 150;
  bool bf16 = false;
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--bf16") {
      bf16 = true;
    } else if ((steps = std::atoi(argv[i])) <= 0) {
      std::fprintf(stderr, "usage: train_cnn [steps] [--bf16]\n");
      return 2;
    }
  }
  manual_seed(11);
  Generator gen(5);
  Cnn net;
  optim::Adam opt(net.parameters(), {.lr = 1e-2});
  double smoothed = 0;
  for (int step = 1; step <= steps; ++step) {
    auto [images, labels] = strokes(32, gen);
    opt.zero_grad();
    Tensor loss;
    {
      std::optional<amp::Autocast> region;
      if (bf16) region.emplace(Device::cpu(), kBFloat16);
      loss = F::cross_entropy(net.forward(images), labels);
    }
    loss.backward();
    opt.step();
    const double value = loss.item<double>();
    smoothed = step == 1 ? value : 0.9 * smoothed + 0.1 * value;
    if (step % 25 == 0) std::printf("step %4d  loss %.4f (smoothed %.4f)\n", step, value, smoothed);
  }
  net.eval();
  auto [images, labels] = strokes(512, gen);
  double eval_loss = 0, eval_acc = 0;
  {
    NoGradGuard no_grad;
    Tensor logits = net.forward(images);
    eval_loss = F::cross_entropy(logits, labels).item<double>();
    eval_acc = (argmax(logits, 1) == labels).to(kFloat64).mean().item<double>();
  }
  std::printf("held-out loss %.4f (target < 0.05), accuracy %.1f%%%s\n", eval_loss, 100 * eval_acc,
              bf16 ? " (trained under bfloat16 autocast, evaluated in float32)" : "");
  return eval_loss < 0.05 ? 0 : 1;
}
