// Custom ops (include/kiln/library.h): eager calls with the user's kernels,
// gradients against finite differences and double backward, several
// outputs, and every definition and call error. Compiled custom ops:
// tests/compiler/custom_op_test.cpp.
#include <gtest/gtest.h>

#include <cmath>

#include "kiln/kiln.h"
#include "kiln/library.h"
#include "unit/expect_error.h"

namespace kiln {
namespace {

namespace lib = kiln::library;
using kiln::testing::expect_error;
using kiln::testing::expect_error_with;

// Within tol of each other, element by element.
bool close(const Tensor& a, const Tensor& b, double tol) {
  if (a.sizes() != b.sizes()) return false;
  const auto x = a.to_vector<double>(), y = b.to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i)
    if (!(std::abs(x[i] - y[i]) <= tol)) return false;
  return true;
}

template <class T, class F>
void each_element(const lib::KernelContext& ctx, F&& f) {
  const auto n = static_cast<size_t>(ctx.input(0).numel());
  f(static_cast<const T*>(ctx.input(0).data_ptr()), static_cast<T*>(ctx.output(0).data_ptr()), n);
}

// y = x^3 + a * w (float32 and float64 on the CPU), its backward with kiln ops.
lib::Op cube_plus() {
  static const lib::Op op = [] {
    lib::OpDef d;
    d.name = "libtest::cube_plus";
    d.inputs = {"x", "w"};
    d.attrs = {{"a", lib::AttrType::Float}};
    d.shape = [](lib::ShapeContext& ctx) {
      if (ctx.sizes(0) != ctx.sizes(1) || ctx.dtype(0) != ctx.dtype(1))
        throw ShapeError(std::string(ctx.op()) + ": x and w differ");
      if (ctx.dtype(0) != kFloat32 && ctx.dtype(0) != kFloat64)
        throw DTypeError(std::string(ctx.op()) + ": float32 or float64 only");
      ctx.add_output_like(0);
    };
    d.cpu = [](const lib::KernelContext& ctx) {
      const double a = ctx.attr<double>("a");
      auto run = [&](auto zero) {
        using T = decltype(zero);
        const T* w = static_cast<const T*>(ctx.input(1).data_ptr());
        each_element<T>(ctx, [&](const T* x, T* y, size_t n) {
          for (size_t i = 0; i < n; ++i) y[i] = x[i] * x[i] * x[i] + static_cast<T>(a) * w[i];
        });
      };
      if (ctx.input(0).dtype() == kFloat64) {
        run(0.0);
      } else {
        run(0.0f);
      }
    };
    d.backward = [](const lib::BackwardContext& ctx, const TensorList& g) {
      TensorList out(2);
      if (ctx.needs_grad(0)) out[0] = g[0] * ctx.input(0).square() * 3;
      if (ctx.needs_grad(1)) out[1] = g[0] * ctx.attr<double>("a");
      return out;
    };
    d.example_inputs = {empty({2, 3}), empty({2, 3})};
    d.example_attrs = {0.5};
    return lib::define_op(std::move(d));
  }();
  return op;
}

// Per row of a 2-d float32 input: its minimum and maximum (two outputs).
lib::Op row_min_max() {
  static const lib::Op op = [] {
    lib::OpDef d;
    d.name = "libtest::row_min_max";
    d.inputs = {"x"};
    d.shape = [](lib::ShapeContext& ctx) {
      if (ctx.dim(0) != 2) throw ShapeError(std::string(ctx.op()) + ": expected a 2-d input");
      ctx.add_output({ctx.size(0, 0)}, ctx.dtype(0), ctx.device(0));
      ctx.add_output({ctx.size(0, 0)}, ctx.dtype(0), ctx.device(0));
    };
    d.cpu = [](const lib::KernelContext& ctx) {
      const int64_t rows = ctx.input(0).size(0), cols = ctx.input(0).size(1);
      const auto* x = static_cast<const float*>(ctx.input(0).data_ptr());
      auto* lo = static_cast<float*>(ctx.output(0).data_ptr());
      auto* hi = static_cast<float*>(ctx.output(1).data_ptr());
      for (int64_t r = 0; r < rows; ++r) {
        lo[r] = hi[r] = x[r * cols];
        for (int64_t c = 1; c < cols; ++c) {
          lo[r] = std::min(lo[r], x[r * cols + c]);
          hi[r] = std::max(hi[r], x[r * cols + c]);
        }
      }
    };
    d.backward = [](const lib::BackwardContext& ctx, const TensorList& g) {
      const Tensor& x = ctx.input(0);
      const Tensor at_min = eq(x, ctx.output(0).unsqueeze(1)).to(x.dtype());
      const Tensor at_max = eq(x, ctx.output(1).unsqueeze(1)).to(x.dtype());
      return TensorList{at_min * g[0].unsqueeze(1) + at_max * g[1].unsqueeze(1)};
    };
    return lib::define_op(std::move(d));
  }();
  return op;
}

TEST(CustomOp, RunsItsKernelEagerlyOnAnyLayout) {
  const Tensor x = randn({4, 5}), w = randn({4, 5});
  const Tensor y = cube_plus().one({x, w}, {0.5});
  EXPECT_TRUE(close(y, x * x * x + w * 0.5, 1e-6));
  // A transposed input reaches the kernel contiguous.
  const Tensor xt = randn({5, 4}).t(), wt = randn({5, 4}).t();
  EXPECT_TRUE(close(cube_plus().one({xt, wt}, {2}), xt * xt * xt + wt * 2, 1e-6));
  const Tensor d = randn({3}, {.dtype = kFloat64});
  EXPECT_EQ(cube_plus().one({d, d}, {1.0}).dtype(), kFloat64);
  EXPECT_EQ(lib::find_op("libtest::cube_plus").name(), "libtest::cube_plus");
}

TEST(CustomOp, GradientsMatchFiniteDifferencesAndDifferentiateAgain) {
  const Tensor x = randn({3, 2}, {.dtype = kFloat64}).requires_grad_(),
               w = randn({3, 2}, {.dtype = kFloat64}).requires_grad_();
  const Tensor y = cube_plus().one({x, w}, {1.5});
  Tensor gx, gw;
  {
    TensorList g =
        autograd::grad({y.sum()}, {x, w}, {}, {.retain_graph = true, .create_graph = true});
    gx = g[0], gw = g[1];
  }
  // Central differences of the sum, element by element.
  const auto xs = x.detach().to_vector<double>(), ws = w.detach().to_vector<double>();
  const auto analytic_x = gx.detach().to_vector<double>();
  const auto analytic_w = gw.detach().to_vector<double>();
  const double h = 1e-6;
  for (size_t i = 0; i < xs.size(); ++i) {
    auto f = [&](double xi) {
      std::vector<double> v = xs;
      v[i] = xi;
      return cube_plus()
          .one({from_vector<double>(v).reshape({3, 2}), w.detach()}, {1.5})
          .sum()
          .item<double>();
    };
    EXPECT_NEAR(analytic_x[i], (f(xs[i] + h) - f(xs[i] - h)) / (2 * h), 1e-6);
    EXPECT_NEAR(analytic_w[i], 1.5, 1e-12);
  }
  // d/dx of sum(3 x^2) is 6 x: the backward's kiln ops differentiate.
  const Tensor ggx = autograd::grad({gx.sum()}, {x})[0];
  EXPECT_TRUE(close(ggx, x.detach() * 6, 1e-12));
}

TEST(CustomOp, SeveralOutputsAndAnOutputWithoutGradient) {
  const Tensor x = from_vector<float>({3, -1, 2, 0, 5, 4}).reshape({2, 3}).requires_grad_();
  TensorList mm = row_min_max()({x});
  ASSERT_EQ(mm.size(), 2u);
  EXPECT_EQ(mm[0].to_vector<float>(), (std::vector<float>{-1, 0}));
  EXPECT_EQ(mm[1].to_vector<float>(), (std::vector<float>{3, 5}));
  // Only the maxima are used: the minima's gradient is zeros, made for the backward.
  mm[1].sum().backward();
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{1, 0, 0, 0, 1, 0}));
}

TEST(CustomOp, DefinitionErrorsNameTheOp) {
  (void)cube_plus();
  auto base = [] {
    lib::OpDef d;
    d.name = "libtest::fresh";
    d.inputs = {"x"};
    d.shape = [](lib::ShapeContext& ctx) { ctx.add_output_like(0); };
    d.cpu = [](const lib::KernelContext&) {};
    return d;
  };
  {
    lib::OpDef d = base();
    d.name = "libtest::cube_plus";
    expect_error<ValueError>([&] { lib::define_op(d); }, "libtest::cube_plus", "defined already");
  }
  for (const char* bad : {"nonamespace", "::x", "a::", "a::b-c", "a b::c"}) {
    lib::OpDef d = base();
    d.name = bad;
    expect_error<ValueError>([&] { lib::define_op(d); }, bad, "namespace::name");
  }
  {
    lib::OpDef d = base();
    d.shape = [](lib::ShapeContext& ctx) {
      if (ctx.dim(0) != 3) throw ShapeError(std::string(ctx.op()) + ": expected 3 dims");
      ctx.add_output_like(0);
    };
    d.example_inputs = {empty({2, 2})};
    expect_error_with<ValueError>([&] { lib::define_op(d); },
                                  {"libtest::fresh", "example", "expected 3 dims"});
  }
  {
    lib::OpDef d = base();
    d.cpu = nullptr;
    expect_error<ValueError>([&] { lib::define_op(d); }, "libtest::fresh", "no kernel");
  }
  {
    lib::OpDef d = base();
    d.cuda_graph_safe = true;
    expect_error<ValueError>([&] { lib::define_op(d); }, "libtest::fresh", "no CUDA kernel");
  }
  {
    lib::OpDef d = base();
    d.shape = nullptr;
    expect_error<ValueError>([&] { lib::define_op(d); }, "libtest::fresh", "no shape rule");
  }
  {
    lib::OpDef d = base();
    d.inputs = {"x", "x"};
    expect_error<ValueError>([&] { lib::define_op(d); }, "libtest::fresh", "'x'");
  }
  {
    lib::OpDef d = base();
    d.attrs = {{"k", lib::AttrType::Int}, {"k", lib::AttrType::Float}};
    expect_error<ValueError>([&] { lib::define_op(d); }, "libtest::fresh", "'k'");
  }
  // None of the failed definitions was kept.
  expect_error<ValueError>([] { lib::find_op("libtest::fresh"); }, "libtest::fresh");
}

TEST(CustomOp, CallErrorsNameTheOpAndTheValues) {
  const Tensor x = randn({2, 3});
  expect_error_with<ValueError>([&] { cube_plus()({x}, {1.0}); },
                                {"libtest::cube_plus", "expected 2 tensor inputs, got 1"});
  expect_error_with<ValueError>(
      [&] {
        cube_plus()({x, x}, {});
      },
      {"libtest::cube_plus", "expected 1 attributes, got 0"});
  expect_error_with<ValueError>(
      [&] {
        cube_plus()({x, x}, {std::string("a")});
      },
      {"libtest::cube_plus", "'a'", "float", "str"});
  expect_error_with<ValueError>(
      [&] {
        cube_plus()({x, Tensor()}, {1.0});
      },
      {"libtest::cube_plus", "'w'", "undefined"});
  expect_error_with<ShapeError>(
      [&] {
        cube_plus()({x, randn({3, 2})}, {1.0});
      },
      {"libtest::cube_plus", "differ"});
  expect_error_with<DTypeError>(
      [&] {
        cube_plus()({x.to(kInt32), x.to(kInt32)}, {1.0});
      },
      {"libtest::cube_plus", "float"});
  // A kernel reading an attribute the op does not have, or as another type.
  lib::OpDef d;
  d.name = "libtest::reads_wrong";
  d.inputs = {"x"};
  d.attrs = {{"n", lib::AttrType::Int}};
  d.shape = [](lib::ShapeContext& ctx) { ctx.add_output_like(0); };
  d.cpu = [](const lib::KernelContext& ctx) { (void)ctx.attr<double>("n"); };
  const lib::Op wrong = lib::define_op(std::move(d));
  expect_error_with<ValueError>([&] { wrong({x}, {int64_t{2}}); },
                                {"libtest::reads_wrong", "'n' is int, read as float"});
}

TEST(CustomOp, AnOpWithoutABackwardFailsWhenDifferentiated) {
  lib::OpDef d;
  d.name = "libtest::no_backward";
  d.inputs = {"x"};
  d.shape = [](lib::ShapeContext& ctx) { ctx.add_output_like(0); };
  d.cpu = [](const lib::KernelContext& ctx) { ctx.output(0).copy_(ctx.input(0)); };
  const lib::Op op = lib::define_op(std::move(d));
  const Tensor x = randn({3}).requires_grad_();
  const Tensor y = op.one({x});
  EXPECT_TRUE(close(y, x.detach(), 0));
  expect_error<Error>([&] { y.sum().backward(); }, "libtest::no_backward", "without a backward");
}

TEST(CustomOp, AKernelForTheDeviceIsRequired) {
  lib::OpDef d;
  d.name = "libtest::cuda_only";
  d.inputs = {"x"};
  d.shape = [](lib::ShapeContext& ctx) { ctx.add_output_like(0); };
  d.cuda = [](const lib::KernelContext&) {};
  const lib::Op op = lib::define_op(std::move(d));
  expect_error_with<DeviceError>([&] { op({randn({2})}); },
                                 {"libtest::cuda_only", "no kernel for cpu", "a CUDA kernel"});
}

TEST(CustomOp, SizesComputeAndCompareAsIntegers) {
  const lib::Size a = 7, b = 2;
  EXPECT_EQ((a / b).value(), 3);
  EXPECT_EQ((a % b).value(), 1);
  EXPECT_EQ((a * b - 1).value(), 13);
  EXPECT_TRUE(a > b && b <= 2 && a != b);
  EXPECT_FALSE(a.is_symbolic());
  expect_error<ValueError>([&] { (void)(a / lib::Size(0)); }, "divided by zero");
}

}  // namespace
}  // namespace kiln
