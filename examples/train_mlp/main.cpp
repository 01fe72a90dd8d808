// Trains a small MLP to tell three interleaved spirals apart (a problem no
// linear model can solve) and reports its accuracy on points it never saw.
//
//   train_mlp [steps] [--bf16]   exits with status 1 when held-out accuracy is below 95%
//
// --bf16 runs the compiled step's forward under bfloat16 autocast (docs/
// optim.md, "Autocast"): the linear layers in bfloat16, the loss, the
// gradients of the float32 parameters and Adam's update in float32.
#include <kiln/amp.h>
#include <kiln/kiln.h>

#include <cstdio>
#include <cstdlib>
#include <numbers>
#include <optional>
#include <string_view>

using namespace kiln;
namespace F = kiln::nn::functional;

struct Mlp : nn::Module {
  nn::Linear fc1{2, 64}, fc2{64, 64}, fc3{64, 3};
  Mlp() {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
    register_module("fc3", fc3);
  }
  Tensor forward(const Tensor& x) { return fc3(relu(fc2(relu(fc1(x))))); }
};

struct Dataset {
  Tensor points;  // [n, 2]
  Tensor labels;  // [n], int64
};

// n points on each of three spiral arms, with noise on the angle.
Dataset spirals(int64_t n, Generator& gen) {
  const int64_t classes = 3;
  Tensor radius = rand({classes * n}, {}, &gen);
  Tensor labels = arange(0, classes).unsqueeze(1).expand({classes, n}).flatten();
  Tensor angle = labels.to(kFloat32) * (2 * std::numbers::pi / classes) + radius * 4 +
                 randn({classes * n}, {}, &gen) * 0.15;
  return {stack({radius * sin(angle), radius * cos(angle)}, 1), labels};
}

double accuracy(Mlp& net, const Dataset& d) {
  NoGradGuard no_grad;
  Tensor predicted = argmax(net.forward(d.points), 1);
  return (predicted == d.labels).to(kFloat64).mean().item<double>();
}

int main(int argc, char** argv) {
  int steps = 1500;
  bool bf16 = false;
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--bf16") {
      bf16 = true;
    } else if ((steps = std::atoi(argv[i])) <= 0) {
      std::fprintf(stderr, "usage: train_mlp [steps] [--bf16]\n");
      return 2;
    }
  }
  manual_seed(7);  // layers draw their initial weights from the default generator
  Generator gen(2024);
  Mlp net;
  Dataset train = spirals(300, gen), test = spirals(200, gen);
  optim::Adam opt(net.parameters(), {.lr = 1e-2});
  // Forward, loss, backward and the Adam update traced into one graph (Adam
  // then counts its steps on the device); each call updates the parameters
  // as the same code run eagerly would.
  auto train_step = compile([&](const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    Tensor loss;
    {
      std::optional<amp::Autocast> region;
      if (bf16) region.emplace(Device::cpu(), kBFloat16);
      loss = F::cross_entropy(net.forward(x), y);
    }
    loss.backward();
    opt.step();
    return loss;
  });
  for (int step = 1; step <= steps; ++step) {
    const Tensor loss = train_step(train.points, train.labels);
    if (step % 250 == 0) std::printf("step %4d  loss %.4f\n", step, loss.item<double>());
  }
  std::printf("compiled: %lld traces for %lld calls\n", static_cast<long long>(train_step.stats().traces),
              static_cast<long long>(train_step.stats().calls));
  const double train_acc = accuracy(net, train), test_acc = accuracy(net, test);
  std::printf("accuracy: train %.1f%%, held out %.1f%% (target 95%%)%s\n", 100 * train_acc,
              100 * test_acc, bf16 ? ", trained under bfloat16 autocast" : "");
  return test_acc >= 0.95 ? 0 : 1;
}
