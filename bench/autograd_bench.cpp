// Autograd and training-step benchmarks: what recording a graph and running
// backward cost, as ratios to the forward-only time measured in the same run.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <string>

#include "autograd_bench.h"
#include "kiln/kiln.h"

namespace {

using namespace kiln;
namespace F = kiln::nn::functional;

constexpr int kChain = 32;  // ops per tiny-tensor chain

Tensor tiny_chain(const Tensor& x) {
  Tensor y = x;
  for (int i = 0; i < kChain / 2; ++i) y = (y * 1.0001) + 0.5;
  return y;
}

void BM_TinyChainForward(benchmark::State& state) {
  Tensor x = ones({4});
  NoGradGuard no_grad;
  for (auto _ : state) benchmark::DoNotOptimize(tiny_chain(x));
}
BENCHMARK(BM_TinyChainForward)->UseRealTime();

void BM_TinyChainRecorded(benchmark::State& state) {
  Tensor x = ones({4}).requires_grad_();
  for (auto _ : state) benchmark::DoNotOptimize(tiny_chain(x));
}
BENCHMARK(BM_TinyChainRecorded)->UseRealTime();

void BM_TinyChainBackward(benchmark::State& state) {
  Tensor x = ones({4}).requires_grad_();
  for (auto _ : state) {
    tiny_chain(x).sum().backward();
    x.set_grad({});
  }
}
BENCHMARK(BM_TinyChainBackward)->UseRealTime();

// A 784-256-256-10 MLP on a batch of 64, trained with plain SGD.
struct Mlp {
  Generator gen{7};
  Tensor w1 = (randn({256, 784}, {}, &gen) * 0.03).requires_grad_();
  Tensor b1 = zeros({256}).requires_grad_();
  Tensor w2 = (randn({256, 256}, {}, &gen) * 0.06).requires_grad_();
  Tensor b2 = zeros({256}).requires_grad_();
  Tensor w3 = (randn({10, 256}, {}, &gen) * 0.06).requires_grad_();
  Tensor b3 = zeros({10}).requires_grad_();
  Tensor x = randn({64, 784}, {}, &gen);
  Tensor y = randint(0, 10, {64}, {}, &gen);

  Tensor forward() const {
    Tensor h = relu(linear(x, w1, b1));
    h = relu(linear(h, w2, b2));
    return linear(h, w3, b3);
  }
  TensorList params() const { return {w1, b1, w2, b2, w3, b3}; }
};

// A small CNN (two conv + batch norm + relu blocks, pooling, a linear head) on
// 16 images of 3x32x32.
struct Cnn {
  Generator gen{8};
  Tensor c1 = (randn({16, 3, 3, 3}, {}, &gen) * 0.2).requires_grad_();
  Tensor g1 = ones({16}).requires_grad_();
  Tensor h1 = zeros({16}).requires_grad_();
  Tensor c2 = (randn({32, 16, 3, 3}, {}, &gen) * 0.08).requires_grad_();
  Tensor g2 = ones({32}).requires_grad_();
  Tensor h2 = zeros({32}).requires_grad_();
  Tensor w = (randn({10, 32}, {}, &gen) * 0.2).requires_grad_();
  Tensor b = zeros({10}).requires_grad_();
  Tensor x = randn({16, 3, 32, 32}, {}, &gen);
  Tensor y = randint(0, 10, {16}, {}, &gen);

  Tensor forward() const {
    Tensor t = conv2d(x, c1, {}, {.padding = {1}});
    t = relu(F::batch_norm(t, {}, {}, g1, h1, true));
    t = max_pool2d(t, {2});
    t = conv2d(t, c2, {}, {.padding = {1}});
    t = relu(F::batch_norm(t, {}, {}, g2, h2, true));
    t = adaptive_avg_pool2d(t, {1}).flatten(1);
    return linear(t, w, b);
  }
  TensorList params() const { return {c1, g1, h1, c2, g2, h2, w, b}; }
};

template <typename Model>
void BM_Forward(benchmark::State& state) {
  Model m;
  NoGradGuard no_grad;
  for (auto _ : state) benchmark::DoNotOptimize(m.forward());
}

template <typename Model>
void BM_TrainStep(benchmark::State& state) {
  Model m;
  for (auto _ : state) {
    Tensor loss = F::cross_entropy(m.forward(), m.y);
    loss.backward();
    NoGradGuard no_grad;
    for (Tensor& p : m.params()) {
      p.sub_(p.grad() * 0.01);
      p.set_grad({});
    }
  }
}

BENCHMARK(BM_Forward<Mlp>)->Name("BM_MlpForward")->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TrainStep<Mlp>)->Name("BM_MlpTrainStep")->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Forward<Cnn>)->Name("BM_CnnForward")->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TrainStep<Cnn>)->Name("BM_CnnTrainStep")->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace

namespace kiln::bench {

void print_autograd_overheads(const RatioReporter& r, std::ostream& os) {
  const double fwd = r.time_ns("BM_TinyChainForward/real_time") / kChain;
  const double rec = r.time_ns("BM_TinyChainRecorded/real_time") / kChain;
  const double bwd = r.time_ns("BM_TinyChainBackward/real_time") / kChain;
  os << "\nautograd on 4-element tensors, per op of a " << kChain << "-op chain:\n";
  char line[160];
  std::snprintf(line, sizeof line, "  %-40s %8.0f ns\n", "forward, not recorded", fwd);
  os << line;
  std::snprintf(line, sizeof line, "  %-40s %8.0f ns  (%.2fx forward)\n",
                "forward, recorded (node creation)", rec, rec / fwd);
  os << line;
  std::snprintf(line, sizeof line, "  %-40s %8.0f ns  (%.2fx forward)\n",
                "forward + backward (engine)", bwd, bwd / fwd);
  os << line;
  os << "training step (forward, loss, backward, SGD update) vs forward alone:\n";
  for (const char* model : {"Mlp", "Cnn"}) {
    const double f = r.time_ns(std::string("BM_") + model + "Forward/real_time");
    const double t = r.time_ns(std::string("BM_") + model + "TrainStep/real_time");
    std::snprintf(line, sizeof line, "  %-40s %8.0f us  (%.2fx forward, %8.0f us)\n",
                  model == std::string("Mlp") ? "MLP 784-256-256-10, batch 64"
                                              : "CNN 2 conv blocks, 16x3x32x32",
                  t / 1000, t / f, f / 1000);
    os << line;
  }
}

}  // namespace kiln::bench
