// Symbolic shapes of a trace (docs/architecture.md, "Symbolic sizes"): when some dims of a
// compiled function's arguments are dynamic, each becomes a symbol (s0, s1, ...) and
// every value of the graph gets its sizes, strides and offset as expressions
// of them, from the very shape rules eager mode runs, instantiated on SymInts
// (core/symbolic.h). What ties the graph to particular values of the
// symbols is collected as guards: the rules' comparisons that the
// expressions do not decide (two dynamic dims that broadcast must be equal),
// and the program's own reads of its tensors' layouts (LayoutRead: a size
// the function read and used as a number, which the graph cannot follow).
//
//   s0: argument 0 dim 0
//   %1 = linear(%0, %2, %3) : float32[s0, 64] cpu
//   %2 = view(%1) {shape=[-1, 2, 32]} : float32[s0, 2, 32] cpu
//   guard s0 == 8  (the function's read of size(0) of %0 at model.cpp:12)
//
// Sizes for which every guard holds give the same program, so a new size is
// checked against the guards alone before its graph is made; the graph made
// for it must then have exactly the layouts the expressions give.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "compiler/capture/capture.h"
#include "core/symbolic.h"

namespace kiln::compiler {

struct SymbolicShapes {
  // Symbol k is dim `dim` of the graph's input `input` (its argument's position).
  struct Symbol {
    int32_t input = 0;
    int64_t dim = 0;
    int64_t hint = 0;  // its size when traced
  };
  struct Layout {
    SymShape sizes, strides;
    SymInt offset;
  };
  std::vector<Symbol> symbols;
  std::vector<Layout> values;         // by value id
  std::vector<ValueId> input_values;  // the graph's inputs, by argument
  std::vector<sym::Guard> guards;
  // The program's layout reads, and for each guard the read it comes from
  // (-1: a shape rule's, or a size that is not symbolic).
  std::vector<LayoutRead> reads;
  std::vector<int32_t> guard_reads;

  // Sets `graph`'s layouts (the graph these shapes were made for) to the
  // expressions, and its storages' sizes to follow them.
  void apply(Graph& graph) const;
  // The symbols' values for a call with these graph inputs.
  std::vector<int64_t> bind(const TensorList& inputs) const;
  // Whether the expressions cover these symbol values: each symbol's is at
  // least 2, as they assume (sizes 0 and 1 are not symbolic).
  bool covers(std::span<const int64_t> values) const;
  // Whether every guard holds, and each input is laid out as its layout
  // says for these values; `why` names the first that does not.
  bool admits(const TensorList& inputs, std::string& why) const;
  // Whether `graph` (made for symbol values `values`) has the layouts the
  // expressions give; `why` names the first value that differs.
  bool describes(const Graph& graph, std::span<const int64_t> values, std::string& why) const;

  // The graph's text with sizes as expressions (to_text's format), the
  // symbols first and the guards after.
  std::string text(const Graph& graph) const;
  // The graph as Graphviz dot, edges labelled with symbolic sizes.
  std::string dot(const Graph& graph) const;
};

// A symbolic graph's text (to_text's format) with each value's own layout
// as expressions ("[s0, 64]"): its passes' snapshots (KILN_DUMP_DIR).
std::string symbolic_graph_text(const Graph& graph);

// "s0 = 4, s1 = 9": the values of a guard's symbols, for messages.
std::string symbol_values(const sym::Guard& g, std::span<const int64_t> values);

// Sets the layouts of every node's outputs from the layouts of the graph's
// inputs, captured values and constants, by the ops' shape rules on symbols
// (a pass's new nodes, made over hints), and the storages' sizes; false,
// with why, where a rule cannot run on them or gives other hints.
bool derive_layouts(Graph& graph, std::string& why);
// Each storage's size as its root's layout gives it (a node's result: its
// elements; an input: the bytes its layout reaches, where symbolic).
void set_storage_bytes(Graph& graph);
// A copy of a symbolic graph with every layout and storage size evaluated
// at symbol values `values`: a graph of plain layouts, its random nodes
// drawing a number per element of their results.
Graph bind_layouts(const Graph& graph, std::span<const int64_t> values);

// The symbolic shapes of `trace` with the dims in `dynamic` (a bit per dim,
// by graph input) as symbols, and the program's layout reads as guards.
// Null, with the reason in `why`, where a shape rule cannot run on symbols
// (it throws) or gives layouts that differ from the trace's at the traced sizes.
std::optional<SymbolicShapes> symbolize(const Trace& trace, std::span<const LayoutRead> reads,
                                        std::span<const uint64_t> dynamic, std::string& why);

}  // namespace kiln::compiler
