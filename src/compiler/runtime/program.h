// A dynamic program compiled once for every size its guards admit
// (docs/architecture.md, "One executable for all sizes"). The passes, the
// schedule and the generated kernels decide over layouts that are
// expressions of the symbols (ir/symbolic_shapes.h), and each comparison
// they make of a dynamic size records the guard under which it holds. A
// call with new sizes that every guard admits binds the program: its
// graph's layouts evaluated at the call's sizes, and an executable made
// from the schedule and kernels as they are, with no trace, pass,
// schedule or kernel build of its own.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "compiler/ir/symbolic_shapes.h"
#include "compiler/passes/pass.h"
#include "compiler/runtime/executable.h"

namespace kiln::compiler {

struct SymbolicProgram {
  Graph traced;                        // the graph as traced, its layouts symbolic
  std::shared_ptr<const Trace> trace;  // after the passes, its layouts symbolic
  Schedule schedule;
  codegen::BuiltKernels kernels;
  // The symbolic shapes' guards, then those the passes, the schedule and
  // the kernels' lowering recorded.
  std::vector<sym::Guard> guards;
  size_t decision_guards = 0;  // how many of them the passes and schedule recorded

  // Whether its decisions' guards hold at symbol values `values`, which the
  // symbolic shapes admit (SymbolicShapes::admits); `why` names the first
  // that fails.
  bool admits(std::span<const int64_t> values, std::string& why) const;
  // The graph after the passes at symbol values `values` (admitted), with
  // the captured tensors it binds, and its executable.
  std::shared_ptr<const Trace> bind(std::span<const int64_t> values) const;
  std::shared_ptr<const Executable> executable(std::shared_ptr<const Trace> bound) const;
};

// The program of `traced` (a family's one-graph trace) over `shapes`; null,
// with why, where its passes cannot keep the layouts symbolic.
std::shared_ptr<const SymbolicProgram> build_program(const Trace& traced,
                                                     const SymbolicShapes& shapes,
                                                     const PassContext& passes,
                                                     const ScheduleOptions& options,
                                                     std::string& why);

}  // namespace kiln::compiler
