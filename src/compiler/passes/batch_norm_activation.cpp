// Eval-mode batch norm fused with the residual add and the relu after it:
// batch_norm (eval, its statistics outputs unused) whose result only an add
// of a residual of its shape and dtype reads, and/or only a relu after that
// (each out of place or in place, as ResNet's blocks write them), becomes one
// batch_norm_eval node: one kernel where eager runs up to three. Its kernel
// rounds as the three ops do, so results are eager's bitwise.
//
// The fused node runs where the add runs (the relu's place when there is no
// add), reading the residual when the add read it: the batch norm is moved
// there, which needs no write in between to a storage it reads. Nodes that
// record autograd are left alone (batch_norm_eval has no derivative).
#include "compiler/ir/readers.h"
#include "compiler/passes/pass.h"

#include <algorithm>

namespace kiln::compiler {
namespace {

struct Chain {
  int32_t norm = -1, add = -1, relu = -1;
  ValueId residual = kNoValue;
  ValueId last = kNoValue;  // the value the fused node stands for
  int32_t anchor() const { return add >= 0 ? add : relu; }
};

}  // namespace

Trace fuse_batch_norm_activation(const Trace& trace) {
  const Graph& g = trace.graph;
  const auto& nodes = g.nodes();
  const Readers readers(g);
  const std::vector<int32_t>& uses = readers.count;
  const auto only_reader = [&](ValueId v) -> const Node* {
    const int32_t reader = readers.only(v);
    if (reader < 0) return nullptr;
    const Node& n = nodes[static_cast<size_t>(reader)];
    return n.grad_enabled ? nullptr : &n;
  };
  const auto index_of = [&](const Node* n) { return static_cast<int32_t>(n - nodes.data()); };
  // A relu of v alone: relu(v) or v.relu_().
  const auto relu_of = [&](ValueId v, const Node* n) {
    return n && n->op == ops::OpId::relu && n->inputs.size() == 1 && n->inputs[0] == v &&
           (!n->inplace() || n->target == v);
  };

  std::vector<Chain> chains;
  std::vector<int32_t> chain_at(nodes.size(), -1);  // by anchor node
  std::vector<bool> skip(nodes.size(), false);
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& bn = nodes[i];
    if (bn.op != ops::OpId::batch_norm || bn.grad_enabled || bn.attrs.b(0) ||
        bn.inputs.size() < 5 || bn.inputs[3] == kNoValue || bn.inputs[4] == kNoValue ||
        uses[static_cast<size_t>(bn.outputs[1])] != 0 ||
        uses[static_cast<size_t>(bn.outputs[2])] != 0) {
      continue;
    }
    const ValueId y = bn.outputs[0];
    const Value& yv = g.value(y);
    const Node* next = only_reader(y);
    Chain c;
    c.norm = static_cast<int32_t>(i);
    if (relu_of(y, next)) {
      c.relu = index_of(next);
      c.last = next->outputs[0];
    } else if (next && next->op == ops::OpId::add && next->inputs.size() == 2 &&
               next->attrs.scalar(0).to_double() == 1) {
      // y + r, r + y, or y += r.
      const bool first = next->inputs[0] == y && next->inputs[1] != y;
      const bool second = !next->inplace() && next->inputs[1] == y && next->inputs[0] != y;
      if (!(first || second) || (next->inplace() && next->target != y)) continue;
      c.residual = next->inputs[first ? 1 : 0];
      const Value& r = g.value(c.residual);
      const Value& sum = g.value(next->outputs[0]);
      if (r.sizes != yv.sizes || r.dtype != yv.dtype || r.device != yv.device ||
          sum.dtype != yv.dtype)
        continue;
      c.add = index_of(next);
      c.last = next->outputs[0];
      const Node* after = only_reader(c.last);
      if (relu_of(c.last, after)) {
        c.relu = index_of(after);
        c.last = after->outputs[0];
      }
    } else {
      continue;
    }
    // Moved to the anchor: nothing in between may write what it reads.
    std::vector<int32_t> read_storages;
    for (size_t k = 0; k < 5; ++k)
      if (bn.inputs[k] != kNoValue) read_storages.push_back(g.value(bn.inputs[k]).storage);
    bool written = false;
    for (int32_t k = c.norm + 1; k < c.anchor() && !written; ++k) {
      const Node& n = nodes[static_cast<size_t>(k)];
      written = n.inplace() && std::find(read_storages.begin(), read_storages.end(),
                                         g.value(n.target).storage) != read_storages.end();
    }
    if (written) continue;
    skip[i] = true;
    if (c.relu >= 0 && c.relu != c.anchor()) skip[static_cast<size_t>(c.relu)] = true;
    chain_at[static_cast<size_t>(c.anchor())] = static_cast<int32_t>(chains.size());
    chains.push_back(c);
  }
  if (chains.empty()) return trace;

  Rewriter r(trace);
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (skip[i]) continue;
    if (chain_at[i] < 0) {
      r.copy(nodes[i]);
      continue;
    }
    const Chain& c = chains[static_cast<size_t>(chain_at[i])];
    const Node& bn = nodes[static_cast<size_t>(c.norm)];
    std::vector<ValueId> inputs;
    for (size_t k = 0; k < 5; ++k) inputs.push_back(r.map(bn.inputs[k]));
    inputs.push_back(r.map(c.residual));
    Graph& ng = r.new_graph();
    const int32_t node = ng.add_node(ops::OpId::batch_norm_eval, std::move(inputs),
                                     ops::Attrs{bn.attrs.f(1), c.relu >= 0}, {g.meta_hint(c.last)});
    ng.node(node).grad_enabled = false;
    r.replace(c.last, ng.nodes()[static_cast<size_t>(node)].outputs[0]);
  }
  return r.finish();
}

}  // namespace kiln::compiler
