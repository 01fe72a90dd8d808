// CompileOptions::check: every call served by graphs also runs the function
// eagerly from the same state, and a difference names the first node of the
// graphs on the call's path that differs from eager dispatch.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "compiler/runtime/segment.h"

namespace kiln::compiler {

// What a call may change besides its results: the arguments and captured
// tensors its graphs write, the gradients they set, and the generators their
// random nodes draw from. Each graph's share is saved before the graph runs
// (add), so that eager can start from the state the call started from.
class CallState {
 public:
  explicit CallState(size_t arguments) : arguments_(arguments) {}
  // Saves what `seg` may change, before it runs on the call's tensors `env`.
  void add(const Segment& seg, const TensorList& env);
  // The written tensors' values now, then the gradients written.
  TensorList values() const;
  const std::string& label(size_t i) const;
  // Back to the state the call started from.
  void restore();
  // The written tensors and gradients back to `values` (from values()).
  void restore_values(const TensorList& values);

 private:
  size_t arguments_;
  TensorList tensors_, saved_;
  std::vector<std::string> labels_;
  std::vector<std::pair<Generator*, Generator>> generators_;
  std::vector<std::pair<Tensor, Tensor>>
      grads_;  // gradient owners, and their gradients before the call
  std::vector<std::string> grad_labels_;
};

// The call through its graphs: it saves state into the CallState (when not
// null) and lists the graphs it ran in `path`.
using CompiledCall =
    std::function<TensorList(CallState*, std::vector<std::shared_ptr<Segment>>& path)>;

// Runs `compiled` and the function eagerly (`run`) from the same state and
// compares results and written tensors; kiln::Error naming the first
// divergence. Leaves eager's state.
TensorList checked_call(const TensorList& args, const compiler::internal::Runner& run,
                        const CompileOptions& options, const CompiledCall& compiled);

}  // namespace kiln::compiler
