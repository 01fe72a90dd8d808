// Who reads each value of a graph, for passes and the scheduler that fuse a
// value's producer with its only reader (docs/architecture.md, "Schedules
// and fused steps").
#pragma once

#include <algorithm>
#include <vector>

#include "compiler/ir/graph.h"

namespace kiln::compiler {

// By value: how many nodes read it (as an input or an in-place target, once
// per node), and the last that does; a graph output counts as two more reads.
struct Readers {
  std::vector<int32_t> count, last;

  explicit Readers(const Graph& g) : count(g.values().size(), 0), last(g.values().size(), -1) {
    for (size_t i = 0; i < g.nodes().size(); ++i) {
      const Node& n = g.nodes()[i];
      std::vector<ValueId> read(n.inputs);
      if (n.inplace()) read.push_back(n.target);
      std::sort(read.begin(), read.end());
      read.erase(std::unique(read.begin(), read.end()), read.end());
      for (ValueId v : read) {
        if (v == kNoValue) continue;
        ++count[static_cast<size_t>(v)];
        last[static_cast<size_t>(v)] = static_cast<int32_t>(i);
      }
    }
    for (ValueId id : g.outputs()) count[static_cast<size_t>(id)] += 2;
  }
  // The node that alone reads v, else -1.
  int32_t only(ValueId v) const {
    return count[static_cast<size_t>(v)] == 1 ? last[static_cast<size_t>(v)] : -1;
  }
};

}  // namespace kiln::compiler
