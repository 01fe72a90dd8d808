// Column reductions in generated kernels: sum, mean, amax and amin over a
// run of dims before the last (a bias gradient's sum over [0, 1], a mean
// over a sequence's tokens) join the pointwise group that makes their
// input. The kernel writes the input a tile at a time and the library's
// column reduction folds each tile in cache, in the blocks it folds over
// memory: results are eager's bitwise, for narrow and wide rows, a tail of
// columns, segments of the reduced range, broadcast inputs (one call per
// tile where they are affine, per row where not) and dropouts (per row, at
// their positions).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "compiler/compiler_testing.h"
#include "kiln/kiln.h"

namespace kiln::compiler {
namespace {

namespace F = kiln::nn::functional;
using testing::same;

struct ColumnCase {
  std::string name;
  Shape sizes;
  std::vector<int64_t> dims;
  Shape other;  // the second operand's sizes (broadcast)
  bool keepdim = false;
  DType dtype = kFloat32;
  // How it runs: "columns"; "rows" where the dims kept after the run are all
  // 1 (the library then reduces rows); "apart" where the reduced ones are.
  std::string how = "columns";
};

Tensor reduce(const std::string& op, const Tensor& x, const std::vector<int64_t>& dims,
              bool keepdim) {
  if (op == "sum") return x.sum(dims, keepdim);
  if (op == "mean") return x.mean(dims, keepdim);
  if (op == "amax") return amax(x, dims, keepdim);
  return amin(x, dims, keepdim);
}

TEST(CodegenColumns, ReductionsOverDimsBeforeTheLastRunInTheGroupsKernel) {
  KILN_NEEDS_COMPILER();
  NoGradGuard no_grad;
  const std::vector<ColumnCase> cases = {
      {"bias_gradient", {8, 64, 96}, {0, 1}, {8, 64, 96}},
      {"tokens_keepdim", {8, 64, 96}, {1}, {8, 64, 1}, true},
      {"narrow_rows", {1000, 3}, {0}, {1000, 3}},
      {"segments", {4096, 8}, {0}, {8}},
      {"column_tail", {33, 260}, {0}, {33, 260}},
      {"wide", {2, 3000, 20}, {1}, {2, 3000, 20}},
      {"not_affine", {8, 16, 40}, {0, 1}, {8, 1, 40}},
      {"middle_pair", {3, 5, 7, 9}, {1, 2}, {9}},
      {"empty_reduced", {5, 0, 7}, {1}, {7}},
      {"no_outputs", {0, 4, 7}, {1}, {7}},
      {"float64", {6, 40, 10}, {0, 1}, {6, 40, 10}, false, kFloat64},
      {"kept_ones", {40, 5, 1}, {0, 1}, {40, 5, 1}, false, kFloat32, "rows"},
      {"reduced_ones", {1, 1, 7}, {0, 1}, {7}, false, kFloat32, "apart"},
  };
  for (const std::string op : {"sum", "mean", "amax", "amin"}) {
    for (const ColumnCase& c : cases) {
      const std::string what = detail::str_cat(op, " ", c.name);
      const std::vector<int64_t> dims = c.dims;
      const bool keepdim = c.keepdim;
      const auto program = [op, dims, keepdim](const Tensor& x, const Tensor& y) {
        return reduce(op, (x * y).tanh(), dims, keepdim);
      };
      const Tensor x = randn(c.sizes, {.dtype = c.dtype}), y = randn(c.other, {.dtype = c.dtype});
      if ((op == "amax" || op == "amin") && c.name == "empty_reduced") continue;  // an error
      const auto f = compile(program, {.strict = true, .name = what});
      EXPECT_TRUE(same(f(x, y), program(x, y))) << what;
      const ExplainReport r = f.explain();
      const std::string line =
          c.how == "apart" ? detail::str_cat(op, " (nodes 1-2) not fused: ", op, " reduces dims ",
                                             c.dims, " of ", c.sizes, ", all of size 1")
                           : detail::str_cat("mul + tanh + ", op,
                                             " (nodes 0-2): one generated kernel of 2 inputs, its ",
                                             c.how, " reduced by ", op, " in cache");
      const std::string lines = testing::explain_lines(r) + testing::explain_lines(r, false);
      EXPECT_NE(lines.find(line), std::string::npos) << what << "\n" << r.to_string();
    }
  }
}

// A dropout's counters are its positions in the whole input: the kernel
// writes the tiles of `mean(x + dropout(h), 1)` a row at a time.
TEST(CodegenColumns, ADropoutBeforeAColumnReductionDrawsAtItsPositions) {
  KILN_NEEDS_COMPILER();
  NoGradGuard no_grad;
  const auto program = [](const Tensor& h, const Tensor& x) {
    return (x + F::dropout(h, 0.1, true)).mean({1});
  };
  const Tensor h = randn({4, 50, 300}), x = randn({4, 50, 300});
  const auto f = compile(program, {.strict = true});
  for (uint64_t seed : {21, 22}) {
    manual_seed(seed);
    (void)randn({1});  // an offset that does not start a Philox block
    const Tensor got = f(h, x), got_after = randn({3});
    manual_seed(seed);
    (void)randn({1});
    const Tensor want = program(h, x);
    EXPECT_TRUE(same(got, want)) << seed;
    EXPECT_TRUE(same(got_after, randn({3}))) << seed;
  }
  EXPECT_NE(testing::explain_lines(f.explain())
                .find("dropout + add + mean (nodes 0-2): one generated kernel of 2 inputs, its "
                      "columns reduced by mean in cache"),
            std::string::npos)
      << f.explain().to_string();
}

// var folds in two passes over its input: it stays apart, and says why.
TEST(CodegenColumns, AReductionTheLibraryCannotFoldFromTilesStaysApart) {
  KILN_NEEDS_COMPILER();
  NoGradGuard no_grad;
  const auto program = [](const Tensor& x) { return var(x * 2.0, {0}); };
  const Tensor x = randn({64, 32});
  const auto f = compile(program, {.strict = true});
  EXPECT_TRUE(same(f(x), program(x)));
  const std::string apart = testing::explain_lines(f.explain(), false);
  EXPECT_NE(apart.find("var reduces dims [0] of [64, 32], not trailing ones (nor a run of dims "
                       "before the last, which sum, mean, amax and amin reduce)"),
            std::string::npos)
      << apart;
}

// Reduced dims with a kept one between them (a batch norm backward's sums over
// [0, 2, 3] of [N, C, H, W]): the library reduces the rows of its input
// permuted, the kept dims first. The kernel writes those rows in
// that order, for every reduction over dims, and results are eager's
// bitwise: broadcast and transposed operands, keepdim, float64, empty
// inputs, dims of size 1 between them.
TEST(CodegenColumns, ReducedDimsApartInMemoryRunAsRowsOfTheInputPermuted) {
  KILN_NEEDS_COMPILER();
  NoGradGuard no_grad;
  struct Case {
    std::string name;
    Shape sizes;
    std::vector<int64_t> dims;
    Shape other;
    bool keepdim = false;
    DType dtype = kFloat32;
    bool transposed = false;  // the second operand a transposed view
    std::string permutation;  // "" where the library reads the input in place
  };
  const std::vector<Case> cases = {
      {"batch_norm", {4, 6, 9, 7}, {0, 2, 3}, {4, 6, 9, 7}, false, kFloat32, false, "[1, 0, 2, 3]"},
      {"batch_norm_keepdim",
       {4, 6, 9, 7},
       {0, 2, 3},
       {6, 1, 1},
       true,
       kFloat32,
       false,
       "[1, 0, 2, 3]"},
      {"sequence_ends", {5, 300, 8}, {0, 2}, {5, 300, 8}, false, kFloat32, true, "[1, 0, 2]"},
      {"two_kept", {3, 4, 5, 6}, {1, 3}, {6}, false, kFloat64, false, "[0, 2, 1, 3]"},
      {"size_one_kept_between", {7, 1, 5}, {0, 2}, {7, 1, 5}, false, kFloat32, false, ""},
      {"one_between", {4, 3, 1, 5}, {0, 3}, {5}, true, kFloat32, false, "[1, 2, 0, 3]"},
      {"many_rows", {2, 600, 3}, {0, 2}, {600, 1}, false, kFloat32, false, "[1, 0, 2]"},
      {"empty", {0, 6, 5}, {0, 2}, {6, 5}, false, kFloat32, false, "[1, 0, 2]"},
      // Fewer rows than threads (8 below): the rows are split into segments.
      {"few_rows", {64, 3, 300, 8}, {0, 2, 3}, {8}, false, kFloat32, false, "[1, 0, 2, 3]"},
  };
  const int threads = get_num_threads();
  const std::vector<std::string> ops = {"sum", "mean", "amax", "amin",     "prod",
                                        "var", "std",  "norm", "logsumexp"};
  for (const std::string& op : ops) {
    for (const Case& c : cases) {
      const std::string what = detail::str_cat(op, " ", c.name);
      if (c.name == "empty" && (op == "amax" || op == "amin")) continue;  // an error
      const std::vector<int64_t> dims = c.dims;
      const bool keepdim = c.keepdim;
      const auto program = [op, dims, keepdim](const Tensor& x, const Tensor& y) {
        const Tensor t = (x * y).tanh();
        if (op == "sum") return t.sum(dims, keepdim);
        if (op == "mean") return t.mean(dims, keepdim);
        if (op == "amax") return amax(t, dims, keepdim);
        if (op == "amin") return amin(t, dims, keepdim);
        if (op == "prod") return prod(t * 0.1 + 1.0, dims, keepdim);
        if (op == "var") return var(t, dims, 1.0, keepdim);
        if (op == "std") return stddev(t, dims, 1.0, keepdim);
        if (op == "norm") return norm(t, 2.0, dims, keepdim);
        return logsumexp(t, dims, keepdim);
      };
      const Tensor x = randn(c.sizes, {.dtype = c.dtype});
      Shape other = c.other;
      if (c.transposed) std::swap(other.front(), other.back());
      Tensor y = randn(other, {.dtype = c.dtype});
      if (c.transposed) y = y.transpose(0, -1);
      const auto f = compile(program, {.strict = true, .name = what});
      set_num_threads(c.name == "few_rows" ? 8 : threads);
      EXPECT_TRUE(same(f(x, y), program(x, y))) << what;
      set_num_threads(threads);
      const std::string lines = testing::explain_lines(f.explain());
      const std::string want =
          c.permutation.empty()
              ? std::string("not fused: ")
              : detail::str_cat("its rows (dims ", c.permutation, " of its input) reduced by ");
      const std::string all = lines + testing::explain_lines(f.explain(), false);
      EXPECT_NE(all.find(want), std::string::npos) << what << "\n" << f.explain().to_string();
    }
  }
}

// The rows of a permuted input are not the order a random node draws in:
// a dropout before such a reduction keeps it apart, and says why.
TEST(CodegenColumns, ADropoutBeforeAPermutedReductionKeepsItApart) {
  KILN_NEEDS_COMPILER();
  NoGradGuard no_grad;
  const auto program = [](const Tensor& x) { return (F::dropout(x, 0.2, true) * 2.0).sum({0, 2}); };
  const Tensor x = randn({4, 5, 6});
  const auto f = compile(program, {.strict = true});
  manual_seed(31);
  const Tensor got = f(x);
  manual_seed(31);
  EXPECT_TRUE(same(got, program(x)));
  EXPECT_NE(testing::explain_lines(f.explain(), false)
                .find("not fused: its rows are dims [1, 0, 2] of its input, and a random node "
                      "draws in the input's order"),
            std::string::npos)
      << f.explain().to_string();
}

}  // namespace
}  // namespace kiln::compiler
