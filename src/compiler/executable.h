// An executable: a trace lowered to a linear schedule of kernel launches over
// a memory plan (DESIGN.md 7). Each step calls the kernel eager dispatch would
// call, with the attributes, input casts and output layouts worked out once
// at lowering, so a call runs no shape rule and no type promotion; every
// intermediate lives in one arena per device (one allocation per call from
// the caching allocators), sharing bytes where lifetimes allow.
//
// Results equal eager's bitwise: the same kernels on the same values, with
// buffers as aligned as eager's. Autograd is not recorded: calls that need
// gradients replay through dispatch instead (compiler/capture.h).
#pragma once

#include <memory>
#include <vector>

#include "compiler/capture.h"
#include "compiler/memory_plan.h"

namespace kiln::compiler {

class Executable {
 public:
  // Lowers a trace (which it keeps: its captured tensors are bound by reference).
  explicit Executable(std::shared_ptr<const Trace> trace);
  ~Executable();

  // Runs on inputs laid out as the trace's (the caller has checked the guards).
  TensorList run(const TensorList& inputs, const NodeObserver& observe = {}) const;

  const MemoryPlan& plan() const noexcept { return plan_; }
  const Trace& trace() const noexcept { return *trace_; }
  size_t num_steps() const noexcept;

 private:
  struct Step;
  std::shared_ptr<const Trace> trace_;
  MemoryPlan plan_;
  std::vector<Step> steps_;
};

}  // namespace kiln::compiler
