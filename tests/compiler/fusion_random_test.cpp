// Random programs through the schedule's groups: chains and trees of
// pointwise ops over broadcast operands, in-place writes to tensors the
// program made and to its arguments (a group's scratch where it holds all of
// a tensor's writes), views read between writes, values read after the
// group that makes them (stored as more outputs), reductions over rows, over
// columns and over dims with a kept one between them, and dropouts (drawn
// inside the kernels), each program's executable against eager bitwise (its
// results and what it wrote into its arguments) from one generator state.
// The programs are made from a seed, so that a failure names the seed and
// the program's text.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "compiler/compiler_testing.h"
#include "compiler/passes/pass.h"
#include "kiln/kiln.h"

namespace kiln::compiler {
namespace {

using testing::lower;
using testing::Lowered;

// One step of a program: an op on earlier values, by index.
struct Step {
  int kind = 0;
  int a = 0, b = 0, c = 0;
};

constexpr int kKinds = 16;                 // and kinds 16 to 20 in place of some steps
constexpr int64_t kRows = 31, kCols = 31;  // square: a transposed view has the sizes

// The values a step may read: the arguments, then each step's result.
// Arguments: x [rows, cols], y [rows, cols], b [cols], s [rows, 1].
Tensor run_step(const Step& st, std::vector<Tensor>& v, std::string& text) {
  const auto name = [](int k) { return detail::str_cat("v", k); };
  const Tensor& a = v[static_cast<size_t>(st.a)];
  const Tensor& b = v[static_cast<size_t>(st.b)];
  const Tensor& c = v[static_cast<size_t>(st.c)];
  const std::string out = name(static_cast<int>(v.size()));
  switch (st.kind) {
    case 0:
      text += detail::str_cat(out, " = ", name(st.a), " + ", name(st.b), "\n");
      return a + b;
    case 1:
      text += detail::str_cat(out, " = ", name(st.a), " * ", name(st.b), " - 0.5\n");
      return a * b - 0.5;
    case 2:
      text += detail::str_cat(out, " = tanh(", name(st.a), ")\n");
      return a.tanh();
    case 3:
      text += detail::str_cat(out, " = gelu(", name(st.a), ") / (1 + abs(", name(st.b), "))\n");
      return gelu(a) / (b.abs() + 1.0);
    case 4:
      text += detail::str_cat(out, " = where(", name(st.a), " > ", name(st.b), ", ", name(st.c),
                              ", exp(", name(st.a), "))\n");
      return where(a > b, c, a.exp());
    case 5:
      text +=
          detail::str_cat(out, " = masked_fill(", name(st.a), ", ", name(st.b), " < 0, -1e4)\n");
      return masked_fill(a, b < 0.0, -1e4);
    case 6:
      text += detail::str_cat(out, " = maximum(", name(st.a), ", ", name(st.b), ").relu()\n");
      return maximum(a, b).relu();
    case 7: {  // a tensor the program made, written in place
      text += detail::str_cat(out, " = ", name(st.a), " + ", name(st.b), "; mul_(0.75); add_(",
                              name(st.b), "); relu_()\n");
      Tensor t = a + b;
      t.mul_(0.75).add_(b).relu_();
      return t;
    }
    case 8: {  // an earlier value written in place: its readers after see it
      text += detail::str_cat(name(st.a), ".add_(", name(st.b), ").clamp_(-2, 2); ", out, " = ",
                              name(st.a), "\n");
      Tensor t = v[static_cast<size_t>(st.a)];
      bool fits = b.dim() <= t.dim();  // b broadcasts to t's sizes
      for (int64_t d = 1; fits && d <= b.dim(); ++d)
        fits = b.size(-d) == 1 || b.size(-d) == t.size(-d);
      if (!fits) return a * 1.0;
      t.add_(b).clamp_(-2.0, 2.0);
      return t;
    }
    case 9:
      text += detail::str_cat(out, " = softmax(", name(st.a), " * 0.25 + ", name(st.b), ")\n");
      return (a * 0.25 + b).softmax(-1);
    case 10:
      text += detail::str_cat(out, " = ", name(st.a), " - mean(", name(st.a), " * ", name(st.b),
                              ", -1, keepdim)\n");
      return a - (a * b).mean({-1}, true);
    case 11: {
      text += detail::str_cat(out, " = layer_norm(", name(st.a), " + ", name(st.b), ")\n");
      const Tensor sum = a + b;
      return nn::functional::layer_norm(sum, {sum.size(-1)});
    }
    case 12:
      text += detail::str_cat(out, " = logsumexp(", name(st.a), " - ", name(st.b),
                              ", -1, keepdim) + ", name(st.c), "\n");
      return logsumexp(a - b, {-1}, true) + c;
    case 13: {  // a view of an earlier value read after a write to it
      text += detail::str_cat("t = ", name(st.a), ".clone(); w = t.t(); t.mul_(2); ", out,
                              " = t + w.t() * ", name(st.b), "\n");
      if (a.dim() != 2 || a.size(0) != a.size(1)) return a * 3.0;
      Tensor t = a.clone();
      const Tensor w = t.t();
      t.mul_(2.0);
      return t + w.t() * b;
    }
    case 14:
      text += detail::str_cat(out, " = sum(sigmoid(", name(st.a), "), -1, keepdim) * ", name(st.b),
                              "\n");
      return a.sigmoid().sum({-1}, true) * b;
    case 16:
      text += detail::str_cat(out, " = dropout(", name(st.a), ", 0.3) * ", name(st.b), "\n");
      return nn::functional::dropout(a, 0.3) * b;
    case 17: {
      text += detail::str_cat(out, " = layer_norm(dropout(", name(st.a), ", 0.2) + ", name(st.b),
                              ")\n");
      const Tensor sum = nn::functional::dropout(a, 0.2) + b;
      return nn::functional::layer_norm(sum, {sum.size(-1)});
    }
    case 18:
      text += detail::str_cat(out, " = sum(", name(st.a), " * ", name(st.b), ", 0, keepdim) + ",
                              name(st.c), "\n");
      return (a * b).sum({0}, true) + c;
    case 19: {  // dims with a kept one between them: rows of the input permuted
      text +=
          detail::str_cat(out, " = sum(", name(st.a), "[:, None, :] * ", name(st.b), ", [0, 2])\n");
      if (a.dim() != 2) return a * 3.0;
      return (a.unsqueeze(1) * b).sum({0, 2});
    }
    case 20:  // a reduction of an earlier value, which later steps may read too
      text += detail::str_cat(out, " = sum(", name(st.a), ", -1, keepdim) * ", name(st.b), "\n");
      return a.sum({-1}, true) * b;
    default:
      text +=
          detail::str_cat(out, " = remainder(", name(st.a), ", 1.5) * sign(", name(st.b), ")\n");
      return remainder(a, 1.5) * sign(b);
  }
}

struct RandomProgram {
  std::vector<Step> steps;
  std::vector<int> results;
  bool writes_argument = false;  // step 8 on an argument
};

RandomProgram make_program(uint32_t seed) {
  std::mt19937 rng(seed);
  std::mt19937 draws(seed + 7919);  // which steps are dropouts instead
  RandomProgram p;
  const int n = 4 + static_cast<int>(rng() % 9);
  for (int i = 0; i < n; ++i) {
    const int values = 4 + i;
    auto pick = [&] { return static_cast<int>(rng() % static_cast<uint32_t>(values)); };
    Step st{static_cast<int>(rng() % kKinds), pick(), pick(), pick()};
    // Reductions and in-place writes read a full-size value first.
    if (st.kind >= 7 && st.a >= 2 && st.a < 4) st.a = static_cast<int>(rng() % 2);
    // Dropouts (one may broadcast), a column reduction, a permuted one and
    // one of an earlier value.
    if (draws() % 6 == 0) st.kind = 16 + static_cast<int>(draws() % 5);
    if (st.kind == 17 && st.a >= 2 && st.a < 4) st.a = static_cast<int>(draws() % 2);
    // The step before's result, or an older one that other steps read in between.
    if (st.kind == 20 && values > 4)
      st.a = draws() % 2 == 0 ? values - 1 : 4 + static_cast<int>(draws() % (values - 4));
    if (st.kind == 8 && st.a < 2) p.writes_argument = true;
    p.steps.push_back(st);
  }
  const int values = 4 + n;
  p.results = {values - 1, static_cast<int>(rng() % static_cast<uint32_t>(values - 4)) + 4};
  return p;
}

TensorList run_program(const RandomProgram& p, const TensorList& args, std::string* text) {
  std::vector<Tensor> v(args.begin(), args.end());
  std::string ignored;
  for (const Step& st : p.steps) v.push_back(run_step(st, v, text ? *text : ignored));
  TensorList out;
  for (int r : p.results) out.push_back(v[static_cast<size_t>(r)]);
  return out;
}

TEST(FusionRandom, ProgramsOfGroupsInPlaceWritesViewsAndReductionsMatchEagerBitwise) {
  NoGradGuard no_grad;
  int fused_steps = 0, reductions = 0, epilogues = 0, in_place = 0, scratch = 0;
  int stored = 0, stored_in_place = 0;  // groups of several outputs; of those writing inputs
  int drawing = 0, drawing_reductions = 0;  // groups with dropouts; of those reducing rows
  int columns = 0, permuted = 0;            // column reductions; rows of a permuted input
  int stored_reductions = 0;                // reductions storing their input
  int hoisted = 0;                          // programs whose reductions the passes move
  for (uint32_t seed = 0; seed < 40; ++seed) {
    const RandomProgram p = make_program(seed);
    manual_seed(seed);
    const TensorList args{randn({kRows, kCols}) * 2.0, randn({kRows, kCols}), randn({kCols}),
                          randn({kRows, 1})};
    const testing::Program f = [&p](const TensorList& a) { return run_program(p, a, nullptr); };
    TensorList mine, theirs;
    for (const Tensor& t : args) {
      mine.push_back(t.clone());
      theirs.push_back(t.clone());
    }
    const Lowered l = lower(f, mine);
    for (const auto& st : l.exe->schedule().steps) {
      fused_steps += st.kernel >= 0;
      reductions += st.reduction.has_value();
      epilogues += st.reduction && st.reduction->epilogue_kernel >= 0;
      in_place += st.writes_input >= 0;
      stored += !st.stored.empty();
      stored_in_place += std::any_of(st.stored_writes.begin(), st.stored_writes.end(),
                                     [](int32_t w) { return w >= 0; });
      drawing += !st.draws.empty();
      drawing_reductions += !st.draws.empty() && st.reduction.has_value();
      columns += st.reduction && st.reduction->column_begin >= 0;
      permuted += st.reduction && !st.reduction->permutation.empty();
      stored_reductions += st.reduction && !st.stored.empty();
      // A tensor written in place inside the group, other than its result's.
      const Graph& g = l.trace->graph;
      const int32_t result =
          g.value(l.exe->schedule().result(g, &st - &l.exe->schedule().steps[0])).storage;
      scratch += st.kernel >= 0 && std::any_of(st.nodes.begin(), st.nodes.end(), [&](int32_t k) {
                   const Node& n = g.nodes()[static_cast<size_t>(k)];
                   return n.inplace() && g.value(n.target).storage != result;
                 });
    }
    std::string text;  // the program, as eager runs it
    manual_seed(1000 + seed);
    const TensorList want = run_program(p, theirs, &text);
    manual_seed(1000 + seed);
    const TensorList got = l.exe->run(mine);
    const std::string what = detail::str_cat("seed ", seed, ":\n", text, to_text(l.trace->graph));
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_TRUE(testing::same(got[i], want[i])) << "result " << i << ", " << what;
    for (size_t i = 0; i < args.size(); ++i)
      EXPECT_TRUE(testing::same(mine[i], theirs[i])) << "argument " << i << ", " << what;
    // Through strict mode's passes first (they keep eager's bits): the same.
    TensorList again;
    for (const Tensor& t : args) again.push_back(t.clone());
    const Trace passed = run_passes(*l.trace, {.strict = true});
    hoisted +=
        testing::op_names(hoist_reductions(*l.trace).graph) != testing::op_names(l.trace->graph);
    const Executable exe(std::make_shared<const Trace>(passed));
    manual_seed(1000 + seed);
    const TensorList through = exe.run(again);
    ASSERT_EQ(through.size(), want.size()) << what;
    for (size_t i = 0; i < through.size(); ++i)
      EXPECT_TRUE(testing::same(through[i], want[i]))
          << "result " << i << " after the passes, " << what << to_text(passed.graph);
    for (size_t i = 0; i < args.size(); ++i)
      EXPECT_TRUE(testing::same(again[i], theirs[i])) << "argument " << i << " after the passes";
  }
  // The programs reach each kind of group (with a compiler to build them).
  if (testing::can_generate_kernels()) {
    EXPECT_GT(fused_steps, 100);
    EXPECT_GT(reductions, 40);
    EXPECT_GT(epilogues, 3) << "of " << reductions;
    EXPECT_GT(in_place, 5);
    EXPECT_GT(scratch, 3);
    EXPECT_GT(stored, 10);
    EXPECT_GT(stored_in_place, 2);
    EXPECT_GT(drawing, 5);
    EXPECT_GT(drawing_reductions, 1);
    EXPECT_GT(columns, 3);
    EXPECT_GT(permuted, 1);
    EXPECT_GT(stored_reductions, 1);
    EXPECT_GT(hoisted, 1);
  }
}

// The same programs compiled with every dim dynamic, under strict, and
// called at several numbers of rows: each size that the program's guards admit
// binds the one program compiled for all sizes (its passes, schedule and
// kernels decided once on symbolic layouts), and every result and written
// argument is eager's bitwise at every size. Sizes a guard refuses (a
// program that read the rows, or a transpose that needs as many rows as
// columns) are traced or retraced, as before.
TEST(FusionRandom, ProgramsBoundToNewSizesMatchEagerBitwise) {
  NoGradGuard no_grad;
  int64_t bound = 0, graphs = 0;
  for (uint32_t seed = 0; seed < 30; ++seed) {
    const RandomProgram p = make_program(seed);
    const auto f = [&p](const Tensor& x, const Tensor& y, const Tensor& b, const Tensor& s) {
      return run_program(p, {x, y, b, s}, nullptr);
    };
    const auto fast = compile(f, {.dynamic = Dynamic::On, .strict = true, .name = "random"});
    for (int64_t n : {31, 17, 40, 9, 24}) {
      manual_seed(seed * 100 + static_cast<uint32_t>(n));
      const TensorList args{randn({n, kCols}) * 2.0, randn({n, kCols}), randn({kCols}),
                            randn({n, 1})};
      TensorList mine, theirs;
      for (const Tensor& t : args) {
        mine.push_back(t.clone());
        theirs.push_back(t.clone());
      }
      std::string text;
      manual_seed(1000 + seed);
      TensorList want;
      try {
        want = run_program(p, theirs, &text);
      } catch (const Error&) {
        continue;  // a program whose ops broadcast only when rows and columns are equal
      }
      manual_seed(1000 + seed);
      const TensorList got = fast(mine[0], mine[1], mine[2], mine[3]);
      const std::string what = detail::str_cat("seed ", seed, ", size ", n, ":\n", text);
      ASSERT_EQ(got.size(), want.size()) << what;
      for (size_t i = 0; i < got.size(); ++i)
        EXPECT_TRUE(testing::same(got[i], want[i])) << "result " << i << ", " << what;
      for (size_t i = 0; i < args.size(); ++i)
        EXPECT_TRUE(testing::same(mine[i], theirs[i])) << "argument " << i << ", " << what;
    }
    bound += fast.stats().bound_sizes;
    graphs += fast.stats().graphs;
  }
  // Most new sizes bind the program (4 of each of 30 programs).
  EXPECT_GT(bound, 60) << "of " << graphs << " graphs";
}

}  // namespace
}  // namespace kiln::compiler
