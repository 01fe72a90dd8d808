#include "compiler/passes/pass.h"

#include <chrono>

#include "compiler/logs.h"

namespace kiln::compiler {

Rewriter::Rewriter(const Trace& old, const std::vector<bool>* as_constants)
    : old_(old), map_(old.graph.values().size(), kNoValue) {
  const Graph& g = old.graph;
  auto storage_for = [&](ValueId id) {
    const auto it = storages_.find(g.value(id).storage);
    return it == storages_.end() ? -1 : it->second;
  };
  auto note = [&](ValueId old_id, ValueId new_id) {
    map_[static_cast<size_t>(old_id)] = new_id;
    storages_[g.value(old_id).storage] = out_.graph.value(new_id).storage;
  };
  for (ValueId id : g.inputs()) note(id, out_.graph.add_input(g.meta_tensor(id), storage_for(id)));
  for (size_t slot = 0; slot < g.captured().size(); ++slot) {
    const ValueId id = g.captured()[slot];
    if (as_constants && (*as_constants)[slot]) {
      map_[static_cast<size_t>(id)] = out_.graph.add_constant(old.captured[slot]);
      continue;
    }
    note(id, out_.graph.add_captured(g.meta_tensor(id), storage_for(id)));
    out_.captured.push_back(old.captured[slot]);
  }
  for (size_t slot = 0; slot < g.constants().size(); ++slot)
    map_[static_cast<size_t>(g.constants()[slot])] = out_.graph.copy_constant(g, slot);
}

void Rewriter::copy(const Node& n) {
  const Graph& g = old_.graph;
  std::vector<ValueId> inputs;
  inputs.reserve(n.inputs.size());
  for (ValueId in : n.inputs) inputs.push_back(map(in));
  TensorList outputs;
  for (ValueId out : n.outputs) outputs.push_back(g.meta_tensor(out));
  const int32_t index = out_.graph.add_node(n.op, std::move(inputs), n.attrs, outputs, map(n.target));
  Node& copied = out_.graph.node(index);
  copied.generator = n.generator;
  copied.draw_count = n.draw_count;
  copied.grad_enabled = n.grad_enabled;
  for (size_t k = 0; k < n.outputs.size(); ++k) map_[static_cast<size_t>(n.outputs[k])] = copied.outputs[k];
}

void Rewriter::fold(ValueId old, const Tensor& value) { map_.at(static_cast<size_t>(old)) = out_.graph.add_constant(value); }

Trace Rewriter::finish() {
  std::vector<ValueId> outputs;
  for (ValueId id : old_.graph.outputs()) outputs.push_back(map(id));
  out_.graph.set_outputs(std::move(outputs));
  return std::move(out_);
}

Trace run_passes(const Trace& trace, const PassContext& context, std::vector<PassReport>* reports) {
  using Pass = Trace (*)(const Trace&);
  std::vector<std::pair<const char*, Pass>> pipeline;
  if (context.freeze) pipeline.emplace_back("freeze", freeze);
  pipeline.emplace_back("remove_noops", remove_noops);
  if (context.freeze) pipeline.emplace_back("fold_conv_batch_norm", fold_conv_batch_norm);
  pipeline.emplace_back("fold_constants", fold_constants);
  pipeline.emplace_back("eliminate_common_subexpressions", eliminate_common_subexpressions);
  pipeline.emplace_back("eliminate_dead_code", eliminate_dead_code);
  pipeline.emplace_back("elide_copies", elide_copies);
  pipeline.emplace_back("fuse_batch_norm_activation", fuse_batch_norm_activation);
  if (!context.strict)
    pipeline.emplace_back("batch_recurrent_projections", batch_recurrent_projections);
  if (context.freeze && !context.strict)
    pipeline.emplace_back("keep_channels_last", keep_channels_last);
  Trace current = trace;
  for (const auto& [name, pass] : pipeline) {
    const auto start = std::chrono::steady_clock::now();
    const size_t before = current.graph.nodes().size();
    current = pass(current);
    verify(current.graph);
    PassReport r{name, before, current.graph.nodes().size(),
                 std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count()};
    log(LogChannel::kPasses, detail::str_cat(r.name, ": ", r.nodes_before, " -> ", r.nodes_after, " nodes in ", r.ms, " ms"));
    if (reports) reports->push_back(std::move(r));
  }
  return current;
}

}  // namespace kiln::compiler
