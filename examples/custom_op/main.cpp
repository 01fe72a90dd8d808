// A fused RMSNorm as a kiln op of one's own (docs/custom_ops.md): a shape
// rule, a CPU kernel (and a CUDA kernel, rms_norm_cuda.cu, where built with
// CUDA), a backward written with kiln ops. The program
//   1. checks the op against kiln's own F::rms_norm: values and gradients;
//   2. trains a small network that uses it, the whole training step
//      compiled into one graph, and checks its first steps against the same
//      steps run eagerly;
//   3. on a CUDA device, checks the CUDA kernel against the CPU one and runs
//      it compiled with reduce-overhead, inside a CUDA graph.
//
//   custom_op [steps]     exits with status 1 when a check fails or the
//                         network's held-out loss is not below 10% of its first
#include <kiln/kiln.h>
#include <kiln/library.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>

#ifdef EXAMPLE_WITH_CUDA
#include "rms_norm_cuda.h"
#endif

using namespace kiln;
namespace F = kiln::nn::functional;
namespace lib = kiln::library;

namespace {

// y = x * w / sqrt(mean(x^2 over the last dim) + eps), float32.
void rms_norm_cpu(const lib::KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const int64_t cols = x.size(-1), rows = cols == 0 ? 0 : x.numel() / cols;
  const auto eps = static_cast<float>(ctx.attr<double>("eps"));
  const auto* in = static_cast<const float*>(x.data_ptr());
  const auto* w = static_cast<const float*>(ctx.input(1).data_ptr());
  auto* out = static_cast<float*>(ctx.output(0).data_ptr());
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = in + r * cols;
    float sum = 0;
    for (int64_t c = 0; c < cols; ++c) sum += row[c] * row[c];
    const float scale = 1.0f / std::sqrt(sum / static_cast<float>(cols) + eps);
    for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = row[c] * scale * w[c];
  }
}

// The gradients of x and w, with kiln ops (so they differentiate again).
TensorList rms_norm_backward(const lib::BackwardContext& ctx, const TensorList& grads) {
  const Tensor& x = ctx.input(0);
  const Tensor& w = ctx.input(1);
  const Tensor& g = grads[0];
  const Tensor r = (x.square().mean({-1}, true) + ctx.attr<double>("eps")).rsqrt();
  const Tensor n = x * r;
  TensorList out(2);
  if (ctx.needs_grad(0)) {
    const Tensor gn = g * w;
    out[0] = r * (gn - n * (gn * n).mean({-1}, true));
  }
  if (ctx.needs_grad(1)) out[1] = (g * n).reshape({-1, w.size(0)}).sum({0});
  return out;
}

const lib::Op& rms_norm_op() {
  static const lib::Op op = [] {
    lib::OpDef d;
    d.name = "example::rms_norm";
    d.inputs = {"x", "weight"};
    d.attrs = {{"eps", lib::AttrType::Float}};
    d.shape = [](lib::ShapeContext& ctx) {
      const std::string op(ctx.op());
      if (ctx.dtype(0) != kFloat32 || ctx.dtype(1) != kFloat32)
        throw DTypeError(op + ": expected float32 x and weight");
      if (ctx.dim(0) < 1 || ctx.dim(1) != 1 || ctx.size(1, 0) != ctx.size(0, -1))
        throw ShapeError(op + ": weight must be 1-d, as long as x's last dim");
      ctx.add_output_like(0);
    };
    d.cpu = rms_norm_cpu;
#ifdef EXAMPLE_WITH_CUDA
    d.cuda = [](const lib::KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      const int64_t cols = x.size(-1);
      launch_rms_norm(static_cast<const float*>(x.data_ptr()),
                      static_cast<const float*>(ctx.input(1).data_ptr()),
                      static_cast<float*>(ctx.output(0).data_ptr()),
                      cols == 0 ? 0 : x.numel() / cols, cols,
                      static_cast<float>(ctx.attr<double>("eps")), ctx.stream());
    };
    d.cuda_graph_safe = true;  // one launch on ctx.stream(), nothing else
#endif
    d.backward = rms_norm_backward;
    d.example_inputs = {empty({2, 8}), empty({8})};
    d.example_attrs = {1e-6};
    return lib::define_op(std::move(d));
  }();
  return op;
}

// The op as a module, as nn::RMSNorm is.
struct FusedRMSNorm : nn::Module {
  Tensor weight;
  double eps;
  FusedRMSNorm(int64_t dim, double eps = 1e-6) : weight(ones({dim})), eps(eps) {
    register_parameter("weight", weight);
  }
  Tensor forward(const Tensor& x) { return rms_norm_op().one({x, weight}, {eps}); }
};

struct Net : nn::Module {
  nn::Linear in{16, 64}, out{64, 1};
  FusedRMSNorm norm{64};
  Net() {
    register_module("in", in);
    register_module("norm", norm);
    register_module("out", out);
  }
  Tensor forward(const Tensor& x) { return out(silu(norm.forward(in(x)))); }
};

double max_difference(const Tensor& a, const Tensor& b) {
  return (a.to(Device::cpu()) - b.to(Device::cpu())).abs().max().item<double>();
}

bool check(bool ok, const char* what, double value) {
  std::printf("%-58s %.3g  %s\n", what, value, ok ? "ok" : "FAILED");
  return ok;
}

// 1. The op against kiln's F::rms_norm.
bool matches_kiln(Generator& gen) {
  const Tensor x = randn({5, 7, 32}, {}, &gen).requires_grad_();
  const Tensor w = randn({32}, {}, &gen).requires_grad_();
  const Tensor y = rms_norm_op().one({x, w}, {1e-6});
  const Tensor want = F::rms_norm(x, {32}, w, 1e-6);
  const Tensor g = randn({5, 7, 32}, {}, &gen);
  const TensorList got_grads = autograd::grad({y}, {x, w}, {g});
  const TensorList want_grads = autograd::grad({want}, {x, w}, {g});
  bool ok =
      check(max_difference(y, want) < 1e-5, "forward against F::rms_norm", max_difference(y, want));
  ok &= check(max_difference(got_grads[0], want_grads[0]) < 1e-4, "x gradient against F::rms_norm",
              max_difference(got_grads[0], want_grads[0]));
  ok &= check(max_difference(got_grads[1], want_grads[1]) < 1e-4,
              "weight gradient against F::rms_norm", max_difference(got_grads[1], want_grads[1]));
  return ok;
}

Tensor teacher(const Tensor& x) {
  return (x.sum({1}, true) * 0.3).sin() + x.select(1, 0).unsqueeze(1) * 0.5;
}

// 2. Training with the whole step compiled; its first steps against eager ones.
bool trains(int steps, Generator& gen) {
  manual_seed(11);
  Net net;
  manual_seed(11);
  Net eager_net;
  optim::Adam opt(net.parameters(), {.lr = 3e-3});
  optim::Adam eager_opt(eager_net.parameters(), {.lr = 3e-3});
  auto step = [](Net& n, optim::Adam& o, const Tensor& x, const Tensor& y) {
    o.zero_grad();
    Tensor loss = F::mse_loss(n.forward(x), y);
    loss.backward();
    o.step();
    return loss;
  };
  auto compiled_step =
      compile([&](const Tensor& x, const Tensor& y) { return step(net, opt, x, y); },
              {.name = "train_step"});
  const Tensor test_x = randn({256, 16}, {}, &gen), test_y = teacher(test_x);
  auto test_loss = [&] {
    NoGradGuard no_grad;
    return F::mse_loss(net.forward(test_x), test_y).item<double>();
  };
  const double first = test_loss();
  double eager_difference = 0;
  for (int i = 0; i < steps; ++i) {
    const Tensor x = randn({64, 16}, {}, &gen), y = teacher(x);
    const Tensor loss = compiled_step(x, y);
    if (i < 10)
      eager_difference =
          std::max(eager_difference, max_difference(loss, step(eager_net, eager_opt, x, y)));
  }
  const double last = test_loss();
  const CompileStats s = compiled_step.stats();
  bool ok =
      check(eager_difference == 0, "compiled steps against eager (10 steps)", eager_difference);
  ok &= check(s.graph_breaks == 0 && s.eager_calls == 0, "graph breaks and eager calls",
              double(s.graph_breaks + s.eager_calls));
  ok &= check(last < 0.1 * first, "held-out loss over its first value", last / first);
  return ok;
}

// 3. The CUDA kernel against the CPU one, and inside a CUDA graph.
bool runs_on_cuda(Generator& gen) {
#ifdef EXAMPLE_WITH_CUDA
  if (!cuda::is_available()) {
    std::printf("no CUDA device: the CUDA kernel is not run\n");
    return true;
  }
  const Tensor x = randn({33, 300}, {}, &gen), w = randn({300}, {}, &gen);
  const Tensor want = rms_norm_op().one({x, w}, {1e-6});
  const Tensor xc = x.to(Device::cuda()), wc = w.to(Device::cuda());
  const Tensor got = rms_norm_op().one({xc, wc}, {1e-6});
  bool ok = check(max_difference(got, want) < 1e-5, "CUDA kernel against the CPU kernel",
                  max_difference(got, want));
  auto graphed = compile(
      [&](const Tensor& a) {
        return rms_norm_op().one({a * 2, wc}, {1e-6}) + 1;
      },
      {.mode = Mode::ReduceOverhead, .name = "graphed"});
  for (int i = 0; i < 3; ++i)
    ok &= max_difference(graphed(xc), rms_norm_op().one({xc * 2, wc}, {1e-6}) + 1) < 1e-6;
  const ExplainReport report = graphed.explain();
  const bool recorded = report.graphs.size() == 1 && report.graphs[0].cuda_graph;
  ok &= check(ok && recorded, "reduce-overhead: one CUDA graph, results as eager's",
              double(report.graphs.size()));
  return ok;
#else
  (void)gen;
  std::printf("built without CUDA: the CUDA kernel is not built\n");
  return true;
#endif
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 400;
  Generator gen(77);
  try {
    bool ok = matches_kiln(gen);
    ok &= trains(steps, gen);
    ok &= runs_on_cuda(gen);
    return ok ? 0 : 1;
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
