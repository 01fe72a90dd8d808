// Graph passes (docs/architecture.md, "The graph IR and passes"): each a named function in
// its own file that takes a trace and returns it rewritten, preserving eager's results bitwise.
// run_passes() runs them in order and verifies the graph after each.
//
// The graph keeps program order and in-place writes (Node::target), so every
// pass respects them: a node that writes a storage, or draws random numbers,
// is never removed, merged or folded, and a merge never crosses a write to
// a storage its inputs read.
#pragma once

#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "compiler/capture/capture.h"

namespace kiln::compiler {

class FoldedConstants;

// Builds a new graph from an old one, node by node, mapping value ids.
// Sources (inputs, captured values, constants) are copied first, in slots.
// Lazily: while a pass copies the old nodes in order and changes nothing,
// nothing is built; the first change builds the copied prefix, and a pass
// that changed nothing returns the old trace as it is (most passes find
// nothing to do in most graphs: a new size of a dynamic dim runs them all).
class Rewriter {
 public:
  // With `as_constants`, the captured values whose slot is true become
  // constants (freeze); the rest stay captured, renumbered.
  explicit Rewriter(const Trace& old, const std::vector<bool>* as_constants = nullptr);
  // The new id of an old value (kNoValue stays kNoValue).
  ValueId map(ValueId old) const {
    if (old == kNoValue) return kNoValue;
    return (lazy_ ? canonical_ : map_).at(static_cast<size_t>(old));
  }
  // Whether old value `old` stands for a constant in the new graph.
  bool is_constant(ValueId old);
  // The old value stands for `now` in the new graph from here on.
  void replace(ValueId old, ValueId now) {
    build();
    map_.at(static_cast<size_t>(old)) = now;
  }
  // Copies a node with its inputs mapped.
  void copy(const Node& n);
  // A new constant holding `value`, standing for old value `old`.
  void fold(ValueId old, const Tensor& value);
  const Graph& graph() {
    build();
    return out_.graph;
  }
  // For passes that emit nodes of their own (their outputs are not mapped).
  Graph& new_graph() {
    build();
    return out_.graph;
  }
  Trace finish();

 private:
  // Builds the new graph's sources and the old nodes copied so far.
  void build();
  void copy_now(const Node& n);

  const Trace& old_;
  const std::vector<bool>* as_constants_;
  bool lazy_ = true;
  bool built_ = false;
  size_t copied_ = 0;  // while lazy: old nodes [0, copied_) copied, in order
  // While lazy: the id each old source and copied node output will have
  // in the new graph (its sources first, then the nodes' outputs).
  std::vector<ValueId> canonical_;
  Trace out_;
  std::vector<ValueId> map_;
  std::unordered_map<int32_t, int32_t> storages_;  // old storage id -> new, for sources
};

// Removes nodes whose results nothing uses (a write or a random draw is a use).
Trace eliminate_dead_code(const Trace& trace);
// Merges a node into an earlier identical one (same op, inputs, attributes;
// no write in between to a storage either reads; outputs never written).
Trace eliminate_common_subexpressions(const Trace& trace);
// Runs nodes whose inputs are all constants once, at compile time, when the
// result is small (at most 256 bytes), and makes the result a constant.
Trace fold_constants(const Trace& trace);
// Freezing (CompileOptions::freeze): captured tensors the graph never writes
// become constants, read once; then conv1d/conv2d followed by an eval-mode
// batch_norm of constants becomes one convolution with folded weights (not
// bitwise equal to eager: the folded weights round differently).
Trace freeze(const Trace& trace);
// `folded`, when given, keeps each fold for the function's other graphs
// (passes/folded_constants.h).
Trace fold_conv_batch_norm(const Trace& trace, FoldedConstants* folded = nullptr);
// An eval-mode batch_norm whose result only an add of a residual and/or a
// relu read becomes one batch_norm_eval node (bitwise eager's), run where
// the add (or the relu) ran. Nodes that record autograd are left alone.
Trace fuse_batch_norm_activation(const Trace& trace);
// Drops views laid out exactly as their input (a reshape to the same shape,
// an expand to the same sizes, a permute that keeps the order).
Trace remove_noops(const Trace& trace);
// Drops a copy into the same dtype, device and layout of a tensor nothing
// else sees (a node's result or a view of one through views nothing else
// reads, its whole storage, read by the copy alone, not returned): later
// nodes read the original.
Trace elide_copies(const Trace& trace);

// Moves each reduction over dims (sum, mean, amax, var, ...) to just after
// the node that makes its last input, where nothing in between writes what
// it reads: the schedule then sees a value reduced before other nodes read
// it, and may reduce it in the kernel that makes it.
Trace hoist_reductions(const Trace& trace);

// The steps of an LSTM loop on the CPU (lstm_step nodes sharing an input
// weight, their inputs not fed by the steps) project their inputs with one
// product, which reads the weight once instead of once per step; the graph
// is laid out again in dependency order. Graphs with in-place writes or
// random draws are left alone. Not bitwise: not run under strict.
Trace batch_recurrent_projections(const Trace& trace);

// Frozen graphs on the CPU: the float32 results of convolutions and max
// pools that only convolutions, pools and in-place pointwise writes read
// are laid out channels last (NHWC in memory), so that convolutions run on
// NHWC without reorders around each one. Not returned, not viewed. Not
// bitwise (a convolution may sum in another order): not run under strict.
Trace keep_channels_last(const Trace& trace);

// What the passes may assume of the compiled function (CompileOptions).
struct PassContext {
  bool freeze = false;  // freeze, and fold batch norms into convolutions
  bool strict = false;  // only passes that keep results bitwise eager's
  // The function's folds, shared by its graphs (passes/folded_constants.h);
  // null: each graph folds its own.
  FoldedConstants* folded = nullptr;
  // KILN_DUMP_DIR: the graph's text as traced and after each pass that
  // changed it (pass name, text); null: none kept.
  std::vector<std::pair<std::string, std::string>>* snapshots = nullptr;
};

struct PassReport {
  std::string name;
  size_t nodes_before = 0, nodes_after = 0;
  double ms = 0;
};

// The passes of the pipeline for `context` (with freezing first when
// asked), verified after each one.
Trace run_passes(const Trace& trace, const PassContext& context = {},
                 std::vector<PassReport>* reports = nullptr);

}  // namespace kiln::compiler
