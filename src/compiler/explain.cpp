// ExplainReport's text and JSON forms.
#include <sstream>

#include "kiln/compile.h"

#include <nlohmann/json.hpp>

namespace kiln {

std::string ExplainReport::to_string() const {
  std::ostringstream os;
  os << name << ": " << graphs.size() << " graph" << (graphs.size() == 1 ? "" : "s") << ", "
     << graph_breaks.size() << " graph break" << (graph_breaks.size() == 1 ? "" : "s") << ", "
     << recompiles.size() << " recompile" << (recompiles.size() == 1 ? "" : "s") << "; "
     << stats.calls << " calls: " << stats.replays << " replayed, " << stats.eager_calls
     << " eager";
  if (stats.graph_launches) os << ", " << stats.graph_launches << " as CUDA graphs";
  if (stats.new_value_traces) os << "; " << stats.new_value_traces << " traces for new values read";
  if (stats.evictions) os << "; " << stats.evictions << " keys let go by the cache's bounds";
  os << "\n";
  if (!stance.empty()) os << "stance: " << stance << "\n";
  for (const auto& d : dynamic_dims) os << "dynamic: " << d << "\n";
  if (!dynamic_sizes.empty()) os << "dynamic sizes: " << dynamic_sizes << "\n";
  if (!symbolic_graph.empty()) os << "symbolic shapes of the dynamic program:\n" << symbolic_graph;
  for (size_t i = 0; i < graphs.size(); ++i) {
    const Graph& g = graphs[i];
    os << "graph " << i + 1 << ": " << g.nodes << " ops (";
    for (size_t k = 0; k < g.ops.size(); ++k)
      os << (k ? ", " : "") << g.ops[k].first << " x" << g.ops[k].second;
    os << "), " << g.captured << " captured tensors, "
       << (g.executable
               ? "planned executable"
               : "replayed through dispatch (it records autograd, or the backend is Replay)");
    if (g.executable) {
      os << ", arena " << g.arena_bytes << " bytes for " << g.planned_bytes << " planned";
      if (g.workspace_bytes) os << " (" << g.workspace_bytes << " of kernel workspaces)";
      os << ", " << g.steps << " steps";
    }
    if (g.cuda_graph)
      os << ", replayed as one CUDA graph holding " << g.cuda_graph_bytes << " bytes";
    if (g.instance_of && g.bound) {
      os << "\n  the program of graph " << g.instance_of
         << ", compiled once for all sizes of its dynamic dims that its guards admit, bound to "
            "these";
      if (!g.symbols.empty()) os << " (" << g.symbols << ")";
    } else if (g.instance_of) {
      os << "\n  the program of graph " << g.instance_of
         << ", compiled for new sizes of dynamic dims"
         << (g.retraced ? " from its trace, without calling the function" : "");
      if (!g.symbols.empty()) os << " (" << g.symbols << ")";
    }
    if (g.resumes) os << "\n  resumes after graph " << g.resumes;
    if (!g.read.empty()) os << "\n  ends at a graph break: " << g.read;
    os << "\n  passes: " << g.traced_nodes << " traced ops -> " << g.nodes << "\n  compile: trace "
       << g.trace_ms << " ms, verify " << g.verify_ms << " ms, passes " << g.passes_ms
       << " ms, lower " << g.lower_ms << " ms";
    if (g.autotune_ms > 0) os << ", first run with autotuning " << g.autotune_ms << " ms";
    if (g.cuda_graph || g.record_ms > 0) os << ", record " << g.record_ms << " ms";
    os << "\n";
    if (g.channels_last > 0)
      os << "  layouts: " << g.channels_last << " results kept channels last\n";
    if (g.prepared_weights > 0)
      os << "  weights: " << g.prepared_weights << " held only in their kernels' layout"
         << (g.prepared_shared > 0
                 ? detail::str_cat(", ", g.prepared_shared, " shared with other graphs")
                 : std::string())
         << "\n";
    if (!g.codegen.empty()) os << "  generated kernels: " << g.codegen << "\n";
    for (const auto& f : g.fused) os << "  fused: " << f << "\n";
    for (const auto& k : g.kernels) {
      os << "  kernel " << k.name << ": " << k.group << "; " << k.launch;
      if (k.ms >= 0) os << "; " << k.ms * 1000 << " us in the profiling run";
      os << "\n";
    }
    for (const auto& f : g.not_fused) os << "  " << f << "\n";
    os << "  guards:\n";
    for (const auto& [guard, value] : g.guards) os << "    " << guard << " == " << value << "\n";
  }
  for (const auto& b : graph_breaks) os << "graph break: " << b << "\n";
  for (const auto& r : recompiles) os << "recompile: " << r << "\n";
  for (const auto& c : cuda_graph_skips) os << "not captured as a CUDA graph: " << c << "\n";
  return os.str();
}

std::string ExplainReport::to_json() const {
  nlohmann::json j;
  j["name"] = name;
  j["stance"] = stance;
  j["stats"] = {{"calls", stats.calls},
                {"replays", stats.replays},
                {"traces", stats.traces},
                {"eager_calls", stats.eager_calls},
                {"graph_breaks", stats.graph_breaks},
                {"graph_launches", stats.graph_launches},
                {"dynamic_instances", stats.dynamic_instances},
                {"retraces", stats.retraces},
                {"bound_sizes", stats.bound_sizes},
                {"graphs", stats.graphs},
                {"graphs_kept", stats.graphs_kept},
                {"recompiles", stats.recompiles},
                {"inlined_calls", stats.inlined_calls},
                {"new_value_traces", stats.new_value_traces},
                {"stance_eager_calls", stats.stance_eager_calls},
                {"evictions", stats.evictions}};
  j["graphs"] = nlohmann::json::array();
  for (const Graph& g : graphs) {
    nlohmann::json ops = nlohmann::json::array(), guards = nlohmann::json::array();
    for (const auto& [op, count] : g.ops) ops.push_back({{"op", op}, {"count", count}});
    for (const auto& [guard, value] : g.guards)
      guards.push_back({{"guard", guard}, {"value", value}});
    j["graphs"].push_back({{"nodes", g.nodes},
                           {"ops", ops},
                           {"guards", guards},
                           {"captured", g.captured},
                           {"executable", g.executable},
                           {"cuda_graph", g.cuda_graph},
                           {"cuda_graph_bytes", g.cuda_graph_bytes},
                           {"arena_bytes", g.arena_bytes},
                           {"planned_bytes", g.planned_bytes},
                           {"workspace_bytes", g.workspace_bytes},
                           {"steps", g.steps},
                           {"fused", g.fused},
                           {"not_fused", g.not_fused},
                           {"generated_kernels", g.generated_kernels},
                           {"codegen", g.codegen},
                           {"codegen_compiled", g.codegen_compiled},
                           {"codegen_ms", g.codegen_ms},
                           {"traced_nodes", g.traced_nodes},
                           {"channels_last", g.channels_last},
                           {"prepared_weights", g.prepared_weights},
                           {"prepared_shared", g.prepared_shared},
                           {"resumes", g.resumes},
                           {"instance_of", g.instance_of},
                           {"retraced", g.retraced},
                           {"bound", g.bound},
                           {"symbols", g.symbols},
                           {"read", g.read},
                           {"compile_ms",
                            {{"trace", g.trace_ms},
                             {"verify", g.verify_ms},
                             {"passes", g.passes_ms},
                             {"lower", g.lower_ms},
                             {"record", g.record_ms},
                             {"autotune", g.autotune_ms}}},
                           {"text", g.text}});
    nlohmann::json kernels = nlohmann::json::array();
    for (const auto& k : g.kernels)
      kernels.push_back({{"group", k.group}, {"name", k.name}, {"launch", k.launch}, {"ms", k.ms}});
    j["graphs"].back()["kernels"] = std::move(kernels);
  }
  j["graph_breaks"] = graph_breaks;
  j["recompiles"] = recompiles;
  j["dynamic_dims"] = dynamic_dims;
  j["dynamic_sizes"] = dynamic_sizes;
  j["symbolic_graph"] = symbolic_graph;
  j["symbolic_guards"] = symbolic_guards;
  j["cuda_graph_skips"] = cuda_graph_skips;
  return j.dump(1);
}

}  // namespace kiln
