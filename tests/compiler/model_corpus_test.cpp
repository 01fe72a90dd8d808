// Models no one tuned the compiler for, written as PyTorch users write them:
// a MobileNetV2, a small U-Net and a GPT-style decoder that grows a KV cache
// by cat. Each is compiled and called over batch and image (or cache) sizes;
// every result equals eager's bitwise, and what the compiler did is pinned:
// traces, graphs made from a kept trace, graph breaks and recompiles.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "compiler/compiler_testing.h"
#include "kiln/kiln.h"

namespace kiln {
namespace {

namespace F = nn::functional;
using compiler::testing::same;

// MobileNetV2's block: 1x1 expansion, 3x3 depthwise, 1x1 linear projection,
// a residual where the shape allows.
struct InvertedResidual : nn::Module {
  int64_t hidden;
  bool residual;
  nn::Conv2d expand, depthwise, project;
  nn::BatchNorm2d bn1, bn2, bn3;
  InvertedResidual(int64_t in, int64_t out, int64_t stride, int64_t ratio)
      : hidden(in * ratio),
        residual(stride == 1 && in == out),
        expand(in, in * ratio, 1, {.bias = false}),
        depthwise(in * ratio, in * ratio, 3,
                  {.stride = stride, .padding = 1, .groups = in * ratio, .bias = false}),
        project(in * ratio, out, 1, {.bias = false}),
        bn1(in * ratio),
        bn2(in * ratio),
        bn3(out) {
    register_module("expand", expand);
    register_module("depthwise", depthwise);
    register_module("project", project);
    register_module("bn1", bn1);
    register_module("bn2", bn2);
    register_module("bn3", bn3);
  }
  Tensor forward(const Tensor& x) {
    Tensor h = relu6(bn1(expand(x)));
    h = relu6(bn2(depthwise(h)));
    h = bn3(project(h));
    return residual ? x + h : h;
  }
};

struct MobileNetV2 : nn::Module {
  nn::Conv2d stem{3, 8, 3, {.stride = 2, .padding = 1, .bias = false}};
  nn::BatchNorm2d stem_bn{8};
  std::vector<std::shared_ptr<InvertedResidual>> blocks;
  nn::Conv2d head{16, 32, 1, {.bias = false}};
  nn::BatchNorm2d head_bn{32};
  nn::Dropout drop{0.2};
  nn::Linear classifier{32, 10};
  MobileNetV2() {
    register_module("stem", stem);
    register_module("stem_bn", stem_bn);
    const int64_t spec[][4] = {{8, 8, 1, 1}, {8, 12, 2, 4}, {12, 12, 1, 4}, {12, 16, 2, 4}};
    for (const auto& s : spec) {
      blocks.push_back(register_module("block" + std::to_string(blocks.size()),
                                       std::make_shared<InvertedResidual>(s[0], s[1], s[2], s[3])));
    }
    register_module("head", head);
    register_module("head_bn", head_bn);
    register_module("drop", drop);
    register_module("classifier", classifier);
  }
  Tensor forward(const Tensor& x) {
    Tensor h = relu6(stem_bn(stem(x)));
    for (const auto& b : blocks) h = b->forward(h);
    h = relu6(head_bn(head(h)));
    return classifier(drop(adaptive_avg_pool2d(h, {1}).flatten(1)));
  }
};

struct DoubleConv : nn::Module {
  nn::Conv2d c1, c2;
  nn::BatchNorm2d b1, b2;
  DoubleConv(int64_t in, int64_t out)
      : c1(in, out, 3, {.padding = 1, .bias = false}),
        c2(out, out, 3, {.padding = 1, .bias = false}),
        b1(out),
        b2(out) {
    register_module("c1", c1);
    register_module("c2", c2);
    register_module("b1", b1);
    register_module("b2", b2);
  }
  Tensor forward(const Tensor& x) { return relu(b2(c2(relu(b1(c1(x)))))); }
};

struct UNet : nn::Module {
  DoubleConv in{3, 8}, down1{8, 16}, down2{16, 32}, up1{48, 16}, up2{24, 8};
  nn::Conv2d out{8, 2, 1};
  UNet() {
    register_module("in", in);
    register_module("down1", down1);
    register_module("down2", down2);
    register_module("up1", up1);
    register_module("up2", up2);
    register_module("out", out);
  }
  Tensor forward(const Tensor& x) {
    const Tensor x1 = in.forward(x);
    const Tensor x2 = down1.forward(max_pool2d(x1, {2}));
    const Tensor x3 = down2.forward(max_pool2d(x2, {2}));
    const F::InterpolateOptions twice{.scale_factor = std::vector<double>{2.0}};
    Tensor u = up1.forward(cat({F::interpolate(x3, twice), x2}, 1));
    u = up2.forward(cat({F::interpolate(u, twice), x1}, 1));
    return out(u);
  }
};

// A GPT-style decoder block that takes one new token per call and the keys
// and values of the tokens before it, and returns its output and the grown
// caches.
struct Decoder : nn::Module {
  static constexpr int64_t kHeads = 2, kDim = 16;
  nn::Linear qkv{kDim, 3 * kDim}, proj{kDim, kDim}, up{kDim, 4 * kDim}, down{4 * kDim, kDim};
  nn::LayerNorm ln1{{kDim}}, ln2{{kDim}};
  Decoder() {
    register_module("qkv", qkv);
    register_module("proj", proj);
    register_module("up", up);
    register_module("down", down);
    register_module("ln1", ln1);
    register_module("ln2", ln2);
  }
  // token [B, 1, D]; caches [B, H, T, D / H]: [B, 1, D] and caches of T + 1.
  std::tuple<Tensor, Tensor, Tensor> forward(const Tensor& token, const Tensor& k_cache,
                                             const Tensor& v_cache) {
    const Tensor heads =
        qkv(ln1(token)).unflatten(-1, {3, kHeads, kDim / kHeads});           // [B, 1, 3, H, Dh]
    const Tensor q = heads.select(2, 0).transpose(1, 2);                     // [B, H, 1, Dh]
    const Tensor k = cat({k_cache, heads.select(2, 1).transpose(1, 2)}, 2);  // [B, H, T + 1, Dh]
    const Tensor v = cat({v_cache, heads.select(2, 2).transpose(1, 2)}, 2);
    const Tensor a = F::scaled_dot_product_attention(q, k, v).transpose(1, 2).flatten(-2);
    Tensor h = token + proj(a);
    h = h + down(gelu(up(ln2(h))));
    return {h, k, v};
  }
};

struct Counts {
  int64_t traces, retraces, breaks, recompiles;
};

void expect_counts(const CompileStats& s, const Counts& want, const std::string& report) {
  EXPECT_EQ(s.traces, want.traces) << report;
  EXPECT_EQ(s.retraces, want.retraces) << report;
  EXPECT_EQ(s.graph_breaks, want.breaks) << report;
  EXPECT_EQ(s.recompiles, want.recompiles) << report;
  EXPECT_EQ(s.eager_calls, 0) << report;
}

// Calls net compiled and eagerly over inputs of these shapes.
template <typename Net>
CompileStats run_over_sizes(Net& net, const std::vector<Shape>& shapes) {
  const auto fast = compile(net, {.name = "model"});
  Generator gen(17);
  for (const Shape& s : shapes) {
    const Tensor x = randn(s, {}, &gen);
    EXPECT_TRUE(same(fast(x), net.forward(x))) << s[0] << " " << s[2] << " " << s[3];
  }
  return fast.explain().stats;
}

TEST(ModelCorpus, MobileNetV2OverBatchAndImageSizes) {
  manual_seed(8);
  MobileNetV2 net;
  net.eval();
  // Batch changes: dim 0 dynamic (a recompile); then image sizes: dims 2
  // and 3 too (another); every later size is made from the trace.
  const CompileStats s = run_over_sizes(net, {{2, 3, 32, 32},
                                              {3, 3, 32, 32},
                                              {3, 3, 40, 40},
                                              {4, 3, 48, 40},
                                              {2, 3, 64, 64},
                                              {5, 3, 33, 35}});
  expect_counts(s, {.traces = 3, .retraces = 3, .breaks = 0, .recompiles = 2}, "");
}

TEST(ModelCorpus, UNetOverBatchAndImageSizes) {
  manual_seed(9);
  UNet net;
  net.eval();
  const CompileStats s = run_over_sizes(
      net, {{2, 3, 16, 16}, {3, 3, 16, 16}, {3, 3, 24, 24}, {2, 3, 32, 16}, {4, 3, 40, 48}});
  expect_counts(s, {.traces = 3, .retraces = 2, .breaks = 0, .recompiles = 2}, "");
}

// Generation: the cache grows by one position per call. With its length
// marked dynamic, one trace serves every later length, at batch 1 and 4.
TEST(ModelCorpus, ADecoderGrowingItsCacheByCatIsTracedOnce) {
  manual_seed(10);
  Decoder net;
  net.eval();
  NoGradGuard no_grad;
  for (const int64_t batch : {1, 4}) {
    SCOPED_TRACE(batch);
    const auto fast = compile(net, {.name = "decoder"});
    Generator gen(3);
    Tensor k = randn({batch, Decoder::kHeads, 2, Decoder::kDim / Decoder::kHeads}, {}, &gen),
           v = k * 0.5;
    compiler::mark_dynamic(k, 2);
    compiler::mark_dynamic(v, 2);
    for (int step = 0; step < 8; ++step) {
      const Tensor token = randn({batch, 1, Decoder::kDim}, {}, &gen);
      const auto [h, k2, v2] = fast(token, k, v);
      const auto [want_h, want_k, want_v] = net.forward(token, k, v);
      EXPECT_TRUE(same(h, want_h)) << step;
      EXPECT_TRUE(same(k2, want_k)) << step;
      k = k2;
      v = v2;
      compiler::mark_dynamic(k, 2);
      compiler::mark_dynamic(v, 2);
    }
    const ExplainReport r = fast.explain();
    expect_counts(r.stats, {.traces = 1, .retraces = 7, .breaks = 0, .recompiles = 0},
                  r.dynamic_sizes);
  }
}

}  // namespace
}  // namespace kiln
