// Custom ops (include/kiln/library.h) inside kiln::compile: one node of the
// graph (never a graph break), results equal to eager, symbolic sizes from
// the op's shape rule, its backward traced into a training step, and
// explain() naming it. Eager custom ops: tests/unit/library_test.cpp.
#include <gtest/gtest.h>

#include <cmath>

#include "compiler/compiler_testing.h"
#include "kiln/kiln.h"
#include "kiln/library.h"
#include "unit/expect_error.h"

namespace kiln {
namespace {

namespace lib = kiln::library;
using compiler::testing::same;

// y = s * tanh(x), float32 on the CPU; its backward with kiln ops.
lib::Op scaled_tanh() {
  static const lib::Op op = [] {
    lib::OpDef d;
    d.name = "comptest::scaled_tanh";
    d.inputs = {"x"};
    d.attrs = {{"s", lib::AttrType::Float}};
    d.shape = [](lib::ShapeContext& ctx) {
      if (ctx.dtype(0) != kFloat32) throw DTypeError(std::string(ctx.op()) + ": float32 only");
      ctx.add_output_like(0);
    };
    d.cpu = [](const lib::KernelContext& ctx) {
      const auto s = static_cast<float>(ctx.attr<double>("s"));
      const auto* x = static_cast<const float*>(ctx.input(0).data_ptr());
      auto* y = static_cast<float*>(ctx.output(0).data_ptr());
      for (int64_t i = 0; i < ctx.input(0).numel(); ++i) y[i] = s * std::tanh(x[i]);
    };
    d.backward = [](const lib::BackwardContext& ctx, const TensorList& g) {
      const double s = ctx.attr<double>("s");
      return TensorList{g[0] * (1 - ctx.input(0).tanh().square()) * s};
    };
    return lib::define_op(std::move(d));
  }();
  return op;
}

// The sum of squares over the last dim: sizes [..., n] -> [...].
lib::Op row_sumsq() {
  static const lib::Op op = [] {
    lib::OpDef d;
    d.name = "comptest::row_sumsq";
    d.inputs = {"x"};
    d.shape = [](lib::ShapeContext& ctx) {
      lib::Sizes sizes = ctx.sizes(0);
      if (sizes.empty()) throw ShapeError(std::string(ctx.op()) + ": a 0-dim input");
      sizes.pop_back();
      ctx.add_output(sizes, ctx.dtype(0), ctx.device(0));
    };
    d.cpu = [](const lib::KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      const int64_t n = x.dim() == 0 ? 1 : x.size(-1), rows = n == 0 ? 0 : x.numel() / n;
      const auto* p = static_cast<const float*>(x.data_ptr());
      auto* out = static_cast<float*>(ctx.output(0).data_ptr());
      for (int64_t r = 0; r < ctx.output(0).numel(); ++r) {
        float acc = 0;
        for (int64_t c = 0; r < rows && c < n; ++c) acc += p[r * n + c] * p[r * n + c];
        out[r] = acc;
      }
    };
    d.backward = [](const lib::BackwardContext& ctx, const TensorList& g) {
      return TensorList{ctx.input(0) * g[0].unsqueeze(-1) * 2};
    };
    return lib::define_op(std::move(d));
  }();
  return op;
}

// A 1-d input of even length n as [n / 2, 2], swapping each pair: the rule
// computes a size and decides on one.
lib::Op swap_pairs() {
  static const lib::Op op = [] {
    lib::OpDef d;
    d.name = "comptest::swap_pairs";
    d.inputs = {"x"};
    d.shape = [](lib::ShapeContext& ctx) {
      const lib::Size n = ctx.size(0, 0);
      if (ctx.dim(0) != 1 || n % 2 != 0)
        throw ShapeError(std::string(ctx.op()) + ": expected a 1-d input of even length");
      ctx.add_output({n / 2, 2}, ctx.dtype(0), ctx.device(0));
    };
    d.cpu = [](const lib::KernelContext& ctx) {
      const auto* x = static_cast<const float*>(ctx.input(0).data_ptr());
      auto* y = static_cast<float*>(ctx.output(0).data_ptr());
      for (int64_t i = 0; i + 1 < ctx.input(0).numel(); i += 2) y[i] = x[i + 1], y[i + 1] = x[i];
    };
    return lib::define_op(std::move(d));
  }();
  return op;
}

Tensor program(const Tensor& x, const Tensor& w) {
  const Tensor h = scaled_tanh().one({x.matmul(w)}, {1.5});
  return row_sumsq().one({(h + 1).relu()}) * 0.5;
}

TEST(CustomOpCompiled, IsOneNodeOfTheGraphAndEqualsEager) {
  const Tensor w = randn({6, 4});
  int calls = 0;
  const auto fast = compile(
      [&](const Tensor& x) {
        ++calls;
        return program(x, w);
      },
      {.check = true, .name = "custom"});
  for (int i = 0; i < 3; ++i) {
    const Tensor x = randn({5, 6});
    EXPECT_TRUE(same(fast(x), program(x, w))) << i;
  }
  EXPECT_EQ(calls, 4);  // the trace, and check's eager run at each of the 3 calls
  const ExplainReport r = fast.explain();
  EXPECT_EQ(r.stats.traces, 1);
  EXPECT_EQ(r.stats.graph_breaks, 0);
  EXPECT_EQ(r.stats.replays, 3);
  ASSERT_EQ(r.graphs.size(), 1u);
  EXPECT_TRUE(r.graphs[0].executable) << r.to_string();
  EXPECT_NE(r.graphs[0].text.find("comptest::scaled_tanh(%"), std::string::npos)
      << r.graphs[0].text;
  EXPECT_NE(r.graphs[0].text.find("{op=\"comptest::scaled_tanh\", s=1.5}"), std::string::npos)
      << r.graphs[0].text;
  const auto& ops = r.graphs[0].ops;
  EXPECT_TRUE(std::any_of(ops.begin(), ops.end(), [](const auto& p) {
    return p.first == "comptest::row_sumsq" && p.second == 1;
  })) << r.to_string();
}

TEST(CustomOpCompiled, TheShapeRuleServesEverySizeOfADynamicProgram) {
  const Tensor w = randn({6, 4});
  int calls = 0;
  const auto fast = compile(
      [&](const Tensor& x, const Tensor& v) {
        ++calls;
        return std::make_tuple(program(x, w), swap_pairs().one({v}) * 2);
      },
      {.dynamic = Dynamic::On, .name = "dynamic"});
  for (int64_t n : {2, 3, 8, 5, 8, 1}) {
    const Tensor x = randn({n, 6}), v = randn({2 * n});
    const auto [a, b] = fast(x, v);
    EXPECT_TRUE(same(a, program(x, w))) << n;
    EXPECT_TRUE(same(b, swap_pairs().one({v}) * 2)) << n;
    EXPECT_EQ(b.sizes(), (Shape{n, 2}));
  }
  const ExplainReport r = fast.explain();
  // One trace: every other size is made from it, the op's rule giving its
  // output sizes as expressions of the symbols (s2//2).
  EXPECT_EQ(calls, 1) << r.to_string();
  EXPECT_NE(r.to_string().find("comptest::swap_pairs(%1) {op=\"comptest::swap_pairs\"} : "
                               "float32[s2//2, 2]"),
            std::string::npos)
      << r.to_string();
  EXPECT_NE(r.to_string().find("guard s2 == 2*s2//2  (comptest::swap_pairs"), std::string::npos);
  EXPECT_EQ(r.stats.graph_breaks, 0);
  EXPECT_GE(r.stats.dynamic_instances, 3) << r.to_string();
  EXPECT_EQ(r.stats.eager_calls, 0);
  // An odd length is the rule's error, compiled as in eager.
  kiln::testing::expect_error<ShapeError>(
      [&] {
        fast(randn({3, 6}), randn({7}));
      },
      "comptest::swap_pairs", "even length");
}

TEST(CustomOpCompiled, ItsBackwardIsTracedIntoATrainingStep) {
  auto make = [] {
    manual_seed(3);
    return std::make_shared<nn::Linear>(6, 4);
  };
  auto net = make(), eager_net = make();
  optim::SGD opt(net->parameters(), {.lr = 0.05});
  optim::SGD eager_opt(eager_net->parameters(), {.lr = 0.05});
  auto step = [](nn::Linear& m, optim::Optimizer& o, const Tensor& x) {
    o.zero_grad();
    Tensor loss = row_sumsq().one({scaled_tanh().one({m(x)}, {0.5})}).mean();
    loss.backward();
    o.step();
    return loss;
  };
  const auto fast = compile([&](const Tensor& x) { return step(*net, opt, x); }, {.name = "train"});
  for (int i = 0; i < 4; ++i) {
    const Tensor x = randn({8, 6});
    EXPECT_TRUE(same(fast(x), step(*eager_net, eager_opt, x))) << i;
  }
  const auto p = net->parameters(), q = eager_net->parameters();
  for (size_t i = 0; i < p.size(); ++i) EXPECT_TRUE(same(p[i], q[i])) << i;
  const ExplainReport r = fast.explain();
  EXPECT_EQ(r.stats.graph_breaks, 0);
  EXPECT_EQ(r.stats.replays, 4);
}

TEST(CustomOpCompiled, ReduceOverheadSaysWhyAnUnsafeOpKeepsItsGraphFromADeviceGraph) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  lib::OpDef d;
  d.name = "comptest::copy_unsafe";
  d.inputs = {"x"};
  d.shape = [](lib::ShapeContext& ctx) { ctx.add_output_like(0); };
  d.cuda = [](const lib::KernelContext& ctx) { ctx.output(0).copy_(ctx.input(0)); };
  const lib::Op unsafe = lib::define_op(std::move(d));
  const auto fast = compile([&](const Tensor& x) { return unsafe.one({x * 2}) + 1; },
                            {.mode = Mode::ReduceOverhead, .name = "unsafe"});
  const Tensor x = randn({16}).to(Device::cuda());
  for (int i = 0; i < 3; ++i)
    EXPECT_TRUE(same(fast(x).to(Device::cpu()), (x * 2 + 1).to(Device::cpu())));
  const std::string text = fast.explain().to_string();
  EXPECT_NE(text.find("custom op comptest::copy_unsafe is not defined cuda_graph_safe"),
            std::string::npos)
      << text;
}

}  // namespace
}  // namespace kiln
