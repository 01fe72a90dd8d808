// Pointwise chains compiled (one generated kernel) against the same chains
// run eagerly (one library kernel per op), in the same run: the ratio table
// of ops_bench.cpp holds them side by side.
#include <benchmark/benchmark.h>

#include "kiln/kiln.h"

namespace {

using namespace kiln;

// Memory-bound: five cheap ops over a [rows, 1024] tensor and a row bias.
Tensor cheap_chain(const Tensor& x, const Tensor& b) { return ((x * 0.5 + b) * 2.0 - 1.0).relu(); }
// Compute-bound: gelu (erfc) then tanh (exp) between scalings.
Tensor heavy_chain(const Tensor& x, const Tensor& b) { return gelu(x * 0.5 + b).tanh() * 2.0; }

template <Tensor (*kChain)(const Tensor&, const Tensor&), bool kCompiled>
void BM_Chain(benchmark::State& state) {
  NoGradGuard no_grad;
  const int64_t rows = state.range(0) / 1024;
  const Tensor x = randn({rows, 1024}), b = randn({1024});
  const auto compiled = compile(kChain, {.name = "chain"});
  for (auto _ : state) {
    Tensor y = kCompiled ? compiled(x, b) : kChain(x, b);
    benchmark::DoNotOptimize(y.data_ptr());
  }
  state.SetItemsProcessed(state.iterations() * rows * 1024);
}

#define KILN_CHAIN_BENCHMARK(chain, compiled, name, n) \
  BENCHMARK(BM_Chain<chain, compiled>)                 \
      ->Name(name)                                     \
      ->Arg(n)                                         \
      ->UseRealTime()                                  \
      ->Unit(benchmark::kMicrosecond)                  \
      ->Repetitions(3)                                 \
      ->ReportAggregatesOnly(true)

KILN_CHAIN_BENCHMARK(cheap_chain, false, "BM_CheapChainEager", int64_t{1} << 24);
KILN_CHAIN_BENCHMARK(cheap_chain, true, "BM_CheapChainCompiled", int64_t{1} << 24);
KILN_CHAIN_BENCHMARK(heavy_chain, false, "BM_HeavyChainEager", int64_t{1} << 20);
KILN_CHAIN_BENCHMARK(heavy_chain, true, "BM_HeavyChainCompiled", int64_t{1} << 20);

}  // namespace
