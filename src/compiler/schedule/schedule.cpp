#include "compiler/schedule/schedule.h"

#include <algorithm>
#include <optional>

#include "compiler/ir/readers.h"
#include "core/shape_util.h"
#include "ops/dispatch.h"

namespace kiln::compiler {
namespace {

using backend::Epilogue;

// A library call and the pointwise nodes after it that only it feeds.
struct Candidate {
  std::vector<int32_t> nodes;
  Epilogue epilogue;
  std::vector<ValueId> inputs;
  const backend::EpilogueLowering* lowering = nullptr;
  std::optional<codegen::PointwiseKernel> kernel;
};

bool library_call(ops::OpId op) { return op == ops::OpId::conv2d || op == ops::OpId::conv1d; }

// Extends the call at `call` with the relu and residual add nodes that alone
// read its result, one after another; empty epilogue when there are none.
Candidate epilogue_of(const Graph& g, const Readers& readers, int32_t call) {
  const Node& c = g.nodes()[static_cast<size_t>(call)];
  Candidate cand;
  cand.nodes.push_back(call);
  for (ValueId in : c.inputs) cand.inputs.push_back(in);
  while (cand.inputs.size() < 3) cand.inputs.push_back(kNoValue);
  const Value& y = g.value(c.outputs[0]);
  ValueId cur = c.outputs[0];
  bool added = false, relued = false;
  for (;;) {
    const int32_t next = readers.only(cur);
    if (next < 0) break;
    const Node& n = g.nodes()[static_cast<size_t>(next)];
    if (n.outputs.empty()) break;
    const Value& out = g.value(n.outputs[0]);
    if (out.dtype != y.dtype || out.sizes != y.sizes || out.device != y.device) break;
    if (n.op == ops::OpId::relu && !relued && n.inputs.size() == 1 && n.inputs[0] == cur &&
        (!n.inplace() || n.target == cur)) {
      relued = true;
      cand.epilogue.ops.push_back(Epilogue::Kind::kRelu);
    } else if (n.op == ops::OpId::add && !added && !relued && n.inputs.size() == 2 &&
               n.attrs.scalar(0).to_double() == 1) {
      // y + r, r + y, or y += r.
      const bool first = n.inputs[0] == cur && n.inputs[1] != cur;
      const bool second = !n.inplace() && n.inputs[1] == cur && n.inputs[0] != cur;
      if (!(first || second) || (n.inplace() && n.target != cur)) break;
      const ValueId r = n.inputs[first ? 1 : 0];
      const Value& rv = g.value(r);
      if (rv.sizes != y.sizes || rv.dtype != y.dtype || rv.device != y.device ||
          rv.storage == y.storage || !contiguous_layout(rv.sizes, rv.strides)) {
        break;
      }
      added = true;
      cand.epilogue.ops.push_back(Epilogue::Kind::kAdd);
      cand.inputs.push_back(r);
    } else {
      break;
    }
    cand.nodes.push_back(next);
    cur = n.outputs[0];
  }
  return cand;
}

// Why the group cannot run at its last node's place: a node in between
// writes a storage one of its nodes reads (empty when none does).
std::string moved_past_a_write(const Graph& g, const Candidate& cand) {
  std::vector<int32_t> read;
  for (ValueId in : cand.inputs)
    if (in != kNoValue) read.push_back(g.value(in).storage);
  for (int32_t k = cand.nodes.front() + 1; k < cand.nodes.back(); ++k) {
    if (std::find(cand.nodes.begin(), cand.nodes.end(), k) != cand.nodes.end()) continue;
    const Node& n = g.nodes()[static_cast<size_t>(k)];
    if (n.inplace() && std::find(read.begin(), read.end(), g.value(n.target).storage) != read.end())
      return detail::str_cat("node ", k, " writes a tensor it reads in between");
  }
  return "";
}

std::string node_list(const Graph& g, const std::vector<int32_t>& nodes) {
  std::string s;
  for (int32_t i : nodes) {
    const Node& n = g.nodes()[static_cast<size_t>(i)];
    if (!s.empty()) s += " + ";
    s += ops::op_schema(n.op).name;
    if (n.inplace()) s += "_";
  }
  return detail::str_cat(s, " (node", nodes.size() > 1 ? "s " : " ", nodes.front(),
                         nodes.size() > 1 ? detail::str_cat("-", nodes.back()) : std::string(),
                         ")");
}

// Groups of pointwise nodes, each grown from a node (its result) back
// through the producers whose every reader is in the group, and made one
// generated kernel. The cost model (docs/architecture.md, "Schedules and
// fused steps"): a value made and read only inside a group never goes
// through memory, which saves a write and a read of its bytes per reader;
// nothing is computed twice, as every node of a group has the result's
// sizes (a smaller value, say a broadcast bias, is an input instead); no
// library call is ever taken apart (only pointwise ops join).
void pointwise_groups(const Graph& g, const Readers& readers, const ScheduleOptions& options,
                      std::vector<bool>& taken, std::vector<Candidate>& groups,
                      std::vector<std::string>& fused, std::vector<std::string>& not_fused) {
  const auto& nodes = g.nodes();
  const std::vector<bool> written = written_storages(g), returned = returned_storages(g);
  std::vector<bool> fusible(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i)
    fusible[i] = !taken[i] && codegen::why_not_generated(g, nodes[i]).empty();
  std::vector<int32_t> inside_reads(g.values().size(), 0);
  std::vector<bool> member(nodes.size(), false);
  std::vector<std::string> lines;
  for (auto root = static_cast<int32_t>(nodes.size()) - 1; root >= 0; --root) {
    if (!fusible[static_cast<size_t>(root)] || taken[static_cast<size_t>(root)]) continue;
    const Value& result = g.value(nodes[static_cast<size_t>(root)].outputs[0]);
    Candidate cand;
    std::vector<ValueId> counted;
    auto join = [&](int32_t k) {
      cand.nodes.push_back(k);
      member[static_cast<size_t>(k)] = true;
      std::vector<ValueId> read = nodes[static_cast<size_t>(k)].inputs;
      std::sort(read.begin(), read.end());
      read.erase(std::unique(read.begin(), read.end()), read.end());
      for (ValueId v : read) {
        if (v == kNoValue) continue;
        if (inside_reads[static_cast<size_t>(v)]++ == 0) counted.push_back(v);
      }
    };
    join(root);
    // Producers come before their readers: going down once decides each
    // after all its readers.
    for (int32_t k = root - 1; k >= 0; --k) {
      const auto ku = static_cast<size_t>(k);
      if (!fusible[ku] || taken[ku]) continue;
      const ValueId out = nodes[ku].outputs[0];
      const Value& v = g.value(out);
      const int32_t reads = inside_reads[static_cast<size_t>(out)];
      if (reads == 0 || reads != readers.count[static_cast<size_t>(out)]) continue;
      if (v.sizes != result.sizes || written[static_cast<size_t>(v.storage)] ||
          returned[static_cast<size_t>(v.storage)])
        continue;
      join(k);
    }
    for (ValueId v : counted) inside_reads[static_cast<size_t>(v)] = 0;
    std::sort(cand.nodes.begin(), cand.nodes.end());
    // The values it reads from outside, in order of first use.
    for (int32_t k : cand.nodes)
      for (ValueId in : nodes[static_cast<size_t>(k)].inputs) {
        const bool inside = in != kNoValue && g.value(in).kind == ValueKind::kNode &&
                            member[static_cast<size_t>(g.value(in).producer)];
        if (in != kNoValue && !inside &&
            std::find(cand.inputs.begin(), cand.inputs.end(), in) == cand.inputs.end())
          cand.inputs.push_back(in);
      }
    for (int32_t k : cand.nodes) member[static_cast<size_t>(k)] = false;
    if (cand.nodes.size() >= 2) {
      const std::string what = node_list(g, cand.nodes);
      std::string why;
      if (!options.generate)
        why = options.generate_off;
      else if (ops::ReferenceModeGuard::enabled())
        why = "the CPU runs its reference kernels";
      if (!why.empty()) {
        // No part of the group would fare better: one line for it.
        for (int32_t k : cand.nodes) fusible[static_cast<size_t>(k)] = false;
      }
      if (why.empty()) why = moved_past_a_write(g, cand);
      if (why.empty()) cand.kernel = codegen::lower_group(g, cand.nodes, cand.inputs, why);
      if (!why.empty()) {
        lines.push_back(detail::str_cat(what, " not fused: ", why));
      } else {
        for (int32_t k : cand.nodes) taken[static_cast<size_t>(k)] = true;
        lines.push_back(detail::str_cat(what, ": one generated kernel of ", cand.inputs.size(),
                                        cand.inputs.size() == 1 ? " input" : " inputs"));
        groups.push_back(std::move(cand));
      }
    }
  }
  // In program order, as the epilogue groups' lines.
  for (auto it = lines.rbegin(); it != lines.rend(); ++it)
    (it->find(" not fused: ") == std::string::npos ? fused : not_fused).push_back(*it);
}

}  // namespace

ValueId Schedule::result(const Graph& graph, size_t step) const {
  const Node& last = graph.nodes()[static_cast<size_t>(steps[step].nodes.back())];
  return last.outputs.empty() ? kNoValue : last.outputs[0];
}

std::string Schedule::describe(const Graph& graph, size_t step) const {
  return node_list(graph, steps[step].nodes);
}

Schedule unfused_schedule(const Graph& graph) {
  Schedule s;
  const size_t n = graph.nodes().size();
  s.steps.resize(n);
  s.step_of.resize(n);
  for (size_t i = 0; i < n; ++i) {
    s.steps[i].nodes = {static_cast<int32_t>(i)};
    s.step_of[i] = static_cast<int32_t>(i);
  }
  s.materialized.assign(graph.storages().size(), true);
  return s;
}

Schedule schedule_graph(const Graph& g, const ScheduleOptions& options) {
  const Readers readers(g);
  const auto& nodes = g.nodes();
  std::vector<Candidate> groups;
  std::vector<int32_t> group_at(nodes.size(), -1);  // by last node
  std::vector<bool> taken(nodes.size(), false);
  Schedule s;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    if (!library_call(n.op) || taken[i] || n.outputs.empty()) continue;
    Candidate cand = epilogue_of(g, readers, static_cast<int32_t>(i));
    if (cand.epilogue.ops.empty()) continue;
    const std::string what = node_list(g, cand.nodes);
    const Value& y = g.value(n.outputs[0]);
    std::string why;
    const backend::EpilogueLowering* lowering = nullptr;
    // Epilogue groups keep eager's bits (backends/epilogue.h): strict
    // (options.strict) fuses them too.
    (void)options;
    if (y.device.is_cpu() && ops::ReferenceModeGuard::enabled()) {
      why = "the CPU runs its reference kernels";
    } else {
      lowering = backend::epilogue_lowering(y.device.kind(), n.op);
      if (!lowering)
        why = detail::str_cat("the ", y.device, " backend runs no ", ops::op_schema(n.op).name,
                              " with an epilogue");
    }
    for (size_t k = 0; k < 3 && why.empty(); ++k) {
      const ValueId in = cand.inputs[k];
      if (in != kNoValue && g.value(in).dtype != y.dtype)
        why = detail::str_cat("input ", k, " is ", g.value(in).dtype, ", the result ", y.dtype);
    }
    if (why.empty()) {
      std::vector<ops::TensorMeta> metas;
      for (ValueId in : cand.inputs) {
        if (in == kNoValue) {
          metas.push_back({});
          continue;
        }
        const Value& v = g.value(in);
        metas.push_back({v.sizes, v.dtype, v.device, v.strides, v.offset});
      }
      TensorList call_inputs;
      for (ValueId in : n.inputs)
        call_inputs.push_back(in == kNoValue ? Tensor() : g.meta_tensor(in));
      const ops::Attrs attrs =
          ops::infer(n.op, call_inputs, n.attrs).attrs;  // canonical, as run gets them
      why = lowering->supports(n.op, metas, {y.sizes, y.dtype, y.device, y.strides, y.offset},
                               attrs, cand.epilogue);
    }
    if (why.empty()) why = moved_past_a_write(g, cand);
    if (!why.empty()) {
      s.not_fused.push_back(detail::str_cat(what, " not fused: ", why));
      continue;
    }
    for (int32_t k : cand.nodes) taken[static_cast<size_t>(k)] = true;
    s.fused.push_back(detail::str_cat(what, ": one ", ops::op_schema(n.op).name,
                                      " call with epilogue ", cand.epilogue.describe()));
    cand.lowering = lowering;
    groups.push_back(std::move(cand));
  }
  pointwise_groups(g, readers, options, taken, groups, s.fused, s.not_fused);
  for (size_t k = 0; k < groups.size(); ++k)
    group_at[static_cast<size_t>(groups[k].nodes.back())] = static_cast<int32_t>(k);
  // The steps in program order: a group at its last node's place.
  s.step_of.assign(nodes.size(), -1);
  s.materialized.assign(g.storages().size(), true);
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (taken[i] && group_at[i] < 0) continue;
    ScheduledStep st;
    if (group_at[i] >= 0) {
      const Candidate& c = groups[static_cast<size_t>(group_at[i])];
      st.nodes = c.nodes;
      st.lowering = c.lowering;
      st.epilogue = c.epilogue;
      st.inputs = c.inputs;
      if (c.kernel) {
        st.kernel = static_cast<int32_t>(s.kernels.size());
        s.kernels.push_back(*c.kernel);
      }
      // Values inside the group live in storages of their own unless the
      // epilogue wrote in place into the call's result.
      const int32_t result_storage = g.value(nodes[i].outputs[0]).storage;
      for (size_t k = 0; k + 1 < c.nodes.size(); ++k) {
        const int32_t inner = g.value(nodes[static_cast<size_t>(c.nodes[k])].outputs[0]).storage;
        if (inner != result_storage) s.materialized[static_cast<size_t>(inner)] = false;
      }
    } else {
      st.nodes = {static_cast<int32_t>(i)};
    }
    for (int32_t k : st.nodes)
      s.step_of[static_cast<size_t>(k)] = static_cast<int32_t>(s.steps.size());
    s.steps.push_back(std::move(st));
  }
  return s;
}

}  // namespace kiln::compiler
