// Saving and resuming training: module and optimizer state through safetensors
// files, the way a user checkpoints.
#include <gtest/gtest.h>

#include <filesystem>

#include "kiln/kiln.h"

namespace kiln {
namespace {

namespace F = kiln::nn::functional;

struct Net : nn::Module {
  nn::Conv2d conv{2, 4, 3, {.padding = 1}};
  nn::BatchNorm2d bn{4};
  nn::Linear fc{4, 3};
  Net() {
    register_module("conv", conv);
    register_module("bn", bn);
    register_module("fc", fc);
  }
  Tensor forward(const Tensor& x) {
    return fc(adaptive_avg_pool2d(relu(bn(conv(x))), {1}).flatten(1));
  }
};

class TempDir {
 public:
  TempDir() : path_(std::filesystem::temp_directory_path() / ("kiln_ckpt_" + std::to_string(::getpid()))) {
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

void train_steps(Net& net, optim::Optimizer& opt, Generator& gen, int steps) {
  for (int i = 0; i < steps; ++i) {
    Tensor x = randn({4, 2, 5, 5}, {}, &gen);
    Tensor y = randint(0, 3, {4}, {}, &gen);
    opt.zero_grad();
    F::cross_entropy(net.forward(x), y).backward();
    opt.step();
  }
}

void expect_same_state(const StateDict& a, const StateDict& b) {
  ASSERT_EQ(a.keys(), b.keys());
  for (const auto& [name, t] : a) {
    const Tensor& u = b.at(name);
    ASSERT_EQ(t.sizes(), u.sizes()) << name;
    EXPECT_EQ(t.to(kFloat64).to_vector<double>(), u.to(kFloat64).to_vector<double>()) << name;
  }
}

TEST(TrainingState, ModuleRoundTripsThroughSafetensors) {
  TempDir dir;
  manual_seed(1);
  Net a;
  Generator gen(3);
  optim::SGD opt(a.parameters(), {.lr = 0.1, .momentum = 0.9});
  train_steps(a, opt, gen, 2);  // running statistics and num_batches_tracked move too
  save_safetensors(dir.file("net.safetensors"), a.state_dict());
  manual_seed(2);
  Net b;
  b.load_state_dict(load_safetensors(dir.file("net.safetensors")));
  expect_same_state(a.state_dict(), b.state_dict());
  a.eval();
  b.eval();
  Tensor x = randn({2, 2, 5, 5}, {}, &gen);
  NoGradGuard no_grad;
  EXPECT_EQ(a.forward(x).to_vector<float>(), b.forward(x).to_vector<float>());
}

TEST(TrainingState, ResumingFromCheckpointFilesMatchesAnUninterruptedRun) {
  TempDir dir;
  manual_seed(5);
  Net straight;
  optim::AdamW straight_opt(straight.parameters(), {.lr = 1e-2, .amsgrad = true});
  Generator g1(9);
  train_steps(straight, straight_opt, g1, 5);

  manual_seed(5);
  Net first;
  optim::AdamW first_opt(first.parameters(), {.lr = 1e-2, .amsgrad = true});
  Generator g2(9);
  train_steps(first, first_opt, g2, 3);
  save_safetensors(dir.file("net.safetensors"), first.state_dict());
  save_safetensors(dir.file("opt.safetensors"), first_opt.state_dict());

  manual_seed(77);
  Net resumed;
  optim::AdamW resumed_opt(resumed.parameters(), {.lr = 1e-2, .amsgrad = true});
  resumed.load_state_dict(load_safetensors(dir.file("net.safetensors")));
  resumed_opt.load_state_dict(load_safetensors(dir.file("opt.safetensors")));
  train_steps(resumed, resumed_opt, g2, 2);
  expect_same_state(straight.state_dict(), resumed.state_dict());
  expect_same_state(straight_opt.state_dict(), resumed_opt.state_dict());
}

}  // namespace
}  // namespace kiln
