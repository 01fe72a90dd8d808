// A reduction whose input is read after it too (returned, or read by later
// steps: a softmax's input kept for its backward, a cross-entropy gradient
// summed per row and then scaled, a bias gradient's column sum of a gradient
// the weight's product reads) runs in the kernel that makes the input all
// the same: the kernel writes each block of rows (or tile of columns) into
// the input's own memory instead of a buffer, and the reduction folds it
// while it is in cache (codegen/row_reduction.h). Both values are eager's
// bit for bit, for rows on both sides of the threads' count and of a block,
// and in float64. An input read before the reduction, or rows of a permuted
// input, stay their own group's.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "compiler/compiler_testing.h"
#include "kiln/kiln.h"

namespace kiln::compiler {
namespace {

namespace F = kiln::nn::functional;
using testing::Lowered;
using testing::Program;
using testing::same;

struct Case {
  std::string name;
  std::function<Tensor(const Tensor&)> op;
};

std::vector<Case> reductions(const Tensor& w, const Tensor& b) {
  return {
      {"sum", [](const Tensor& x) { return x.sum({-1}); }},
      {"mean keepdim", [](const Tensor& x) { return x.mean({-1}, true); }},
      {"sum of two dims",
       [](const Tensor& x) {
         return x.sum({-2, -1});
       }},
      {"amax", [](const Tensor& x) { return amax(x, {-1}); }},
      {"softmax", [](const Tensor& x) { return x.softmax(-1); }},
      {"log_softmax", [](const Tensor& x) { return x.log_softmax(-1); }},
      {"var", [](const Tensor& x) { return var(x, {-1}); }},
      {"logsumexp", [](const Tensor& x) { return logsumexp(x, {-1}); }},
      {"layer_norm", [w, b](const Tensor& x) { return F::layer_norm(x, {x.size(-1)}, w, b); }},
  };
}

// The one step that makes and reduces the input, storing it: its index.
int64_t stored_reduction_step(const Schedule& s) {
  int64_t found = -1;
  for (size_t k = 0; k < s.steps.size(); ++k)
    if (s.steps[k].reduction && !s.steps[k].stored.empty()) found = static_cast<int64_t>(k);
  return found;
}

void expect_eagers_bits(const Program& f, const TensorList& args, const std::string& what) {
  const Lowered l = testing::lower(f, args);
  const int64_t k = stored_reduction_step(l.exe->schedule());
  ASSERT_GE(k, 0) << what << "\n" << to_text(l.trace->graph);
  const ScheduledStep& step = l.exe->schedule().steps[static_cast<size_t>(k)];
  EXPECT_EQ(step.stored.size(), 1u) << what;
  EXPECT_EQ(step.stored_writes, std::vector<int32_t>{-1}) << what;
  const TensorList want = f(args);
  for (int run = 0; run < 2; ++run) {  // the measuring run, then the planned one
    const TensorList got = l.exe->run(args);
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_TRUE(same(got[i], want[i])) << what << ": run " << run << " output " << i;
  }
}

TEST(CodegenStored, AReductionsInputReadAfterItIsStoredAsItIsReduced) {
  KILN_NEEDS_COMPILER();
  NoGradGuard no_grad;
  Generator gen(21);
  for (int threads : {2, 8}) {
    set_num_threads(threads);
    for (DType dtype : {kFloat32, kFloat64}) {
      // Few rows (fewer than threads: the whole input, then one call), rows
      // of one block, many rows over many blocks, long rows, empty rows.
      for (const auto& [rows, n] : std::vector<std::pair<int64_t, int64_t>>{
               {1, 5}, {3, 33}, {40, 300}, {999, 24}, {6, 20000}, {4, 0}}) {
        const Tensor x = (randn({rows, n}, {}, &gen) * 2.0).to(dtype);
        const Tensor bias = randn({n}, {}, &gen).to(dtype);
        const Tensor w = randn({n}, {}, &gen).to(dtype), b = randn({n}, {}, &gen).to(dtype);
        for (const Case& c : reductions(w, b)) {
          if (n == 0 && c.name == "amax") continue;  // no identity: eager refuses it too
          const auto op = c.op;
          const std::string what = detail::str_cat(c.name, " ", dtype, " [", rows, ", ", n, "] at ",
                                                   threads, " threads");
          // Returned beside the reduction.
          expect_eagers_bits(
              [op](const TensorList& t) {
                const Tensor y = (t[0] * 0.5 + t[1]).tanh();
                return TensorList{op(y), y};
              },
              {x, bias}, what + ", returned");
          // Read by a later step (and by a second reduction after it).
          expect_eagers_bits(
              [op](const TensorList& t) {
                const Tensor y = t[0] * 1.5 - t[1];
                const Tensor r = op(y);
                return TensorList{r, y.exp() * 0.25, y.sum({-1}, true)};
              },
              {x, bias}, what + ", read after");
        }
      }
    }
  }
  set_num_threads(2);
}

// Column reductions (a bias gradient's sum over the rows of a gradient that
// the weight's product reads too) store their input as they fold each tile:
// narrow and wide rows, a tail of columns, segments of the reduced range,
// an operand not affine in the reduced index (a call per row), float64.
TEST(CodegenStored, AColumnReductionsInputReadAfterItIsStoredTileByTile) {
  KILN_NEEDS_COMPILER();
  NoGradGuard no_grad;
  Generator gen(22);
  struct Shape2 {
    Shape x, other;
    std::vector<int64_t> dims;
  };
  const std::vector<Shape2> shapes = {{{512, 300}, {300}, {0}},
                                      {{1000, 3}, {1000, 3}, {0}},
                                      {{4096, 8}, {8}, {0}},
                                      {{33, 260}, {33, 260}, {0}},
                                      {{8, 64, 96}, {8, 64, 96}, {0, 1}},
                                      {{8, 16, 40}, {8, 1, 40}, {0, 1}},
                                      {{2, 3000, 20}, {20}, {1}}};
  for (int threads : {2, 8}) {
    set_num_threads(threads);
    for (DType dtype : {kFloat32, kFloat64}) {
      for (const Shape2& s : shapes) {
        const Tensor x = randn(s.x, {}, &gen).to(dtype), o = randn(s.other, {}, &gen).to(dtype);
        for (const char* op : {"sum", "mean", "amax"}) {
          const std::string name = op;
          const std::vector<int64_t> dims = s.dims;
          const Program f = [name, dims](const TensorList& t) {
            const Tensor g = (t[0] * 0.5 - t[1]).tanh();
            const Tensor r = name == "sum"    ? g.sum(dims)
                             : name == "mean" ? g.mean(dims, true)
                                              : amax(g, dims);
            return TensorList{r, g * 2.0};
          };
          const std::string what = detail::str_cat(name, " ", dtype, " ", s.x, " over ", dims,
                                                   " at ", threads, " threads");
          expect_eagers_bits(f, {x, o}, what);
          const Lowered l = testing::lower(f, {x, o});
          const auto k = static_cast<size_t>(stored_reduction_step(l.exe->schedule()));
          EXPECT_GE(l.exe->schedule().steps[k].reduction->column_begin, 0) << what;
        }
      }
    }
  }
  set_num_threads(2);
}

TEST(CodegenStored, InputsReadBeforeTheReductionOrOfOtherKindsStayApart) {
  KILN_NEEDS_COMPILER();
  NoGradGuard no_grad;
  const Tensor x = randn({16, 40}), b = randn({40});
  // Read by a node before the reduction: the group stores it, the reduction
  // reads it from memory.
  const Program before = [](const TensorList& t) {
    const Tensor y = t[0] * 2.0 + t[1];
    const Tensor e = y.exp();
    return TensorList{e, y.sum({-1})};
  };
  Lowered l = testing::lower(before, {x, b});
  EXPECT_EQ(stored_reduction_step(l.exe->schedule()), -1) << to_text(l.trace->graph);
  EXPECT_TRUE(same(l.exe->run({x, b})[1], before({x, b})[1]));
  // Rows of a permuted input are written in their own order: stored by
  // its own group.
  const Tensor x3 = randn({4, 6, 5});
  const Program permuted = [](const TensorList& t) {
    const Tensor y = t[0] * 2.0;
    return TensorList{y.sum({0, 2}), y};
  };
  l = testing::lower(permuted, {x3});
  EXPECT_EQ(stored_reduction_step(l.exe->schedule()), -1);
  for (const auto& st : l.exe->schedule().steps) EXPECT_FALSE(st.reduction.has_value());
  EXPECT_TRUE(same(l.exe->run({x3})[0], permuted({x3})[0]));
  // Written in place after the reduction: apart.
  const Program written = [](const TensorList& t) {
    Tensor y = t[0] * 2.0 + t[1];
    const Tensor s = y.sum({-1});
    y.mul_(3.0);
    return TensorList{s, y};
  };
  l = testing::lower(written, {x, b});
  EXPECT_EQ(stored_reduction_step(l.exe->schedule()), -1);
  const TensorList got = l.exe->run({x, b}), want = written({x, b});
  EXPECT_TRUE(same(got[0], want[0]) && same(got[1], want[1]));
}

// Through compile(), strict, with explain's line and check.
TEST(CodegenStored, ExplainSaysTheInputIsStored) {
  KILN_NEEDS_COMPILER();
  NoGradGuard no_grad;
  const auto f = [](const Tensor& x, const Tensor& m) {
    const Tensor s = x * 0.125 + m;
    return std::make_tuple(s.softmax(-1), s);
  };
  const auto fast = compile(f, {.strict = true, .check = true, .name = "scores"});
  const Tensor x = randn({2, 4, 16, 16}), m = randn({2, 1, 1, 16});
  const auto [p, s] = fast(x, m);
  const auto [pe, se] = f(x, m);
  EXPECT_TRUE(same(p, pe) && same(s, se));
  const ExplainReport r = fast.explain();
  ASSERT_EQ(r.graphs[0].fused.size(), 1u) << r.to_string();
  EXPECT_EQ(r.graphs[0].fused[0],
            "mul + add + softmax (nodes 0-2): one generated kernel of 3 inputs, its rows reduced "
            "by softmax in cache, its input stored as it is reduced");
}

}  // namespace
}  // namespace kiln::compiler
