// Freezing: every captured tensor that no node writes becomes a constant of
// the graph. Later passes may then fold what depends on parameters only.
#include "compiler/passes/pass.h"

namespace kiln::compiler {

Trace freeze(const Trace& trace) {
  const Graph& g = trace.graph;
  const std::vector<bool> written = written_storages(g);
  std::vector<bool> as_constants(g.captured().size());
  for (size_t slot = 0; slot < g.captured().size(); ++slot)
    as_constants[slot] = !written[static_cast<size_t>(g.value(g.captured()[slot]).storage)];
  Rewriter r(trace, &as_constants);
  for (const Node& n : g.nodes()) r.copy(n);
  return r.finish();
}

}  // namespace kiln::compiler
