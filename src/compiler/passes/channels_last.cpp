// Channels-last activations (docs/architecture.md, "Layouts"): when the CPU
// runs a frozen graph, the float32 results of convolutions and max pools are
// laid out channels last ([N, H, W, C] in memory) where everything that reads
// them runs on that layout as fast as on NCHW or faster:
//  - a convolution reading it as its source runs on NHWC, without the
//    reorders in and out of oneDNN's blocked layout around each 3x3 one;
//  - a max pool or adaptive average pool loops over pixels, channels inner;
//  - an in-place pointwise op (relu_, a residual add_) writes it in its own
//    memory order, reading any other tensor of its sizes in that order too.
// The graph's results keep their layouts, and a tensor a view reads keeps
// its own. Values are eager's; the convolutions' sums may run in another
// order on NHWC, so strict mode does not run this pass.
#include "compiler/passes/pass.h"
#include "core/shape_util.h"

namespace kiln::compiler {
namespace {

bool made_channels_last(const Graph& g, const Node& n) {
  if (n.inplace() || n.outputs.size() != 1 ||
      (n.op != ops::OpId::conv2d && n.op != ops::OpId::max_pool2d))
    return false;
  const Value& v = g.value(n.outputs[0]);
  // Only where the two layouts differ: channels last, and not also row-major.
  return v.dtype == kFloat32 && v.device.is_cpu() && v.sizes.size() == 4 &&
         channels_last_layout(v.sizes, channels_last_strides(v.sizes));
}

}  // namespace

Trace keep_channels_last(const Trace& trace) {
  const Graph& g = trace.graph;
  const auto storage_of = [&](ValueId id) { return static_cast<size_t>(g.value(id).storage); };
  const std::vector<bool> returned = returned_storages(g);
  std::vector<bool> chosen(g.storages().size(), false);
  for (const Node& n : g.nodes())
    if (made_channels_last(g, n))
      chosen[storage_of(n.outputs[0])] = !returned[storage_of(n.outputs[0])];
  // The storage holds its root and the results of in-place pointwise writes
  // into it, nothing else (no view of it).
  for (size_t id = 0; id < g.values().size(); ++id) {
    const Value& v = g.value(static_cast<ValueId>(id));
    const auto s = static_cast<size_t>(v.storage);
    if (!chosen[s] || g.storages()[s].root == static_cast<ValueId>(id)) continue;
    const bool written =
        v.kind == ValueKind::kNode && g.nodes()[static_cast<size_t>(v.producer)].inplace() &&
        ops::op_schema(g.nodes()[static_cast<size_t>(v.producer)].op).has_flag(ops::kPointwise);
    if (!written) chosen[s] = false;
  }
  // Every reader runs on the layout; a choice undone can undo others (a
  // residual add_ reads two storages that go together), so until none changes.
  for (bool changed = true; changed;) {
    changed = false;
    const auto undo = [&](size_t s) {
      changed = changed || chosen[s];
      chosen[s] = false;
    };
    for (const Node& n : g.nodes()) {
      const bool pointwise_write = n.inplace() && ops::op_schema(n.op).has_flag(ops::kPointwise);
      if (pointwise_write) {
        // The target and the inputs of its sizes go together, channels last or not.
        const Value& t = g.value(n.target);
        bool all = chosen[storage_of(n.target)];
        for (ValueId in : n.inputs)
          if (in != kNoValue && g.value(in).sizes == t.sizes) all = all && chosen[storage_of(in)];
        if (!all) {
          undo(storage_of(n.target));
          for (ValueId in : n.inputs)
            if (in != kNoValue && g.value(in).sizes == t.sizes) undo(storage_of(in));
        }
        continue;
      }
      // A max pool's result is channels last only where its source is.
      if (made_channels_last(g, n) && n.op == ops::OpId::max_pool2d &&
          !chosen[storage_of(n.inputs[0])])
        undo(storage_of(n.outputs[0]));
      for (size_t i = 0; i < n.inputs.size(); ++i) {
        const ValueId in = n.inputs[i];
        if (in == kNoValue || !chosen[storage_of(in)]) continue;
        const bool source = i == 0 && !n.inplace();
        const bool runs_on_it =
            source && (n.op == ops::OpId::conv2d || n.op == ops::OpId::max_pool2d ||
                       n.op == ops::OpId::adaptive_avg_pool2d);
        if (!runs_on_it) undo(storage_of(in));
      }
    }
  }
  Trace out = trace;
  for (size_t id = 0; id < g.values().size(); ++id) {
    const Value& v = g.value(static_cast<ValueId>(id));
    if (chosen[static_cast<size_t>(v.storage)])
      out.graph.set_strides(static_cast<ValueId>(id), channels_last_strides(v.sizes));
  }
  return out;
}

}  // namespace kiln::compiler
