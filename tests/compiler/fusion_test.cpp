// Fused steps (compiler/schedule/): a convolution with the bias, residual add
// and relu after it runs as one library call with an epilogue, within the
// tolerance of docs/compile.md of eager; what is left apart says why.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "backends/epilogue.h"
#include "compiler/compiler_testing.h"
#include "compiler/runtime/executable.h"
#include "compiler/schedule/memory_plan.h"
#include "kiln/kiln.h"
#include "unit/expect_error.h"

namespace kiln::compiler {
namespace {

using testing::lower;
using testing::Lowered;
using testing::Program;

// Within float32's tolerance of docs/compile.md (1e-5 relative, 1e-6
// absolute), element by element; NaN where eager has NaN.
void expect_close(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  const auto a = got.to_vector<double>(), b = want.to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(std::isnan(a[i]), std::isnan(b[i])) << what << ": element " << i;
    if (!std::isnan(b[i])) {
      ASSERT_LE(std::abs(a[i] - b[i]), 1e-6 + 1e-5 * std::abs(b[i])) << what << ": element " << i;
    }
  }
}

// Runs f eagerly and through its executable (twice: the measuring run and a
// planned one): the results are eager's bitwise (a fused step runs the
// kernel eager's call runs, and rounds the add and the relu as they do).
void expect_matches(const Program& f, const TensorList& args, const Lowered& l) {
  const TensorList want = f(args);
  for (int run = 0; run < 2; ++run) {
    const TensorList got = l.exe->run(args);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_TRUE(testing::same(got[i], want[i])) << "run " << run << " output " << i << ":\n"
                                                  << to_text(l.trace->graph);
  }
  check_plan(l.trace->graph, l.exe->schedule(), l.exe->plan());
}

size_t fused_steps(const Schedule& s) {
  return static_cast<size_t>(
      std::count_if(s.steps.begin(), s.steps.end(), [](const auto& st) { return st.fused(); }));
}

// Signed values, so the relu and the residual matter.
Tensor signed_values(const Shape& sizes, Generator& gen) { return randn(sizes, {}, &gen); }

TEST(Fusion, ConvolutionBiasResidualAndReluRunAsOneStep) {
  Generator gen(21);
  NoGradGuard no_grad;
  struct Case {
    const char* what;
    int64_t channels, out, size, kernel, stride, padding, groups;
    bool bias;
  };
  // 1x1 kernels run on plain NCHW (the residual a binary post-op); larger
  // ones on oneDNN's blocked layouts (the residual reordered in, a sum
  // post-op); odd channel counts leave partial channel blocks.
  const Case cases[] = {
      {"1x1", 16, 32, 7, 1, 1, 0, 1, true},           {"3x3", 8, 8, 9, 3, 1, 1, 1, true},
      {"3x3 no bias", 5, 7, 6, 3, 1, 1, 1, false},    {"grouped 3x3", 8, 8, 8, 3, 1, 1, 4, true},
      {"7x7 stride 2", 3, 16, 17, 7, 2, 3, 1, false}, {"1x1 odd", 3, 5, 4, 1, 1, 0, 1, false}};
  for (const Case& c : cases) {
    const int64_t out_size = (c.size + 2 * c.padding - c.kernel) / c.stride + 1;
    const Tensor x = signed_values({2, c.channels, c.size, c.size}, gen);
    const Tensor w = signed_values({c.out, c.channels / c.groups, c.kernel, c.kernel}, gen);
    const Tensor b = c.bias ? signed_values({c.out}, gen) : Tensor();
    const Tensor r = signed_values({2, c.out, out_size, out_size}, gen);
    const Conv2dOptions o{
        .stride = {c.stride, c.stride}, .padding = {c.padding, c.padding}, .groups = c.groups};
    // The ways programs write it: out of place, in place as ResNet's
    // blocks do, the residual first, relu alone, add alone.
    const std::vector<std::pair<std::string, Program>> programs = {
        {"relu(conv + r)",
         [&](const TensorList& a) { return TensorList{(conv2d(a[0], w, b, o) + a[1]).relu()}; }},
        {"conv += r; relu_",
         [&](const TensorList& a) {
           Tensor y = conv2d(a[0], w, b, o);
           y += a[1];
           y.relu_();
           return TensorList{y};
         }},
        {"relu(r + conv)",
         [&](const TensorList& a) { return TensorList{(a[1] + conv2d(a[0], w, b, o)).relu()}; }},
        {"relu(conv)",
         [&](const TensorList& a) {
           return TensorList{conv2d(a[0], w, b, o).relu(), a[1] * 2};
         }},
        {"conv + r", [&](const TensorList& a) { return TensorList{conv2d(a[0], w, b, o) + a[1]}; }},
    };
    for (const auto& [name, f] : programs) {
      SCOPED_TRACE(detail::str_cat(c.what, ": ", name));
      const Lowered l = lower(f, {x, r});
      const Schedule& sched = l.exe->schedule();
      ASSERT_EQ(fused_steps(sched), 1u) << to_text(l.trace->graph);
      ASSERT_EQ(sched.fused.size(), 1u);
      EXPECT_NE(sched.fused[0].find("one conv2d call with epilogue"), std::string::npos);
      expect_matches(f, {x, r}, l);
    }
  }
}

TEST(Fusion, Conv1dAndNaNsGoThroughTheEpilogue) {
  Generator gen(5);
  NoGradGuard no_grad;
  const Tensor w = signed_values({6, 4, 3}, gen), b = signed_values({6}, gen);
  Tensor x = signed_values({2, 4, 10}, gen);
  Tensor r = signed_values({2, 6, 10}, gen);
  // A NaN in the input spreads through the convolution; one in the
  // residual stays in its element; relu keeps NaN, as eager's does.
  x.data<float>()[13] = std::numeric_limits<float>::quiet_NaN();  // [0, 1, 3]
  r.data<float>()[87] = std::numeric_limits<float>::quiet_NaN();  // [1, 2, 7]
  const Program f = [&](const TensorList& a) {
    return TensorList{(conv1d(a[0], w, b, {.padding = {1}}) + a[1]).relu()};
  };
  const Lowered l = lower(f, {x, r});
  ASSERT_EQ(fused_steps(l.exe->schedule()), 1u);
  const Tensor want = f({x, r})[0];
  ASSERT_TRUE(std::isnan(want.to_vector<double>()[87]));
  expect_matches(f, {x, r}, l);
}

// A linear and the gelu after it: one call. On the matmul primitive (16 rows
// and more, a weight of 64K elements or more) oneDNN applies its gelu as the
// product is written: within float32 tolerance of eager, and strict leaves
// the two apart; under 16 rows the product, then eager's gelu, bitwise.
TEST(Fusion, ALinearTakesItsGeluAsOneCall) {
  NoGradGuard no_grad;
  Generator gen(21);
  const Tensor w = signed_values({256, 300}, gen) * 0.05, b = signed_values({256}, gen);
  for (const char* form : {"none", "tanh"}) {
    const Program f = [form](const TensorList& t) {
      return TensorList{gelu(linear(t[0], t[1], t[2]), form)};
    };
    const Program no_bias = [form](const TensorList& t) {
      return TensorList{gelu(linear(t[0], t[1]), form)};
    };
    for (int64_t rows : {4, 32, 130}) {
      const std::string what = detail::str_cat(form, " rows ", rows);
      const Tensor x = signed_values({rows, 300}, gen);
      for (const Program& p : {f, no_bias}) {
        const Lowered l = lower(p, {x, w, b});
        ASSERT_EQ(l.exe->schedule().steps.size(), 1u) << what;
        ASSERT_EQ(l.exe->schedule().fused.size(), 1u) << what;
        EXPECT_NE(l.exe->schedule().fused[0].find("linear + gelu (nodes 0-1): one linear call "
                                                  "with epilogue gelu"),
                  std::string::npos)
            << l.exe->schedule().fused[0];
        const TensorList want = p({x, w, b});
        for (int run = 0; run < 2; ++run) {
          const Tensor got = l.exe->run({x, w, b})[0];
          if (rows < 16)
            EXPECT_TRUE(testing::same(got, want[0])) << what;
          else
            expect_close(got, want[0], what);
        }
        check_plan(l.trace->graph, l.exe->schedule(), l.exe->plan());
      }
    }
    // Strict: apart, and eager's bits.
    const Tensor x = signed_values({32, 300}, gen);
    ScheduleOptions strict;
    strict.strict = true;
    const Lowered l = lower(f, {x, w, b}, strict);
    EXPECT_EQ(fused_steps(l.exe->schedule()), 0u);
    ASSERT_EQ(l.exe->schedule().not_fused.size(), 1u);
    EXPECT_NE(l.exe->schedule().not_fused[0].find("not fused: strict: the cpu backend's gelu"),
              std::string::npos)
        << l.exe->schedule().not_fused[0];
    expect_matches(f, {x, w, b}, l);
  }
}

TEST(Fusion, AValueMadeInsideAGroupGetsNoBytes) {
  Generator gen(2);
  NoGradGuard no_grad;
  const Tensor w = signed_values({8, 8, 3, 3}, gen);
  const Program f = [&](const TensorList& a) {
    return TensorList{(conv2d(a[0], w, {}, {.padding = {1, 1}}) + a[1]).relu()};
  };
  const Tensor x = signed_values({1, 8, 12, 12}, gen), r = signed_values({1, 8, 12, 12}, gen);
  const Lowered l = lower(f, {x, r});
  const Graph& g = l.trace->graph;
  ASSERT_EQ(l.exe->schedule().steps.size(), 1u);
  // conv's and add's results live inside the step; relu's leaves the graph.
  for (const Node& n : g.nodes()) {
    const auto s = static_cast<size_t>(g.value(n.outputs[0]).storage);
    EXPECT_EQ(l.exe->schedule().materialized[s], n.op == ops::OpId::relu);
    EXPECT_FALSE(l.exe->plan().storages[s].in_arena);
  }
  EXPECT_EQ(l.exe->plan().planned_bytes, 0u);
  expect_matches(f, {x, r}, l);
}

TEST(Fusion, CandidatesLeftApartSayWhy) {
  Generator gen(8);
  NoGradGuard no_grad;
  const Tensor w = signed_values({4, 4, 3, 3}, gen);
  const Tensor x = signed_values({1, 4, 6, 6}, gen), r = signed_values({1, 4, 6, 6}, gen);
  struct Case {
    std::string what;
    Program f;
    TensorList args;
    ScheduleOptions options;
    std::string why;  // empty: no candidate at all
  };
  const std::vector<Case> cases = {
      {"float64",
       [&](const TensorList& a) { return TensorList{conv2d(a[0], w.to(kFloat64)).relu()}; },
       {x.to(kFloat64)},
       {},
       "the CPU runs it on float64, not float32"},
      {"a write in between",
       [&](const TensorList& a) {
         Tensor y = conv2d(a[0], w, {}, {.padding = {1, 1}});
         Tensor x2 = a[0];
         x2.mul_(2.0);
         return TensorList{y.relu(), x2};
       },
       {x},
       {},
       "writes a tensor it reads in between"},
      // Not candidates: the result is read twice; the residual broadcasts.
      {"read twice",
       [&](const TensorList& a) {
         Tensor y = conv2d(a[0], w);
         return TensorList{y.relu(), y};
       },
       {x},
       {},
       ""},
      {"broadcast residual",
       [&](const TensorList& a) {
         return TensorList{conv2d(a[0], w, {}, {.padding = {1, 1}}) + a[1].narrow(3, 0, 1)};
       },
       {x, r},
       {},
       ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    TensorList traced;
    for (const Tensor& t : c.args) traced.push_back(t.clone());
    const Lowered l = lower(c.f, traced, c.options);
    EXPECT_EQ(fused_steps(l.exe->schedule()), 0u);
    if (c.why.empty()) {
      EXPECT_TRUE(l.exe->schedule().not_fused.empty());
    } else {
      ASSERT_EQ(l.exe->schedule().not_fused.size(), 1u);
      EXPECT_NE(l.exe->schedule().not_fused[0].find(c.why), std::string::npos)
          << l.exe->schedule().not_fused[0];
    }
    // Fresh arguments for each run: one program writes its argument.
    const auto fresh = [&] {
      TensorList a;
      for (const Tensor& t : c.args) a.push_back(t.clone());
      return a;
    };
    const TensorList want = c.f(fresh());
    const TensorList got = l.exe->run(fresh());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(testing::same(got[i], want[i])) << i;
  }
}

// ResNets, frozen: every convolution with a relu or a residual add after it
// is one step, pinned per model so that a fusion regression fails here;
// explain() and KILN_LOGS=fusion show the groups; check passes.
TEST(Fusion, FrozenResNetsRunEachConvolutionWithItsEpilogueAsOneStep) {
  NoGradGuard no_grad;
  struct Case {
    std::string name;
    std::shared_ptr<models::ResNet> net;
    size_t fused;      // convolutions with an epilogue
    int64_t absorbed;  // relu and add nodes run inside them
    int64_t channels_last;  // results kept channels last
    int64_t prepared;       // weights held only prepared: every convolution's
  };
  manual_seed(4);
  // ResNet-18: 20 convolutions; all but the 3 downsampling ones are followed
  // by a relu, 8 of those by a residual add first. ResNet-50: 53, 4
  // downsampling, 16 residual adds. Channels last: every convolution and the
  // max pool, but for those whose 32x32 input leaves 1x1 maps (the last
  // stage's, bar ResNet-50's first 1x1 convolution at 2x2), where the two
  // layouts are one: 20 - 5 + 1 and 53 - 9 + 1.
  const std::vector<Case> cases = {
      {"resnet18", models::resnet18({.num_classes = 10, .widths = {8, 16, 32, 64}}), 17, 17 + 8, 16,
       20},
      {"resnet50", models::resnet50({.num_classes = 10, .widths = {8, 16, 32, 64}}), 49, 49 + 16,
       45, 53}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    c.net->eval();
    const Tensor x = randn({1, 3, 32, 32});
    testing::LogCapture logs("fusion");
    const auto fast = compile(*c.net, {.freeze = true, .check = true, .name = c.name});
    const Tensor got = fast(x), want = (*c.net)(x);
    expect_close(got, want, c.name);
    const ExplainReport report = fast.explain();
    ASSERT_EQ(report.graphs.size(), 1u);
    const auto& g = report.graphs[0];
    EXPECT_EQ(g.fused.size(), c.fused);
    EXPECT_TRUE(g.not_fused.empty());
    EXPECT_EQ(g.steps, g.nodes - c.absorbed);
    EXPECT_EQ(g.channels_last, c.channels_last);
    EXPECT_EQ(g.prepared_weights, c.prepared);
    EXPECT_NE(report.to_string().find("fused: conv2d + add_ + relu_"), std::string::npos)
        << report.to_string();
    EXPECT_TRUE(logs.contains(c.name + ": conv2d + relu_"));
    EXPECT_TRUE(logs.contains(detail::str_cat(g.nodes, " nodes in ", g.steps, " steps")));
  }
}

// Epilogue groups round as eager: strict fuses them, and check compares
// bitwise.
TEST(Fusion, StrictFusesEpiloguesAndKeepsEagersBits) {
  Generator gen(13);
  NoGradGuard no_grad;
  const Tensor w = signed_values({8, 4, 1, 1}, gen), b = signed_values({8}, gen);
  const Tensor x = signed_values({2, 4, 5, 5}, gen), r = signed_values({2, 8, 5, 5}, gen);
  const auto f = [&](const Tensor& a, const Tensor& res) { return (conv2d(a, w, b) + res).relu(); };
  const auto fast = compile(f, {.strict = true, .check = true, .name = "strict_epilogue"});
  EXPECT_TRUE(testing::same(fast(x, r), f(x, r)));
  const ExplainReport report = fast.explain();
  ASSERT_EQ(report.graphs.size(), 1u);
  EXPECT_EQ(report.graphs[0].fused.size(), 1u);
  EXPECT_EQ(report.graphs[0].steps, 1);
}

// check names the fused group whose result differs from eager's: here a
// lowering that forgets the relu.
void conv_epilogue_without_relu(const backend::KernelCall& call,
                                const backend::Epilogue& epilogue) {
  Tensor y = conv2d(call.in(0), call.in(1), call.in(2));
  if (std::find(epilogue.ops.begin(), epilogue.ops.end(), backend::Epilogue::Kind::kAdd) !=
      epilogue.ops.end())
    y = y + call.in(3);
  call.out().copy_(y);
}

TEST(Fusion, CheckNamesTheFusedGroupThatDiffers) {
  const backend::EpilogueLowering saved =
      *backend::epilogue_lowering(DeviceKind::CPU, ops::OpId::conv2d);
  backend::register_epilogue_lowering(DeviceKind::CPU, ops::OpId::conv2d,
                                      {saved.supports, conv_epilogue_without_relu});
  struct Restore {
    backend::EpilogueLowering saved;
    ~Restore() { backend::register_epilogue_lowering(DeviceKind::CPU, ops::OpId::conv2d, saved); }
  } restore{saved};
  Generator gen(9);
  NoGradGuard no_grad;
  const Tensor w = signed_values({4, 4, 3, 3}, gen), x = signed_values({1, 4, 6, 6}, gen);
  const auto fast = compile([&](const Tensor& a) { return conv2d(a, w).relu() * 2; },
                            {.check = true, .name = "planted"});
  kiln::testing::expect_error<Error>(
      [&] { (void)fast(x); },
      "node 1 (relu, the result of the fused group conv2d + relu (nodes 0-1))", "first to differ");
}

}  // namespace
}  // namespace kiln::compiler
