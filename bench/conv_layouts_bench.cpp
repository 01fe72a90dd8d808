// The layouts of activations between ResNet-50's 53 convolutions at batch 1
// (224x224), on oneDNN's float32 primitives with weights in the layouts
// each primitive prefers (prepacked, as freezing holds them):
//  - Plain: what kiln runs, each tensor NCHW between calls; 1x1 convolutions
//    on NCHW, larger kernels on oneDNN's blocked layout with the source
//    reordered in and the result out around each one;
//  - BlockedEach: every convolution blocked, reordered in and out;
//  - BlockedKept: every convolution blocked, activations kept blocked from
//    the max pool to the end (reordered in after the max pool, out once);
//  - ChannelsLastKept: every convolution on NHWC, kept NHWC throughout.
// Each is the convolutions alone, no epilogue ops, so that the layouts are
// the only difference (docs/benchmarks.md, "Layouts between convolutions").
// `kiln_bench_ops --benchmark_filter=ConvLayouts`.
#include <benchmark/benchmark.h>

#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <optional>
#include <unordered_map>
#include <vector>

namespace {

using dnnl::memory;
using tag = memory::format_tag;

struct ConvShape {
  int64_t in, out, kernel, stride, pad, size;  // size: input height = width
  int64_t from = -1;  // the convolution whose result it reads (-1: its own input)
};

// torchvision's ResNet-50 (v1.5: the stride on the 3x3 convolution). A
// block's result is its third convolution's (the residual add is written
// into it), which the next block's first convolution and downsample read.
std::vector<ConvShape> resnet50_convs() {
  std::vector<ConvShape> convs{{3, 64, 7, 2, 3, 224}};
  int64_t in = 64, size = 56, block_input = -1;  // the max pool's result: its own
  const int64_t blocks[4] = {3, 4, 6, 3}, widths[4] = {64, 128, 256, 512};
  for (int stage = 0; stage < 4; ++stage) {
    for (int64_t b = 0; b < blocks[stage]; ++b) {
      const int64_t w = widths[stage], out = 4 * w, stride = b == 0 && stage > 0 ? 2 : 1;
      const int64_t next = size / stride;
      const auto first = static_cast<int64_t>(convs.size());
      convs.push_back({in, w, 1, 1, 0, size, block_input});
      convs.push_back({w, w, 3, stride, 1, size, first});
      convs.push_back({w, out, 1, 1, 0, next, first + 1});
      if (b == 0) convs.push_back({in, out, 1, stride, 0, size, block_input});
      block_input = first + 2;
      in = out;
      size = next;
    }
  }
  return convs;
}

enum class Layouts { kPlain, kBlockedEach, kBlockedKept, kChannelsLastKept };

struct Conv {
  dnnl::convolution_forward primitive;
  memory plain_src, plain_dst, src, dst, weights;
  std::optional<dnnl::reorder> in, out;
};

void BM_ConvLayouts(benchmark::State& state) {
  const auto layouts = static_cast<Layouts>(state.range(0));
  const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  const auto f32 = memory::data_type::f32;
  std::vector<Conv> convs;
  const std::vector<ConvShape> shapes = resnet50_convs();
  for (const ConvShape& s : shapes) {
    const int64_t o = (s.size + 2 * s.pad - s.kernel) / s.stride + 1;
    const memory::desc plain_src({1, s.in, s.size, s.size}, f32, tag::nchw);
    const memory::desc plain_dst({1, s.out, o, o}, f32, tag::nchw);
    const bool blocked = layouts != Layouts::kPlain || s.kernel > 1;
    const auto run_layout = [&](const memory::desc& d) {
      if (layouts == Layouts::kChannelsLastKept) return memory::desc(d.dims(), f32, tag::nhwc);
      return blocked ? memory::desc(d.dims(), f32, tag::any) : d;
    };
    const dnnl::convolution_forward::desc desc(
        dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
        run_layout(plain_src), memory::desc({s.out, s.in, s.kernel, s.kernel}, f32, tag::any),
        memory::desc(), run_layout(plain_dst), {s.stride, s.stride}, {s.pad, s.pad},
        {s.pad, s.pad});
    const dnnl::convolution_forward::primitive_desc pd(desc, engine);
    Conv c{dnnl::convolution_forward(pd),
           memory(plain_src, engine),
           memory(plain_dst, engine),
           memory(pd.src_desc(), engine),
           memory(pd.dst_desc(), engine),
           memory(pd.weights_desc(), engine),
           {},
           {}};
    // Every buffer written once: pages never written all read the kernel's
    // one zero page, which stays in cache and hides the memory traffic
    // (measured 28 ms for every variant that way, against 32-44 ms here).
    for (memory* m : {&c.plain_src, &c.plain_dst, &c.src, &c.dst, &c.weights}) {
      auto* data = static_cast<float*>(m->get_data_handle());
      std::fill_n(data, m->get_desc().get_size() / sizeof(float), 0.01f);
    }
    if (pd.src_desc() != plain_src) c.in = dnnl::reorder(c.plain_src, c.src);
    if (pd.dst_desc() != plain_dst) c.out = dnnl::reorder(c.dst, c.plain_dst);
    convs.push_back(std::move(c));
  }
  const bool kept = layouts == Layouts::kBlockedKept || layouts == Layouts::kChannelsLastKept;
  // Each convolution reads the result it reads in the model, in its layout
  // (plain: the plain result; kept: the primitive's own), as the model's
  // dataflow has it; the first of a stage reads the max pool's or its own.
  for (size_t i = 0; i < convs.size(); ++i) {
    const int64_t from = shapes[i].from;
    if (from < 0) continue;
    Conv& c = convs[i];
    const Conv& p = convs[static_cast<size_t>(from)];
    if (!kept && p.plain_dst.get_desc() == c.plain_src.get_desc()) c.plain_src = p.plain_dst;
    if (kept && p.dst.get_desc() == c.src.get_desc()) c.src = p.dst;
  }
  for (auto _ : state) {
    for (size_t i = 0; i < convs.size(); ++i) {
      Conv& c = convs[i];
      if (c.in && (!kept || shapes[i].from < 0)) c.in->execute(stream, c.plain_src, c.src);
      c.primitive.execute(
          stream, {{DNNL_ARG_SRC, c.src}, {DNNL_ARG_WEIGHTS, c.weights}, {DNNL_ARG_DST, c.dst}});
      if (c.out && (!kept || i + 1 == convs.size())) c.out->execute(stream, c.dst, c.plain_dst);
    }
    stream.wait();
  }
  state.counters["convolutions"] = static_cast<double>(convs.size());
}
BENCHMARK(BM_ConvLayouts)
    ->ArgNames({"layouts"})
    ->Arg(static_cast<int>(Layouts::kPlain))
    ->Arg(static_cast<int>(Layouts::kBlockedEach))
    ->Arg(static_cast<int>(Layouts::kBlockedKept))
    ->Arg(static_cast<int>(Layouts::kChannelsLastKept))
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond)
    ->MinTime(0.5)
    ->Repetitions(3)
    ->ReportAggregatesOnly(true);

}  // namespace
