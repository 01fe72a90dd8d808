// Prepared weights (docs/architecture.md, "Prepared weights"): a frozen
// graph's convolution weights on the CPU, folded with their batch norms, are
// packed once into the layout the primitive reads, a block of output
// channels at a time, and held only so. The packing is checked against
// oneDNN's own reorder (bitwise, through the kernel), the frozen graphs
// against eager, and the memory they hold against what the folded copies
// would take.
#include <gtest/gtest.h>

#include <algorithm>

#include "backends/backend.h"
#include "backends/prepared.h"
#include "compiler/compiler_testing.h"
#include "compiler/passes/folded_constants.h"
#include "compiler/passes/pass.h"
#include "core/shape_util.h"
#include "kiln/kiln.h"
#include "ops/dispatch.h"

namespace kiln::compiler {
namespace {

using testing::near;
using testing::same;

struct ConvCase {
  const char* name;
  Shape x, w;
  ops::Attrs attrs;  // conv2d's: stride, padding (4), dilation, groups
  bool nhwc_in = false, nhwc_out = false;
};

ops::Attrs conv_attrs(int64_t stride, int64_t pad, int64_t dilation, int64_t groups) {
  return ops::Attrs{std::vector<int64_t>{stride, stride}, std::vector<int64_t>{pad, pad, pad, pad},
                    std::vector<int64_t>{dilation, dilation}, groups};
}

Tensor laid_out(const Tensor& t, bool nhwc) {
  return nhwc ? t.permute({0, 2, 3, 1}).contiguous().permute({0, 3, 1, 2}) : t;
}

// The kernel with a prepared weight (the tensor in its place a meta tensor)
// writes what it writes reading the weight itself: the packing puts every
// value where oneDNN's reorder does, the padding of partial blocks included
// (output channels and groups that are no multiple of a block).
TEST(PreparedWeights, PackedWeightsGiveTheUnpreparedKernelsResultsBitwise) {
  Generator gen(31);
  NoGradGuard no_grad;
  const backend::InputPreparation* prep =
      backend::input_preparation(DeviceKind::CPU, ops::OpId::conv2d);
  ASSERT_NE(prep, nullptr);
  ASSERT_EQ(prep->input, 1u);
  const backend::KernelFn& kernel = ops::kernel_for(ops::OpId::conv2d, Device::cpu());
  const std::vector<ConvCase> cases = {
      {"3x3", {1, 16, 9, 9}, {32, 16, 3, 3}, conv_attrs(1, 1, 1, 1)},
      {"stem 7x7 stride 2", {1, 3, 23, 21}, {64, 3, 7, 7}, conv_attrs(2, 3, 1, 1)},
      {"1x1 odd channels", {1, 24, 5, 7}, {33, 24, 1, 1}, conv_attrs(1, 0, 1, 1)},
      {"grouped", {2, 12, 8, 8}, {20, 3, 3, 3}, conv_attrs(1, 1, 1, 4)},
      {"depthwise", {1, 40, 10, 10}, {40, 1, 3, 3}, conv_attrs(2, 1, 1, 40)},
      {"dilated", {1, 8, 12, 12}, {20, 8, 3, 3}, conv_attrs(1, 2, 2, 1)},
      {"large", {1, 64, 6, 6}, {512, 64, 3, 3}, conv_attrs(1, 1, 1, 1)},
      {"3x3 channels last", {1, 16, 9, 9}, {32, 16, 3, 3}, conv_attrs(1, 1, 1, 1), true, true},
      {"1x1 channels last", {1, 24, 5, 7}, {33, 24, 1, 1}, conv_attrs(1, 0, 1, 1), true, true},
      {"into channels last", {1, 3, 23, 21}, {64, 3, 7, 7}, conv_attrs(2, 3, 1, 1), false, true},
      {"depthwise channels last",
       {1, 40, 10, 10},
       {40, 1, 3, 3},
       conv_attrs(1, 1, 1, 40),
       true,
       true},
  };
  for (const ConvCase& c : cases) {
    SCOPED_TRACE(c.name);
    const Tensor x = laid_out(randn(c.x, {}, &gen), c.nhwc_in);
    const Tensor w = randn(c.w, {}, &gen), b = randn({c.w[0]}, {}, &gen);
    const TensorList args{x, w, b};
    const ops::Inferred inferred = ops::infer(ops::OpId::conv2d, args, c.attrs);
    const Shape out_sizes = inferred.outputs[0].sizes;
    const auto output = [&] { return laid_out(empty(out_sizes), c.nhwc_out); };
    const ops::OpSchema& schema = ops::op_schema(ops::OpId::conv2d);
    // What the kernel computes from the weight itself.
    TensorList inputs{x, w, b}, want{output()};
    kernel(backend::KernelCall{schema, inputs, want, inferred.attrs});
    // The prepared form, from blocks of rows; then the kernel on it.
    int64_t widest = 0, rows_asked = 0;
    const backend::InputRows rows = [&](int64_t begin, int64_t end) {
      widest = std::max(widest, end - begin);
      rows_asked += end - begin;
      return w.narrow(0, begin, end - begin).contiguous();
    };
    const Tensor w_meta = ops::make_tensor(w.sizes(), w.dtype(), w.device(), true);
    TensorList metas{x, w_meta, b}, got{output()};
    const backend::KernelCall layouts{schema, metas, got, inferred.attrs};
    const std::shared_ptr<const void> prepared = prep->prepare(layouts, rows, &w.impl());
    ASSERT_NE(prepared, nullptr);
    EXPECT_EQ(rows_asked, c.w[0]);              // each row once
    if (c.w[0] == 512) {
      EXPECT_LT(widest, 512);  // in blocks, never the whole weight
    }
    kernel(backend::KernelCall{schema, metas, got, inferred.attrs, prepared.get()});
    EXPECT_TRUE(same(got[0], want[0]));
    EXPECT_EQ(got[0].strides(), want[0].strides());
    // The same values for calls of the same layouts: one prepared form,
    // made once; other values: their own.
    EXPECT_EQ(prep->prepare(layouts, rows, &w.impl()), prepared);
    EXPECT_EQ(rows_asked, c.w[0]);
    EXPECT_NE(prep->prepare(layouts, rows, &b.impl()), prepared);
  }
}

// A frozen network of convolutions and batch norms: its folded weights are
// held only prepared (explain() counts them), it computes what eager does,
// and it holds neither a folded copy per weight nor, while compiling, all of
// them at once: its memory grows by less than two of its weights, where
// the folded copies alone take four.
TEST(PreparedWeights, FrozenGraphsHoldFoldedWeightsOnlyPrepared) {
  manual_seed(8);
  const int64_t width = 256;
  auto block = [&](int64_t in, int64_t groups) {
    return std::make_shared<nn::Sequential>(
        std::make_shared<nn::Conv2d>(in, width, 3,
                                     nn::Conv2d::Options{.padding = 1, .groups = groups}),
        std::make_shared<nn::BatchNorm2d>(width), std::make_shared<nn::ReLU>());
  };
  nn::Sequential net(block(width, 1), block(width, 1), block(width, 2), block(width, 1));
  {
    NoGradGuard no_grad;
    for (auto& [name, t] : net.named_buffers())
      if (name.ends_with("running_var")) t.copy_(rand(t.sizes()) + 0.5);
  }
  net.eval();
  const Tensor x = randn({1, width, 4, 4});
  const size_t weight_bytes = static_cast<size_t>(width * width * 9) * sizeof(float);
  Tensor want;
  {
    NoGradGuard no_grad;
    want = net(x);
    empty_cache(Device::cpu());
    const size_t before = memory_stats(Device::cpu()).allocated_bytes;
    reset_peak_memory_stats(Device::cpu());
    const auto fast = compile(net, {.freeze = true});
    const Tensor got = fast(x);
    const MemoryStats stats = memory_stats(Device::cpu());
    EXPECT_LT(stats.peak_allocated_bytes - before, 2 * weight_bytes);
    EXPECT_LT(stats.allocated_bytes - before, weight_bytes / 2);
    EXPECT_TRUE(near(got, want));
    EXPECT_TRUE(same(fast(x), got));
    const ExplainReport report = fast.explain();
    ASSERT_EQ(report.graphs.size(), 1u);
    EXPECT_EQ(report.graphs[0].prepared_weights, 4);
    EXPECT_NE(report.to_string().find("weights: 4 held only in their kernels' layout"),
              std::string::npos)
        << report.to_string();
    // Not frozen: the parameters are read as they are, nothing prepared.
    const auto plain = compile(net);
    EXPECT_TRUE(same(plain(x), want));
    EXPECT_EQ(plain.explain().graphs[0].prepared_weights, 0);
  }
  // With gradients recorded for the input, the call replays the frozen graph
  // through dispatch: the folded weights are made again from the parameters.
  const auto fast = compile(net, {.freeze = true});
  const Tensor input = x.clone().requires_grad_(true);
  const Tensor got = fast(input);
  EXPECT_TRUE(got.requires_grad());
  EXPECT_TRUE(near(got.detach(), want));
  got.sum().backward();
  const Tensor eager_input = x.clone().requires_grad_(true);
  net(eager_input).sum().backward();
  EXPECT_TRUE(near(input.grad(), eager_input.grad()));
}

// A constant that something besides a prepared weight input reads (here a
// product with an input) keeps its values, held as they are.
TEST(PreparedWeights, AConstantOtherNodesReadKeepsItsValues) {
  manual_seed(9);
  NoGradGuard no_grad;
  const Tensor w = randn({8, 4, 3, 3}), x = randn({1, 4, 6, 6}), s = randn({8, 4, 3, 3});
  const auto f = [&](const Tensor& in, const Tensor& scale) {
    return std::make_tuple(kiln::conv2d(in, w, {}, {.padding = {1}}).relu_(), w * scale);
  };
  const auto fast = compile(f, {.freeze = true});
  const auto [conv, product] = fast(x, s);
  const auto [conv_want, product_want] = f(x, s);
  EXPECT_TRUE(near(conv, conv_want));
  EXPECT_TRUE(same(product, product_want));
  EXPECT_EQ(fast.explain().graphs[0].prepared_weights, 0);
}

// A frozen weight that is a view of another layout (here a transposed
// parameter) is packed from its values, rows in order.
TEST(PreparedWeights, AWeightOfAnotherLayoutIsPackedFromItsValues) {
  manual_seed(11);
  NoGradGuard no_grad;
  const Tensor stored = randn({6, 20, 3, 3}), x = randn({1, 6, 7, 7});
  const Tensor w = stored.transpose(0, 1);  // [20, 6, 3, 3], not contiguous
  const auto f = [&](const Tensor& in) { return kiln::conv2d(in, w, {}, {.padding = {1}}); };
  const auto fast = compile(f, {.freeze = true});
  EXPECT_TRUE(same(fast(x), f(x)));
  EXPECT_EQ(fast.explain().graphs[0].prepared_weights, 1);
}

// A folded weight is a lazy constant: its recipe is shared by the graphs
// that copy it (a program's graphs at several sizes), and its whole value,
// once made, is theirs too while one of them holds it (on CUDA, where no
// backend prepares it, each executable binds it whole).
TEST(PreparedWeights, ALazyConstantIsMadeOnceForTheGraphsThatHoldIt) {
  manual_seed(10);
  NoGradGuard no_grad;
  auto conv = std::make_shared<nn::Conv2d>(4, 6, 3);
  auto bn = std::make_shared<nn::BatchNorm2d>(6);
  bn->running_var.copy_(rand({6}) + 0.5);
  bn->running_mean.copy_(randn({6}));
  nn::Sequential net(conv, bn);
  net.eval();
  const testing::Program f = [&](const TensorList& a) { return TensorList{net(a[0])}; };
  const Trace frozen = run_passes(testing::trace_of(f, {randn({1, 4, 5, 5})}), {.freeze = true});
  int64_t slot = -1;
  for (size_t k = 0; k < frozen.graph.constants().size(); ++k)
    if (frozen.graph.lazy_constant(k)) slot = static_cast<int64_t>(k);
  ASSERT_GE(slot, 0) << to_text(frozen.graph);
  EXPECT_NE(to_text(frozen.graph).find("(lazy)"), std::string::npos);
  Graph other;
  const ValueId copied = other.copy_constant(frozen.graph, static_cast<size_t>(slot));
  const auto other_slot = static_cast<size_t>(other.value(copied).slot);
  EXPECT_TRUE(other.lazy_constant(other_slot));
  EXPECT_EQ(other.constant_identity(other_slot),
            frozen.graph.constant_identity(static_cast<size_t>(slot)));
  const Tensor a = frozen.graph.constant(static_cast<size_t>(slot));
  const Tensor b = other.constant(other_slot);
  EXPECT_EQ(a.data_ptr(), b.data_ptr());
  const Tensor scale = bn->weight / (bn->running_var + bn->options.eps).sqrt();
  EXPECT_TRUE(near(a, conv->weight * scale.reshape({6, 1, 1, 1})));
  // Rows come made apart, with the same values.
  EXPECT_TRUE(same(other.constant_rows(other_slot, 2, 5), a.narrow(0, 2, 3)));
}

// The passes of a function's graphs share its folds (passes/folded_constants.h):
// the traces of two sizes get the same folded weight, not equal copies.
TEST(PreparedWeights, TheFunctionsGraphsShareTheirFoldedWeights) {
  manual_seed(12);
  NoGradGuard no_grad;
  const Tensor w = randn({6, 4, 3, 3}), b = randn({6}), mean = randn({6});
  const Tensor var = rand({6}) + 0.5, gamma = randn({6}), beta = randn({6});
  double eps = 1e-5;
  const testing::Program f = [&](const TensorList& a) {
    const Tensor y = kiln::conv2d(a[0], w, b);
    return TensorList{nn::functional::batch_norm(y, mean, var, gamma, beta, false, 0.1, eps)};
  };
  const auto lazy_identity = [](const Trace& t) {
    for (size_t k = 0; k < t.graph.constants().size(); ++k)
      if (t.graph.lazy_constant(k)) return t.graph.constant_identity(k);
    return static_cast<const void*>(nullptr);
  };
  const auto bias = [](const Trace& t) { return t.graph.constant(t.graph.constants().size() - 1); };
  FoldedConstants folded;
  const PassContext shared{.freeze = true, .folded = &folded};
  const Trace two = run_passes(testing::trace_of(f, {randn({2, 4, 5, 5})}), shared);
  const Trace three = run_passes(testing::trace_of(f, {randn({3, 4, 5, 5})}), shared);
  ASSERT_NE(lazy_identity(two), nullptr) << to_text(two.graph);
  EXPECT_EQ(lazy_identity(two), lazy_identity(three));
  EXPECT_EQ(bias(two).data_ptr(), bias(three).data_ptr());  // the very same tensor
  // Without the table, each graph folds its own, of the same values.
  const Trace own = run_passes(testing::trace_of(f, {randn({3, 4, 5, 5})}), {.freeze = true});
  EXPECT_NE(lazy_identity(own), lazy_identity(two));
  EXPECT_NE(bias(own).data_ptr(), bias(two).data_ptr());
  EXPECT_TRUE(same(bias(own), bias(two)));
  // Another epsilon over the same tensors is another fold.
  eps = 1e-3;
  const Trace other_eps = run_passes(testing::trace_of(f, {randn({2, 4, 5, 5})}), shared);
  ASSERT_NE(lazy_identity(other_eps), nullptr);
  EXPECT_NE(lazy_identity(other_eps), lazy_identity(two));
  EXPECT_FALSE(same(bias(other_eps), bias(two)));
}

// A frozen model called at several batch sizes (a server's) prepares its
// weights once: each size's graph reads the prepared copies of the others
// where their primitives read one layout, and gives what a function compiled
// for that size alone gives, bit for bit. compiler::reset() forgets the
// folds with the graphs, so changed parameters are then seen.
TEST(PreparedWeights, EverySizeOfAFrozenModelReadsOneCopyOfItsWeights) {
  manual_seed(13);
  NoGradGuard no_grad;
  const auto block = [](int64_t in, int64_t out) {
    auto bn = std::make_shared<nn::BatchNorm2d>(out);
    bn->running_var.copy_(rand({out}) + 0.5);
    bn->running_mean.copy_(randn({out}) * 0.1);
    return std::make_shared<nn::Sequential>(
        std::make_shared<nn::Conv2d>(in, out, 3, nn::Conv2d::Options{.padding = 1}), bn,
        std::make_shared<nn::ReLU>());
  };
  nn::Sequential net(block(3, 32), block(32, 32), block(32, 64));
  net.eval();
  const auto fast = compile(net, {.freeze = true});
  for (int64_t batch : {2, 3, 4, 5}) {
    const Tensor x = randn({batch, 3, 12, 12});
    const Tensor got = fast(x);
    const auto alone = compile(net, {.freeze = true});
    EXPECT_TRUE(same(got, alone(x))) << batch;
    EXPECT_TRUE(near(got, net(x))) << batch;
  }
  const ExplainReport r = fast.explain();
  ASSERT_EQ(r.graphs.size(), 4u) << r.to_string();
  EXPECT_EQ(r.stats.dynamic_instances, 2);
  for (size_t k = 1; k < r.graphs.size(); ++k) {
    EXPECT_EQ(r.graphs[k].prepared_weights, 3) << k;
    EXPECT_GT(r.graphs[k].prepared_shared, 0) << k;
  }
  EXPECT_NE(r.to_string().find("shared with other graphs"), std::string::npos) << r.to_string();
  // Batch sizes 4 and 5 are one program's instances: every weight one copy.
  EXPECT_EQ(r.graphs[3].prepared_shared, 3) << r.to_string();
  compiler::reset();
  for (auto& [name, t] : net.named_buffers())
    if (name.ends_with("running_var")) t.copy_(rand(t.sizes()) + 2.0);
  const Tensor x = randn({3, 3, 12, 12});
  EXPECT_TRUE(near(fast(x), net(x)));
  EXPECT_EQ(fast.explain().graphs.back().prepared_shared, 0);
}

}  // namespace
}  // namespace kiln::compiler
