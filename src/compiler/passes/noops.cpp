// No-op removal: a view whose output is laid out exactly as its input (same
// sizes, strides, offset and dtype) is its input; later nodes read the input.
// A view the graph returns stays: the caller gets a handle of its own, as in eager.
#include "compiler/passes/pass.h"

namespace kiln::compiler {

Trace remove_noops(const Trace& trace) {
  const Graph& g = trace.graph;
  std::vector<bool> returned(g.values().size(), false);
  for (ValueId id : g.outputs()) returned[static_cast<size_t>(id)] = true;
  Rewriter r(trace);
  for (const Node& n : g.nodes()) {
    if (!n.inplace() && ops::op_schema(n.op).has_flag(ops::kView) && n.outputs.size() == 1 && !n.inputs.empty() &&
        n.inputs[0] != kNoValue && !returned[static_cast<size_t>(n.outputs[0])]) {
      const Value &in = g.value(n.inputs[0]), &out = g.value(n.outputs[0]);
      if (in.sizes == out.sizes && in.strides == out.strides && in.offset == out.offset && in.dtype == out.dtype) {
        r.replace(n.outputs[0], r.map(n.inputs[0]));
        continue;
      }
    }
    r.copy(n);
  }
  return r.finish();
}

}  // namespace kiln::compiler
