// kiln_bench_cuda: the CUDA backend's op-level figures, one JSON line each,
// for bench/cuda/cuda_vs_torch.py to set beside PyTorch's:
//   - host time per eager op on tiny tensors (a + b on one element, queued
//     without waiting; the device catches up at the end),
//   - host time per call of a compiled function of tiny tensors ((a + b) * 2)
//     in reduce-overhead mode: a cache hit, the guard check and the launch;
//     queued back to back (where the device's pace can bound it), and in
//     bursts of 50 calls that the device keeps up with (the host's own cost),
//   - matmul of 4096 x 4096 x 4096 in float32 (no TF32) and bfloat16,
//   - a + b on 64M floats (bandwidth-bound),
//   - scaled_dot_product_attention at BERT-base's shapes (12 heads, 128
//     tokens, head dim 64, an additive padding mask [N, 1, 1, 128]) for
//     batches 1, 8 and 32,
//   - batch_norm in eval mode at ResNet-50's largest and smallest maps,
//   - a compiled default-mode conv2d + bias + residual add + relu at
//     ResNet-50's first stage (batch 1, 64 channels, 56 x 56, 3 x 3), its
//     ops apart and as cuDNN's fused call (KILN_CUDA_PREVIEW): host time
//     per call in bursts, and device time.
// Device times come from CUDA events around the timed calls (medians of runs).
//
//   kiln_bench_cuda [--iters 20]
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "kiln/kiln.h"

namespace {

using namespace kiln;

// Median milliseconds of one call of f over `iters` runs, timed by events.
double device_ms(const std::function<void()>& f, int iters) {
  f();
  cuda::synchronize();
  std::vector<double> ms;
  for (int i = 0; i < iters; ++i) {
    cuda::Event start(true), end(true);
    start.record();
    f();
    end.record();
    end.synchronize();
    ms.push_back(start.elapsed_ms(end));
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// Median host microseconds per call of f over `runs` runs of `calls` calls
// queued back to back, each run followed by a synchronize that is not timed.
// 5 runs of 20000: the device's pace can bound it; 200 runs of 50: the device
// keeps up, and the host's own cost shows.
double host_us(const std::function<void()>& f, int calls = 20000, int runs = 5) {
  for (int i = 0; i < 1000; ++i) f();
  cuda::synchronize();
  std::vector<double> us;
  for (int r = 0; r < runs; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) f();
    const auto t1 = std::chrono::steady_clock::now();
    cuda::synchronize();
    us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / calls);
  }
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

void emit(const std::string& name, double value, const std::string& unit) {
  std::printf("{\"framework\": \"kiln\", \"name\": \"%s\", \"value\": %.6g, \"unit\": \"%s\"}\n",
              name.c_str(), value, unit.c_str());
  std::fflush(stdout);
}

int run(int iters) {
  if (!cuda::is_available()) throw DeviceError("kiln_bench_cuda: " + cuda::unavailable_reason());
  const Device dev = Device::cuda();
  set_allow_tf32({.matmul = false, .conv = true});
  {
    // Host time per op: many tiny adds queued back to back.
    const Tensor a = ones({1}, {.dtype = kFloat32, .device = dev}),
                 b = ones({1}, {.dtype = kFloat32, .device = dev});
    emit("host_us_per_tiny_add", host_us([&] { (void)(a + b); }), "us");
    const auto compiled = compile([](const Tensor& x, const Tensor& y) { return (x + y) * 2.0; },
                                  {.mode = Mode::ReduceOverhead});
    emit("host_us_per_compiled_call", host_us([&] { (void)compiled(a, b); }), "us");
    emit("host_us_per_compiled_call_in_bursts", host_us([&] { (void)compiled(a, b); }, 50, 200),
         "us");
    // A module's call also checks its parameters' slots and its modules'
    // training flags (4 batch norms, 8 parameters, 12 buffers here).
    nn::Sequential net(std::make_shared<nn::Linear>(16, 16), std::make_shared<nn::BatchNorm1d>(16),
                       std::make_shared<nn::Linear>(16, 16), std::make_shared<nn::BatchNorm1d>(16),
                       std::make_shared<nn::Linear>(16, 16), std::make_shared<nn::BatchNorm1d>(16),
                       std::make_shared<nn::Linear>(16, 16), std::make_shared<nn::BatchNorm1d>(16));
    net.eval();
    net.to(dev);
    NoGradGuard no_grad;
    const Tensor x = ones({2, 16}, {.dtype = kFloat32, .device = dev});
    const auto module = compile(net, {.mode = Mode::ReduceOverhead});
    emit("host_us_per_compiled_module_call_in_bursts", host_us([&] { (void)module(x); }, 50, 200),
         "us");
  }
  for (DType t : {kFloat32, kBFloat16}) {
    const int64_t n = 4096;
    Generator g(0);
    const Tensor a = randn({n, n}, {}, &g).to(t).to(dev), b = randn({n, n}, {}, &g).to(t).to(dev);
    const double ms = device_ms([&] { (void)matmul(a, b); }, iters);
    emit(std::string("matmul_4096_") + (t == kFloat32 ? "fp32" : "bf16"), ms, "ms");
  }
  {
    const int64_t n = int64_t{1} << 26;
    const Tensor a = ones({n}, {.dtype = kFloat32, .device = dev}),
                 b = ones({n}, {.dtype = kFloat32, .device = dev});
    emit("add_64M_fp32", device_ms([&] { (void)(a + b); }, iters), "ms");
  }
  namespace F = nn::functional;
  for (int64_t batch : {1, 8, 32}) {
    Generator g(0);
    const Tensor q = randn({batch, 12, 128, 64}, {}, &g).to(dev),
                 k = randn({batch, 12, 128, 64}, {}, &g).to(dev),
                 v = randn({batch, 12, 128, 64}, {}, &g).to(dev);
    const Tensor mask = zeros({batch, 1, 1, 128}, {.dtype = kFloat32, .device = dev});
    emit("sdpa_bert_b" + std::to_string(batch),
         device_ms([&] { (void)F::scaled_dot_product_attention(q, k, v, {.attn_mask = mask}); },
                   iters),
         "ms");
  }
  for (const Shape& shape :
       {Shape{32, 64, 112, 112}, Shape{32, 2048, 7, 7}, Shape{1, 2048, 7, 7}}) {
    Generator g(0);
    const Tensor x = randn(shape, {}, &g).to(dev);
    const int64_t ch = shape[1];
    const Tensor mean = randn({ch}, {}, &g).to(dev), var = rand({ch}, {}, &g).to(dev) + 0.5,
                 w = randn({ch}, {}, &g).to(dev), b = randn({ch}, {}, &g).to(dev);
    std::string name = "batch_norm_eval";
    for (int64_t d : shape) name += "_" + std::to_string(d);
    emit(name, device_ms([&] { (void)F::batch_norm(x, mean, var, w, b, false); }, iters), "ms");
  }
  {
    // A residual block's tail, compiled in default mode: the fused call's
    // worth is its device time less its host cost, which shows without a
    // CUDA graph to hide it.
    Generator g(0);
    const Tensor x = randn({1, 64, 56, 56}, {}, &g).to(dev),
                 r = randn({1, 64, 56, 56}, {}, &g).to(dev),
                 w = randn({64, 64, 3, 3}, {}, &g).to(dev), b = randn({64}, {}, &g).to(dev);
    NoGradGuard no_grad;
    const auto block = [&](const Tensor& a, const Tensor& res) {
      Tensor y = conv2d(a, w, b, {.padding = {1, 1}});
      y += res;
      return y.relu_();
    };
    const char* before = std::getenv("KILN_CUDA_PREVIEW");
    const std::string saved = before ? before : "";
    for (const bool fused : {false, true}) {
      // The gate is read when a graph is lowered: each compiled function
      // below lowers its graph under its own setting.
      setenv("KILN_CUDA_PREVIEW", fused ? "1" : "0", 1);
      const auto compiled = compile(block, {.name = fused ? "conv_fused" : "conv_apart"});
      (void)compiled(x, r);
      const std::string how = fused ? "fused" : "apart";
      emit("host_us_per_conv_add_relu_" + how + "_in_bursts",
           host_us([&] { (void)compiled(x, r); }, 50, 200), "us");
      emit("conv_add_relu_1_64_56_56_" + how, device_ms([&] { (void)compiled(x, r); }, iters),
           "ms");
    }
    if (before) {
      setenv("KILN_CUDA_PREVIEW", saved.c_str(), 1);
    } else {
      unsetenv("KILN_CUDA_PREVIEW");
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 20;
  CLI::App app{"CUDA op figures of kiln"};
  app.add_option("--iters", iters, "timed calls per figure")->check(CLI::Range(1, 100000));
  CLI11_PARSE(app, argc, argv);
  try {
    return run(iters);
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
