// The memory plan and the executable: plans never overlap live storages and
// reuse dead ones; executables give eager's results bitwise.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

#include "compiler/capture/capture.h"
#include "compiler/compiler_testing.h"
#include "compiler/runtime/executable.h"
#include "compiler/schedule/memory_plan.h"
#include "kiln/kiln.h"
#include "ops/workspace.h"
#include "unit/expect_error.h"

namespace kiln::compiler {
namespace {

namespace F = nn::functional;
using kiln::testing::expect_error;
using testing::Program;
using testing::same;

std::shared_ptr<const Trace> trace_of(const Program& f, const TensorList& args) {
  return std::make_shared<const Trace>(testing::trace_of(f, args));
}

// Runs f eagerly, through replay and through the executable: all three equal.
void expect_executable_matches(const Program& f, const TensorList& args) {
  const auto t = trace_of(f, args);
  verify(t->graph);
  const Executable exe(t);
  check_plan(t->graph, exe.schedule(), exe.plan());
  const TensorList expected = f(args);
  const TensorList actual = exe.run(args);
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    EXPECT_TRUE(same(actual[i], expected[i])) << "output " << i << ":\n" << to_text(t->graph);
    EXPECT_EQ(actual[i].strides(), expected[i].strides()) << i;
  }
}

TEST(MemoryPlan, ReusesDeadStoragesAndKeepsOutputsAndInputsOut) {
  // x -> a -> b -> c -> d: each intermediate dies once the next is made.
  const auto t = trace_of(
      [](const TensorList& a) {
        Tensor y = a[0].exp();
        for (int i = 0; i < 6; ++i) y = (y * 0.5).tanh();
        return TensorList{y.sum()};
      },
      {ones({64, 64})});
  const MemoryPlan plan = plan_memory(t->graph);
  check_plan(t->graph, plan);
  ASSERT_EQ(plan.arenas.size(), 1u);
  const size_t one = 64 * 64 * 4;
  EXPECT_GE(plan.planned_bytes, 12 * one);
  EXPECT_LE(plan.arenas[0].nbytes, 2 * one + 4096) << "dead intermediates were not reused";
  // The input and the output are not in the arena.
  EXPECT_FALSE(
      plan.storages[static_cast<size_t>(t->graph.value(t->graph.inputs()[0]).storage)].in_arena);
  EXPECT_FALSE(
      plan.storages[static_cast<size_t>(t->graph.value(t->graph.outputs()[0]).storage)].in_arena);
}

TEST(MemoryPlan, AStorageLivesAsLongAsItsViews) {
  // b is read through a view after c is made: b and c must not share bytes.
  const auto t = trace_of(
      [](const TensorList& a) {
        Tensor b = a[0] + 1.0;
        Tensor view = b.t();
        Tensor c = a[0] * 2.0;
        Tensor d = c + view.t();
        return TensorList{d.sum()};
      },
      {ones({8, 8})});
  const MemoryPlan plan = plan_memory(t->graph);
  check_plan(t->graph, plan);
  const Graph& g = t->graph;
  const auto storage_of_node = [&](size_t node) {
    return static_cast<size_t>(g.value(g.nodes()[node].outputs[0]).storage);
  };
  const PlannedStorage& b = plan.storages[storage_of_node(0)];
  EXPECT_GE(b.last, 4) << to_text(g);  // read by the add through the view
}

TEST(MemoryPlan, CheckPlanFindsOverlaps) {
  const auto t =
      trace_of([](const TensorList& a) { return TensorList{((a[0] + 1.0) * (a[0] + 2.0)).sum()}; },
               {ones({16})});
  MemoryPlan plan = plan_memory(t->graph);
  check_plan(t->graph, plan);
  // Move every arena storage to offset 0: the two sums are alive together.
  for (auto& p : plan.storages) p.offset = 0;
  expect_error<Error>([&] { check_plan(t->graph, plan); }, "memory plan", "overlap");
}

// check_plan replays the graph over the arena's bytes instead of trusting the
// planner's lifetimes, so a lifetime the planner got wrong is caught: here the
// plan is made to forget the last reader of a storage (a matmul, which reads
// every input element for every output), in two ways.
TEST(MemoryPlan, CheckPlanCatchesAStorageReusedBeforeItsLastRead) {
  // node 0: y = a @ b; node 1: z = a * 2; node 2: w = y @ z; node 3: w.sum()
  const auto t = trace_of(
      [](const TensorList& a) {
        const Tensor y = matmul(a[0], a[1]);
        const Tensor z = a[0] * 2.0;
        return TensorList{matmul(y, z).sum()};
      },
      {ones({8, 8}), ones({8, 8})});
  const Graph& g = t->graph;
  ASSERT_EQ(g.nodes().size(), 4u);
  const auto storage = [&](size_t node) {
    return static_cast<size_t>(g.value(g.nodes()[node].outputs[0]).storage);
  };
  const size_t y = storage(0), z = storage(1), w = storage(2);
  const MemoryPlan good = plan_memory(g);
  check_plan(g, good);
  ASSERT_TRUE(good.storages[y].in_arena && good.storages[z].in_arena && good.storages[w].in_arena);
  // z written over y while y still has its reader at node 2 (as if y's
  // lifetime ended at node 0): the planner's own overlap rule, which trusts
  // that lifetime, sees nothing wrong.
  MemoryPlan early = good;
  early.storages[y].last = early.storages[y].first;
  early.storages[z].offset = early.storages[y].offset;
  expect_error<Error>([&] { check_plan(g, early); }, "storage", "is read at node 2");
  // w written over y at y's last read: a matmul reading y while writing it.
  MemoryPlan same_node = good;
  same_node.storages[w].offset = same_node.storages[y].offset;
  expect_error<Error>([&] { check_plan(g, same_node); }, "node 2 writes", "which it reads");
}

TEST(MemoryPlan, AWorkspaceLivesForItsStepOnly) {
  // Five steps in a chain; steps 1 and 3 ask for workspaces larger than
  // any storage. They never live at once, so they share bytes, and neither
  // overlaps the storages alive during its step.
  const auto t = trace_of(
      [](const TensorList& a) {
        Tensor y = a[0];
        for (int i = 0; i < 5; ++i) y = (y * 0.5).tanh();
        return TensorList{y.sum()};
      },
      {ones({32, 32})});
  const Graph& g = t->graph;
  const size_t one = 32 * 32 * 4;
  std::vector<size_t> workspaces(g.nodes().size(), 0);
  ASSERT_GE(workspaces.size(), 4u);
  workspaces[1] = 3 * one;
  workspaces[3] = 3 * one;
  const MemoryPlan plan = plan_memory(g, workspaces);
  check_plan(g, plan);
  ASSERT_EQ(plan.workspaces.size(), g.nodes().size());
  EXPECT_TRUE(plan.workspaces[1].in_arena);
  EXPECT_TRUE(plan.workspaces[3].in_arena);
  EXPECT_FALSE(plan.workspaces[0].in_arena);
  EXPECT_EQ(plan.workspaces[3].nbytes, 3 * one);
  ASSERT_EQ(plan.arenas.size(), 1u);
  // Alive at once at most: two chain links and the larger workspace.
  EXPECT_EQ(plan.arenas[0].nbytes, 2 * one + 3 * one) << "the two workspaces did not share bytes";
  // A workspace moved onto a storage alive in its step is an overlap.
  MemoryPlan broken = plan;
  const PlannedStorage& input_of_step_3 =
      broken.storages[static_cast<size_t>(g.value(g.nodes()[3].inputs[0]).storage)];
  ASSERT_TRUE(input_of_step_3.in_arena);
  broken.workspaces[3].offset = input_of_step_3.offset;
  broken.arenas[0].nbytes = std::max(broken.arenas[0].nbytes, input_of_step_3.offset + 3 * one);
  kiln::testing::expect_error_with<Error>([&] { check_plan(g, broken); },
                                          {"memory plan", "the workspace of node 3", "overlap"});
}

TEST(Workspace, AScopeServesFromItsSliceAsAStack) {
  const Device cpu = Device::cpu();
  const Tensor arena = empty({4096}, {.dtype = kUInt8});
  const char* base = static_cast<const char*>(arena.data_ptr());
  const auto at = [](const Tensor& t) { return static_cast<const char*>(t.data_ptr()); };
  {
    ops::WorkspaceScope scope(cpu, arena.storage(), 128, 1024);
    {
      const Tensor a = ops::make_workspace(100, cpu);
      EXPECT_EQ(at(a), base + 128);
      EXPECT_EQ(a.numel(), 100);
      {
        const Tensor b = ops::make_workspace(200, cpu);  // above a while a is held
        EXPECT_EQ(at(b), base + 128 + 128);
      }
      const Tensor c = ops::make_workspace(64, cpu);  // b's bytes, free again
      EXPECT_EQ(at(c), base + 128 + 128);
    }
    EXPECT_EQ(scope.high_water(), 128u + 256u);
    const Tensor d = ops::make_workspace(1000, cpu);  // from the slice's start again
    EXPECT_EQ(at(d), base + 128);
    const Tensor e = ops::make_workspace(100, cpu);  // past the slice: the allocator's
    EXPECT_TRUE(at(e) < base || at(e) >= base + 4096);
    EXPECT_EQ(scope.served(), 128u + 256u + 64u + 1024u);
    // Another device's workspaces are not the scope's.
    EXPECT_EQ(ops::WorkspaceScope::rounded(1, Device::cuda()), 256u);
  }
  const Tensor outside = ops::make_workspace(100, cpu);
  EXPECT_TRUE(at(outside) < base || at(outside) >= base + 4096);
  // Measuring only: the most held at once.
  ops::WorkspaceScope measure(cpu);
  { const Tensor a = ops::make_workspace(10, cpu), b = ops::make_workspace(70, cpu); }
  { const Tensor a = ops::make_workspace(100, cpu); }
  EXPECT_EQ(measure.high_water(), 64u + 128u);
  EXPECT_EQ(measure.served(), 0u);
}

TEST(Executable, MatchesEagerBitwise) {
  Generator gen(2);
  expect_executable_matches(
      [](const TensorList& a) {
        return TensorList{relu(a[0] * 2.0 - a[1]).sum({1}), a[0].t().exp()};
      },
      {randn({3, 4}, {}, &gen), randn({4}, {}, &gen)});
  // Integer and mixed dtypes: casts the shape rules ask for.
  expect_executable_matches(
      [](const TensorList& a) {
        return TensorList{(a[0] + a[1]) / 3, a[0].to(kFloat64).mean()};
      },
      {arange(0, 12).view({3, 4}), randn({4}, {}, &gen)});
  // Views of intermediates returned, in-place writes, a view's offset.
  expect_executable_matches(
      [](const TensorList& a) {
        Tensor x = a[0] * 3.0;
        Tensor row = x.narrow(0, 1, 2);
        row.add_(1.0);
        return TensorList{row, x.select(1, 2), x.softmax(-1)};
      },
      {randn({4, 5}, {}, &gen)});
  // Inputs that are views with an offset (same strides, another offset than traced).
  const Tensor base = randn({6, 5}, {}, &gen);
  const auto t =
      trace_of([](const TensorList& a) { return TensorList{a[0].t().contiguous() + 1.0}; },
               {base.narrow(0, 0, 3)});
  const Executable exe(t);
  const Tensor moved = base.narrow(0, 2, 3);
  EXPECT_TRUE(same(exe.run({moved})[0], moved.t().contiguous() + 1.0));
}

TEST(Executable, RunsModelsAsEagerDoes) {
  Generator gen(4);
  manual_seed(4);
  NoGradGuard no_grad;
  nn::Sequential cnn(std::make_shared<nn::Conv2d>(3, 8, 3, nn::Conv2d::Options{.padding = 1}),
                     std::make_shared<nn::BatchNorm2d>(8), std::make_shared<nn::ReLU>(),
                     std::make_shared<nn::MaxPool2d>(2), std::make_shared<nn::Flatten>(),
                     std::make_shared<nn::Linear>(8 * 4 * 4, 5));
  cnn.eval();
  expect_executable_matches([&](const TensorList& a) { return TensorList{cnn(a[0])}; },
                            {randn({2, 3, 8, 8}, {}, &gen)});
  nn::LSTM lstm(4, 6, {.num_layers = 2});
  expect_executable_matches(
      [&](const TensorList& a) {
        auto r = lstm(a[0]);
        return TensorList{r.output, r.state.h, r.state.c};
      },
      {randn({5, 2, 4}, {}, &gen)});
  nn::MultiheadAttention mha(16, 4);
  expect_executable_matches(
      [&](const TensorList& a) { return TensorList{mha(a[0], a[0], a[0]).output}; },
      {randn({3, 2, 16}, {}, &gen)});
}

TEST(Executable, RandomOpsDrawAsEagerDoes) {
  Generator gen(9);
  const Program f = [&](const TensorList& a) {
    return TensorList{F::dropout(a[0], 0.3, true, &gen) + randn({8}, {}, &gen)};
  };
  const Tensor x = ones({8});
  const auto t = trace_of(f, {x});
  const Executable exe(t);
  const Generator start = gen;
  const TensorList first = exe.run({x});
  EXPECT_FALSE(same(first[0], exe.run({x})[0]));
  gen = start;
  const TensorList expected = f({x});
  EXPECT_TRUE(same(first[0], expected[0]));
}

}  // namespace
}  // namespace kiln::compiler
