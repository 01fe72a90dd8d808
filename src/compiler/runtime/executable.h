// An executable: a trace lowered to a linear schedule of kernel launches over
// a memory plan (docs/architecture.md, "Executables and CUDA graphs"). Each step calls
// the kernel eager dispatch would call, or for a fused step (compiler/schedule/)
// its backend's library call with an epilogue or its generated kernel, with the attributes, input
// casts and output layouts worked out once at lowering, so a call runs no
// shape rule and no type promotion; every
// intermediate lives in one arena per device (one allocation per call from
// the caching allocators), sharing bytes where lifetimes allow.
//
// The kernels' workspaces (ops/workspace.h) are planned too: the first run
// measures what each step asks for, and later runs use a plan that gives
// each step a slice of the arena for the step's time, so a call holds at
// once only what is alive plus the workspace of the running kernel.
//
// Results equal eager's bitwise: the same kernels on the same values, with
// buffers as aligned as eager's (a fused step rounds each element as the
// nodes it covers do). Autograd is not recorded: calls that need
// gradients replay through dispatch instead (compiler/capture/capture.h).
#pragma once

#include <atomic>
#include <memory>
#include <vector>

#include "compiler/capture/capture.h"
#include "compiler/codegen/generated.h"
#include "compiler/schedule/memory_plan.h"
#include "compiler/schedule/schedule.h"

namespace kiln::compiler {

class Executable {
 public:
  // Lowers a trace (which it keeps: its captured tensors are bound by reference).
  explicit Executable(std::shared_ptr<const Trace> trace, const ScheduleOptions& options = {});
  // Over a schedule and kernels made already (a symbolic program's, bound
  // to the trace's sizes: runtime/program.h).
  Executable(std::shared_ptr<const Trace> trace, Schedule schedule, codegen::BuiltKernels kernels);
  ~Executable();

  // Runs on inputs laid out as the trace's (the caller has checked the guards).
  // While a device graph records the run, `philox` says where its random
  // kernels read their draws at each replay. `observe` sees each step's
  // results under the index of its last node.
  // With `times` (a profiling run), each step that runs a generated kernel
  // is timed, the device's queue drained before and after it: by step, its
  // milliseconds, -1 for the other steps.
  using StepTimes = std::vector<double>;
  TensorList run(const TensorList& inputs, const NodeObserver& observe = {},
                 PhiloxRecording* philox = nullptr, StepTimes* times = nullptr) const;

  // The plan calls use now: with the workspaces once a run has measured them.
  const MemoryPlan& plan() const noexcept { return *current_.load(std::memory_order_acquire); }
  const Trace& trace() const noexcept { return *trace_; }
  const Schedule& schedule() const noexcept { return schedule_; }
  size_t num_steps() const noexcept;
  // Its generated kernels: how they were had ("3 kernels compiled in
  // 410 ms"), or why there are none where groups were found.
  const codegen::BuiltKernels& kernels() const noexcept { return kernels_; }
  // Constants held only in the form their backend prepared (backends/prepared.h).
  size_t prepared_constants() const noexcept { return prepared_constants_; }
  // The prepared forms its steps read (one per step that has one).
  std::vector<const void*> prepared_forms() const;

 private:
  struct Step;
  void build_steps();
  void prepare_constants();
  std::shared_ptr<const Trace> trace_;
  Schedule schedule_;
  MemoryPlan plan_;                                     // without workspaces
  mutable std::unique_ptr<const MemoryPlan> measured_;  // with them, set once
  mutable std::atomic<const MemoryPlan*> current_;
  mutable std::atomic<bool> measuring_{false};  // a run has taken the measurement
  codegen::BuiltKernels kernels_;
  std::vector<Step> steps_;
  std::vector<std::vector<ValueId>> release_after_;  // by step: values whose storage it uses last
  // The constants calls bind, by slot: a tensor without bytes for one held
  // only prepared, a lazy one's value where something else reads it.
  std::vector<Tensor> constants_;
  size_t prepared_constants_ = 0;
};

// The graph's schedule with its generated kernels built into `kernels`; where
// they cannot be built (no compiler, a build error), the schedule without
// generated kernels, and `kernels.summary` says why.
Schedule lower_schedule(const Graph& graph, const ScheduleOptions& options,
                        codegen::BuiltKernels& kernels);

}  // namespace kiln::compiler
