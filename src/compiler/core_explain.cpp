// Core::explain(): a compiled function's report of its kept graphs, their
// guards, schedules and generated kernels (kiln/compile.h's ExplainReport).
#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>

#include "compiler/core_impl.h"
#include "compiler/ir/graph.h"
#include "core/shape_util.h"

namespace kiln::compiler::internal {

CompileStats Core::Impl::current_stats() const {
  CompileStats s = stats;
  s.graphs = graphs;
  s.recompiles = static_cast<int64_t>(recompiles.size());
  std::vector<const Segment*> kept;
  for (const auto& [key, e] : cache)
    for (const Segment* seg : segments_of(*e))
      if (seg->order > 0 && std::find(kept.begin(), kept.end(), seg) == kept.end())
        kept.push_back(seg);
  s.graphs_kept = static_cast<int64_t>(kept.size());
  return s;
}

CompileStats Core::stats() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->current_stats();
}

ExplainReport Core::explain() const {
  std::lock_guard lock(impl_->mutex);
  ExplainReport r;
  r.name = impl_->options.name;
  r.stats = impl_->current_stats();
  if (stance() != Stance::Default || r.stats.stance_eager_calls > 0) {
    r.stance = detail::str_cat(stance_name(stance()), ": ", r.stats.stance_eager_calls,
                               " calls ran eagerly by a stance");
  }
  r.recompiles = impl_->recompiles;
  r.graph_breaks = impl_->graph_breaks;
  r.dynamic_dims = impl_->dynamic_reasons;
  r.dynamic_sizes = impl_->sizes_note;
  r.symbolic_graph = impl_->symbolic_text;
  r.symbolic_guards = impl_->symbolic_guards;
  // Every kept graph, once, with the guards that lead to it.
  struct Found {
    std::shared_ptr<Segment> seg;
    std::vector<std::pair<std::string, std::string>> guards;
  };
  std::vector<Found> found;
  std::unordered_map<const Segment*, size_t> seen;
  for (const auto& [key, e] : impl_->cache) {
    if (!e->root) continue;
    std::vector<std::pair<std::shared_ptr<Segment>, std::pair<std::string, std::string>>> stack{
        {e->root, {}}};
    for (const auto& other : e->other_roots) stack.push_back({other, {}});
    while (!stack.empty()) {
      auto [seg, via] = std::move(stack.back());
      stack.pop_back();
      auto [it, added] = seen.emplace(seg.get(), found.size());
      if (added) found.push_back({seg, e->described});
      if (!via.first.empty()) found[it->second].guards.push_back(std::move(via));
      if (!added) continue;
      for (const auto& [bytes, link] : seg->next) {
        stack.push_back(
            {link.next,
             {detail::str_cat("value read by graph ", seg->order, " (", seg->read_description, ")"),
              link.value}});
      }
    }
  }
  std::sort(found.begin(), found.end(),
            [](const Found& a, const Found& b) { return a.seg->order < b.seg->order; });
  // The prepared forms each graph reads: those of one program at several
  // sizes may be the same copies.
  std::map<const void*, std::set<const Segment*>> holders;
  for (const Found& f : found)
    if (f.seg->executable)
      for (const void* form : f.seg->executable->prepared_forms())
        holders[form].insert(f.seg.get());
  for (const Found& f : found) {
    const Segment& s = *f.seg;
    ExplainReport::Graph g;
    const Graph& graph = s.trace->graph;
    g.nodes = static_cast<int64_t>(graph.nodes().size());
    for (const Node& n : graph.nodes()) {
      if (!n.inplace() && !n.outputs.empty()) {
        const Value& v = graph.value(n.outputs[0]);
        g.channels_last += channels_last_layout(sym::hints(v.sizes), sym::hints(v.strides)) &&
                           !ops::op_schema(n.op).has_flag(ops::kView);
      }
      const std::string name(op_name(n));
      const std::string op = n.inplace() ? name + "_" : name;
      auto it =
          std::find_if(g.ops.begin(), g.ops.end(), [&](const auto& p) { return p.first == op; });
      if (it == g.ops.end()) {
        g.ops.emplace_back(op, 1);
      } else {
        ++it->second;
      }
    }
    g.guards = f.guards;
    for (const HostGuard& h : s.host_guards)
      g.guards.emplace_back(h.what,
                            h.flag ? (h.value != 0 ? "true" : "false") : detail::str_cat(h.value));
    g.captured = static_cast<int64_t>(graph.captured().size());
    g.executable = s.executable != nullptr;
    if (s.executable) {
      for (const auto& a : s.executable->plan().arenas) g.arena_bytes += a.nbytes;
      g.planned_bytes = s.executable->plan().planned_bytes;
      g.prepared_weights = static_cast<int64_t>(s.executable->prepared_constants());
      for (const void* form : s.executable->prepared_forms())
        g.prepared_shared += holders[form].size() > 1 ? 1 : 0;
      for (const auto& w : s.executable->plan().workspaces)
        g.workspace_bytes += w.in_arena ? w.nbytes : 0;
      const Schedule& schedule = s.executable->schedule();
      g.steps = static_cast<int64_t>(schedule.steps.size());
      g.fused = schedule.fused;
      g.not_fused = schedule.not_fused;
      g.generated_kernels = static_cast<int64_t>(schedule.kernels.size());
      g.codegen = s.executable->kernels().summary;
      g.codegen_compiled = s.executable->kernels().compiled;
      g.codegen_ms = s.executable->kernels().ms;
      std::lock_guard graph_lock(s.graph_mutex);
      for (size_t k = 0; k < schedule.steps.size(); ++k) {
        const ScheduledStep& step = schedule.steps[k];
        if (step.kernel < 0) continue;
        const codegen::PointwiseKernel& kernel = schedule.kernels[static_cast<size_t>(step.kernel)];
        const Node& last = graph.nodes()[static_cast<size_t>(step.nodes.back())];
        const ValueId over = step.reduction ? last.inputs[0] : last.outputs[0];
        g.kernels.push_back(
            {schedule.describe(graph, k), kernel.symbol,
             codegen::describe_launch(kernel, step.reduction ? &*step.reduction : nullptr,
                                      sym::hints(graph.value(over).sizes)),
             k < s.kernel_ms.size() ? s.kernel_ms[k] : -1.0});
      }
    }
    g.resumes = s.resumes;
    g.instance_of = s.instance_of;
    g.retraced = s.retraced;
    g.bound = s.bound;
    g.symbols = s.symbols;
    g.read = s.read >= 0 ? s.read_description : "";
    g.trace_ms = s.trace_ms;
    g.verify_ms = s.verify_ms;
    g.passes_ms = s.passes_ms;
    g.traced_nodes = static_cast<int64_t>(s.traced_nodes);
    g.lower_ms = s.lower_ms;
    {
      std::lock_guard graph_lock(s.graph_mutex);
      g.cuda_graph = s.graphed != nullptr;
      if (s.graphed) g.cuda_graph_bytes = s.graphed->pool_bytes();
      g.record_ms = s.record_ms;
      g.autotune_ms = s.autotune_ms;
      for (const std::string& why : s.graph_obstacles)
        r.cuda_graph_skips.push_back(detail::str_cat("graph ", r.graphs.size() + 1, ": ", why));
    }
    g.text = to_text(graph);
    r.graphs.push_back(std::move(g));
  }
  return r;
}

}  // namespace kiln::compiler::internal
