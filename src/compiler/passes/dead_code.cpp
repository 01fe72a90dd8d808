// Dead-code elimination: a node stays when it writes a storage, draws random
// numbers (removing it would shift every later draw), acts on the host
// (kSideEffect: a debug print), or has an output that a kept node or the
// graph's results use.
#include "compiler/passes/pass.h"

namespace kiln::compiler {

Trace eliminate_dead_code(const Trace& trace) {
  const Graph& g = trace.graph;
  std::vector<bool> live(g.values().size(), false), keep(g.nodes().size(), false);
  for (ValueId id : g.outputs()) live[static_cast<size_t>(id)] = true;
  for (size_t i = g.nodes().size(); i-- > 0;) {
    const Node& n = g.nodes()[i];
    bool needed =
        n.inplace() || n.draw_count >= 0 || ops::op_schema(n.op).has_flag(ops::kSideEffect);
    for (ValueId out : n.outputs) needed = needed || live[static_cast<size_t>(out)];
    if (!needed) continue;
    keep[i] = true;
    for (ValueId in : n.inputs)
      if (in != kNoValue) live[static_cast<size_t>(in)] = true;
    if (n.inplace()) live[static_cast<size_t>(n.target)] = true;
  }
  Rewriter r(trace);
  for (size_t i = 0; i < g.nodes().size(); ++i)
    if (keep[i]) r.copy(g.nodes()[i]);
  return r.finish();
}

}  // namespace kiln::compiler
