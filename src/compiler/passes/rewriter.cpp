#include "compiler/passes/pass.h"

#include "compiler/ir/symbolic_shapes.h"

#include <cassert>
#include <chrono>

#include "compiler/logs.h"

namespace kiln::compiler {

Rewriter::Rewriter(const Trace& old, const std::vector<bool>* as_constants)
    : old_(old), as_constants_(as_constants), lazy_(as_constants == nullptr) {
  const Graph& g = old.graph;
  if (!lazy_) {
    build();
    return;
  }
  canonical_.assign(g.values().size(), kNoValue);
  ValueId next = 0;
  for (ValueId id : g.inputs()) canonical_[static_cast<size_t>(id)] = next++;
  for (ValueId id : g.captured()) canonical_[static_cast<size_t>(id)] = next++;
  for (ValueId id : g.constants()) canonical_[static_cast<size_t>(id)] = next++;
  for (const Node& n : g.nodes())
    for (ValueId out : n.outputs) canonical_[static_cast<size_t>(out)] = next++;
}

void Rewriter::build() {
  if (built_) return;
  built_ = true;
  const Graph& g = old_.graph;
  map_.assign(g.values().size(), kNoValue);
  auto storage_for = [&](ValueId id) {
    const auto it = storages_.find(g.value(id).storage);
    return it == storages_.end() ? -1 : it->second;
  };
  auto note = [&](ValueId old_id, ValueId new_id) {
    map_[static_cast<size_t>(old_id)] = new_id;
    storages_[g.value(old_id).storage] = out_.graph.value(new_id).storage;
  };
  for (ValueId id : g.inputs()) note(id, out_.graph.add_input(g.meta_hint(id), storage_for(id)));
  for (size_t slot = 0; slot < g.captured().size(); ++slot) {
    const ValueId id = g.captured()[slot];
    if (as_constants_ && (*as_constants_)[slot]) {
      map_[static_cast<size_t>(id)] = out_.graph.add_constant(old_.captured[slot]);
      continue;
    }
    note(id, out_.graph.add_captured(g.meta_hint(id), storage_for(id)));
    out_.captured.push_back(old_.captured[slot]);
  }
  for (size_t slot = 0; slot < g.constants().size(); ++slot)
    map_[static_cast<size_t>(g.constants()[slot])] = out_.graph.copy_constant(g, slot);
  const bool was_lazy = lazy_;
  lazy_ = false;
  for (size_t i = 0; i < copied_; ++i) copy_now(g.nodes()[i]);
  // The ids map() gave while lazy are the ones the new graph has.
  for (size_t id = 0; was_lazy && id < map_.size(); ++id)
    assert(map_[id] == canonical_[id] || map_[id] == kNoValue);
}

bool Rewriter::is_constant(ValueId old) {
  if (lazy_) return old_.graph.value(old).kind == ValueKind::kConstant;
  return out_.graph.value(map(old)).kind == ValueKind::kConstant;
}

void Rewriter::copy(const Node& n) {
  const auto& nodes = old_.graph.nodes();
  if (lazy_ && copied_ < nodes.size() && &n == &nodes[copied_]) {
    ++copied_;
    return;
  }
  build();
  copy_now(n);
}

void Rewriter::copy_now(const Node& n) {
  const Graph& g = old_.graph;
  std::vector<ValueId> inputs;
  inputs.reserve(n.inputs.size());
  for (ValueId in : n.inputs) inputs.push_back(map(in));
  TensorList outputs;
  for (ValueId out : n.outputs) outputs.push_back(g.meta_hint(out));
  const int32_t index = out_.graph.add_node(n.op, std::move(inputs), n.attrs, outputs, map(n.target));
  Node& copied = out_.graph.node(index);
  copied.generator = n.generator;
  copied.draw_count = n.draw_count;
  copied.grad_enabled = n.grad_enabled;
  for (size_t k = 0; k < n.outputs.size(); ++k) map_[static_cast<size_t>(n.outputs[k])] = copied.outputs[k];
}

void Rewriter::fold(ValueId old, const Tensor& value) {
  build();
  map_.at(static_cast<size_t>(old)) = out_.graph.add_constant(value);
}

Trace Rewriter::finish() {
  if (lazy_ && copied_ == old_.graph.nodes().size()) return old_;  // nothing changed
  build();
  std::vector<ValueId> outputs;
  for (ValueId id : old_.graph.outputs()) outputs.push_back(map(id));
  out_.graph.set_outputs(std::move(outputs));
  return std::move(out_);
}

namespace {

// Whether b is a as a pass found it: the same values (layouts and storages)
// and the same nodes, so that verifying b again would find what verifying a
// found.
// Compared as expressions, which records no guard.
bool same_layout(const SymShape& a, const SymShape& b) {
  if (a.size() != b.size()) return false;
  for (size_t d = 0; d < a.size(); ++d)
    if (a[d].hint() != b[d].hint() || !(a[d].expr() == b[d].expr())) return false;
  return true;
}

bool unchanged(const Graph& a, const Graph& b) {
  if (a.values().size() != b.values().size() || a.nodes().size() != b.nodes().size() ||
      a.outputs() != b.outputs() || a.storages().size() != b.storages().size())
    return false;
  for (size_t i = 0; i < a.values().size(); ++i) {
    const Value &x = a.values()[i], &y = b.values()[i];
    if (x.kind != y.kind || !same_layout(x.sizes, y.sizes) || !same_layout(x.strides, y.strides) ||
        !same_layout({x.offset}, {y.offset}) || x.dtype != y.dtype || x.storage != y.storage ||
        x.producer != y.producer)
      return false;
  }
  for (size_t i = 0; i < a.nodes().size(); ++i) {
    const Node &x = a.nodes()[i], &y = b.nodes()[i];
    if (x.op != y.op || x.inputs != y.inputs || x.outputs != y.outputs || x.target != y.target ||
        !(x.attrs == y.attrs))
      return false;
  }
  return true;
}

// Gives `after`'s inputs the layouts of `before`'s (argument by argument)
// and derives its nodes' from them.
void keep_symbolic(const Graph& before, Graph& after, const char* pass) {
  for (size_t i = 0; i < after.inputs().size() && i < before.inputs().size(); ++i) {
    const Value& v = before.value(before.inputs()[i]);
    after.set_layout(after.inputs()[i], v.sizes, v.strides, v.offset);
  }
  std::string why;
  if (!derive_layouts(after, why))
    throw Error(
        detail::str_cat("compiler: after ", pass, ", the graph's layouts are not symbolic: ", why));
}

}  // namespace

Trace run_passes(const Trace& trace, const PassContext& context, std::vector<PassReport>* reports) {
  using Pass = std::function<Trace(const Trace&)>;
  std::vector<std::pair<const char*, Pass>> pipeline;
  if (context.freeze) pipeline.emplace_back("freeze", freeze);
  pipeline.emplace_back("remove_noops", remove_noops);
  if (context.freeze)
    pipeline.emplace_back("fold_conv_batch_norm",
                          [&](const Trace& t) { return fold_conv_batch_norm(t, context.folded); });
  pipeline.emplace_back("fold_constants", fold_constants);
  pipeline.emplace_back("eliminate_common_subexpressions", eliminate_common_subexpressions);
  pipeline.emplace_back("eliminate_dead_code", eliminate_dead_code);
  pipeline.emplace_back("elide_copies", elide_copies);
  pipeline.emplace_back("fuse_batch_norm_activation", fuse_batch_norm_activation);
  if (!context.strict)
    pipeline.emplace_back("batch_recurrent_projections", batch_recurrent_projections);
  if (context.freeze && !context.strict)
    pipeline.emplace_back("keep_channels_last", keep_channels_last);
  pipeline.emplace_back("hoist_reductions", hoist_reductions);
  Trace current = trace;
  const bool symbolic = trace.graph.symbolic();
  // A symbolic graph's snapshots show its sizes as expressions.
  const auto text = [&](const Graph& g) { return symbolic ? symbolic_graph_text(g) : to_text(g); };
  if (context.snapshots) context.snapshots->emplace_back("traced", text(trace.graph));
  for (const auto& [name, pass] : pipeline) {
    const auto start = std::chrono::steady_clock::now();
    const size_t before = current.graph.nodes().size();
    Trace next = pass(current);
    // A pass that found nothing to do leaves the graph verified as it was.
    if (!unchanged(current.graph, next.graph)) {
      verify(next.graph);
      // A symbolic graph's new nodes were made over hints: their layouts
      // follow from the inputs' expressions (docs/architecture.md, "Symbolic sizes").
      if (symbolic) keep_symbolic(current.graph, next.graph, name);
      if (context.snapshots) context.snapshots->emplace_back(name, text(next.graph));
    }
    current = std::move(next);
    PassReport r{name, before, current.graph.nodes().size(),
                 std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count()};
    log(LogChannel::kPasses, detail::str_cat(r.name, ": ", r.nodes_before, " -> ", r.nodes_after, " nodes in ", r.ms, " ms"));
    if (reports) reports->push_back(std::move(r));
  }
  return current;
}

}  // namespace kiln::compiler
