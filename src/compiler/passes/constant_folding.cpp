// Constant folding: a node whose inputs are all constants (or that has no
// inputs, as full and arange) runs once at compile time, through eager's
// dispatch, and its outputs become constants. Not folded: writes, random
// draws, results larger than 256 bytes (a constant is held for as long as
// the graph, while eager frees it after its last use and the memory plan
// reuses its bytes: a compiled call must not need more memory than eager's),
// results that are written later or that the graph returns (a caller could
// change a constant shared by every call).
#include "compiler/passes/pass.h"

#include "kiln/autograd.h"
#include "ops/dispatch.h"

namespace kiln::compiler {

Trace fold_constants(const Trace& trace) {
  constexpr size_t kMaxBytes = 256;
  const Graph& g = trace.graph;
  const std::vector<bool> written = written_storages(g), returned = returned_storages(g);
  NoGradGuard no_grad;
  Rewriter r(trace);
  for (const Node& n : g.nodes()) {
    // Random ops draw at each call, or reuse a draw of the call; a debug
    // print prints at each call.
    const ops::OpSchema& schema = ops::op_schema(n.op);
    bool foldable =
        !n.inplace() && !schema.has_flag(ops::kRandom) && !schema.has_flag(ops::kSideEffect);
    for (ValueId in : n.inputs) foldable = foldable && (in == kNoValue || r.is_constant(in));
    for (ValueId out : n.outputs) {
      const Value& v = g.value(out);
      const auto storage = static_cast<size_t>(v.storage);
      foldable = foldable && !written[storage] && !returned[storage] &&
                 g.storages()[static_cast<size_t>(v.storage)].nbytes <= kMaxBytes;
    }
    if (!foldable) {
      r.copy(n);
      continue;
    }
    TensorList args;
    for (ValueId in : n.inputs) {
      if (in == kNoValue) {
        args.emplace_back();
        continue;
      }
      const Value& c = r.graph().value(r.map(in));
      args.push_back(r.graph().constant(static_cast<size_t>(c.slot)));
    }
    TensorList outs;
    try {
      outs = ops::dispatch(n.op, args, n.attrs);
    } catch (const Error&) {  // it cannot run here (a device this machine lacks): leave it to the call
      r.copy(n);
      continue;
    }
    for (size_t k = 0; k < outs.size(); ++k) r.fold(n.outputs[k], outs[k]);
  }
  return r.finish();
}

}  // namespace kiln::compiler
