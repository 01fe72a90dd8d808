// The compiler's IR: an SSA graph of op-table nodes
// (docs/architecture.md, "The graph IR and passes").
//
// A Value is one tensor handle as the traced program saw it: its shape,
// strides, offset, dtype and device, and the storage it lives in. Values
// that share a storage alias each other, as views do in eager mode: a view
// node's output has its input's storage, and an in-place node's output is a
// new Value (a new version) of its target's storage. Nodes keep program
// order, so running them in order over real buffers, views included,
// reproduces eager's effects exactly; passes must respect that order where
// storages are written (Node::target).
//
// Graph inputs are the compiled function's tensor arguments; captured values
// are tensors the function read that it did not receive (module parameters,
// buffers, tensors of a closure), bound by reference at every call; constants
// are numbers the program wrote (x * 2.0), held by value, and with `freeze`
// the parameters and what passes fold from them. A folded weight may be a
// lazy constant, made only when something asks for its value (the
// executable hands it to the backend, which keeps it in its own layout:
// docs/architecture.md, "Prepared weights").
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "core/symbolic.h"
#include "kiln/ops/factory.h"
#include "kiln/tensor.h"
#include "ops/attrs.h"
#include "ops/op_table.h"

namespace kiln::compiler {

using ValueId = int32_t;
inline constexpr ValueId kNoValue = -1;  // an absent optional input

enum class ValueKind : uint8_t {
  kInput,     // an argument of the compiled function
  kCaptured,  // a tensor the function read without receiving it, by reference
  kConstant,  // a number the program wrote, or a frozen or folded tensor, by value
  kNode,      // an output of a node
};

// Its layout is symbolic where the graph is (docs/architecture.md,
// "Symbolic sizes"): a size of a dynamic dim is an expression of the
// symbols, and comparing it records the guard under which the comparison
// holds (sym::GuardScope), so that what passes and the scheduler decide is
// known to hold for every size the guards admit. A traced graph's layouts
// are constants.
struct Value {
  ValueKind kind = ValueKind::kNode;
  SymShape sizes, strides;
  SymInt offset = 0;  // in elements of the storage
  DType dtype = kFloat32;
  Device device;
  int32_t storage = 0;          // values with one storage alias each other
  int32_t producer = -1;        // the node of a kNode value
  int32_t output_index = 0;     // which output of the producer
  int32_t slot = -1;            // position among the inputs, captured values or constants
  bool wrapped_number = false;  // a number the program wrote: promotes below tensors
};

struct Node {
  ops::OpId op{};
  std::vector<ValueId> inputs;  // kNoValue for an absent optional input
  ops::Attrs attrs;
  std::vector<ValueId> outputs;
  // An in-place op writes its result into target (often inputs[0], not for
  // copy): outputs[0] is target's new version, of the same layout.
  ValueId target = kNoValue;
  // A random op's draw: its seed and offset attributes come from this
  // generator (null: the default one), `count` values per call, drawn anew
  // at every replay. count < 0: the attributes are fixed.
  Generator* generator = nullptr;
  int64_t draw_count = -1;
  // Grad mode when the program ran it (a NoGradGuard inside the function):
  // replays that record autograd run it in the same mode.
  bool grad_enabled = true;
  bool inplace() const noexcept { return target != kNoValue; }
};

// The node's op as explain(), logs and errors name it: a custom op by the
// name it was defined with (ops/custom.h).
std::string_view op_name(const Node& n) noexcept;

// A storage the graph knows: its size in bytes and where it comes from.
struct StorageInfo {
  SymInt nbytes = 0;
  Device device;
  ValueId root = kNoValue;  // the first value seen in it (input, captured, constant or node output)
};

class Graph {
 public:
  // Builders. A value in a storage the graph already has (an input that is a
  // view of another) passes its storage id; -1 makes a new storage.
  ValueId add_input(const Tensor& like, int32_t storage = -1);
  ValueId add_captured(const Tensor& like, int32_t storage = -1);
  ValueId add_constant(const Tensor& value);
  // A constant of like's layout (contiguous) whose values rows(begin, end)
  // computes, rows [begin, end) of its first dim, each time they are asked
  // for (it holds no bytes of its own); the same values every time.
  using ConstantRows = std::function<Tensor(int64_t begin, int64_t end)>;
  ValueId add_lazy_constant(const Tensor& like, ConstantRows rows);
  // Constant `slot` of `from` added to this graph, lazy where it is there.
  ValueId copy_constant(const Graph& from, size_t slot);
  // Appends a node whose outputs are described by `outputs` (meta or real
  // tensors of the right layout). A view's outputs join the storage of
  // inputs[0]; an in-place node (target set) has one output, in target's
  // storage.
  int32_t add_node(ops::OpId op, std::vector<ValueId> inputs, ops::Attrs attrs,
                   const TensorList& outputs, ValueId target = kNoValue);
  Node& node(int32_t index) { return nodes_.at(static_cast<size_t>(index)); }
  // A layout a pass chose for a node's result (the same bytes, other
  // strides); the pass keeps the values of its storage consistent.
  void set_strides(ValueId id, SymShape strides) {
    values_.at(static_cast<size_t>(id)).strides = std::move(strides);
  }
  void set_outputs(std::vector<ValueId> outputs) { outputs_ = std::move(outputs); }
  // A value's layout as expressions of the symbols (the same hints), and a
  // storage's size: symbolic_shapes.h makes and binds them.
  void set_layout(ValueId id, SymShape sizes, SymShape strides, SymInt offset) {
    Value& v = values_.at(static_cast<size_t>(id));
    v.sizes = std::move(sizes);
    v.strides = std::move(strides);
    v.offset = std::move(offset);
  }
  void set_storage_bytes(int32_t storage, SymInt nbytes) {
    storages_.at(static_cast<size_t>(storage)).nbytes = std::move(nbytes);
  }
  // Whether some value's layout is symbolic.
  bool symbolic() const;

  const std::vector<Value>& values() const noexcept { return values_; }
  const std::vector<Node>& nodes() const noexcept { return nodes_; }
  const std::vector<StorageInfo>& storages() const noexcept { return storages_; }
  const std::vector<ValueId>& inputs() const noexcept { return inputs_; }
  const std::vector<ValueId>& captured() const noexcept { return captured_; }
  const std::vector<ValueId>& constants() const noexcept { return constants_; }
  const std::vector<ValueId>& outputs() const noexcept { return outputs_; }
  const Value& value(ValueId id) const { return values_.at(static_cast<size_t>(id)); }
  // Constant `slot`'s value (a lazy one is made now), rows [begin, end) of
  // its first dim (contiguous), and whether it is lazy.
  Tensor constant(size_t slot) const;
  Tensor constant_rows(size_t slot, int64_t begin, int64_t end) const;
  bool lazy_constant(size_t slot) const { return constant_makers_.at(slot) != nullptr; }
  // The same for constants of every graph that holds the same values (a
  // lazy constant's recipe, copies of a tensor), while such a graph lives.
  const void* constant_identity(size_t slot) const;

  // A meta tensor with value id's layout (a view of a meta storage of the
  // right size, so that shape rules see the same strides as eager),
  // specialized: its symbolic sizes guard that they keep their hints, as
  // what is decided from it holds at those only.
  Tensor meta_tensor(ValueId id) const;
  // The same, unguarded: for building graphs whose layouts are derived
  // again from the symbols (run_passes), and for checks.
  Tensor meta_hint(ValueId id) const;

 private:
  ValueId add_value(Value v, const Tensor& like, int32_t storage);
  ValueId add_source(ValueKind kind, std::vector<ValueId>& list, const Tensor& like,
                     int32_t storage);
  int32_t new_storage(const Tensor& like, ValueId root);
  // A lazy constant's recipe, shared by its copies (other graphs of the
  // program), with the whole value it last made while someone holds it.
  struct LazyConstant;
  ValueId add_lazy_constant(const Tensor& like, std::shared_ptr<LazyConstant> lazy);

  std::vector<Value> values_;
  std::vector<Node> nodes_;
  std::vector<StorageInfo> storages_;
  std::vector<ValueId> inputs_, captured_, constants_, outputs_;
  TensorList constant_values_;  // by slot; undefined for a lazy one
  // By slot, null unless lazy.
  std::vector<std::shared_ptr<LazyConstant>> constant_makers_;
};

// Whether a value's layout is symbolic somewhere (sizes, strides or offset).
bool symbolic(const Value& v);

// By storage id: whether some in-place node writes it; whether it holds a
// graph output (or a view of one).
std::vector<bool> written_storages(const Graph& graph);
std::vector<bool> returned_storages(const Graph& graph);

// Checks the graph's invariants and throws kiln::Error naming the first node
// that breaks one: values defined before use, producers and storages
// consistent, every node's shape rule reproducing its outputs' sizes and
// dtypes from its inputs. Run on each trace, and after every pass that
// changed the graph (run_passes).
void verify(const Graph& graph);

// Text, one line per node:  %5 = add(%3, %4) {alpha=1} : float32[2, 3] cpu
// `layout`, when given, prints a value's sizes (and strides) instead of its
// own: symbolic shapes print "[s0, 3]" (SymbolicShapes::text).
using LayoutText = std::function<std::string(ValueId)>;
std::string to_text(const Graph& graph, const LayoutText& layout = {});
// Graphviz dot: values' producers as boxes, edges labelled with shapes
// (`layout`'s, when given, as for to_text).
std::string to_dot(const Graph& graph, const LayoutText& layout = {});
// A hash of the structure (ops, attributes, wiring, layouts, dtypes,
// devices, aliasing, constants' values), the same for two traces of one
// program on equal inputs: not of captured tensors' identities, nor of the
// seeds a random op drew while tracing.
uint64_t structural_hash(const Graph& graph);
// The same, sizes aside: equal for two traces of one program whose ops and
// wiring do not depend on its arguments' sizes (sizes, strides, offsets,
// integer attributes and constants' values are left out; ranks are not).
uint64_t program_hash(const Graph& graph);

std::ostream& operator<<(std::ostream& os, const Graph& graph);

}  // namespace kiln::compiler
