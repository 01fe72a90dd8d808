// kiln::bench::evaluate on small functions and modules, on the CPU (and on a
// GPU where there is one).
#include <gtest/gtest.h>

#include <cmath>

#include "kiln/bench.h"
#include "kiln/kiln.h"

namespace kiln::bench {
namespace {

struct Mlp : nn::Module {
  nn::Linear fc1{16, 32}, fc2{32, 4};
  Mlp() {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }
  Tensor forward(const Tensor& x) { return fc2(relu(fc1(x))); }
};

Options quick(std::vector<std::string> modes = {}) {
  Options o;
  o.modes = std::move(modes);
  o.iters = 7;
  o.warmup = 1;
  return o;
}

TEST(KernelLaunches, EachEagerKernelCountsOnce) {
  const Tensor a = randn({4, 4});
  const Tensor b = randn({4, 4});
  const int64_t before = kernel_launches();
  const Tensor c = a + b;
  EXPECT_EQ(kernel_launches() - before, 1);
  const Tensor v = c.view({16});  // a view runs no kernel
  EXPECT_EQ(kernel_launches() - before, 1);
  (void)v.relu();
  EXPECT_EQ(kernel_launches() - before, 2);
}

TEST(BenchEvaluate, MeasuresAModuleEagerAndCompiled) {
  manual_seed(0);
  Mlp net;
  net.eval();
  InferenceModeGuard inference;
  const Tensor x = randn({8, 16});
  std::vector<std::string> stages;
  std::vector<double> fractions;
  std::vector<std::string> output_modes;
  Options o = quick();
  o.name = "mlp";
  o.on_progress = [&](const Progress& p) {
    stages.push_back(p.stage);
    fractions.push_back(p.fraction);
  };
  o.on_outputs = [&](const std::string& mode, const std::vector<Tensor>& outs) {
    output_modes.push_back(mode);
    ASSERT_EQ(outs.size(), 1u);
    EXPECT_EQ(outs[0].sizes(), (Shape{8, 4}));
  };
  const Case c = evaluate(net, std::tuple{x}, o);
  EXPECT_EQ(c.model, "mlp");
  EXPECT_EQ(c.batch, 8);
  EXPECT_EQ(c.dtype, "fp32");
  EXPECT_EQ(c.device, "cpu");
  EXPECT_EQ(c.weights_bytes, (16 * 32 + 32 + 32 * 4 + 4) * 4);
  EXPECT_EQ(c.input_bytes, 8 * 16 * 4);
  ASSERT_EQ(c.results.size(), 2u);  // the CPU's modes: eager and default
  EXPECT_EQ(output_modes, (std::vector<std::string>{"eager", "default"}));

  const Result& eager = c.results[0];
  EXPECT_EQ(eager.mode, "eager");
  EXPECT_EQ(eager.framework, "kiln");
  EXPECT_EQ(eager.graphs, 0);
  EXPECT_EQ(eager.first_call.trace_ms, -1);
  EXPECT_GT(eager.first_call.total_ms, 0);
  // linear, relu, linear: one kernel each.
  EXPECT_DOUBLE_EQ(eager.launches_per_call, 3);
  EXPECT_EQ(eager.generated_kernels, 0);
  EXPECT_DOUBLE_EQ(eager.speedup_vs_eager, 1);

  const Result& compiled = c.results[1];
  EXPECT_EQ(compiled.mode, "default");
  EXPECT_EQ(compiled.graphs, 1);
  EXPECT_EQ(compiled.graph_breaks, 0);
  EXPECT_EQ(compiled.recompiles, 0);
  EXPECT_LE(compiled.launches_per_call, 3);
  EXPECT_GT(compiled.launches_per_call, 0);
  EXPECT_LE(compiled.max_abs_error, 1e-6);
  EXPECT_GT(compiled.first_call.trace_ms, 0);  // measured (eager's is -1)
  EXPECT_GT(compiled.first_call.run_ms, 0);
  // linear, relu, linear: no pointwise group, no kernel to generate.
  EXPECT_EQ(compiled.generated_kernels, 0);
  EXPECT_EQ(compiled.first_call.codegen_ms, 0);
  EXPECT_NEAR(compiled.first_call.trace_ms + compiled.first_call.passes_ms +
                  compiled.first_call.build_ms + compiled.first_call.run_ms,
              compiled.first_call.total_ms, 1e-9 + 1e-6 * compiled.first_call.total_ms);
  EXPECT_DOUBLE_EQ(compiled.speedup_vs_eager, eager.latency_ms.median / compiled.latency_ms.median);
  EXPECT_EQ(compiled.speedup_vs_torch_eager, -1);

  for (const Result& r : c.results) {
    const Latency& l = r.latency_ms;
    EXPECT_EQ(l.samples, 7);
    EXPECT_LE(l.min, l.p10);
    EXPECT_LE(l.p10, l.median);
    EXPECT_LE(l.median, l.p90);
    EXPECT_LE(l.p90, l.p99);
    EXPECT_LE(l.p99, l.max);
    EXPECT_NEAR(r.throughput, 8 * 1000 / l.median, 1e-9 * r.throughput);
    EXPECT_GE(r.peak_bytes, 8 * 4 * 4) << r.mode;  // at least the [8, 4] float output
  }
  ASSERT_FALSE(fractions.empty());
  for (size_t i = 1; i < fractions.size(); ++i) EXPECT_LE(fractions[i - 1], fractions[i]);
  EXPECT_DOUBLE_EQ(fractions.back(), 1.0);
  EXPECT_EQ(stages.front(), "eager: first call");
}

TEST(BenchEvaluate, ReportsGraphBreaksOfACallable) {
  InferenceModeGuard inference;
  const Tensor x = randn({4, 3});
  const Case c = evaluate(
      [](const Tensor& t, double scale) {
        Tensor y = t * scale;
        if (y.sum().item<float>() > 0) return y.relu();  // a graph break
        return y.neg();
      },
      std::tuple{x, 2.0}, quick({"default"}));
  ASSERT_EQ(c.results.size(), 2u);  // eager comes first even when not asked for
  EXPECT_EQ(c.results[0].mode, "eager");
  const Result& r = c.results[1];
  EXPECT_EQ(r.graph_breaks, 1);
  EXPECT_EQ(r.graphs, 2);
  EXPECT_EQ(r.max_abs_error, 0);
  EXPECT_EQ(c.batch, 4);
}

TEST(BenchEvaluate, RejectsBadOptions) {
  const Tensor x = randn({2, 2});
  auto f = [](const Tensor& t) { return t + 1; };
  Options o = quick({"reduce-overhead"});
  try {
    (void)evaluate(f, std::tuple{x}, o);
    FAIL() << "no error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("mode 'reduce-overhead'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("cpu"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)evaluate(f, std::tuple{x}, quick({"fast"})), ValueError);
  Options none = quick();
  none.iters = 0;
  EXPECT_THROW((void)evaluate(f, std::tuple{x}, none), ValueError);
}

TEST(BenchEvaluate, ComparesOutputsAsDocumented) {
  const Tensor ref = from_vector<float>({1, -4, 2});
  const Tensor got = from_vector<float>({1, -3.5, 2});
  auto e = detail::compare_outputs({got, ref}, {ref, ref});
  EXPECT_DOUBLE_EQ(e.abs, 0.5);
  EXPECT_DOUBLE_EQ(e.rel, 0.125);  // over the reference's largest magnitude, 4
  EXPECT_TRUE(e.note.empty());
  e = detail::compare_outputs({got}, {ref, ref});
  EXPECT_TRUE(std::isinf(e.abs));
  EXPECT_NE(e.note.find("1 outputs"), std::string::npos);
  e = detail::compare_outputs({got.view({3, 1})}, {ref});
  EXPECT_TRUE(std::isinf(e.rel));
  EXPECT_NE(e.note.find("shape"), std::string::npos);
  const Tensor nan = from_vector<float>({1, std::nanf(""), 2});
  EXPECT_TRUE(std::isinf(detail::compare_outputs({nan}, {ref}).abs));
}

TEST(BenchEvaluate, CudaModesRunCudaGraphs) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device: " << cuda::unavailable_reason();
  manual_seed(0);
  Mlp net;
  net.eval();
  net.to(Device::cuda());
  InferenceModeGuard inference;
  const Case c = evaluate(net, std::tuple{randn({8, 16}).to(Device::cuda())}, quick());
  ASSERT_EQ(c.results.size(), 4u);
  EXPECT_EQ(c.device, "cuda:0");
  const Result* ro = c.find("kiln", "reduce-overhead");
  ASSERT_NE(ro, nullptr);
  EXPECT_DOUBLE_EQ(ro->launches_per_call, 1);  // one CUDA graph
  EXPECT_EQ(ro->note, "");
  EXPECT_LE(ro->max_abs_error, 1e-5);
  EXPECT_NE(c.find("kiln", "max-autotune"), nullptr);
}

}  // namespace
}  // namespace kiln::bench
