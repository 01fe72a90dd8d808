// The schedule of an executable (docs/architecture.md, "Schedules and fused
// steps"): the graph's nodes in steps, each step one call at run time. A
// step is one node (a kernel, a view, an in-place write) or a group of nodes
// run as one call: a library call with an epilogue (a convolution with its
// residual add and relu), or pointwise nodes as one generated kernel
// (compiler/codegen/). The memory plan, the
// workspaces and the plan's check count time in steps, so a value made and
// read only inside a group never gets bytes.
//
// What is fused is decided here, once for every backend, over the graph and
// the backends' capabilities (backends/epilogue.h); each candidate left
// apart is noted with why, for explain() and KILN_LOGS=fusion.
#pragma once

#include <string>
#include <vector>

#include "backends/epilogue.h"
#include "compiler/codegen/pointwise_kernel.h"
#include "compiler/codegen/row_reduction.h"
#include "compiler/ir/graph.h"

namespace kiln::compiler {

struct ScheduleOptions {
  // Results bitwise eager's (CompileOptions::strict): no group that rounds
  // otherwise than the nodes it covers. (Epilogue groups and generated
  // kernels round as eager.)
  bool strict = false;
  // Pointwise groups as generated kernels; off where they cannot be built
  // (no C++ compiler), with `generate_off` saying why.
  bool generate = true;
  std::string generate_off;
};

struct ScheduledStep {
  // The graph nodes it covers, ascending. It runs at the last one's place in
  // program order: the others' inputs are ready by then, and no node in
  // between writes what they read.
  std::vector<int32_t> nodes;
  // A library call with an epilogue: nodes[0] is the call, the others the
  // epilogue's ops in order. It reads `inputs` (the call's, then one per
  // kAdd) and makes the last node's output.
  const backend::EpilogueLowering* lowering = nullptr;
  backend::Epilogue epilogue;
  // A group of pointwise nodes as one generated kernel (Schedule::kernels),
  // reading `inputs`, the values from outside the group, in its order.
  int32_t kernel = -1;
  std::vector<ValueId> inputs;
  // A reduction over rows of the kernel's result, the last node
  // (codegen/row_reduction.h): the kernel reads the first
  // reduction->kernel_inputs of `inputs`, the reduction the others.
  std::optional<codegen::RowReduction> reduction;
  // A group whose nodes write a tensor in place (a chain such as
  // `m.mul_(b).add_(g)`, its last node in place): the input it writes, whose
  // memory is the result's; -1 where the group makes the tensor itself.
  int32_t writes_input = -1;
  // A generated group that stores values besides its result (read after it,
  // or its last value of a tensor it writes in place), in the kernel's order
  // of outputs before the result; by each, the input whose memory it writes
  // (in place), else -1 (memory of its own). A reduction's group (over rows
  // or columns) stores its input, the kernel's result, where steps after it
  // read it.
  std::vector<ValueId> stored;
  std::vector<int32_t> stored_writes;
  // A generated group's random nodes (dropout), ascending: the step draws
  // for them in this order, and its kernels read each draw by its place
  // here (codegen::emit_cpp's `draws`).
  std::vector<int32_t> draws;

  bool fused() const noexcept { return lowering != nullptr || kernel >= 0; }
};

struct Schedule {
  std::vector<ScheduledStep> steps;
  std::vector<int32_t> step_of;  // by node
  // By storage: false when only the inside of a fused step touches it
  // (the step never makes it, and it gets no bytes).
  std::vector<bool> materialized;
  // The generated kernels' IR, by ScheduledStep::kernel: one per distinct
  // IR, which steps may share.
  std::vector<codegen::PointwiseKernel> kernels;
  // Each fused step, and each candidate left apart with why (explain()).
  std::vector<std::string> fused, not_fused;

  // The value a step makes for the steps after it (a fused step: its last
  // node's output).
  ValueId result(const Graph& graph, size_t step) const;
  // Every value it makes for the steps after it: the stored ones, then the result.
  std::vector<ValueId> results(const Graph& graph, size_t step) const;
  // "conv2d + add + relu (nodes 4-6)", for messages.
  std::string describe(const Graph& graph, size_t step) const;
};

// One step per node: what an executable runs without fusion.
Schedule unfused_schedule(const Graph& graph);
// The graph's steps with library calls and their epilogues fused where the
// backend of their device can run them so, and groups of pointwise nodes as
// generated kernels (options.generate).
Schedule schedule_graph(const Graph& graph, const ScheduleOptions& options);

}  // namespace kiln::compiler
