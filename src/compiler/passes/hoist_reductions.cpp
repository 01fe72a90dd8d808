// Reductions hoisted to their input: a reduction over dims (sum, mean,
// amax, var, ...) moves to just after the node that makes its last input,
// where no node in between writes what it reads. It reads the same bytes
// either way, and its result is read only after its old place, so results
// are eager's bitwise. The schedule then sees a value reduced before other
// nodes read it: a linear's backward multiplies `g.t()` for the weight's
// gradient before it sums `g` for the bias, and with the sum hoisted to g it
// can run in the kernel that makes g, which stores g as it folds it
// (docs/architecture.md, "Schedules and fused steps").
#include <algorithm>
#include <numeric>

#include "compiler/passes/pass.h"

namespace kiln::compiler {
namespace {

bool reduces_dims(ops::OpId op) {
  using ops::OpId;
  return op == OpId::sum || op == OpId::mean || op == OpId::prod || op == OpId::amax ||
         op == OpId::amin || op == OpId::var || op == OpId::std || op == OpId::norm ||
         op == OpId::logsumexp;
}

}  // namespace

Trace hoist_reductions(const Trace& trace) {
  const Graph& g = trace.graph;
  const auto& nodes = g.nodes();
  const auto count = static_cast<int32_t>(nodes.size());
  // By node: the place it runs after (its own index, or for a hoisted
  // reduction its last input's maker's place), and whether it was hoisted.
  std::vector<int32_t> place(nodes.size());
  std::vector<bool> hoisted(nodes.size(), false);
  bool moved = false;
  for (int32_t i = 0; i < count; ++i) {
    const Node& n = nodes[static_cast<size_t>(i)];
    place[static_cast<size_t>(i)] = i;
    if (n.inplace() || !reduces_dims(n.op) || ops::op_schema(n.op).has_flag(ops::kRandom)) continue;
    int32_t after = -1, last = -1;  // the inputs' makers: latest place, latest index
    for (ValueId in : n.inputs) {
      if (in == kNoValue || g.value(in).kind != ValueKind::kNode) continue;
      const int32_t p = g.value(in).producer;
      after = std::max(after, place[static_cast<size_t>(p)]);
      last = std::max(last, p);
    }
    // (Right after a maker that stays: where it is.)
    if (last < 0 || (last + 1 == i && !hoisted[static_cast<size_t>(last)])) continue;
    // Nothing it would move past writes the memory it reads.
    bool free = true;
    for (int32_t k = after + 1; k < i && free; ++k) {
      const Node& w = nodes[static_cast<size_t>(k)];
      if (!w.inplace()) continue;
      const int32_t written = g.value(w.target).storage;
      for (ValueId in : n.inputs) free = free && (in == kNoValue || g.value(in).storage != written);
    }
    if (!free) continue;
    place[static_cast<size_t>(i)] = after;
    hoisted[static_cast<size_t>(i)] = true;
    moved = true;
  }
  if (!moved) return trace;
  // Each node at its place; the reductions hoisted after a node run right
  // after it, in their own order.
  std::vector<int32_t> order(nodes.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    const auto ka = static_cast<size_t>(a), kb = static_cast<size_t>(b);
    if (place[ka] != place[kb]) return place[ka] < place[kb];
    return !hoisted[ka] && hoisted[kb];
  });
  Rewriter r(trace);
  for (int32_t i : order) r.copy(nodes[static_cast<size_t>(i)]);
  return r.finish();
}

}  // namespace kiln::compiler
