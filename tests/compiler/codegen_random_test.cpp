// Generated kernels that draw random numbers: a dropout inside a group makes
// its mask in the kernel, from the seed and offset its step draws at each
// call in program order, at the Philox counters the library's dropout uses
// (core/philox.h). Results stay eager's bitwise (strict), and the generator
// ends where eager leaves it. A group whose draws would move past another
// random op stays apart.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "compiler/compiler_testing.h"
#include "kiln/kiln.h"

namespace kiln::compiler {
namespace {

namespace F = kiln::nn::functional;
using testing::same;

// Runs f and eager from one generator state (after `advance` values drawn
// outside, so that the dropout's offset need not start a Philox block) and
// expects equal results and equal generator states after.
void expect_eager_draws(const std::function<Tensor()>& f, const std::function<Tensor()>& eager,
                        uint64_t seed, int64_t advance, const std::string& what) {
  const auto call = [&](const std::function<Tensor()>& fn) {
    manual_seed(seed);
    if (advance > 0) (void)randn({advance});
    Tensor out = fn();
    return std::pair{out, randn({3})};
  };
  const auto [got, got_after] = call(f);
  const auto [want, want_after] = call(eager);
  EXPECT_TRUE(same(got, want)) << what;
  EXPECT_TRUE(same(got_after, want_after)) << what << ": the generator moved otherwise";
}

struct DropoutCase {
  std::string name;
  Shape sizes;
  double p = 0.3;
  DType dtype = kFloat32;
  enum { kPlain, kTransposed, kOffset } layout = kPlain;
  int64_t advance = 0;
};

TEST(CodegenRandom, ADropoutInAChainDrawsInsideTheKernelAsEager) {
  KILN_NEEDS_COMPILER();
  NoGradGuard no_grad;
  const std::vector<DropoutCase> cases = {
      {"empty", {0, 5}},
      {"one", {1}, 0.5},
      {"odd_tail", {7}, 0.3, kFloat32, DropoutCase::kPlain, 1},
      {"rows", {3, 37}, 0.3, kFloat32, DropoutCase::kPlain, 3},
      {"parallel", {257, 131}, 0.2, kFloat32, DropoutCase::kPlain, 1},
      {"float64", {5, 9}, 0.4, kFloat64},
      {"transposed", {37, 3}, 0.5, kFloat32, DropoutCase::kTransposed, 1},
      {"offset_view", {6, 40}, 0.25, kFloat32, DropoutCase::kOffset},
      {"p_one", {4, 6}, 1.0},
      {"tiny_p", {300}, 1e-3},
  };
  for (const DropoutCase& c : cases) {
    const double p = c.p;
    const auto program = [p](const Tensor& x, const Tensor& y) {
      return F::dropout(x * 2.0, p, true) + y;
    };
    Tensor x = randn(c.sizes, {.dtype = c.dtype});
    if (c.layout == DropoutCase::kTransposed) {
      x = randn({c.sizes[1], c.sizes[0]}, {.dtype = c.dtype}).t();
    } else if (c.layout == DropoutCase::kOffset) {
      x = randn({c.sizes[0], c.sizes[1] + 3}, {.dtype = c.dtype}).narrow(1, 2, c.sizes[1]);
    }
    const Tensor y = randn({c.sizes.back()}, {.dtype = c.dtype});  // broadcast over rows
    const auto f = compile(program, {.strict = true, .name = c.name});
    for (uint64_t seed : {11, 12})
      expect_eager_draws([&] { return f(x, y); }, [&] { return program(x, y); }, seed, c.advance,
                         c.name);
    if (c.name == "rows") {
      // Each call draws anew.
      EXPECT_FALSE(same(f(x, y), f(x, y)));
      const std::string fused = testing::explain_lines(f.explain());
      EXPECT_NE(fused.find("mul + dropout + add (nodes 0-2): one generated kernel of 3 inputs"),
                std::string::npos)
          << fused;
    }
  }
}

// Two dropouts of one group take their draws in program order (two draw
// slots of one kernel); a mask's `ones` is a constant of the kernel.
TEST(CodegenRandom, TwoDropoutsOfOneKernelDrawInProgramOrder) {
  KILN_NEEDS_COMPILER();
  NoGradGuard no_grad;
  const auto program = [](const Tensor& x, const Tensor& y) {
    const Tensor mask = F::dropout(ones({40, 33}), 0.1, true);
    return F::dropout(F::dropout(x, 0.5, true).exp() * y, 0.2, true) * mask;
  };
  const Tensor x = randn({40, 33}), y = randn({40, 33});
  const auto f = compile(program, {.strict = true});
  for (uint64_t seed : {3, 4})
    expect_eager_draws([&] { return f(x, y); }, [&] { return program(x, y); }, seed, 1,
                       "two dropouts");
  const ExplainReport r = f.explain();
  EXPECT_EQ(r.graphs.back().generated_kernels, 1) << r.to_string();
  EXPECT_NE(
      testing::explain_lines(r).find("full + dropout + dropout + exp + mul + dropout + mul (nodes "
                                     "0-6): one generated kernel of 2 inputs"),
      std::string::npos)
      << r.to_string();
}

// A random op between a dropout and the end of its group would draw before
// the dropout if the group ran at its end: the group stays apart, and says so.
TEST(CodegenRandom, ARandomOpInBetweenKeepsADropoutsGroupApart) {
  KILN_NEEDS_COMPILER();
  NoGradGuard no_grad;
  const auto program = [](const Tensor& x) {
    const Tensor h = F::dropout(x, 0.5, true);
    const Tensor r = randn({16, 24});
    return h.exp() + r;
  };
  const Tensor x = randn({16, 24});
  const auto f = compile(program, {.strict = true});
  for (uint64_t seed : {5, 6})
    expect_eager_draws([&] { return f(x); }, [&] { return program(x); }, seed, 0,
                       "randn in between");
  const std::string apart = testing::explain_lines(f.explain(), false);
  EXPECT_NE(apart.find("dropout + exp + add (nodes 0-3) not fused: node 1 draws random numbers "
                       "in between"),
            std::string::npos)
      << apart;
}

// Dropout in a row reduction's kernels: before a layer_norm (a residual
// block's `layer_norm(x + dropout(h))`) and after a softmax (attention's
// dropout of its probabilities), over many rows (blocks of rows on the
// threads) and one row (one call).
TEST(CodegenRandom, DropoutsBeforeAndAfterARowReductionDrawInItsKernels) {
  KILN_NEEDS_COMPILER();
  NoGradGuard no_grad;
  const auto residual = [](const Tensor& h, const Tensor& x) {
    return F::layer_norm(x + F::dropout(h, 0.1, true), {h.size(-1)});
  };
  const auto attention = [](const Tensor& s) {
    return F::dropout((s * 0.125).softmax(-1), 0.1, true);
  };
  for (const Shape& sizes : {Shape{64, 48}, Shape{1, 48}}) {
    const std::string what = detail::str_cat(sizes);
    const Tensor h = randn(sizes), x = randn(sizes);
    const auto f = compile(residual, {.strict = true});
    const auto g = compile(attention, {.strict = true});
    for (uint64_t seed : {7, 8}) {
      expect_eager_draws([&] { return f(h, x); }, [&] { return residual(h, x); }, seed, 1,
                         "layer_norm " + what);
      expect_eager_draws([&] { return g(h); }, [&] { return attention(h); }, seed, 1,
                         "softmax " + what);
    }
    EXPECT_NE(testing::explain_lines(f.explain())
                  .find("dropout + add + layer_norm (nodes 0-2): one generated kernel of 4 "
                        "inputs, its rows reduced by layer_norm in cache"),
              std::string::npos)
        << f.explain().to_string();
    EXPECT_NE(testing::explain_lines(g.explain()).find("around softmax"), std::string::npos)
        << g.explain().to_string();
  }
}

// check runs each call eagerly from the same generator state and compares.
TEST(CodegenRandom, CheckComparesKernelsThatDrawWithEager) {
  KILN_NEEDS_COMPILER();
  NoGradGuard no_grad;
  const auto program = [](const Tensor& x) { return F::dropout(x.tanh(), 0.3, true) * 3.0; };
  const auto f = compile(program, {.strict = true, .check = true});
  const Tensor x = randn({20, 30});
  for (uint64_t seed : {9, 10})
    expect_eager_draws([&] { return f(x); }, [&] { return program(x); }, seed, 1, "check");
  EXPECT_EQ(f.explain().graphs.back().generated_kernels, 1);
}

}  // namespace
}  // namespace kiln::compiler
