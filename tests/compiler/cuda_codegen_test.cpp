// Generated CUDA kernels (compiler/codegen/cuda_source.h,
// backends/cuda/kernel_compiler.h): the groups the CPU generates, written
// as CUDA C++ and compiled by NVRTC. Without a GPU (CI), every kernel of
// programs covering each op the generator has, of row reductions, and of a
// small BERT, compiles to PTX. On a GPU,
// each program runs as its generated kernels, bitwise eager's on the device
// (the library's arithmetic, backends/cuda/scalar_ops.cuh) and within
// tolerance of the reference kernels; through kiln::compile too, with its
// CUDA graph, one program for every size of a dynamic dim, and the disk
// cache.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <string>

#include "backends/cuda/kernel_compiler.h"
#include "compiler/codegen/cuda_source.h"
#include "compiler/compiler_testing.h"
#include "compiler/runtime/executable.h"
#include "kiln/cuda.h"
#include "kiln/kiln.h"
#include "ops/dispatch.h"

namespace kiln::compiler {
namespace {

using testing::expect_near_reference;
using testing::generated_steps;
using testing::Program;
using testing::values;

struct Case {
  std::string name;
  Program f;
  int inputs = 2;
  size_t kernels = 1;  // generated steps
};

// Every form the generator has, in chains: unary ops, binary ops with and
// without alpha, compares, where, clamps with and without bounds,
// masked_fill with an infinity, isnan/isinf and logical ops, casts, scalar
// constants, values stored besides the result, siblings, in-place chains.
std::vector<Case> cases() {
  using T = const TensorList&;
  std::vector<Case> c;
  for (const testing::UnaryCase& u : testing::unary_cases()) {
    // log, sqrt...: inputs of at least 0.25.
    const bool positive = u.positive_only;
    c.push_back({u.name, [op = u.op, positive](T a) {
                   const Tensor x = a[0] * 1.5 + a[1];
                   return TensorList{op(positive ? x.abs() + 0.25 : x)};
                 }});
  }
  c.push_back({"add alpha, sub alpha, div, pow", [](T a) {
                 return TensorList{(add(a[0], a[1], 0.3) / sub(a[1], a[0], 2.5)) +
                                   a[0].abs().pow(a[1])};
               }});
  c.push_back({"maximum, minimum, remainder", [](T a) {
                 return TensorList{maximum(a[0], a[1]) * minimum(a[0], a[1]) +
                                   remainder(a[0], a[1])};
               }});
  c.push_back({"compares and where", [](T a) {
                 const Tensor w =
                     where(a[0] > a[1], a[0], a[1] * 2.0) + where(a[0] <= a[1], a[0].exp(), a[1]);
                 return TensorList{where(a[0] == a[1], w, where(a[0] != 0.5, -w, w + 1.0))};
               }});
  c.push_back({"masked_fill with infinities, isnan, isinf, logical", [](T a) {
                 const Tensor m =
                     logical_or(isnan(a[0]), logical_and(a[1] > 0.0, logical_not(isinf(a[0]))));
                 const Tensor f =
                     masked_fill(a[0], a[1] > 0.5, -std::numeric_limits<double>::infinity());
                 return TensorList{where(logical_xor(m, a[0] < -1.0), a[1], f) + 1.0};
               }});
  c.push_back({"NaN fill", [](T a) {
                 return TensorList{masked_fill(a[0] * 2.0, a[1] > 1.0, std::nan("")) + a[1]};
               }});
  c.push_back({"casts and constants", [](T a) {
                 return TensorList{(a[0].to(kFloat64) * 3.0).to(a[1].dtype()) +
                                   (a[0] > a[1]).to(a[1].dtype()) * 0.5 - 1};
               }});
  c.push_back({"a value stored besides the result", [](T a) {
                 const Tensor y = a[0] * 2.0;
                 return TensorList{y, (y + a[1]).relu()};
               }});
  c.push_back({"siblings", [](T a) { return TensorList{(a[0] * 2.0).exp(), (a[0] + 1.0).sin()}; }});
  c.push_back({"an in-place chain", [](T a) {
                 Tensor m = a[0] * 1.0;
                 m.mul_(a[1]).add_(a[0], 0.5);
                 return TensorList{m.sqrt()};
               }});
  return c;
}

// The reductions a device kernel runs with the group that makes their rows
// (codegen/cuda_source.h), of an input [.., n]; and one that stays apart.
struct RowCase {
  std::string name;
  std::function<Tensor(const Tensor& x, const Tensor& w, const Tensor& b)> op;
  bool joins = true;
  int64_t trailing = 1;  // dims of a row (w and b's)
};

std::vector<RowCase> row_cases() {
  using nn::functional::layer_norm;
  using W = const Tensor&;
  return {
      {"softmax", [](W x, W, W) { return x.softmax(-1); }},
      {"log_softmax", [](W x, W, W) { return x.log_softmax(-1); }},
      {"layer_norm", [](W x, W w, W b) { return layer_norm(x, {x.size(-1)}, w, b, 1e-5); }},
      {"layer_norm, weight alone",
       [](W x, W w, W) { return layer_norm(x, {x.size(-1)}, w, Tensor(), 1e-3); }},
      {"layer_norm, no affine", [](W x, W, W) { return layer_norm(x, {x.size(-1)}); }},
      {"layer_norm of two dims",
       [](W x, W w, W b) {
         return layer_norm(x, {x.size(-2), x.size(-1)}, w, b);
       },
       true, 2},
      {"sum (apart on CUDA)", [](W x, W, W) { return x.sum({-1}); }, false},
  };
}

#ifdef KILN_WITH_CUDA
// Adds k unless a kernel of its symbol is there (one source defines each once).
void add_once(std::vector<codegen::PointwiseKernel>& kernels, const codegen::PointwiseKernel& k) {
  if (std::none_of(kernels.begin(), kernels.end(),
                   [&](const auto& other) { return other.symbol == k.symbol; }))
    kernels.push_back(k);
}

// The kernels the schedule of f over args (on the CPU) generates, as they
// would run on a CUDA device: a reduction's group with its reduction where
// a device kernel reduces such rows, the group alone otherwise.
std::vector<codegen::PointwiseKernel> cuda_kernels(const Program& f, const TensorList& args) {
  NoGradGuard no_grad;
  const Trace trace = testing::trace_of(f, args);
  const Schedule s = schedule_graph(trace.graph, {});
  std::vector<codegen::PointwiseKernel> kernels;
  for (const ScheduledStep& step : s.steps) {
    if (step.kernel < 0) continue;
    codegen::PointwiseKernel k = s.kernels[static_cast<size_t>(step.kernel)];
    k.device = Device::cuda(0);
    // The program's numbers (0-dim, on the host there) are passed by value.
    for (size_t i = 0; i < k.inputs.size(); ++i)
      k.inputs[i].host = trace.graph.value(step.inputs[i]).sizes.empty();
    if (const auto& r = step.reduction; r && r->epilogue_kernel < 0 && r->column_begin < 0 &&
                                        r->permutation.empty() &&
                                        codegen::reduces_rows_on_device(r->op)) {
      const Node& n = trace.graph.nodes()[static_cast<size_t>(r->node)];
      codegen::as_row_kernel(k, n, !step.stored.empty());
    }
    add_once(kernels, k);
  }
  return kernels;
}
#endif

TEST(CudaSource, EveryKernelCompilesWithNvrtcWithoutAGpu) {
#ifndef KILN_WITH_CUDA
  GTEST_SKIP() << "this build of kiln has no CUDA backend";
#else
  Generator gen(3);
  std::vector<codegen::PointwiseKernel> all;
  for (DType dtype : {kFloat32, kFloat64}) {
    for (const Case& c : cases()) {
      TensorList args;
      for (int i = 0; i < c.inputs; ++i) args.push_back(values({5, 3}, dtype, gen));
      auto kernels = cuda_kernels(c.f, args);
      ASSERT_EQ(kernels.size(), c.kernels) << c.name << " " << dtype;
      all.insert(all.end(), kernels.begin(), kernels.end());
    }
  }
  // A broadcast operand and a transposed one: other inner kinds.
  const Tensor x = values({6, 4}, kFloat32, gen);
  for (auto k :
       cuda_kernels([](const TensorList& a) { return TensorList{(a[0] * a[1]).tanh() + a[2]}; },
                    {x, values({4}, kFloat32, gen), values({4, 6}, kFloat32, gen).t()}))
    all.push_back(k);
  // Row kernels: each reduction with its prologue, storing its rows or not.
  for (DType dtype : {kFloat32, kFloat64}) {
    for (const RowCase& c : row_cases()) {
      const auto op = c.op;
      const Tensor w = c.trailing == 2 ? values({3, 5}, dtype, gen) : values({5}, dtype, gen);
      const Program f = [op, w](const TensorList& a) {
        return TensorList{op((a[0] * 0.5 + a[1]).tanh(), w, w * 2.0)};
      };
      const Program stores = [op, w](const TensorList& a) {
        const Tensor h = a[0] - a[1];
        return TensorList{op(h, w, Tensor()), h};
      };
      for (const Program& p : {f, stores}) {
        auto kernels = cuda_kernels(p, {values({4, 3, 5}, dtype, gen), values({5}, dtype, gen)});
        ASSERT_EQ(kernels.size(), 1u) << c.name;
        EXPECT_EQ(kernels[0].rows.has_value(), c.joins) << c.name;
        // (A layer_norm of two dims shares the kernel of one: rows are sizes.)
        add_once(all, kernels[0]);
      }
    }
  }
  // A model's groups: a small BERT (residual adds, gelu, the attention's
  // scale and mask, layer_norm's prologues), forward in eval.
  const auto bert = testing::small_bert();
  const Tensor ids = randint(0, 100, {2, 9}, {}, &gen), mask = ones({2, 9}, {.dtype = kInt64});
  const auto bert_kernels = cuda_kernels(
      [bert](const TensorList& a) { return TensorList{(*bert)(a[0], a[1]).last_hidden_state}; },
      {ids, mask});
  EXPECT_GE(bert_kernels.size(), 3u);
  // Its layer_norms of residual sums: row kernels.
  EXPECT_TRUE(std::any_of(bert_kernels.begin(), bert_kernels.end(),
                          [](const auto& k) { return k.rows.has_value(); }));
  for (const auto& k : bert_kernels) add_once(all, k);
  const std::string source = codegen::emit_cuda(all);
  std::string why;
  const auto ptx = backend::cuda::nvrtc_compile(source, "compute_90", why);
  ASSERT_TRUE(ptx) << why << "\n" << source;
  size_t host = 0;
  for (const codegen::PointwiseKernel& k : all) {
    EXPECT_NE(ptx->find(".entry " + k.symbol), std::string::npos) << k.symbol;
    EXPECT_EQ(k.symbol.rfind(k.rows ? "kiln_rows_" : "kiln_pointwise_", 0), 0u) << k.symbol;
    for (const codegen::KernelOperand& in : k.inputs) host += in.host;
  }
  EXPECT_GT(host, 10u);  // the programs' numbers: by value
  // A source NVRTC refuses gives its log, not a crash.
  EXPECT_FALSE(backend::cuda::nvrtc_compile(source + "\nnot C++;\n", "compute_90", why));
  EXPECT_NE(why.find("NVRTC refused the source"), std::string::npos) << why;
#endif
}

// This binary's GPU tests run the CUDA fusions still in preview
// (backends/cuda_preview.h): the row kernels here, cuDNN's fused
// convolution in cuda_fusion_test.cpp, and the CUDA programs of the other
// tests with them.
const bool kPreviewOn = setenv("KILN_CUDA_PREVIEW", "1", 1) == 0;

bool has_cuda() { return kPreviewOn && cuda::is_available(); }
#define KILN_NEEDS_GPU() \
  if (!has_cuda()) GTEST_SKIP() << "no CUDA device: " << cuda::unavailable_reason()

// f's executable on CUDA: `kernels` generated device kernels, results
// eager's on the device bitwise, and (with `with_reference`) the reference
// kernels' on the CPU within tolerance.
void expect_generated_on_cuda(const Program& f, const TensorList& cpu_args, size_t kernels,
                              const std::string& what, bool with_reference = true) {
  NoGradGuard no_grad;
  TensorList args;
  for (const Tensor& a : cpu_args) args.push_back(a.to(Device::cuda(0)));
  const testing::Lowered l = testing::lower(f, args);
  ASSERT_EQ(generated_steps(l.exe->schedule()), kernels)
      << what << "\n"
      << to_text(l.trace->graph)
      << (l.exe->schedule().not_fused.empty() ? "" : l.exe->schedule().not_fused[0]);
  const TensorList want = f(args);
  TensorList reference;
  if (with_reference) {
    ops::ReferenceModeGuard ref;
    reference = f(cpu_args);
  }
  for (int run = 0; run < 2; ++run) {
    const TensorList got = l.exe->run(args);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_TRUE(got[i].device().is_cuda()) << what;
      EXPECT_TRUE(testing::same(got[i].to(Device::cpu()), want[i].to(Device::cpu())))
          << what << ": run " << run << " output " << i;
      if (with_reference) expect_near_reference(got[i], reference[i], what);
    }
  }
}

TEST(CudaCodegen, EveryOpIsOneKernelOfEagersBitsOnTheDevice) {
  KILN_NEEDS_GPU();
  Generator gen(4);
  for (DType dtype : {kFloat32, kFloat64}) {
    for (const Case& c : cases()) {
      // Sizes 0 and 1, a tail, and more elements than one grid covers (the
      // grid-stride loop: 32 blocks of 256 per multiprocessor), that one
      // against eager alone: among a million random inputs a composite
      // expression cancels past the reference's tolerance somewhere, where
      // eager's own kernels differ from it alike.
      for (int64_t n : {0, 1, 7, 1000, 1500000}) {
        if (n == 1500000 && dtype == kFloat64) continue;
        TensorList args;
        for (int i = 0; i < c.inputs; ++i) args.push_back(values({n}, dtype, gen));
        expect_generated_on_cuda(c.f, args, c.kernels,
                                 detail::str_cat(c.name, " ", dtype, " [", n, "]"), n <= 1000);
      }
    }
  }
}

TEST(CudaCodegen, BroadcastsNonContiguousAndOffsetInputs) {
  KILN_NEEDS_GPU();
  Generator gen(5);
  const Program chain = [](const TensorList& t) {
    return TensorList{gelu(t[0] * t[1] + t[2]).sigmoid() * 2.0};
  };
  for (DType dtype : {kFloat32, kFloat64}) {
    for (int64_t rows : {1, 3, 129, 2053}) {
      const std::string what = detail::str_cat(dtype, " rows ", rows);
      const Tensor x = values({rows, 19}, dtype, gen);
      expect_generated_on_cuda(chain, {x, values({19}, dtype, gen), values({rows, 1}, dtype, gen)},
                               1, what + " broadcasts");
      expect_generated_on_cuda(chain, {x, values({}, dtype, gen), x}, 1, what + " 0-d");
      // Transposed, strided and offset on the device.
      NoGradGuard no_grad;
      const Device cuda = Device::cuda(0);
      const TensorList dev = {values({19, rows}, dtype, gen).to(cuda).t(),
                              values({rows, 38}, dtype, gen).to(cuda).slice(1, 0, 38, 2),
                              values({rows + 1, 19}, dtype, gen).to(cuda).narrow(0, 1, rows)};
      const testing::Lowered l = testing::lower(chain, dev);
      ASSERT_EQ(generated_steps(l.exe->schedule()), 1u) << what;
      EXPECT_TRUE(
          testing::same(l.exe->run(dev)[0].to(Device::cpu()), chain(dev)[0].to(Device::cpu())))
          << what;
    }
  }
}

// A softmax, log_softmax or layer_norm of the rows a group makes is one
// kernel with it (codegen/cuda_source.h), eager's bits on the device: rows
// up to a warp's lanes and the block-wide ones past 1024 elements, no rows,
// empty rows, NaN and infinities (a row all -inf), broadcast inputs, and
// the rows stored where they are read after; a reduction the device kernels
// do not have stays apart.
TEST(CudaCodegen, RowReductionsJoinTheGroupThatMakesTheirRowsWithEagersBits) {
  KILN_NEEDS_GPU();
  Generator gen(7);
  const double inf = std::numeric_limits<double>::infinity();
  for (DType dtype : {kFloat32, kFloat64}) {
    for (const auto& [rows, n] : std::vector<std::pair<int64_t, int64_t>>{
             {0, 5}, {1, 1}, {3, 33}, {2, 300}, {67, 7}, {501, 61}, {4, 0}, {3, 1500}, {2, 4099}}) {
      for (const RowCase& c : row_cases()) {
        const int64_t a = c.trailing == 2 ? (n % 2 == 0 && n > 0 ? 2 : 1) : 1;
        const Shape row = c.trailing == 2 ? Shape{a, n / std::max<int64_t>(a, 1)} : Shape{n};
        Shape sizes{2, rows};
        sizes.insert(sizes.end(), row.begin(), row.end());
        const Tensor x = (randn(sizes, {}, &gen) * 2.0).to(dtype);
        const Tensor bias = values(row, dtype, gen);
        const Tensor w = values(row, dtype, gen), b = values(row, dtype, gen);
        const auto op = c.op;
        const std::string what = detail::str_cat(c.name, " ", dtype, " ", sizes);
        const Program f = [op, w, b](const TensorList& t) {
          const Device d = t[0].device();
          return TensorList{op((t[0] * 0.5 + t[1]).tanh(), w.to(d), b.to(d))};
        };
        // Masked as attention masks its scores: a row of -inf where the
        // mask holds everywhere.
        const Program masked = [op, w, b, inf](const TensorList& t) {
          const Device d = t[0].device();
          return TensorList{op(masked_fill(t[0] * 0.125, t[1] > 1.0, -inf), w.to(d), b.to(d))};
        };
        const Program stores = [op, w](const TensorList& t) {
          const Tensor h = t[0] - t[1];
          return TensorList{op(h, w.to(t[0].device()), Tensor()), h};
        };
        if (n == 0) {
          try {  // empty rows: an op that refuses them is not compiled either
            op(x, w, b);
          } catch (const Error&) {
            continue;
          }
        }
        expect_generated_on_cuda(f, {x, bias}, 1, what);
        expect_generated_on_cuda(masked, {x, bias * 3.0}, 1, what + " masked");
        expect_generated_on_cuda(stores, {x, bias}, c.joins ? 1 : 0, what + " stored");
        // The steps of the schedule, where there are rows to compute (an
        // empty tensor's ops are not fused: the H100 run saw 3 steps).
        if (x.numel() == 0) continue;
        NoGradGuard no_grad;
        const Device cuda = Device::cuda(0);
        const testing::Lowered l = testing::lower(f, {x.to(cuda), bias.to(cuda)});
        ASSERT_EQ(l.exe->schedule().steps.size(), c.joins ? 1u : 2u) << what;
        const testing::Lowered ls = testing::lower(stores, {x.to(cuda), bias.to(cuda)});
        EXPECT_EQ(ls.exe->schedule().steps[0].stored.size(), c.joins ? 1u : 0u) << what;
      }
    }
  }
}

// Through kiln::compile: the generated kernels in explain(), fewer launches
// than eager, reduce-overhead's CUDA graph replaying them, strict bitwise,
// and a dynamic dim's every size served by the one program.
TEST(CudaCodegen, CompiledFunctionsRunGeneratedKernelsInEveryMode) {
  KILN_NEEDS_GPU();
  Generator gen(6);
  const auto f = [](const Tensor& x, const Tensor& b) {
    const Tensor h = gelu(x * 0.5 + b);
    return (h * x.sigmoid()).tanh() - b;
  };
  for (Mode mode : {Mode::Default, Mode::ReduceOverhead}) {
    for (bool strict : {false, true}) {
      auto g = compile(f, {.mode = mode, .dynamic = Dynamic::On, .strict = strict});
      for (int64_t rows : {4, 9, 33, 70}) {
        const Tensor x = values({rows, 64}, kFloat32, gen).to(Device::cuda(0));
        const Tensor b = values({64}, kFloat32, gen).to(Device::cuda(0));
        for (int call = 0; call < 2; ++call)
          EXPECT_TRUE(testing::same(g(x, b).to(Device::cpu()), f(x, b).to(Device::cpu())))
              << rows << " call " << call;
      }
      const ExplainReport r = g.explain();
      const std::string text = r.to_string();
      EXPECT_NE(text.find("one generated kernel"), std::string::npos) << text;
      ASSERT_FALSE(r.graphs.empty());
      for (const auto& graph : r.graphs) EXPECT_EQ(graph.generated_kernels, 1) << text;
      EXPECT_GE(r.stats.bound_sizes, 2) << text;
    }
  }
}

// A transformer block's rows through kiln::compile: the residual sum and
// its layer_norm, the scaled and masked scores and their softmax, each one
// kernel, in every mode (strict, a CUDA graph, every size of a dynamic dim),
// results eager's bitwise; explain() names each kernel with its launch, and
// a profiling run times them.
TEST(CudaCodegen, CompiledRowKernelsInEveryModeWithTheirLaunchesInExplain) {
  KILN_NEEDS_GPU();
  Generator gen(8);
  const Device cuda = Device::cuda(0);
  const Tensor w = values({48}, kFloat32, gen).to(cuda), b = values({48}, kFloat32, gen).to(cuda);
  const auto f = [w, b](const Tensor& x, const Tensor& r, const Tensor& scores,
                        const Tensor& mask) {
    const Tensor h = nn::functional::layer_norm(x + r, {48}, w, b, 1e-12);
    const Tensor p = masked_fill(scores * 0.125, mask, -1e9).softmax(-1);
    return TensorList{h, p};
  };
  for (Mode mode : {Mode::Default, Mode::ReduceOverhead}) {
    for (bool strict : {false, true}) {
      auto g = compile(f, {.mode = mode, .dynamic = Dynamic::On, .strict = strict});
      for (int64_t tokens : {5, 17, 128}) {
        const Tensor x = values({2, tokens, 48}, kFloat32, gen).to(cuda);
        const Tensor r = values({2, tokens, 48}, kFloat32, gen).to(cuda);
        const Tensor scores = values({2, 3, tokens, tokens}, kFloat32, gen).to(cuda);
        const Tensor mask = (rand({2, 1, 1, tokens}, {}, &gen) < 0.2).to(cuda);
        for (int call = 0; call < 2; ++call) {
          const TensorList got = g(x, r, scores, mask), want = f(x, r, scores, mask);
          for (size_t i = 0; i < 2; ++i)
            EXPECT_TRUE(testing::same(got[i].to(Device::cpu()), want[i].to(Device::cpu())))
                << tokens << " call " << call << " output " << i;
        }
      }
      const ExplainReport r = g.explain();
      ASSERT_FALSE(r.graphs.empty());
      EXPECT_EQ(r.graphs.back().generated_kernels, 2) << r.to_string();
      ASSERT_EQ(r.graphs.back().kernels.size(), 2u) << r.to_string();
      for (const auto& k : r.graphs.back().kernels) {
        EXPECT_EQ(k.name.rfind("kiln_rows_", 0), 0u) << k.name;
        EXPECT_NE(k.launch.find("blocks of 256 threads: "), std::string::npos) << k.launch;
        EXPECT_EQ(k.ms, -1.0);
      }
      const Tensor x = values({2, 128, 48}, kFloat32, gen).to(cuda);
      const Tensor scores = values({2, 3, 128, 128}, kFloat32, gen).to(cuda);
      const Tensor mask = (rand({2, 1, 1, 128}, {}, &gen) < 0.2).to(cuda);
      const TensorList got = g.profile(x, x, scores, mask), want = f(x, x, scores, mask);
      EXPECT_TRUE(testing::same(got[1].to(Device::cpu()), want[1].to(Device::cpu())));
      const std::string text = g.explain().to_string();
      EXPECT_NE(text.find("256 rows of 48 elements, 32 lanes a row"), std::string::npos) << text;
      EXPECT_NE(text.find("768 rows of 128 elements, 32 lanes a row"), std::string::npos) << text;
      EXPECT_NE(text.find(" us in the profiling run"), std::string::npos) << text;
    }
  }
}

// Kernel counts pinned per reference model on CUDA, as on the CPU
// (Codegen.ReferenceModelsGenerateThePinnedKernels), so that a fusion
// regression fails: BERT's sums with the layer_norm after each, as row
// kernels; a frozen ResNet's relus and residual adds in its convolutions.
TEST(CudaCodegen, ReferenceModelsGenerateThePinnedKernels) {
  KILN_NEEDS_GPU();
  NoGradGuard no_grad;
  const Device cuda = Device::cuda(0);
  auto bert = testing::small_bert();
  bert->to(cuda);
  const Tensor ids = randint(0, 100, {1, 16}).to(cuda);
  const auto f = compile([&](const Tensor& x) { return bert->forward(x).last_hidden_state; },
                         {.check = true, .name = "bert"});
  EXPECT_TRUE(testing::same(f(ids).to(Device::cpu()),
                            bert->forward(ids).last_hidden_state.to(Device::cpu())));
  const ExplainReport r = f.explain();
  ASSERT_EQ(r.graphs.size(), 1u);
  const auto& g = r.graphs[0];
  // The embeddings' two adds, then each layer's two residual adds, each
  // with its layer_norm; the layers' groups share one kernel.
  EXPECT_EQ(g.generated_kernels, 2) << r.to_string();
  ASSERT_EQ(g.fused.size(), 5u) << r.to_string();
  EXPECT_NE(g.fused[0].find("add + add + layer_norm (nodes "), std::string::npos) << g.fused[0];
  for (size_t k = 0; k < g.fused.size(); ++k)
    EXPECT_NE(g.fused[k].find("its rows reduced by layer_norm as it computes them"),
              std::string::npos)
        << g.fused[k];
  EXPECT_EQ(g.steps, g.nodes - 6);

  manual_seed(4);
  auto net = models::resnet18({.num_classes = 10, .widths = {8, 16, 32, 64}});
  net->eval();
  net->to(cuda);
  const Tensor x = randn({1, 3, 32, 32}).to(cuda);
  const auto fast = compile(*net, {.freeze = true, .name = "resnet18"});
  // Folded batch norms and TF32 convolutions: eager's within 1e-2.
  const Tensor got = fast(x).to(Device::cpu()), want = (*net)(x).to(Device::cpu());
  EXPECT_LT((got - want).abs().max().item<double>(),
            1e-2 * (want.abs().max().item<double>() + 1e-3));
  const ExplainReport rr = fast.explain();
  ASSERT_EQ(rr.graphs.size(), 1u);
  // Every convolution followed by a relu takes it, and the 8 blocks' last
  // ones their residual add before it, in cuDNN's fused call: no pointwise
  // group is left.
  EXPECT_EQ(rr.graphs[0].generated_kernels, 0) << rr.to_string();
  ASSERT_EQ(rr.graphs[0].fused.size(), 17u) << rr.to_string();
  for (const std::string& line : rr.graphs[0].fused)
    EXPECT_NE(line.find("one conv2d call with epilogue "), std::string::npos) << line;
  EXPECT_EQ(rr.graphs[0].steps, rr.graphs[0].nodes - 17 - 8);
}

}  // namespace
}  // namespace kiln::compiler
