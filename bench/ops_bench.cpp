// kiln's op microbenchmarks, each set beside the bound it is judged against,
// measured in the same run: memory-bound ops against memcpy of the same bytes,
// matmul against oneDNN's sgemm, convolution against a direct oneDNN primitive,
// pointwise chains compiled into one generated kernel against eager
// (codegen_bench.cpp).
#include <benchmark/benchmark.h>
#include <omp.h>

#include <oneapi/dnnl/dnnl.h>

#include <cstring>
#include <iostream>
#include <oneapi/dnnl/dnnl.hpp>

#include "autograd_bench.h"
#include "kiln/kiln.h"
#include "kiln/library.h"
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
BENCHMARK(BM_Memcpy)
    ->Arg(kBigN)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond)
    ->Repetitions(3)
    ->ReportAggregatesOnly(true);

template <bool kMul>
void BM_Binary(benchmark::State& state) {
  Tensor a = randn({state.range(0)}), b = randn({state.range(0)});
  for (auto _ : state) {
    Tensor c = kMul ? a * b : a + b;
    benchmark::DoNotOptimize(c.data_ptr());
  }
  state.SetBytesProcessed(
      static_cast<int64_t>(state.iterations() * 3 * state.range(0) * sizeof(float)));
}
BENCHMARK(BM_Binary<false>)
    ->Name("BM_Add")
    ->Arg(kBigN)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond)
    ->Repetitions(3)
    ->ReportAggregatesOnly(true);
BENCHMARK(BM_Binary<true>)
    ->Name("BM_Mul")
    ->Arg(kBigN)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond)
    ->Repetitions(3)
    ->ReportAggregatesOnly(true);

// Host time of one eager op on one-element tensors: dispatch, shape rule,
// allocation, kernel call.
void BM_DispatchAddOneElement(benchmark::State& state) {
  Tensor a = ones({1}), b = ones({1});
  for (auto _ : state) {
    Tensor c = a + b;
    benchmark::DoNotOptimize(c.data_ptr());
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}
BENCHMARK(BM_DispatchAddOneElement);

// The same add as a custom op (include/kiln/library.h): the registry's
// lookups, the user's shape rule and kernel through std::function. It should
// cost no more than the built-in op.
const library::Op& custom_add() {
  static const library::Op op = [] {
    library::OpDef d;
    d.name = "bench::add";
    d.inputs = {"a", "b"};
    d.shape = [](library::ShapeContext& ctx) {
      if (ctx.sizes(0) != ctx.sizes(1) || ctx.dtype(0) != kFloat32 || ctx.dtype(1) != kFloat32)
        throw ShapeError("bench::add: two float32 tensors of one shape");
      ctx.add_output_like(0);
    };
    d.cpu = [](const library::KernelContext& ctx) {
      const auto* a = static_cast<const float*>(ctx.input(0).data_ptr());
      const auto* b = static_cast<const float*>(ctx.input(1).data_ptr());
      auto* c = static_cast<float*>(ctx.output(0).data_ptr());
      for (int64_t i = 0; i < ctx.output(0).numel(); ++i) c[i] = a[i] + b[i];
    };
    return library::define_op(std::move(d));
  }();
  return op;
}

void BM_DispatchCustomAddOneElement(benchmark::State& state) {
  Tensor a = ones({1}), b = ones({1});
  const library::Op& add = custom_add();
  for (auto _ : state) {
    Tensor c = add.one({a, b});
    benchmark::DoNotOptimize(c.data_ptr());
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}
BENCHMARK(BM_DispatchCustomAddOneElement);

// --- softmax and layer_norm over 4096-wide rows, against memcpy of the same bytes -----
constexpr int64_t kRowWidth = 4096;

void BM_Softmax(benchmark::State& state) {
  Tensor x = randn({state.range(0) / kRowWidth, kRowWidth});
  for (auto _ : state) {
    Tensor y = softmax(x, -1);
    benchmark::DoNotOptimize(y.data_ptr());
  }
  state.SetBytesProcessed(
      static_cast<int64_t>(state.iterations() * 2 * state.range(0) * sizeof(float)));
}
BENCHMARK(BM_Softmax)
    ->Arg(kBigN)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond)
    ->Repetitions(3)
    ->ReportAggregatesOnly(true);

void BM_LayerNorm(benchmark::State& state) {
  Tensor x = randn({state.range(0) / kRowWidth, kRowWidth});
  Tensor w = randn({kRowWidth}), b = randn({kRowWidth});
  for (auto _ : state) {
    Tensor y = nn::functional::layer_norm(x, {kRowWidth}, w, b);
    benchmark::DoNotOptimize(y.data_ptr());
  }
  state.SetBytesProcessed(
      static_cast<int64_t>(state.iterations() * 2 * state.range(0) * sizeof(float)));
}
BENCHMARK(BM_LayerNorm)
    ->Arg(kBigN)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond)
    ->Repetitions(3)
    ->ReportAggregatesOnly(true);

// --- matmul against oneDNN's sgemm called directly -----------------------------------
void set_flops(benchmark::State& state, double flops_per_iteration) {
  state.counters["FLOPS"] =
      benchmark::Counter(flops_per_iteration, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_MatmulKiln(benchmark::State& state) {
  const int64_t n = state.range(0);
  Tensor a = randn({n, n}), b = randn({n, n});
  for (auto _ : state) {
    Tensor c = matmul(a, b);
    benchmark::DoNotOptimize(c.data_ptr());
  }
  set_flops(state, 2.0 * n * n * n);
}
BENCHMARK(BM_MatmulKiln)
    ->Arg(1024)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond)
    ->Repetitions(3)
    ->ReportAggregatesOnly(true);

void BM_MatmulSgemm(benchmark::State& state) {
  const int64_t n = state.range(0);
  Tensor a = randn({n, n}), b = randn({n, n}), c = empty({n, n});
  for (auto _ : state) {
    dnnl_sgemm('N', 'N', n, n, n, 1.f, a.data<float>(), n, b.data<float>(), n, 0.f, c.data<float>(),
               n);
    benchmark::ClobberMemory();
  }
  set_flops(state, 2.0 * n * n * n);
}
BENCHMARK(BM_MatmulSgemm)
    ->Arg(1024)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond)
    ->Repetitions(3)
    ->ReportAggregatesOnly(true);

// --- conv2d on ResNet-50's layer shapes against a direct oneDNN primitive ------------
struct ConvLayer {
  int64_t in_channels, size, out_channels, kernel, stride, padding;
};
// The stem, the first 1x1 and 3x3 of each stage, the strided 3x3s and a downsample.
const std::vector<ConvLayer> kResNet50Layers = {
    {3, 224, 64, 7, 2, 3},    {64, 56, 64, 1, 1, 0},   {64, 56, 64, 3, 1, 1},
    {64, 56, 256, 1, 1, 0},   {256, 56, 128, 1, 1, 0}, {128, 56, 128, 3, 2, 1},
    {128, 28, 128, 3, 1, 1},  {256, 28, 256, 3, 2, 1}, {256, 14, 256, 3, 1, 1},
    {1024, 14, 256, 1, 1, 0}, {512, 7, 512, 3, 1, 1},  {1024, 14, 2048, 1, 2, 0}};

int64_t conv_out(const ConvLayer& l) { return (l.size + 2 * l.padding - l.kernel) / l.stride + 1; }

double conv_flops(const ConvLayer& l, int64_t batch) {
  const double o = static_cast<double>(conv_out(l));
  return 2.0 * batch * l.out_channels * o * o * l.in_channels * l.kernel * l.kernel;
}

void BM_Conv2dKiln(benchmark::State& state) {
  const ConvLayer& l = kResNet50Layers[state.range(0)];
  const int64_t batch = state.range(1);
  Tensor x = randn({batch, l.in_channels, l.size, l.size});
  Tensor w = randn({l.out_channels, l.in_channels, l.kernel, l.kernel}),
         b = randn({l.out_channels});
  for (auto _ : state) {
    Tensor y = conv2d(x, w, b, {.stride = {l.stride}, .padding = {l.padding}});
    benchmark::DoNotOptimize(y.data_ptr());
  }
  set_flops(state, conv_flops(l, batch));
}

// The same convolution as one oneDNN primitive, created once, on the same
// plain layouts kiln's tensors have (nchw, oihw).
void BM_Conv2dOneDnn(benchmark::State& state) {
  using namespace dnnl;
  const ConvLayer& l = kResNet50Layers[state.range(0)];
  const int64_t batch = state.range(1), o = conv_out(l);
  Tensor x = randn({batch, l.in_channels, l.size, l.size});
  Tensor w = randn({l.out_channels, l.in_channels, l.kernel, l.kernel}),
         b = randn({l.out_channels});
  Tensor y = empty({batch, l.out_channels, o, o});
  engine eng(engine::kind::cpu, 0);
  stream strm(eng);
  const auto f32 = memory::data_type::f32;
  memory::desc src({batch, l.in_channels, l.size, l.size}, f32, memory::format_tag::nchw);
  memory::desc wei({l.out_channels, l.in_channels, l.kernel, l.kernel}, f32,
                   memory::format_tag::oihw);
  memory::desc bia({l.out_channels}, f32, memory::format_tag::x);
  memory::desc dst({batch, l.out_channels, o, o}, f32, memory::format_tag::nchw);
  convolution_forward::desc desc(prop_kind::forward_inference, algorithm::convolution_direct, src,
                                 wei, bia, dst, {l.stride, l.stride}, {l.padding, l.padding},
                                 {l.padding, l.padding});
  convolution_forward conv(convolution_forward::primitive_desc(desc, eng));
  memory sm(src, eng, x.data_ptr()), wm(wei, eng, w.data_ptr()), bm(bia, eng, b.data_ptr()),
      dm(dst, eng, y.data_ptr());
  for (auto _ : state) {
    conv.execute(
        strm,
        {{DNNL_ARG_SRC, sm}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_BIAS, bm}, {DNNL_ARG_DST, dm}});
    strm.wait();
  }
  set_flops(state, conv_flops(l, batch));
}

// kiln and oneDNN run back to back for each layer, three times each (the
// median counts), so that drift of a shared machine hits both sides alike.
void register_conv_benchmarks() {
  for (int64_t batch : {1, 8}) {
    for (size_t i = 0; i < kResNet50Layers.size(); ++i) {
      for (auto [name, fn] : {std::pair{"BM_Conv2dKiln", &BM_Conv2dKiln},
                              std::pair{"BM_Conv2dOneDnn", &BM_Conv2dOneDnn}}) {
        benchmark::RegisterBenchmark(name, fn)
            ->Args({static_cast<int64_t>(i), batch})
            ->UseRealTime()
            ->Unit(benchmark::kMicrosecond)
            ->Repetitions(3)
            ->ReportAggregatesOnly(true);
      }
    }
  }
}

std::vector<kiln::bench::RatioPair> ratio_pairs() {
  using kiln::bench::RatioPair;
  const std::string memcpy_big = "BM_Memcpy/16777216/repeats:3/real_time";
  std::vector<RatioPair> pairs = {
      {"add, 16M floats vs memcpy bandwidth", "BM_Add/16777216/repeats:3/real_time", memcpy_big,
       "bytes_per_second", 0.7},
      {"mul, 16M floats vs memcpy bandwidth", "BM_Mul/16777216/repeats:3/real_time", memcpy_big,
       "bytes_per_second", 0.7},
      {"softmax, 4096-wide rows vs memcpy", "BM_Softmax/16777216/repeats:3/real_time", memcpy_big,
       "bytes_per_second", 0.5},
      {"layer_norm, 4096-wide rows vs memcpy", "BM_LayerNorm/16777216/repeats:3/real_time",
       memcpy_big, "bytes_per_second", 0.5},
      {"5-op pointwise chain 16M: generated vs eager",
       "BM_CheapChainCompiled/16777216/repeats:3/real_time",
       "BM_CheapChainEager/16777216/repeats:3/real_time", "items_per_second", 2.0},
      {"gelu+tanh chain 1M: generated vs eager",
       "BM_HeavyChainCompiled/1048576/repeats:3/real_time",
       "BM_HeavyChainEager/1048576/repeats:3/real_time", "items_per_second", 1.05},
      {"custom op dispatch vs built-in add, 1 element", "BM_DispatchCustomAddOneElement",
       "BM_DispatchAddOneElement", "items_per_second", 0.9},
      {"matmul 1024^3 fp32 vs dnnl_sgemm", "BM_MatmulKiln/1024/repeats:3/real_time",
       "BM_MatmulSgemm/1024/repeats:3/real_time", "FLOPS", 0.9},
  };
  for (int64_t batch : {1, 8}) {
    for (size_t i = 0; i < kResNet50Layers.size(); ++i) {
      const ConvLayer& l = kResNet50Layers[i];
      const std::string args = detail::str_cat('/', i, '/', batch, "/repeats:3/real_time");
      pairs.push_back(
          {detail::str_cat("conv2d N=", batch, " ", l.in_channels, "->", l.out_channels, " ",
                           l.kernel, "x", l.kernel, " s", l.stride, " @", l.size, " vs oneDNN"),
           "BM_Conv2dKiln" + args, "BM_Conv2dOneDnn" + args, "FLOPS", 0.9});
    }
  }
  return pairs;
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  register_conv_benchmarks();
  kiln::bench::RatioReporter reporter(ratio_pairs());
  std::cout << kiln::version_string() << ", " << kiln::get_num_threads() << " threads\n";
  benchmark::RunSpecifiedBenchmarks(&reporter);
  const int missed = reporter.print_ratios(std::cout);
  std::printf("%-44s %12.0f ns per op (aim: < 1000)\n", "eager dispatch, one-element add",
              reporter.time_ns("BM_DispatchAddOneElement"));
  kiln::bench::print_autograd_overheads(reporter, std::cout);
  benchmark::Shutdown();
  std::cout << (missed ? "some ratios missed their targets\n" : "all ratios met their targets\n");
  return 0;
}
