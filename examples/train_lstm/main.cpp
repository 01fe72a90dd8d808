// Trains an LSTM on the adding problem: each step of a sequence carries a random
// value and a marker, and the target is the sum of the two marked values. The
// network has to remember them across the sequence.
//
//   train_lstm [steps]    exits with status 1 when the final loss is not below 0.01
#include <kiln/kiln.h>

#include <cstdio>
#include <cstdlib>

using namespace kiln;
namespace F = kiln::nn::functional;

constexpr int64_t kLength = 12;

struct Adder : nn::Module {
  nn::LSTM lstm{2, 32, {.batch_first = true}};
  nn::Linear head{32, 1};
  Adder() {
    register_module("lstm", lstm);
    register_module("head", head);
  }
  Tensor forward(const Tensor& x) {
    Tensor out = lstm(x).output;  // [batch, time, 32]
    return head(out.select(1, kLength - 1)).squeeze(1);
  }
};

// Sequences of (value, marker); exactly two markers, one in each half.
std::pair<Tensor, Tensor> adding_batch(int64_t batch, Generator& gen) {
  Tensor values = rand({batch, kLength}, {}, &gen);
  Tensor first = randint(0, kLength / 2, {batch, 1}, {}, &gen);
  Tensor second = randint(kLength / 2, kLength, {batch, 1}, {}, &gen);
  Tensor steps = arange(0, kLength).unsqueeze(0);
  Tensor markers = logical_or(steps == first, steps == second).to(kFloat32);
  Tensor target = sum(values * markers, {1});
  return {stack({values, markers}, 2), target};
}

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 600;
  manual_seed(3);
  Generator gen(17);
  Adder net;
  optim::Adam opt(net.parameters(), {.lr = 1e-2});
  // Predicting the mean target (1) scores the target's variance, 1/6.
  std::printf("baseline loss (always predicting 1): %.4f\n", 1.0 / 6);
  for (int step = 1; step <= steps; ++step) {
    auto [x, y] = adding_batch(64, gen);
    opt.zero_grad();
    Tensor loss = F::mse_loss(net.forward(x), y);
    loss.backward();
    optim::clip_grad_norm_(net.parameters(), 1.0);
    opt.step();
    if (step % 100 == 0) std::printf("step %4d  loss %.5f\n", step, loss.item<double>());
  }
  auto [x, y] = adding_batch(1024, gen);
  double eval_loss = 0;
  {
    NoGradGuard no_grad;
    eval_loss = F::mse_loss(net.forward(x), y).item<double>();
  }
  std::printf("held-out loss %.5f (target < 0.01)\n", eval_loss);
  return eval_loss < 0.01 ? 0 : 1;
}
