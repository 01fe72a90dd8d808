// Copy elision: a copy into the same dtype, device and layout of a tensor
// nothing else sees (a node's result, or a view of one through views that
// nothing else reads, covering its whole storage, read by the copy alone and
// not returned) is that tensor; later nodes read the original, and a pass
// over its bytes is saved. A compiled training step's gradients are such
// copies: autograd hands `.grad` a tensor of its own.
#include "compiler/ir/readers.h"
#include "compiler/passes/pass.h"

namespace kiln::compiler {

Trace elide_copies(const Trace& trace) {
  const Graph& g = trace.graph;
  const Readers readers(g);  // a returned value counts as more readers
  std::vector<int32_t> values_in(g.storages().size(), 0);
  for (const Value& v : g.values()) ++values_in[static_cast<size_t>(v.storage)];
  // Whether x's storage holds only x and the values it is a view of, each
  // read only by the next, the first a fresh node result.
  const auto alone = [&](ValueId x) {
    const auto storage = static_cast<size_t>(g.value(x).storage);
    int32_t chain = 1;
    for (ValueId v = x; g.storages()[storage].root != v; ++chain) {
      const Value& value = g.value(v);
      if (value.kind != ValueKind::kNode) return false;
      const Node& p = g.nodes()[static_cast<size_t>(value.producer)];
      if (p.inplace() || !ops::op_schema(p.op).has_flag(ops::kView) || p.inputs.empty())
        return false;
      v = p.inputs[0];
      if (v == kNoValue || g.value(v).storage != value.storage ||
          readers.count[static_cast<size_t>(v)] != 1)
        return false;
    }
    const Value& root = g.value(g.storages()[storage].root);
    return root.kind == ValueKind::kNode && chain == values_in[storage];
  };
  Rewriter r(trace);
  for (const Node& n : g.nodes()) {
    if (n.op == ops::OpId::copy && !n.inplace() && !n.grad_enabled && n.inputs.size() == 1 &&
        n.outputs.size() == 1 && n.inputs[0] != kNoValue) {
      const ValueId in = n.inputs[0];
      const Value &x = g.value(in), &y = g.value(n.outputs[0]);
      if (readers.count[static_cast<size_t>(in)] == 1 && x.dtype == y.dtype &&
          x.device == y.device && x.sizes == y.sizes && x.strides == y.strides &&
          x.offset == y.offset &&
          g.storages()[static_cast<size_t>(x.storage)].nbytes ==
              g.storages()[static_cast<size_t>(y.storage)].nbytes &&
          alone(in)) {
        r.replace(n.outputs[0], r.map(in));
        continue;
      }
    }
    r.copy(n);
  }
  return r.finish();
}

}  // namespace kiln::compiler
