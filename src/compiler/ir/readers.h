// Who reads each value of a graph, for passes and the scheduler that fuse a
// value's producer with its only reader (docs/architecture.md, "Schedules
// and fused steps").
#pragma once

#include <algorithm>
#include <vector>

#include "compiler/ir/graph.h"

namespace kiln::compiler {

// By value: how many nodes read it (as an input or an in-place target, once
// per node; a graph output counts as two more reads), and which, ascending.
struct Readers {
  std::vector<int32_t> count;
  std::vector<std::vector<int32_t>> nodes;

  explicit Readers(const Graph& g) : count(g.values().size(), 0), nodes(g.values().size()) {
    for (size_t i = 0; i < g.nodes().size(); ++i) {
      const Node& n = g.nodes()[i];
      std::vector<ValueId> read(n.inputs);
      if (n.inplace()) read.push_back(n.target);
      std::sort(read.begin(), read.end());
      read.erase(std::unique(read.begin(), read.end()), read.end());
      for (ValueId v : read) {
        if (v == kNoValue) continue;
        ++count[static_cast<size_t>(v)];
        nodes[static_cast<size_t>(v)].push_back(static_cast<int32_t>(i));
      }
    }
    for (ValueId id : g.outputs()) count[static_cast<size_t>(id)] += 2;
  }
  // How many nodes up to `node` (included) read v.
  int32_t reads_up_to(ValueId v, int32_t node) const {
    const std::vector<int32_t>& r = nodes[static_cast<size_t>(v)];
    return static_cast<int32_t>(std::upper_bound(r.begin(), r.end(), node) - r.begin());
  }
  // The node that alone reads v, else -1.
  int32_t only(ValueId v) const {
    return count[static_cast<size_t>(v)] == 1 ? nodes[static_cast<size_t>(v)].back() : -1;
  }
};

}  // namespace kiln::compiler
