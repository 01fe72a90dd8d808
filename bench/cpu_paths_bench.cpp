// The size thresholds of the CPU backend, each side measured at sizes around
// it: where the backend picks a path by a row count, an element count or a
// product size, both paths run on the same operands, so the threshold can be
// put where they cross (docs/benchmarks.md, "Size thresholds of the CPU
// backend"). `kiln_bench_ops --benchmark_filter=Path`.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <oneapi/dnnl/dnnl.h>

#include <vector>

#include "backends/cpu/onednn_gemm.h"
#include "backends/cpu/onednn_matmul.h"
#include "kiln/kiln.h"

namespace {

using namespace kiln;
using backend::cpu::MatrixRef;

// --- linear: x [m, k] @ W^T, W [n, k]: sgemm reading W transposed, the matmul
// primitive reading it in place, the primitive on a reordered, cached copy,
// and the linear op itself (whatever path it takes). Each call takes the next
// of weights worth 64 MiB, so that they come from memory, as a model's layers
// do, not from a cache that one layer's weight would fit --------------------

constexpr int64_t kWeightBytes = int64_t{64} << 20;

struct LinearOperands {
  Tensor x, y;
  std::vector<Tensor> weights;
  size_t next = 0;
  explicit LinearOperands(const benchmark::State& state)
      : x(randn({state.range(0), state.range(2)})), y(empty({state.range(0), state.range(1)})) {
    const int64_t bytes = state.range(1) * state.range(2) * 4;
    for (int64_t total = 0; total < kWeightBytes; total += bytes)
      weights.push_back(randn({state.range(1), state.range(2)}));
  }
  const Tensor& w() { return weights[next++ % weights.size()]; }
  int64_t m() const { return x.size(0); }
  int64_t n() const { return y.size(1); }
  int64_t k() const { return x.size(1); }
};

void BM_PathLinearSgemmT(benchmark::State& state) {
  LinearOperands o(state);
  for (auto _ : state) {
    dnnl_sgemm('N', 'T', o.m(), o.n(), o.k(), 1.f, o.x.data<float>(), o.k(), o.w().data<float>(),
               o.k(), 0.f, o.y.data<float>(), o.n());
    benchmark::ClobberMemory();
  }
}

// The same through sgemm on W^T made contiguous (cached_transposed_weight),
// linear's path for an input that is not contiguous.
void BM_PathLinearSgemmTransposedCopy(benchmark::State& state) {
  LinearOperands o(state);
  for (Tensor& w : o.weights) w = w.t().contiguous();
  for (auto _ : state) {
    dnnl_sgemm('N', 'N', o.m(), o.n(), o.k(), 1.f, o.x.data<float>(), o.k(), o.w().data<float>(),
               o.n(), 0.f, o.y.data<float>(), o.n());
    benchmark::ClobberMemory();
  }
}

void BM_PathLinearPrimitiveT(benchmark::State& state) {
  LinearOperands o(state);
  for (auto _ : state) {
    backend::cpu::gemm_f32_primitive({o.x.data<float>(), o.m(), o.k(), o.k(), 1},
                                     {o.w().data<float>(), o.k(), o.n(), 1, o.k()},
                                     o.y.data<float>(), o.n(), 1.f, 0.f);
    benchmark::ClobberMemory();
  }
}

void BM_PathLinearCachedPrimitive(benchmark::State& state) {
  LinearOperands o(state);
  InferenceModeGuard inference;
  for (auto _ : state) {
    backend::cpu::linear_f32_primitive(o.x.data<float>(), o.m(), o.k(), o.w(), nullptr,
                                       o.y.data<float>());
    benchmark::ClobberMemory();
  }
}

void BM_PathLinearOp(benchmark::State& state) {
  LinearOperands o(state);
  const Tensor bias = randn({o.n()});
  InferenceModeGuard inference;
  for (auto _ : state) {
    Tensor y = linear(o.x, o.w(), bias);
    benchmark::DoNotOptimize(y.data_ptr());
  }
}

// Rows around the 16-row thresholds, at BERT-base's three weight shapes and
// two weights around the cache's 64K-element threshold.
void linear_args(benchmark::internal::Benchmark* b) {
  for (const auto& [n, k] : std::vector<std::pair<int64_t, int64_t>>{
           {768, 768}, {3072, 768}, {768, 3072}, {128, 256}, {256, 256}}) {
    for (const int64_t m : {1, 2, 4, 8, 12, 15, 16, 24, 32, 64, 128}) b->Args({m, n, k});
  }
  b->ArgNames({"m", "n", "k"})->UseRealTime()->Unit(benchmark::kMicrosecond)->MinTime(0.2);
  b->Repetitions(5)->ReportAggregatesOnly(true);
}
BENCHMARK(BM_PathLinearSgemmT)->Apply(linear_args);
BENCHMARK(BM_PathLinearSgemmTransposedCopy)->Apply(linear_args);
BENCHMARK(BM_PathLinearPrimitiveT)->Apply(linear_args);
BENCHMARK(BM_PathLinearCachedPrimitive)->Apply(linear_args);
BENCHMARK(BM_PathLinearOp)->Apply(linear_args);

// --- batched products: one thread per product (each sgemm single-threaded
// inside the parallel region) against the products in turn, each with every
// thread. kiln takes the first below 64^3 multiply-adds per product --------

struct BatchOperands {
  Tensor a, b, c;
  explicit BatchOperands(const benchmark::State& state)
      : a(randn({state.range(0), state.range(1), state.range(1)})),
        b(randn({state.range(0), state.range(1), state.range(1)})),
        c(empty({state.range(0), state.range(1), state.range(1)})) {}
  void one(int64_t i) const {
    const int64_t s = a.size(1);
    backend::cpu::gemm_f32({a.data<float>() + i * s * s, s, s, s, 1},
                           {b.data<float>() + i * s * s, s, s, s, 1}, c.data<float>() + i * s * s,
                           s, 1.f, 0.f);
  }
};

void BM_PathBatchPerThread(benchmark::State& state) {
  const BatchOperands o(state);
  for (auto _ : state) {
#pragma omp parallel for
    for (int64_t i = 0; i < state.range(0); ++i) o.one(i);
    benchmark::ClobberMemory();
  }
}

void BM_PathBatchInTurn(benchmark::State& state) {
  const BatchOperands o(state);
  for (auto _ : state) {
    for (int64_t i = 0; i < state.range(0); ++i) o.one(i);
    benchmark::ClobberMemory();
  }
}

void batch_args(benchmark::internal::Benchmark* b) {
  for (const int64_t count : {2, 12})
    for (const int64_t s : {16, 32, 48, 63, 64, 80, 96, 128, 192, 256}) b->Args({count, s});
  b->ArgNames({"count", "size"})->UseRealTime()->Unit(benchmark::kMicrosecond)->MinTime(0.05);
  b->Repetitions(5)->ReportAggregatesOnly(true);
}
BENCHMARK(BM_PathBatchPerThread)->Apply(batch_args);
BENCHMARK(BM_PathBatchInTurn)->Apply(batch_args);

// --- one thread against every thread: float64 matmul (kiln stays on one
// below 2^20 multiply-adds) and elementwise add (below kParallelGrain, 32768
// elements). The second argument is the thread count --------------------------

class ThreadCount {
 public:
  explicit ThreadCount(int n) : saved_(get_num_threads()) { set_num_threads(n); }
  ~ThreadCount() { set_num_threads(saved_); }

 private:
  int saved_;
};

void BM_PathMatmulF64(benchmark::State& state) {
  const int64_t s = state.range(0);
  const Tensor a = randn({s, s}, {.dtype = kFloat64}), b = randn({s, s}, {.dtype = kFloat64});
  const ThreadCount threads(static_cast<int>(state.range(1)));
  for (auto _ : state) {
    Tensor c = matmul(a, b);
    benchmark::DoNotOptimize(c.data_ptr());
  }
}
BENCHMARK(BM_PathMatmulF64)
    ->ArgsProduct({{48, 64, 80, 101, 128, 160}, {1, 2}})
    ->ArgNames({"size", "threads"})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond)
    ->MinTime(0.05)
    ->Repetitions(5)
    ->ReportAggregatesOnly(true);

void BM_PathAdd(benchmark::State& state) {
  const Tensor a = randn({state.range(0)}), b = randn({state.range(0)});
  const ThreadCount threads(static_cast<int>(state.range(1)));
  for (auto _ : state) {
    Tensor c = a + b;
    benchmark::DoNotOptimize(c.data_ptr());
  }
}
BENCHMARK(BM_PathAdd)
    ->ArgsProduct({{4096, 8192, 16384, 32768, 65536, 131072}, {1, 2}})
    ->ArgNames({"n", "threads"})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond)
    ->MinTime(0.05)
    ->Repetitions(5)
    ->ReportAggregatesOnly(true);

// --- attention at BERT-base's shapes (12 heads of 64), queries around the
// 16..64-row blocks ----------------------------------------------------------

void BM_PathAttention(benchmark::State& state) {
  const int64_t l = state.range(0);
  const Tensor q = randn({1, 12, l, 64}), k = randn({1, 12, l, 64}), v = randn({1, 12, l, 64});
  InferenceModeGuard inference;
  for (auto _ : state) {
    Tensor y = nn::functional::scaled_dot_product_attention(q, k, v);
    benchmark::DoNotOptimize(y.data_ptr());
  }
}
BENCHMARK(BM_PathAttention)
    ->DenseRange(4, 36, 4)
    ->Arg(64)
    ->Arg(65)
    ->Arg(128)
    ->ArgName("queries")
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond)
    ->MinTime(0.05)
    ->Repetitions(5)
    ->ReportAggregatesOnly(true);

}  // namespace
