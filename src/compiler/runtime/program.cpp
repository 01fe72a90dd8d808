#include "compiler/runtime/program.h"

#include <algorithm>

namespace kiln::compiler {

bool SymbolicProgram::admits(std::span<const int64_t> values, std::string& why) const {
  for (size_t i = guards.size() - decision_guards; i < guards.size(); ++i) {
    const sym::Guard& g = guards[i];
    if (g.holds(values)) continue;
    why = detail::str_cat("guard ", g.str(), " (", g.origin, ") fails for ",
                          symbol_values(g, values));
    return false;
  }
  return true;
}

std::shared_ptr<const Trace> SymbolicProgram::bind(std::span<const int64_t> values) const {
  auto bound = std::make_shared<Trace>();
  bound->graph = bind_layouts(trace->graph, values);
  bound->captured = trace->captured;
  return bound;
}

std::shared_ptr<const Executable> SymbolicProgram::executable(
    std::shared_ptr<const Trace> bound) const {
  codegen::BuiltKernels bound_kernels = kernels;
  bound_kernels.compiled = false;
  bound_kernels.ms = 0;
  if (!kernels.functions.empty())
    bound_kernels.summary = detail::str_cat(kernels.functions.size(),
                                            kernels.functions.size() == 1 ? " kernel" : " kernels",
                                            " of the program for all sizes");
  return std::make_shared<const Executable>(std::move(bound), schedule, std::move(bound_kernels));
}

std::shared_ptr<const SymbolicProgram> build_program(const Trace& traced,
                                                     const SymbolicShapes& shapes,
                                                     const PassContext& passes,
                                                     const ScheduleOptions& options,
                                                     std::string& why) {
  // A random node draws a number per element of its result, which binding
  // counts again for each size (as retrace does).
  for (const Node& n : traced.graph.nodes()) {
    if (n.draw_count >= 0 &&
        n.draw_count != shape_numel(traced.graph.value(n.outputs.at(0)).sizes).hint()) {
      why = detail::str_cat(ops::op_schema(n.op).name, " drew ", n.draw_count,
                            " random numbers, not one per element of its result");
      return nullptr;
    }
  }
  auto program = std::make_shared<SymbolicProgram>();
  Trace symbolic = traced;
  shapes.apply(symbolic.graph);
  program->traced = symbolic.graph;
  sym::GuardScope scope;
  try {
    scope.set_origin("the passes");
    auto after = std::make_shared<Trace>(run_passes(symbolic, passes));
    scope.set_origin("the schedule");
    program->schedule = lower_schedule(after->graph, options, program->kernels);
    program->trace = std::move(after);
  } catch (const Error& e) {
    why = e.what();
    return nullptr;
  }
  program->guards = shapes.guards;
  for (sym::Guard& g : scope.take()) {
    if (std::find(program->guards.begin(), program->guards.end(), g) != program->guards.end())
      continue;
    program->guards.push_back(std::move(g));
    ++program->decision_guards;
  }
  return program;
}

}  // namespace kiln::compiler
