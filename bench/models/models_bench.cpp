// kiln_bench_models: forward latency of the reference models (random
// weights, eval mode, inference mode), eager or through kiln::compile
// (--mode default or reduce-overhead), one configuration per run, as one JSON
// line. bench/models/models_vs_torch.py runs it beside PyTorch's models (eager
// or torch.compile) with the same thread count and prints the side-by-side
// table.
//
//   kiln_bench_models --model resnet50 --batch 8 --threads 2 --iters 20
//   kiln_bench_models --model resnet50 --device cuda --mode reduce-overhead
//   kiln_bench_models --model bert --mode default --freeze
//
// With a compiled mode the first call (trace, passes, lowering, the run and,
// for reduce-overhead and max-autotune, recording the CUDA graph; for
// max-autotune, timing the algorithms of shapes the autotune cache does not
// know yet) is reported apart as
// first_call_ms; it is not among the timed calls.
//
// On a CUDA device each timed call ends with a device synchronize, so the
// time covers the whole forward, host and device. peak_extra_mb is the
// device's (or the CPU allocator's) peak allocated memory over the run, less
// what the weights and inputs hold: the memory a call needs.
//
// Models: resnet50 (3x224x224), bert (BERT-base, token ids of --seq, default
// 128), lstm (LSTMNet, --seq steps of 256 features, default 128), lstm_loop
// (LSTMCellLoop, default 32 steps, as the anchors).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiln/kiln.h"

namespace {

struct Config {
  std::string model;
  int64_t batch = 1;
  int64_t seq = 0;  // 0: the model's default
  int threads = 0;  // 0: kiln's default
  int iters = 20;
  int warmup = 3;
  std::string device = "cpu";
  std::string mode = "eager";  // eager, default, reduce-overhead, max-autotune
  bool freeze = false;
};

// The model's forward on x, eager or compiled; f returns what the model
// returns (a tensor or a tuple of them).
template <typename F>
std::function<void()> forward_of(const Config& c, F f, kiln::Tensor x) {
  if (c.mode == "eager") return [f, x] { (void)f(x); };
  const kiln::Mode mode = c.mode == "reduce-overhead" ? kiln::Mode::ReduceOverhead
                          : c.mode == "max-autotune"  ? kiln::Mode::MaxAutotune
                                                      : kiln::Mode::Default;
  auto compiled = std::make_shared<kiln::Compiled<F>>(
      f, kiln::CompileOptions{.mode = mode, .freeze = c.freeze, .name = c.model});
  return [compiled, x] { (void)(*compiled)(x); };
}

// A forward call of the configured model on fixed inputs; the model and inputs
// live in the closure.
std::function<void()> make_forward(const Config& c) {
  using namespace kiln;
  manual_seed(0);
  const Device device = c.device == "cuda" ? Device::cuda() : Device::cpu();
  if (c.model == "resnet50") {
    std::shared_ptr<models::ResNet> net = models::resnet50();
    net->eval();
    net->to(device);
    Tensor images = randn({c.batch, 3, 224, 224}).to(device);
    return forward_of(c, [net](const Tensor& x) { return net->forward(x); }, images);
  }
  if (c.model == "bert") {
    auto net = std::make_shared<models::BertModel>(models::BertConfig{});
    net->eval();
    net->to(device);
    Tensor ids = randint(0, 30522, {c.batch, c.seq ? c.seq : 128}).to(device);
    return forward_of(
        c,
        [net](const Tensor& x) {
          models::BertOutput out = net->forward(x);
          return std::make_tuple(out.last_hidden_state, out.pooler_output);
        },
        ids);
  }
  if (c.model == "lstm") {
    auto net = std::make_shared<models::LSTMNet>();
    net->eval();
    net->to(device);
    Tensor x = randn({c.batch, c.seq ? c.seq : 128, 256}).to(device);
    return forward_of(c, [net](const Tensor& in) { return net->forward(in); }, x);
  }
  if (c.model == "lstm_loop") {
    auto net = std::make_shared<models::LSTMCellLoop>();
    net->eval();
    net->to(device);
    Tensor x = randn({c.batch, c.seq ? c.seq : 32, 256}).to(device);
    return forward_of(c, [net](const Tensor& in) { return net->forward(in); }, x);
  }
  throw kiln::ValueError("kiln_bench_models: unknown model '" + c.model +
                         "' (resnet50, bert, lstm, lstm_loop)");
}

int run(const Config& c) {
  if (c.threads > 0) kiln::set_num_threads(c.threads);
  kiln::InferenceModeGuard inference;
  const std::function<void()> model_forward = make_forward(c);
  const bool on_cuda = c.device == "cuda";
  const kiln::Device device = on_cuda ? kiln::Device::cuda() : kiln::Device::cpu();
  if (on_cuda) kiln::cuda::synchronize();
  const size_t resident = kiln::memory_stats(device).allocated_bytes;  // weights and inputs
  kiln::reset_peak_memory_stats(device);
  const std::function<void()> forward = [&] {
    model_forward();
    if (on_cuda) kiln::cuda::synchronize();
  };
  const auto first_start = std::chrono::steady_clock::now();
  forward();  // with --compile: trace, passes, lowering and a run
  const double first_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - first_start).count();
  for (int i = 0; i < c.warmup; ++i) forward();
  std::vector<double> ms;
  for (int i = 0; i < c.iters; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    forward();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  const size_t peak = kiln::memory_stats(device).peak_allocated_bytes;
  const double peak_extra_mb = static_cast<double>(peak > resident ? peak - resident : 0) / (1 << 20);
  const std::string mode = c.freeze ? c.mode + ", frozen" : c.mode;
  std::printf(
      "{\"framework\": \"kiln\", \"model\": \"%s\", \"device\": \"%s\", \"batch\": %lld, \"threads\": %d, "
      "\"iters\": %d, \"mode\": \"%s\", "
      "\"median_ms\": %.4f, \"min_ms\": %.4f, \"p90_ms\": %.4f, \"first_call_ms\": %.3f, "
      "\"peak_extra_mb\": %.2f}\n",
      c.model.c_str(), c.device.c_str(), static_cast<long long>(c.batch), kiln::get_num_threads(), c.iters,
      mode.c_str(), ms[ms.size() / 2], ms.front(), ms[ms.size() * 9 / 10], first_ms, peak_extra_mb);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  CLI::App app{"Eager forward latency of kiln's reference models"};
  app.add_option("--model", c.model, "resnet50, bert, lstm or lstm_loop")
      ->required()
      ->check(CLI::IsMember({"resnet50", "bert", "lstm", "lstm_loop"}));
  app.add_option("--batch", c.batch, "batch size")->check(CLI::Range(int64_t{1}, int64_t{4096}));
  app.add_option("--seq", c.seq, "sequence length (bert, lstm, lstm_loop)")
      ->check(CLI::Range(int64_t{1}, int64_t{512}));
  app.add_option("--threads", c.threads, "CPU threads (default: kiln's)")->check(CLI::Range(1, 1024));
  app.add_option("--iters", c.iters, "timed calls")->check(CLI::Range(1, 100000));
  app.add_option("--warmup", c.warmup, "untimed calls first")->check(CLI::Range(0, 100000));
  app.add_option("--device", c.device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--mode", c.mode, "eager, or kiln::compile's default, reduce-overhead or max-autotune mode")
      ->check(CLI::IsMember({"eager", "default", "reduce-overhead", "max-autotune"}));
  app.add_flag_callback("--compile", [&c] { c.mode = "default"; }, "the same as --mode default");
  app.add_flag("--freeze", c.freeze, "with a compiled mode: freeze the parameters (folds batch norms)");
  CLI11_PARSE(app, argc, argv);
  if (c.freeze && c.mode == "eager") {
    std::fprintf(stderr, "kiln_bench_models: --freeze needs a compiled mode (--mode default or reduce-overhead)\n");
    return 2;
  }
  try {
    return run(c);
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
