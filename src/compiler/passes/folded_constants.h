// Constants that passes fold from other constants, kept for every graph one
// compiled function makes (its other sizes of a dynamic dim, its later
// traces): folding the same constants again gives the very same constant,
// not a copy, so that what a backend prepares from it (a frozen
// convolution's weight in its primitive's layout: backends/prepared.h) is
// made once and held once (docs/architecture.md, "Prepared weights").
//
// A fold is keyed by the identities of the constants it reads
// (Graph::constant_identity) and by its own numbers (an epsilon). The table
// keeps those constants, so that an identity is never reused while it is a
// key. Frozen values are read once (docs/compile.md, "Freezing"):
// compiler::reset() drops the table with the function's graphs.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "compiler/ir/graph.h"

namespace kiln::compiler {

class FoldedConstants {
 public:
  // A fold's key: what it computes (a pass's own tag), the constants of
  // `graph` it reads (kNoValue for an absent one) and its numbers.
  struct Key {
    int32_t kind = 0;
    std::vector<uintptr_t> sources;  // Graph::constant_identity, 0 for an absent one
    std::vector<double> numbers;
    auto operator<=>(const Key&) const = default;
  };
  static Key key(int32_t kind, const Graph& graph, std::span<const ValueId> sources,
                 std::vector<double> numbers);

  // The constants the fold made before, added to `into` (the same values,
  // the same identities), or nothing.
  std::optional<std::vector<ValueId>> find(const Key& key, Graph& into);
  // Keeps what the fold made (constants of `made_in`) under its key; the
  // sources (constants of `graph`) are kept alive with it.
  void add(const Key& key, const Graph& graph, std::span<const ValueId> sources,
           const Graph& made_in, std::span<const ValueId> made);

 private:
  std::mutex mutex_;
  Graph store_;  // the sources and what was made from them, as constants
  std::map<Key, std::vector<size_t>> made_;  // by key: constant slots of store_
};

}  // namespace kiln::compiler
