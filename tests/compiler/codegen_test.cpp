// Generated kernels (compiler/codegen/): groups of pointwise nodes run as one
// kernel kiln writes, compiles and loads. Every op the generator has, alone
// after one other node and in chains, gives eager's results bitwise (the
// same arithmetic, backends/cpu/scalar_ops.h) and the reference kernels'
// within tolerance, for each dtype, sizes 0 and 1, odd vector tails, sizes
// on both sides of the parallel threshold, broadcasts, non-contiguous and
// offset inputs. Without a compiler the groups run on the library kernels,
// with a note.
#include <gtest/gtest.h>

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "backends/cpu/kernel_compiler.h"
#include "backends/cpu/loops.h"
#include "compiler/compiler_testing.h"
#include "compiler/runtime/executable.h"
#include "compiler/schedule/memory_plan.h"
#include "kiln/kiln.h"
#include "ops/dispatch.h"

extern char** environ;

namespace kiln::compiler {
namespace {

using testing::expect_near_reference;
using testing::generated_steps;
using testing::lower;
using testing::Lowered;
using testing::Program;
using testing::unary_cases;
using testing::UnaryCase;
using testing::values;

// f through its executable (the measuring run and a planned one) against
// eager (bitwise) and the reference kernels; `kernels` groups generated.
void expect_generated(const Program& f, const TensorList& args, size_t kernels,
                      const std::string& what) {
  NoGradGuard no_grad;
  const Lowered l = lower(f, args);
  ASSERT_EQ(generated_steps(l.exe->schedule()), kernels)
      << what << "\n"
      << to_text(l.trace->graph) << "not fused:\n"
      << (l.exe->schedule().not_fused.empty() ? "" : l.exe->schedule().not_fused[0]);
  const TensorList want = f(args);
  TensorList reference;
  {
    ops::ReferenceModeGuard ref;
    reference = f(args);
  }
  for (int run = 0; run < 2; ++run) {
    const TensorList got = l.exe->run(args);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_TRUE(testing::same(got[i], want[i]))
          << what << ": run " << run << " output " << i << "\n"
          << to_text(l.trace->graph);
      expect_near_reference(got[i], reference[i], what);
    }
  }
  check_plan(l.trace->graph, l.exe->schedule(), l.exe->plan());
}

Tensor positive(const Shape& sizes, DType dtype, Generator& gen) {
  return (rand(sizes, {}, &gen) * 4.0 + 0.25).to(dtype);
}

using Unary = std::function<Tensor(const Tensor&)>;

TEST(Codegen, EveryUnaryOpAfterAnotherNodeIsOneKernelOfEagersBits) {
  KILN_NEEDS_COMPILER();
  Generator gen(5);
  for (DType dtype : {kFloat32, kFloat64}) {
    for (const UnaryCase& c : unary_cases()) {
      for (int64_t n : {0, 1, 7, 33}) {
        const Tensor x = c.positive_only ? positive({n}, dtype, gen) : values({n}, dtype, gen);
        const Tensor b = positive({n}, dtype, gen) * 0.01;
        const Unary op = c.op;
        // op(x + b): the add and the op in one kernel.
        expect_generated([op](const TensorList& a) { return TensorList{op(a[0] + a[1])}; }, {x, b},
                         1, detail::str_cat(c.name, " ", dtype, " [", n, "]"));
      }
    }
  }
}

struct BinaryCase {
  const char* name;
  std::function<Tensor(const Tensor&, const Tensor&)> op;
};

std::vector<BinaryCase> binary_cases() {
  return {
      {"add", [](const Tensor& a, const Tensor& b) { return a + b; }},
      {"add alpha", [](const Tensor& a, const Tensor& b) { return add(a, b, 0.3); }},
      {"sub", [](const Tensor& a, const Tensor& b) { return a - b; }},
      {"sub alpha", [](const Tensor& a, const Tensor& b) { return sub(a, b, 2.5); }},
      {"mul", [](const Tensor& a, const Tensor& b) { return a * b; }},
      {"div", [](const Tensor& a, const Tensor& b) { return a / b; }},
      {"pow", [](const Tensor& a, const Tensor& b) { return a.abs().pow(b); }},
      {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); }},
      {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); }},
      {"where gt", [](const Tensor& a, const Tensor& b) { return where(a > b, a, b * 2.0); }},
      {"where lt", [](const Tensor& a, const Tensor& b) { return where(a < b, a.exp(), b); }},
      {"where eq", [](const Tensor& a, const Tensor& b) { return where(a == b, a, -b); }},
      {"where ne", [](const Tensor& a, const Tensor& b) { return where(a != b, a, b + 1.0); }},
      {"where le ge",
       [](const Tensor& a, const Tensor& b) { return where(a <= b, a, where(a >= 0.5, b, a)); }},
      {"remainder", [](const Tensor& a, const Tensor& b) { return remainder(a, b); }},
      {"masked_fill",
       [](const Tensor& a, const Tensor& b) {
         return masked_fill(a, b > 0.5, -std::numeric_limits<double>::infinity()) + b;
       }},
      {"isnan isinf logical",
       [](const Tensor& a, const Tensor& b) {
         const Tensor m = logical_or(isnan(a), logical_and(b > 0.0, logical_not(isinf(a))));
         return where(logical_xor(m, a < -1.0), b, a);
       }},
      {"scalar constants", [](const Tensor& a, const Tensor& b) { return (a * 0.5 + 2) * b - 1; }},
      {"cast",
       [](const Tensor& a, const Tensor& b) { return (a.to(kFloat64) * 3.0).to(b.dtype()) + b; }},
  };
}

TEST(Codegen, EveryBinaryOpCompareAndWhereInChainsIsOneKernelOfEagersBits) {
  KILN_NEEDS_COMPILER();
  Generator gen(6);
  for (DType dtype : {kFloat32, kFloat64}) {
    for (const BinaryCase& c : binary_cases()) {
      for (int64_t n : {0, 1, 9, 40}) {
        const Tensor a = values({n, 3}, dtype, gen), b = values({n, 3}, dtype, gen);
        const auto op = c.op;
        // relu(op(a, b) * a): the op between two other nodes.
        expect_generated(
            [op](const TensorList& t) { return TensorList{(op(t[0], t[1]) * t[0]).relu()}; },
            {a, b}, 1, detail::str_cat(c.name, " ", dtype, " [", n, ", 3]"));
      }
    }
  }
}

TEST(Codegen, BroadcastsNonContiguousAndOffsetInputsAndBothSidesOfTheParallelThreshold) {
  KILN_NEEDS_COMPILER();
  Generator gen(7);
  const auto chain = [](const TensorList& t) {
    return TensorList{gelu(t[0] * t[1] + t[2]).sigmoid() * 2.0};
  };
  for (DType dtype : {kFloat32, kFloat64}) {
    for (int64_t rows : {1, 3, 129, 2053}) {  // 2053 x 19: above the parallel threshold
      const std::string what = detail::str_cat(dtype, " rows ", rows);
      const Tensor x = values({rows, 19}, dtype, gen);
      // A row broadcast, a column broadcast, a 0-d tensor.
      expect_generated(chain, {x, values({19}, dtype, gen), values({rows, 1}, dtype, gen)}, 1,
                       what + " broadcasts");
      expect_generated(chain, {x, values({}, dtype, gen), x}, 1, what + " 0-d");
      // A transposed input, a strided one and one at an offset.
      const Tensor t = values({19, rows}, dtype, gen).t();
      const Tensor strided = values({rows, 38}, dtype, gen).narrow(1, 0, 38).slice(1, 0, 38, 2);
      const Tensor offset = values({rows + 1, 19}, dtype, gen).narrow(0, 1, rows);
      expect_generated(chain, {t, strided, offset}, 1, what + " transposed, strided, offset");
    }
  }
  EXPECT_GT(int64_t{2053} * 19, backend::cpu::kParallelGrain);
}

TEST(Codegen, GroupsStopAtLibraryCallsReductionsAndValuesReadOutside) {
  KILN_NEEDS_COMPILER();
  Generator gen(8);
  const Tensor x = values({6, 8}, kFloat32, gen), w = values({8, 8}, kFloat32, gen);
  // matmul -> (add, tanh) -> sum -> (mul, exp): two groups around the calls.
  expect_generated(
      [](const TensorList& t) {
        const Tensor h = (t[0].matmul(t[1]) + 1.0).tanh();
        return TensorList{(h.sum({1}) * 0.5).exp()};
      },
      {x, w}, 2, "around a matmul and a sum");
  // A value read after the group (here a result) is one more output of it.
  NoGradGuard no_grad;
  const Program two_results = [](const TensorList& t) {
    const Tensor y = t[0] * 2.0;
    return TensorList{y, (y + 1.0).relu()};
  };
  expect_generated(two_results, {x}, 1, "a value also returned");
  const Lowered l = lower(two_results, {x});
  ASSERT_EQ(l.exe->schedule().steps.size(), 1u);
  EXPECT_EQ(l.exe->schedule().steps[0].nodes.size(), 3u);
  ASSERT_EQ(l.exe->schedule().steps[0].stored.size(), 1u);
  EXPECT_EQ(l.exe->schedule().steps[0].stored_writes, std::vector<int32_t>{-1});
  // One read by a node before the group's last stays out of it: the sum
  // needs y before (y + s) runs.
  const Program read_before = [](const TensorList& t) {
    const Tensor y = t[0] * 2.0;
    return TensorList{(y + y.sum({1}, true)).relu()};
  };
  // (The sum reduces y as its group stores it: tests/compiler/codegen_stored_test.cpp.)
  expect_generated(read_before, {x}, 2, "a value read by a reduction in between");
  EXPECT_EQ(lower(read_before, {x}).exe->schedule().steps.size(), 2u);  // y + sum, add + relu
  // A diamond: x*2 read by both exp and sin, whose sum is the result: one kernel.
  expect_generated(
      [](const TensorList& t) {
        const Tensor y = t[0] * 2.0;
        return TensorList{y.exp() + y.sin()};
      },
      {x}, 1, "diamond");
}

// Siblings: groups of one sizes that read one input (or the later reads the
// earlier's values) and run one after the other are one kernel storing
// both results; a library call between them keeps them apart.
TEST(Codegen, SiblingGroupsRunNextToEachOtherAreOneKernel) {
  KILN_NEEDS_COMPILER();
  NoGradGuard no_grad;
  Generator gen(9);
  const Tensor x = values({6, 8}, kFloat32, gen), w = values({8, 8}, kFloat32, gen);
  const Program siblings = [](const TensorList& t) {
    return TensorList{(t[0] * 2.0).exp(), (t[0] + 1.0).sin()};
  };
  expect_generated(siblings, {x, w}, 1, "siblings");
  const Lowered l = lower(siblings, {x, w});
  ASSERT_EQ(l.exe->schedule().steps.size(), 1u);
  EXPECT_EQ(l.exe->schedule().fused.at(0),
            "mul + exp + add + sin (nodes 0-3): one generated kernel of 3 inputs, and 2 outputs");
  const Program apart = [](const TensorList& t) {
    const Tensor a = (t[0] * 2.0).exp();
    const Tensor m = t[0].matmul(t[1]);
    return TensorList{a, (t[0] + 1.0).sin() + m};
  };
  expect_generated(apart, {x, w}, 2, "a matmul between");
}

struct ReductionCase {
  const char* name;
  Unary op;  // of a [.., n] input
};

std::vector<ReductionCase> row_reduction_cases(const Tensor& w, const Tensor& b) {
  return {
      {"softmax", [](const Tensor& x) { return x.softmax(-1); }},
      {"log_softmax", [](const Tensor& x) { return x.log_softmax(-1); }},
      {"sum", [](const Tensor& x) { return x.sum({-1}); }},
      {"sum of two dims",
       [](const Tensor& x) {
         return x.sum({-2, -1}, true);
       }},
      {"mean", [](const Tensor& x) { return x.mean({-1}, true); }},
      {"prod", [](const Tensor& x) { return prod(x * 0.01 + 1.0, {-1}); }},
      {"amax", [](const Tensor& x) { return amax(x, {-1}); }},
      {"amin", [](const Tensor& x) { return amin(x, {-1}, true); }},
      {"var", [](const Tensor& x) { return var(x, {-1}); }},
      {"std", [](const Tensor& x) { return stddev(x, {-1}, 0.0, true); }},
      {"norm", [](const Tensor& x) { return norm(x, 2.0, {-1}); }},
      {"logsumexp", [](const Tensor& x) { return logsumexp(x, {-1}); }},
      {"layer_norm",
       [w, b](const Tensor& x) { return nn::functional::layer_norm(x, {x.size(-1)}, w, b); }},
      {"layer_norm, no affine",
       [](const Tensor& x) { return nn::functional::layer_norm(x, {x.size(-1)}); }},
  };
}

// A reduction over rows whose input a pointwise group makes is that group's
// last node (codegen/row_reduction.h): eager's bits, for rows on both sides
// of the threads' count and of a block, odd row lengths, no rows, NaN and
// infinities, a broadcast bias and a transposed input.
TEST(Codegen, EveryRowReductionJoinsTheGroupThatMakesItsInputWithEagersBits) {
  KILN_NEEDS_COMPILER();
  Generator gen(11);
  for (DType dtype : {kFloat32, kFloat64}) {
    for (const auto& [rows, n] : std::vector<std::pair<int64_t, int64_t>>{
             {0, 5}, {1, 1}, {3, 33}, {2, 300}, {67, 7}, {501, 61}, {4, 0}}) {
      const Tensor w = values({n}, dtype, gen), b = values({n}, dtype, gen);
      const Tensor x = (randn({2, rows, n}, {}, &gen) * 2.0).to(dtype);
      const Tensor bias = (randn({n}, {}, &gen)).to(dtype);
      for (const ReductionCase& c : row_reduction_cases(w, b)) {
        const Unary op = c.op;
        if (n == 0) {
          try {  // rows of nothing: the ops without an identity refuse them
            op(x);
          } catch (const Error&) {
            continue;
          }
        }
        const Program f = [op](const TensorList& t) {
          return TensorList{op((t[0] * 0.5 + t[1]).tanh())};
        };
        const std::string what = detail::str_cat(c.name, " ", dtype, " [2, ", rows, ", ", n, "]");
        expect_generated(f, {x, bias}, 1, what);
        NoGradGuard no_grad;
        const Lowered l = lower(f, {x, bias});
        ASSERT_EQ(l.exe->schedule().steps.size(), 1u) << what;
        EXPECT_TRUE(l.exe->schedule().steps[0].reduction.has_value()) << what;
      }
    }
  }
  // NaN and infinities in a row; a transposed input (where eager's result of
  // the group keeps the input's layout, the reduction reads it from memory).
  const Tensor odd = values({9, 40}, kFloat32, gen);
  const Tensor t = values({40, 9}, kFloat32, gen).t();
  for (const ReductionCase& c : row_reduction_cases(values({40}, kFloat32, gen), Tensor())) {
    const Unary op = c.op;
    const Program f = [op](const TensorList& a) { return TensorList{op(a[0] * 2.0 - a[1])}; };
    expect_generated(f, {odd, flip(odd, {1})}, 1, detail::str_cat(c.name, " NaN and inf"));
    expect_generated(f, {t, odd}, 1, detail::str_cat(c.name, " transposed"));
  }
}

// Pointwise ops after a row reduction that keeps its input's rank (softmax,
// log_softmax, layer_norm, a keepdim reduction) run on each block of rows
// as the reduction leaves it: one step of two generated kernels, eager's
// bits, for rows on both sides of the threads' count and of a block.
TEST(Codegen, OpsAfterARowReductionRunOnEachBlockOfItsRowsWithEagersBits) {
  KILN_NEEDS_COMPILER();
  Generator gen(14);
  struct Case {
    const char* name;
    Program f;         // of x [.., n], m [n], w [n]
    bool row = false;  // ops on the reduction's result alone come first
  };
  const std::vector<Case> cases = {
      {"rms norm",
       [](const TensorList& t) {
         const Tensor h = t[0] + t[1];
         return TensorList{h * ((h * h).mean({-1}, true) + 1e-6).rsqrt() * t[2]};
       },
       true},
      {"softmax, masked",
       [](const TensorList& t) { return TensorList{(t[0] * 0.5 + t[1]).softmax(-1) * t[2]}; }},
      {"log_softmax, minus",
       [](const TensorList& t) { return TensorList{(t[0] * 2.0).log_softmax(-1) - t[1]}; }},
      {"layer_norm, gelu",
       [](const TensorList& t) {
         return TensorList{
             kiln::gelu(nn::functional::layer_norm(t[0] + t[1], {t[0].size(-1)}, t[2], Tensor()))};
       }},
      {"over the sum of squares",
       [](const TensorList& t) { return TensorList{t[0] / ((t[0] * t[0]).sum({-1}, true) + 1)}; },
       true},
      {"minus the max",
       [](const TensorList& t) {
         return TensorList{(t[0] - amax(t[0] * 1.0, {-1}, true)).exp() * t[1]};
       }},
  };
  for (DType dtype : {kFloat32, kFloat64}) {
    for (const auto& [rows, n] :
         std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {3, 33}, {2, 300}, {67, 7}, {501, 61}}) {
      const Tensor x = values({2, rows, n}, dtype, gen);
      const Tensor m = values({n}, dtype, gen), w = values({n}, dtype, gen);
      for (const Case& c : cases) {
        const std::string what = detail::str_cat(c.name, " ", dtype, " [2, ", rows, ", ", n, "]");
        expect_generated(c.f, {x, m, w}, 1, what);
        NoGradGuard no_grad;
        const Lowered l = lower(c.f, {x, m, w});
        const auto step =
            std::find_if(l.exe->schedule().steps.begin(), l.exe->schedule().steps.end(),
                         [](const ScheduledStep& s) { return s.kernel >= 0; });
        ASSERT_TRUE(step->reduction.has_value()) << what;
        EXPECT_GE(step->reduction->epilogue_kernel, 0) << what;
        // (Rows of one element: the ops on the result have the input's sizes.)
        EXPECT_EQ(step->reduction->row_kernel >= 0, c.row && n > 1) << what;
      }
    }
  }
  // The reduction's result also returned: it is made in memory, and the ops
  // after it are a group of their own.
  const Tensor x = values({5, 9}, kFloat32, gen);
  const Program both = [](const TensorList& t) {
    const Tensor s = (t[0] * 2.0).softmax(-1);
    return TensorList{s, s * t[1]};
  };
  NoGradGuard no_grad;
  const Lowered l = lower(both, {x, x});
  for (const ScheduledStep& st : l.exe->schedule().steps) {
    if (st.reduction) {
      EXPECT_LT(st.reduction->epilogue_kernel, 0);
    }
  }
  EXPECT_TRUE(testing::same(l.exe->run({x, x})[1], both({x, x})[1]));
  // explain() says what the step does.
  const auto f = compile([](const Tensor& a, const Tensor& b) { return (a * 0.5).softmax(-1) * b; },
                         {.name = "masked softmax"});
  EXPECT_TRUE(testing::same(f(x, x), (x * 0.5).softmax(-1) * x));
  ASSERT_EQ(f.explain().graphs[0].fused.size(), 1u);
  EXPECT_EQ(f.explain().graphs[0].fused[0],
            "mul + softmax + mul (nodes 0-2): generated kernels of 3 inputs around softmax, its "
            "rows reduced in cache and the ops after it applied to each block");
}

TEST(Codegen, RowReductionsOverOtherDimsOrReadOnceMoreStayApartAndSayWhy) {
  KILN_NEEDS_COMPILER();
  NoGradGuard no_grad;
  const Tensor x = randn({6, 8});
  const auto fused_lines = [&](const Program& f) {
    const Lowered l = lower(f, {x});
    std::string text;
    for (const auto& s : l.exe->schedule().fused) text += s + "\n";
    for (const auto& s : l.exe->schedule().not_fused) text += s + "\n";
    return text;
  };
  // Along the first dim: the mul and the exp are one kernel, the prod apart
  // (a sum there is a column reduction, codegen_columns_test.cpp).
  EXPECT_EQ(
      fused_lines([](const TensorList& t) { return TensorList{prod((t[0] * 2.0).exp(), {0})}; }),
      "mul + exp (nodes 0-1): one generated kernel of 2 inputs\n"
      "exp + prod (nodes 1-2) not fused: prod reduces dims [0] of [6, 8], not trailing ones (nor "
      "a run of dims before the last, which sum, mean, amax and amin reduce)\n");
  EXPECT_NE(fused_lines([](const TensorList& t) { return TensorList{(t[0] * 2.0).softmax(0)}; })
                .find("mul + softmax (nodes 0-1) not fused: softmax runs along dim 0, not the "
                      "last of [6, 8]"),
            std::string::npos);
  // A widening mean: its input is cast.
  EXPECT_NE(fused_lines([](const TensorList& t) {
              return TensorList{mean(t[0] * 2.0, {1}, false, kFloat64)};
            }).find("not fused: its input is cast to float64"),
            std::string::npos);
  // The input read again: the sum reduces it as its group stores it, the
  // amax after it reads it from memory.
  const Lowered twice = lower(
      [](const TensorList& t) {
        const Tensor y = (t[0] * 2.0).exp();
        return TensorList{y.sum({1}), amax(y, {1})};
      },
      {x});
  EXPECT_EQ(generated_steps(twice.exe->schedule()), 1u);
  ASSERT_TRUE(twice.exe->schedule().steps[0].reduction.has_value());
  EXPECT_EQ(twice.exe->schedule().steps[0].stored.size(), 1u);
  EXPECT_EQ(twice.exe->schedule().steps.size(), 2u);
  // explain() names the reduction of a group.
  const auto f =
      compile([](const Tensor& s, const Tensor& m) { return (s * 0.125 + m).softmax(-1); },
              {.name = "attention scores"});
  const Tensor s = randn({2, 4, 16, 16}), m = randn({2, 1, 1, 16});
  EXPECT_TRUE(testing::same(f(s, m), (s * 0.125 + m).softmax(-1)));
  const ExplainReport r = f.explain();
  ASSERT_EQ(r.graphs[0].fused.size(), 1u);
  EXPECT_EQ(r.graphs[0].fused[0],
            "mul + add + softmax (nodes 0-2): one generated kernel of 3 inputs, its rows reduced "
            "by softmax in cache");
  EXPECT_EQ(r.graphs[0].steps, 1);
  EXPECT_EQ(r.graphs[0].planned_bytes, 0u);
}

// In-place chains: the writes to one tensor, with the pure nodes that feed
// them, run as one kernel that writes the tensor once. On a tensor the
// program made (a clone) the group makes it; on an argument the kernel
// writes the argument's memory, as eager does.
TEST(Codegen, InPlaceChainsAreOneKernelThatWritesTheirTensorOnce) {
  KILN_NEEDS_COMPILER();
  NoGradGuard no_grad;
  Generator gen(12);
  for (DType dtype : {kFloat32, kFloat64}) {
    for (int64_t n : {0, 1, 7, 2053}) {
      const std::string what = detail::str_cat(dtype, " [", n, ", 19]");
      const Tensor x = values({n, 19}, dtype, gen), b = values({19}, dtype, gen);
      const Tensor g = values({n, 19}, dtype, gen);
      // On a fresh tensor: the clone, its three writes and the relu.
      expect_generated(
          [](const TensorList& t) {
            Tensor y = t[0].clone();
            y.mul_(2.0).add_(t[1]).relu_();
            return TensorList{y};
          },
          {x, b}, 1, what + " fresh");
      // On an argument (an optimizer's moment): eager's bits in its memory.
      const Program ema = [](const TensorList& t) {
        Tensor m = t[0];
        m.mul_(0.9).add_(t[1].square(), 0.1);
        return TensorList{m.sqrt()};
      };
      // The chain and the sqrt: one kernel that writes the moment into the
      // argument's memory and the sqrt into its own.
      const Lowered l = lower(ema, {x.clone(), g});
      ASSERT_EQ(l.exe->schedule().steps.size(), 1u) << what;
      EXPECT_EQ(l.exe->schedule().steps[0].stored_writes, std::vector<int32_t>{0}) << what;
      EXPECT_EQ(l.exe->schedule().steps[0].writes_input, -1) << what;
      for (int run = 0; run < 2; ++run) {
        Tensor got = x.clone(), want = x.clone();
        const TensorList got_out = l.exe->run({got, g});
        const TensorList want_out = ema({want, g});
        EXPECT_TRUE(testing::same(got, want)) << what << " run " << run;
        EXPECT_TRUE(testing::same(got_out[0], want_out[0])) << what << " run " << run;
      }
    }
  }
}

TEST(Codegen, InPlaceChainsStayApartWhereAnotherViewOrANodeInBetweenSeesTheirTensor) {
  KILN_NEEDS_COMPILER();
  NoGradGuard no_grad;
  const Tensor a = randn({5, 5}), b = randn({5, 5});
  const auto check = [&](const Program& f, const std::string& why) {
    const Lowered l = lower(f, {a.clone(), b});
    std::string lines;
    for (const auto& s : l.exe->schedule().not_fused) lines += s + "\n";
    EXPECT_NE(lines.find(why), std::string::npos) << lines << to_text(l.trace->graph);
    Tensor got = a.clone(), want = a.clone();
    const TensorList got_out = l.exe->run({got, b}), want_out = f({want, b});
    EXPECT_TRUE(testing::same(got, want)) << why;
    for (size_t i = 0; i < got_out.size(); ++i) EXPECT_TRUE(testing::same(got_out[i], want_out[i]));
  };
  // A transposed view made before the writes, read by the last one.
  check(
      [](const TensorList& t) {
        Tensor x = t[0];
        const Tensor v = x.t();
        x.mul_(2.0);
        x.add_(v.contiguous() * 3.0);
        return TensorList{x * 1.0};
      },
      "not fused: it reads another view of the tensor it writes in place");
  // A view read between the writes sees the first one.
  check(
      [](const TensorList& t) {
        Tensor x = t[0];
        const Tensor v = x.view({25});
        x.mul_(2.0);
        const Tensor s = v.sum();
        x.add_(t[1]);
        return TensorList{s, x * 1.0};
      },
      "mul_ + add_ (nodes 1-3) not fused: node 2 uses the tensor it writes in place, in between");
  // explain() says which input a group writes.
  const auto f = compile(
      [](const Tensor& m, const Tensor& g) {
        Tensor w = m;
        w.mul_(0.5).add_(g);
        return w * 1.0;
      },
      {.name = "moment"});
  Tensor m = randn({8}), m2 = m.clone();
  const Tensor g = randn({8});
  f(m, g);
  m2.mul_(0.5).add_(g);
  EXPECT_TRUE(testing::same(m, m2));
  const ExplainReport r = f.explain();
  ASSERT_EQ(r.graphs[0].fused.size(), 1u);
  EXPECT_EQ(r.graphs[0].fused[0],
            "mul_ + add_ + mul (nodes 0-2): one generated kernel of 4 inputs, and 2 outputs, "
            "written in place into input 0");
}

// A group runs at its last node's place. A write in between that comes
// before the first node reading its tensor is one the group sees in program
// order too: a parameter's decay, a moment written by a library call, then
// the step from the moment is one kernel. A write after that first read
// keeps the group apart.
TEST(Codegen, AWriteInBetweenKeepsAGroupApartOnlyAfterItsFirstReadOfTheTensor) {
  KILN_NEEDS_COMPILER();
  NoGradGuard no_grad;
  Generator gen(21);
  const Tensor p = values({67, 5}, kFloat32, gen), m = values({67, 5}, kFloat32, gen);
  const Tensor g = values({67, 5}, kFloat32, gen), v = positive({67, 5}, kFloat32, gen);
  const auto run_both = [&](const Lowered& l, const Program& f) {
    for (int run = 0; run < 2; ++run) {
      TensorList got{p.clone(), m.clone(), g, v}, want{p.clone(), m.clone(), g, v};
      const TensorList got_out = l.exe->run(got), want_out = f(want);
      EXPECT_TRUE(testing::same(got[0], want[0])) << "run " << run;
      EXPECT_TRUE(testing::same(got[1], want[1])) << "run " << run;
      EXPECT_TRUE(testing::same(got_out[0], want_out[0])) << "run " << run;
    }
  };
  const Program step = [](const TensorList& t) {
    Tensor param = t[0], moment = t[1];
    param.mul_(0.99);
    moment.fill_(0.5);  // no generated form: a library call in between
    param.add_(moment / t[3] * -0.01);
    return TensorList{param * 1.0};
  };
  const Lowered l = lower(step, {p.clone(), m.clone(), g, v});
  const Schedule& s = l.exe->schedule();
  ASSERT_EQ(s.steps.size(), 2u) << to_text(l.trace->graph);
  EXPECT_EQ(s.describe(l.trace->graph, 1), "mul_ + div + mul + add_ + mul (nodes 0-5)");
  EXPECT_EQ(s.steps[1].stored_writes, std::vector<int32_t>{0});
  run_both(l, step);
  // With the moment's update in generated form too, the step is one kernel
  // that writes the parameter and the moment in place, and its result.
  const Program adam_like = [](const TensorList& t) {
    Tensor param = t[0], moment = t[1];
    param.mul_(0.99);
    moment.mul_(0.9).add_(t[2], 0.1);
    param.add_(moment / t[3] * -0.01);
    return TensorList{param * 1.0};
  };
  const Lowered one = lower(adam_like, {p.clone(), m.clone(), g, v});
  ASSERT_EQ(one.exe->schedule().steps.size(), 1u) << to_text(one.trace->graph);
  EXPECT_EQ(one.exe->schedule().steps[0].stored_writes, (std::vector<int32_t>{2, 0}));
  run_both(one, adam_like);
  // Read before the write: the product would see the moment written.
  const Program early = [](const TensorList& t) {
    Tensor moment = t[1];
    const Tensor y = moment * 2.0;
    moment.fill_(1.0);
    return TensorList{y + moment};
  };
  const Lowered e = lower(early, {p.clone(), m.clone()});
  std::string lines;
  for (const auto& line : e.exe->schedule().not_fused) lines += line + "\n";
  EXPECT_NE(lines.find("mul + add (nodes 0-2) not fused: node 1 writes a tensor it reads in "
                       "between"),
            std::string::npos)
      << lines;
  TensorList got{p.clone(), m.clone()}, want{p.clone(), m.clone()};
  const TensorList got_out = e.exe->run(got), want_out = early(want);
  EXPECT_TRUE(testing::same(got[1], want[1]));
  EXPECT_TRUE(testing::same(got_out[0], want_out[0]));
  // Where the group holds the write, its kernel reads each element before
  // it writes it: one step.
  const Program held = [](const TensorList& t) {
    Tensor moment = t[1];
    const Tensor y = moment * 2.0;
    moment.add_(1.0);
    return TensorList{y + moment};
  };
  const Lowered h = lower(held, {p.clone(), m.clone()});
  EXPECT_EQ(h.exe->schedule().steps.size(), 1u) << to_text(h.trace->graph);
  TensorList got_h{p.clone(), m.clone()}, want_h{p.clone(), m.clone()};
  const TensorList got_h_out = h.exe->run(got_h), want_h_out = held(want_h);
  EXPECT_TRUE(testing::same(got_h[1], want_h[1]));
  EXPECT_TRUE(testing::same(got_h_out[0], want_h_out[0]));
}

// A tensor the program makes and then only writes in place, all inside one
// group, is the group's scratch: `neg(x).add_(1).sqrt()` is one kernel, and
// the tensor gets no bytes. Where a node outside reads it between writes,
// or a view of it exists, the writes stay outside the group.
TEST(Codegen, TensorsMadeAndWrittenInPlaceInsideAGroupAreItsScratch) {
  KILN_NEEDS_COMPILER();
  NoGradGuard no_grad;
  Generator gen(22);
  for (DType dtype : {kFloat32, kFloat64}) {
    const Tensor x = values({37, 3}, dtype, gen);
    const Program scratch = [](const TensorList& t) {
      Tensor y = neg(t[0]);
      y.add_(1.0).mul_(0.5);
      return TensorList{y.sqrt()};
    };
    expect_generated(scratch, {x}, 1, detail::str_cat(dtype, " scratch"));
    const Lowered l = lower(scratch, {x});
    ASSERT_EQ(l.exe->schedule().steps.size(), 1u);
    EXPECT_EQ(l.exe->plan().planned_bytes, 0u);
  }
  const Tensor x = values({37, 3}, kFloat32, gen);
  // Read outside between its writes: the first write and its maker are one
  // group; the later write and the exp another, which writes y in place.
  const Program read_between = [](const TensorList& t) {
    Tensor y = t[0] * 2.0;
    y.add_(1.0);
    const Tensor s = y.sum();
    y.mul_(3.0);
    return TensorList{y.exp(), s};
  };
  expect_generated(read_between, {x}, 2, "read between");
  const Lowered between = lower(read_between, {x});
  ASSERT_EQ(between.exe->schedule().steps.size(), 3u);
  EXPECT_EQ(between.exe->schedule().steps[2].stored_writes, std::vector<int32_t>{0});
  // A view of it made before a write and read after: only `(y * 3).exp()`
  // is a group.
  const Program viewed = [](const TensorList& t) {
    Tensor y = t[0] * 2.0;
    const Tensor v = y.view({-1});
    y.add_(1.0);
    return TensorList{(y * 3.0).exp(), v * 1.0};
  };
  expect_generated(viewed, {x}, 1, "viewed");
}

// Through kiln::compile (its passes, check and strict): a masked, scaled
// softmax and an optimizer-like update of an argument, called again and
// again, stay eager's bitwise, the argument's memory included.
TEST(Codegen, ReductionAndInPlaceGroupsThroughCompileWithCheckAndStrict) {
  KILN_NEEDS_COMPILER();
  const auto program = [](const Tensor& scores, const Tensor& mask, Tensor m, const Tensor& g) {
    m.mul_(0.9).add_(g, 0.1);
    const Tensor p = masked_fill(scores * 0.125, mask, -1e9).softmax(-1);
    return p * m.sum({-1}, true);
  };
  const auto f = compile(program, {.strict = true, .check = true, .name = "step"});
  Generator gen(31);
  const Tensor m0 = randn({16, 16}, {}, &gen);
  Tensor mine = m0.clone(), theirs = m0.clone();
  for (int call = 0; call < 3; ++call) {
    const Tensor scores = randn({2, 4, 16, 16}, {}, &gen);
    const Tensor mask = rand({2, 1, 1, 16}, {}, &gen) < 0.2;
    const Tensor g = randn({16, 16}, {}, &gen);
    const Tensor got = f(scores, mask, mine, g);
    const Tensor want = program(scores, mask, theirs, g);
    EXPECT_TRUE(testing::same(got, want)) << "call " << call;
    EXPECT_TRUE(testing::same(mine, theirs)) << "call " << call;
  }
  const ExplainReport r = f.explain();
  ASSERT_EQ(r.graphs.size(), 1u);
  std::string fused;
  for (const auto& line : r.graphs[0].fused) fused += line + "\n";
  EXPECT_NE(fused.find("mul_ + add_"), std::string::npos) << fused;
  EXPECT_NE(fused.find("written in place into input"), std::string::npos) << fused;
  // The product after the softmax joins it: applied to each block of rows.
  // (The sum of m runs right after the update: passes/hoist_reductions.cpp.)
  EXPECT_NE(fused.find("mul + masked_fill + softmax + mul (nodes 3-6): generated kernels of 4 "
                       "inputs around softmax, its rows reduced in cache"),
            std::string::npos)
      << fused;
  bool reduced = false;
  for (const auto& k : r.graphs[0].kernels)
    reduced = reduced || k.launch ==
                             "CPU: 2048 elements computed a block of rows at a time into "
                             "cache, each block reduced there by the library's softmax";
  EXPECT_TRUE(reduced) << r.to_string();
}

TEST(Codegen, InnerValuesGetNoBytesAndExplainSaysWhatWasGenerated) {
  KILN_NEEDS_COMPILER();
  const auto f =
      compile([](const Tensor& x) { return ((x * 2.0).tanh() + 1.0).relu(); }, {.name = "chain"});
  const Tensor x = randn({4, 16});
  EXPECT_TRUE(testing::same(f(x), ((x * 2.0).tanh() + 1.0).relu()));
  const ExplainReport r = f.explain();
  ASSERT_EQ(r.graphs.size(), 1u);
  EXPECT_EQ(r.graphs[0].generated_kernels, 1);
  EXPECT_EQ(r.graphs[0].steps, 1);
  ASSERT_EQ(r.graphs[0].fused.size(), 1u);
  // x and the constants 2 and 1.
  EXPECT_EQ(r.graphs[0].fused[0],
            "mul + tanh + add + relu (nodes 0-3): one generated kernel of 3 inputs");
  EXPECT_NE(r.graphs[0].codegen.find("1 kernel "), std::string::npos) << r.graphs[0].codegen;
  EXPECT_NE(r.to_string().find("generated kernels: 1 kernel"), std::string::npos);
  EXPECT_NE(r.to_json().find("\"generated_kernels\": 1"), std::string::npos);
  // The three values inside get no bytes (the result is the caller's).
  EXPECT_EQ(r.graphs[0].planned_bytes, 0u);
  // The kernel by name, with its loop; timed once a profiling run has run.
  ASSERT_EQ(r.graphs[0].kernels.size(), 1u);
  const ExplainReport::Graph::Kernel& k = r.graphs[0].kernels[0];
  EXPECT_EQ(k.group, "mul + tanh + add + relu (nodes 0-3)");
  EXPECT_EQ(k.name.rfind("kiln_pointwise_", 0), 0u) << k.name;
  EXPECT_EQ(k.launch, "CPU: a loop over 64 elements, on one thread");
  EXPECT_EQ(k.ms, -1.0);
  const Tensor big = randn({300, 1000});
  EXPECT_TRUE(testing::same(f.profile(big), ((big * 2.0).tanh() + 1.0).relu()));
  const ExplainReport p = f.explain();
  ASSERT_EQ(p.graphs.size(), 2u);  // the second for the new sizes
  ASSERT_EQ(p.graphs[1].kernels.size(), 1u);
  EXPECT_EQ(p.graphs[1].kernels[0].name, k.name);  // one kernel for every size
  EXPECT_NE(p.graphs[1].kernels[0].launch.find("300000 elements, split across the threads"),
            std::string::npos)
      << p.graphs[1].kernels[0].launch;
  EXPECT_GT(p.graphs[1].kernels[0].ms, 0.0);
  EXPECT_EQ(p.graphs[0].kernels[0].ms, -1.0);  // not run since
  const std::string text = p.to_string();
  EXPECT_NE(text.find("kernel " + k.name + ": mul + tanh + add + relu (nodes 0-3); CPU: a loop"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(" us in the profiling run"), std::string::npos) << text;
  EXPECT_NE(p.to_json().find("\"launch\": \"CPU: a loop over 300000"), std::string::npos);
  // A second compile of the same program loads nothing new.
  const auto g =
      compile([](const Tensor& x) { return ((x * 2.0).tanh() + 1.0).relu(); }, {.name = "again"});
  g(x);
  EXPECT_NE(g.explain().graphs[0].codegen.find("already loaded"), std::string::npos)
      << g.explain().graphs[0].codegen;
}

TEST(Codegen, OneKernelServesEverySizeOfADynamicDim) {
  KILN_NEEDS_COMPILER();
  auto program = [](const Tensor& x, const Tensor& b) { return gelu(x * 0.125 + b).tanh(); };
  const auto f = compile(program, {.dynamic = Dynamic::On, .name = "lengths"});
  const Tensor b = randn({32});
  f(randn({1, 8, 32}), b);  // the first size compiles the kernel
  const auto before = backend::cpu::KernelCompiler::instance().stats();
  for (int64_t length = 9; length <= 128; length += 17) {
    const Tensor x = randn({1, length, 32});
    EXPECT_TRUE(testing::same(f(x, b), program(x, b))) << length;
  }
  const auto after = backend::cpu::KernelCompiler::instance().stats();
  EXPECT_EQ(after.compiled, before.compiled);
  EXPECT_EQ(after.disk_hits, before.disk_hits);
  const ExplainReport r = f.explain();
  for (const auto& g : r.graphs) EXPECT_EQ(g.generated_kernels, 1);
}

// Sets an environment variable for a scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_)
      setenv(name_, old_->c_str(), 1);
    else
      unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(Codegen, WithoutACompilerTheGroupsRunOnTheLibraryKernelsWithANote) {
  ScopedEnv cxx("KILN_CXX", "/nonexistent/c++");
  testing::LogCapture logs("fusion");
  const auto program = [](const Tensor& x) { return (x.exp() * 2.0).sigmoid(); };
  const auto f = compile(program, {.name = "nocc"});
  const Tensor x = randn({5, 7});
  EXPECT_TRUE(testing::same(f(x), program(x)));
  const ExplainReport r = f.explain();
  ASSERT_EQ(r.graphs.size(), 1u);
  EXPECT_EQ(r.graphs[0].generated_kernels, 0);
  EXPECT_EQ(r.graphs[0].steps, 3);
  EXPECT_EQ(r.graphs[0].codegen,
            "generated kernels are off: KILN_CXX is '/nonexistent/c++', which is not an "
            "executable file");
  ASSERT_EQ(r.graphs[0].not_fused.size(), 1u);
  EXPECT_EQ(r.graphs[0].not_fused[0],
            "exp + mul + sigmoid (nodes 0-2) not fused: generated kernels are off: KILN_CXX is "
            "'/nonexistent/c++', which is not an executable file");
  EXPECT_TRUE(logs.contains("nocc: generated kernels are off"));
}

TEST(Codegen, KilnDumpDirHoldsTheReadableSource) {
  KILN_NEEDS_COMPILER();
  const auto dir =
      std::filesystem::temp_directory_path() / detail::str_cat("kiln-dump-", ::getpid());
  std::filesystem::remove_all(dir);
  {
    ScopedEnv dump("KILN_DUMP_DIR", dir.string());
    const auto f = compile([](const Tensor& x) { return (x + 3.0).sqrt() * x; }, {.name = "dump"});
    f(randn({3}));
  }
  // In the graph's folder (tests/compiler/dump_test.cpp has the rest of it).
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir / "dump" / "graph1" / "kernels")) {
    ++files;
    std::ifstream in(e.path());
    const std::string text((std::istreambuf_iterator<char>(in)), {});
    EXPECT_NE(text.find("scalar::sqrt("), std::string::npos) << text;
    EXPECT_NE(text.find("extern \"C\" void kiln_pointwise_"), std::string::npos);
  }
  EXPECT_EQ(files, 1u);
  std::filesystem::remove_all(dir);
}

// Run by the next test in a new process of this binary: compiles a program
// whose kernel it writes to $KILN_CODEGEN_TEST_OUT ("compiled" or not).
TEST(Codegen, DISABLED_ChildProcessCompilesAProgram) {
  const auto f =
      compile([](const Tensor& x) { return (x * 1.25 - 0.5).tanh().exp(); }, {.name = "child"});
  const Tensor x = randn({17});
  ASSERT_TRUE(testing::same(f(x), (x * 1.25 - 0.5).tanh().exp()));
  const ExplainReport r = f.explain();
  std::ofstream(std::getenv("KILN_CODEGEN_TEST_OUT"))
      << (r.graphs[0].codegen_compiled ? "compiled" : "not compiled") << "\n"
      << r.graphs[0].codegen << "\n";
}

std::string run_child(const std::filesystem::path& cache, const std::filesystem::path& out) {
  std::vector<std::string> env_text;
  for (char** e = environ; *e; ++e) {
    const std::string s = *e;
    if (s.rfind("KILN_KERNEL_CACHE=", 0) && s.rfind("KILN_CODEGEN_TEST_OUT=", 0) &&
        s.rfind("GTEST_", 0))
      env_text.push_back(s);
  }
  env_text.push_back("KILN_KERNEL_CACHE=" + cache.string());
  env_text.push_back("KILN_CODEGEN_TEST_OUT=" + out.string());
  std::vector<char*> env;
  for (auto& s : env_text) env.push_back(s.data());
  env.push_back(nullptr);
  std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  std::string filter = "--gtest_filter=Codegen.DISABLED_ChildProcessCompilesAProgram";
  std::string disabled = "--gtest_also_run_disabled_tests";
  char* argv[] = {self.data(), filter.data(), disabled.data(), nullptr};
  pid_t pid = 0;
  if (posix_spawn(&pid, self.c_str(), nullptr, nullptr, argv, env.data()) != 0)
    return "spawn failed";
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return "child failed";
  std::ifstream in(out);
  std::string first;
  std::getline(in, first);
  return first;
}

TEST(Codegen, AWarmStartInANewProcessCompilesNothing) {
  KILN_NEEDS_COMPILER();
  const auto base =
      std::filesystem::temp_directory_path() / detail::str_cat("kiln-warm-", ::getpid());
  std::filesystem::remove_all(base);
  std::filesystem::create_directories(base);
  EXPECT_EQ(run_child(base / "cache", base / "first"), "compiled");
  EXPECT_EQ(run_child(base / "cache", base / "second"), "not compiled");
  std::ifstream second(base / "second");
  std::string line;
  std::getline(second, line);
  std::getline(second, line);
  EXPECT_NE(line.find("read from the disk cache"), std::string::npos) << line;
  std::filesystem::remove_all(base);
}

// Kernel counts pinned per reference model, so that a fusion regression
// fails: what is generated, and the steps a call runs.
TEST(Codegen, ReferenceModelsGenerateThePinnedKernels) {
  KILN_NEEDS_COMPILER();
  NoGradGuard no_grad;
  auto bert = testing::small_bert();
  const Tensor ids = randint(0, 100, {1, 16});
  const auto f = compile([&](const Tensor& x) { return bert->forward(x).last_hidden_state; },
                         {.check = true, .name = "bert"});
  const Tensor got = f(ids);
  EXPECT_TRUE(testing::same(got, bert->forward(ids).last_hidden_state));
  const ExplainReport r = f.explain();
  ASSERT_EQ(r.graphs.size(), 1u);
  const auto& g = r.graphs[0];
  // Each layer's intermediate linear with its gelu (the library call with
  // an epilogue, listed first); the embeddings' two adds and each residual
  // add, each with the layer_norm after it; the rest are library calls
  // (linear, the attention). The layers' groups have one IR: they share one
  // kernel.
  EXPECT_EQ(g.generated_kernels, 2);
  ASSERT_EQ(g.fused.size(), 7u);
  for (size_t k = 0; k < 2; ++k)
    EXPECT_NE(g.fused[k].find("linear + gelu (nodes "), std::string::npos) << g.fused[k];
  EXPECT_EQ(g.fused[2],
            "add + add + layer_norm (nodes 7-9): one generated kernel of 5 inputs, its rows "
            "reduced by layer_norm in cache");
  for (size_t k = 3; k < g.fused.size(); ++k)
    EXPECT_NE(g.fused[k].find("add + layer_norm (nodes "), std::string::npos) << g.fused[k];
  EXPECT_EQ(g.steps, g.nodes - 8);
}

}  // namespace
}  // namespace kiln::compiler
