#include "compiler/ir/graph.h"

#include <algorithm>
#include <bit>
#include <mutex>
#include <ostream>
#include <sstream>
#include <type_traits>

#include "kiln/autograd.h"
#include "ops/custom.h"
#include "ops/dispatch.h"

namespace kiln::compiler {

using kiln::operator<<;  // Shape, hidden by this namespace's own operator<<

namespace {

const char* kind_name(ValueKind k) {
  switch (k) {
    case ValueKind::kInput:
      return "input";
    case ValueKind::kCaptured:
      return "captured";
    case ValueKind::kConstant:
      return "constant";
    case ValueKind::kNode:
      return "node";
  }
  return "?";
}

bool default_layout(const Value& v) {
  return v.offset.hint() == 0 &&
         sym::hints(v.strides) == ops::contiguous_strides(sym::hints(v.sizes));
}

void print_type(std::ostream& os, const Value& v, ValueId id, const LayoutText& layout) {
  os << v.dtype;
  if (layout) {
    os << layout(id);
  } else {
    os << v.sizes;
    if (!default_layout(v)) os << "{" << v.strides << "+" << v.offset << "}";
  }
  os << " " << v.device;
}

void print_attr(std::ostream& os, const ops::AttrValue& a) {
  std::visit(
      [&](const auto& x) {
        using X = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<X, std::monostate>) {
          os << "none";
        } else if constexpr (std::is_same_v<X, bool>) {
          os << (x ? "true" : "false");
        } else if constexpr (std::is_same_v<X, std::vector<int64_t>>) {
          os << Shape(x);
        } else if constexpr (std::is_same_v<X, std::string>) {
          os << '"' << x << '"';
        } else {
          os << x;
        }
      },
      a);
}

}  // namespace

std::string_view op_name(const Node& n) noexcept {
  return n.op == ops::OpId::custom ? ops::custom_op_name(n.attrs) : ops::op_schema(n.op).name;
}

namespace {

void print_node(std::ostream& os, const Graph& g, const Node& n, const LayoutText& layout) {
  const ops::OpSchema& schema = ops::op_schema(n.op);
  os << "  ";
  for (size_t i = 0; i < n.outputs.size(); ++i) os << (i ? ", " : "") << "%" << n.outputs[i];
  os << " = ";
  if (n.inplace()) os << "%" << n.target << ".";
  os << op_name(n) << (n.inplace() ? "_" : "") << "(";
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    os << (i ? ", " : "");
    if (n.inputs[i] == kNoValue) {
      os << "none";
    } else {
      os << "%" << n.inputs[i];
    }
  }
  os << ")";
  if (n.attrs.size() > 0) {
    os << " {";
    for (size_t i = 0; i < n.attrs.size(); ++i) {
      os << (i ? ", " : "")
         << (i < schema.attrs.size()     ? schema.attrs[i].name
             : n.op == ops::OpId::custom ? ops::custom_attr_name(n.attrs, i)
                                         : "?")
         << "=";
      print_attr(os, n.attrs[i]);
    }
    os << "}";
  }
  os << " :";
  for (size_t i = 0; i < n.outputs.size(); ++i) {
    const Value& v = g.value(n.outputs[i]);
    os << (i ? "," : "") << " ";
    print_type(os, v, n.outputs[i], layout);
    const ValueId root = g.storages()[static_cast<size_t>(v.storage)].root;
    if (root != n.outputs[i]) os << " aliases %" << root;
  }
  os << "\n";
}

void print_values(std::ostream& os, const Graph& g, const char* what,
                  const std::vector<ValueId>& ids, const LayoutText& layout) {
  os << what << "(";
  for (size_t i = 0; i < ids.size(); ++i) {
    os << (i ? ", " : "") << "%" << ids[i] << ": ";
    const Value& v = g.value(ids[i]);
    print_type(os, v, ids[i], layout);
    if (v.kind == ValueKind::kConstant) {
      const auto slot = static_cast<size_t>(v.slot);
      if (g.lazy_constant(slot)) {
        os << " (lazy)";
      } else if (const Tensor c = g.constant(slot); c.numel() == 1) {
        os << " = " << c.item();
      }
    }
    const ValueId root = g.storages()[static_cast<size_t>(v.storage)].root;
    if (root != ids[i]) os << " aliases %" << root;
  }
  os << ")";
}

// splitmix64 over a running state.
struct Hasher {
  uint64_t h = 0x6b696c6e5f697221ull;
  // false: integers that may follow sizes (sizes, strides, offsets, integer
  // attributes, constants' values) count by their number only.
  bool with_sizes = true;
  void add(uint64_t x) {
    uint64_t z = (h ^ x) + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    h = z ^ (z >> 31);
  }
  void add_shape(const Shape& s) {
    add(s.size());
    if (with_sizes)
      for (int64_t d : s) add(static_cast<uint64_t>(d));
  }
  void add_string(std::string_view s) {
    add(s.size());
    for (char c : s) add(static_cast<unsigned char>(c));
  }
  void add_scalar(const Scalar& s) {
    add(s.is_floating() ? 1 : s.is_bool() ? 2 : 3);
    if (!with_sizes) return;
    add(s.is_floating() ? std::bit_cast<uint64_t>(s.to_double())
                        : static_cast<uint64_t>(s.to_int()));
  }
  void add_value(const Value& v) {
    add(static_cast<uint64_t>(v.kind));
    add_shape(sym::hints(v.sizes));
    add_shape(sym::hints(v.strides));
    if (with_sizes) add(static_cast<uint64_t>(v.offset.hint()));
    add(static_cast<uint64_t>(v.dtype));
    add(static_cast<uint64_t>(v.device.kind()));
    add(static_cast<uint64_t>(v.device.index()));
    add(static_cast<uint64_t>(v.storage));
    add(v.wrapped_number);
  }
  void add_attr(const ops::AttrValue& a) {
    add(a.index());
    std::visit(
        [&](const auto& x) {
          using X = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<X, std::monostate>) {
          } else if constexpr (std::is_same_v<X, int64_t>) {
            if (with_sizes) add(static_cast<uint64_t>(x));
          } else if constexpr (std::is_same_v<X, bool>) {
            add(static_cast<uint64_t>(x));
          } else if constexpr (std::is_same_v<X, double>) {
            add(std::bit_cast<uint64_t>(x));
          } else if constexpr (std::is_same_v<X, std::vector<int64_t>>) {
            add_shape(x);
          } else if constexpr (std::is_same_v<X, DType>) {
            add(static_cast<uint64_t>(x));
          } else if constexpr (std::is_same_v<X, Device>) {
            add(static_cast<uint64_t>(x.kind()));
            add(static_cast<uint64_t>(x.index()));
          } else if constexpr (std::is_same_v<X, Scalar>) {
            add_scalar(x);
          } else {
            add_string(x);
          }
        },
        a);
  }
};

[[noreturn]] void fail(size_t node, const Node& n, const std::string& what) {
  throw Error(detail::str_cat("compiler: verify: node ", node, " (", op_name(n), "): ", what));
}

}  // namespace

int32_t Graph::new_storage(const Tensor& like, ValueId root) {
  storages_.push_back(
      StorageInfo{static_cast<int64_t>(like.storage()->nbytes()), like.device(), root});
  return static_cast<int32_t>(storages_.size() - 1);
}

ValueId Graph::add_value(Value v, const Tensor& like, int32_t storage) {
  const auto id = static_cast<ValueId>(values_.size());
  const TensorImpl& layout =
      like.impl();  // read unnoted: the graph's own, not the traced program's
  v.sizes = sym::constants(layout.sizes);
  v.strides = sym::constants(layout.strides);
  v.offset = layout.offset;
  v.dtype = like.dtype();
  v.device = like.device();
  v.wrapped_number = like.is_wrapped_number();
  v.storage = storage < 0 ? new_storage(like, id) : storage;
  values_.push_back(std::move(v));
  return id;
}

ValueId Graph::add_source(ValueKind kind, std::vector<ValueId>& list, const Tensor& like,
                          int32_t storage) {
  Value v;
  v.kind = kind;
  v.slot = static_cast<int32_t>(list.size());
  const ValueId id = add_value(std::move(v), like, storage);
  list.push_back(id);
  return id;
}

ValueId Graph::add_input(const Tensor& like, int32_t storage) {
  return add_source(ValueKind::kInput, inputs_, like, storage);
}

ValueId Graph::add_captured(const Tensor& like, int32_t storage) {
  return add_source(ValueKind::kCaptured, captured_, like, storage);
}

ValueId Graph::add_constant(const Tensor& value) {
  const ValueId id = add_source(ValueKind::kConstant, constants_, value, -1);
  constant_values_.push_back(value);
  constant_makers_.emplace_back();
  return id;
}

struct Graph::LazyConstant {
  ConstantRows rows;
  std::mutex mutex;
  std::weak_ptr<Storage> whole;  // its whole value, while some executable holds it
};

ValueId Graph::add_lazy_constant(const Tensor& like, ConstantRows rows) {
  const ValueId id = add_source(ValueKind::kConstant, constants_, like, -1);
  constant_values_.emplace_back();
  auto lazy = std::make_shared<LazyConstant>();
  lazy->rows = std::move(rows);
  constant_makers_.push_back(std::move(lazy));
  return id;
}

ValueId Graph::copy_constant(const Graph& from, size_t slot) {
  if (!from.lazy_constant(slot)) return add_constant(from.constant_values_.at(slot));
  const ValueId id =
      add_source(ValueKind::kConstant, constants_, from.meta_hint(from.constants_.at(slot)), -1);
  constant_values_.emplace_back();
  constant_makers_.push_back(from.constant_makers_[slot]);
  return id;
}

const void* Graph::constant_identity(size_t slot) const {
  if (lazy_constant(slot)) return constant_makers_[slot].get();
  return &constant_values_.at(slot).impl();
}

Tensor Graph::constant(size_t slot) const {
  if (!lazy_constant(slot)) return constant_values_.at(slot);
  // Made once for all the graphs that hold it (the executables of a program
  // at several sizes) while one of them keeps it.
  LazyConstant& lazy = *constant_makers_[slot];
  const Value& v = value(constants_[slot]);
  std::lock_guard lock(lazy.mutex);
  if (std::shared_ptr<Storage> kept = lazy.whole.lock())
    return ops::make_tensor(std::move(kept), sym::hints(v.sizes), v.dtype);
  Tensor made = constant_rows(slot, 0, v.sizes.at(0).hint());
  if (made.storage_offset() == 0) lazy.whole = made.storage();
  return made;
}

Tensor Graph::constant_rows(size_t slot, int64_t begin, int64_t end) const {
  const Value& v = value(constants_.at(slot));
  if (v.sizes.empty() || begin < 0 || begin > end || end > v.sizes[0].hint())
    throw Error(detail::str_cat("compiler: rows [", begin, ", ", end, ") of constant ", slot,
                                " of sizes ", v.sizes));
  if (!lazy_constant(slot))
    return constant_values_[slot].narrow(0, begin, end - begin).contiguous();
  Tensor made = constant_makers_[slot]->rows(begin, end);
  Shape sizes = sym::hints(v.sizes);
  sizes[0] = end - begin;
  if (made.sizes() != sizes || !made.is_contiguous() || made.dtype() != v.dtype ||
      made.device() != v.device)
    throw Error(detail::str_cat("compiler: constant ", slot, " rows were made as ", made.sizes(),
                                " ", made.dtype(), ", not the contiguous ", sizes, " ", v.dtype,
                                " the graph has"));
  return made;
}

int32_t Graph::add_node(ops::OpId op, std::vector<ValueId> inputs, ops::Attrs attrs,
                        const TensorList& outputs, ValueId target) {
  const auto index = static_cast<int32_t>(nodes_.size());
  const ops::OpSchema& schema = ops::op_schema(op);
  int32_t storage = -1;
  if (target != kNoValue) {
    storage = value(target).storage;
  } else if (schema.has_flag(ops::kView) && !inputs.empty() && inputs[0] != kNoValue) {
    storage = value(inputs[0]).storage;
  }
  Node n;
  n.op = op;
  n.inputs = std::move(inputs);
  n.attrs = std::move(attrs);
  n.target = target;
  for (size_t i = 0; i < outputs.size(); ++i) {
    Value v;
    v.kind = ValueKind::kNode;
    v.producer = index;
    v.output_index = static_cast<int32_t>(i);
    n.outputs.push_back(add_value(std::move(v), outputs[i], storage));
  }
  nodes_.push_back(std::move(n));
  return index;
}

Tensor Graph::meta_tensor(ValueId id) const {
  const Value& v = value(id);
  Tensor t = meta_hint(id);
  for (const SymShape* s : {&v.sizes, &v.strides})
    for (const SymInt& d : *s) d.specialize();
  v.offset.specialize();
  storages_.at(static_cast<size_t>(v.storage)).nbytes.specialize();
  return t;
}

Tensor Graph::meta_hint(ValueId id) const {
  const Value& v = value(id);
  const StorageInfo& s = storages_.at(static_cast<size_t>(v.storage));
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(static_cast<size_t>(s.nbytes.hint()), s.device);
  impl->sizes = sym::hints(v.sizes);
  impl->strides = sym::hints(v.strides);
  impl->offset = v.offset.hint();
  impl->dtype = v.dtype;
  impl->wrapped_number = v.wrapped_number;
  return Tensor(std::move(impl));
}

void verify(const Graph& g) {
  const auto& values = g.values();
  std::vector<bool> defined(values.size(), false);
  auto check_slots = [&](const std::vector<ValueId>& ids, ValueKind kind, const char* what) {
    for (size_t i = 0; i < ids.size(); ++i) {
      const ValueId id = ids[i];
      if (id < 0 || static_cast<size_t>(id) >= values.size() || values[id].kind != kind ||
          values[id].slot != static_cast<int32_t>(i)) {
        throw Error(detail::str_cat("compiler: verify: ", what, " ", i, " is not value %", id,
                                    " of its kind and slot"));
      }
      defined[id] = true;
    }
  };
  check_slots(g.inputs(), ValueKind::kInput, "input");
  check_slots(g.captured(), ValueKind::kCaptured, "captured value");
  check_slots(g.constants(), ValueKind::kConstant, "constant");
  for (const Value& v : values) {
    if (v.storage < 0 || static_cast<size_t>(v.storage) >= g.storages().size())
      throw Error(detail::str_cat("compiler: verify: a value has storage ", v.storage, " of ",
                                  g.storages().size()));
  }
  NoGradGuard no_grad;
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const Node& n = g.nodes()[i];
    const ops::OpSchema& schema = ops::op_schema(n.op);
    TensorList inputs;
    for (ValueId id : n.inputs) {
      if (id == kNoValue) {
        inputs.emplace_back();
        continue;
      }
      if (id < 0 || static_cast<size_t>(id) >= values.size() || !defined[id])
        fail(i, n, detail::str_cat("input %", id, " is used before it is defined"));
      inputs.push_back(g.meta_hint(id));
    }
    if (n.inplace()) {
      if (!schema.has_flag(ops::kInplace) || schema.num_outputs != 1)
        fail(i, n, "marked in place, but the op has no in-place form");
      if (n.target < 0 || static_cast<size_t>(n.target) >= values.size() || !defined[n.target])
        fail(i, n, detail::str_cat("in-place target %", n.target, " is used before it is defined"));
    }
    if (schema.num_outputs >= 0 && n.outputs.size() != static_cast<size_t>(schema.num_outputs))
      fail(i, n, detail::str_cat(n.outputs.size(), " outputs, the op has ", schema.num_outputs));
    TensorList expected;
    try {
      expected = ops::dispatch(n.op, inputs, n.attrs);
    } catch (const Error& e) {
      fail(i, n, detail::str_cat("its shape rule rejects the inputs: ", e.what()));
    }
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      const ValueId out = n.outputs[k];
      if (out < 0 || static_cast<size_t>(out) >= values.size() || defined[out])
        fail(i, n, detail::str_cat("output %", out, " is out of range or defined twice"));
      const Value& v = values[out];
      if (v.kind != ValueKind::kNode || v.producer != static_cast<int32_t>(i) ||
          v.output_index != static_cast<int32_t>(k))
        fail(i, n, detail::str_cat("output %", out, " does not name this node as its producer"));
      const Tensor& e = expected[k];
      if (n.inplace()) {
        const Value& t = values[n.target];
        if (v.storage != t.storage)
          fail(i, n, detail::str_cat("output %", out, " should alias its target %", n.target));
        if (e.sizes() != sym::hints(t.sizes) || sym::hints(v.sizes) != sym::hints(t.sizes) ||
            sym::hints(v.strides) != sym::hints(t.strides) || v.offset.hint() != t.offset.hint() ||
            v.dtype != t.dtype || !ops::can_cast(e.dtype(), t.dtype))
          fail(i, n,
               detail::str_cat("in-place output %", out, " ", v.dtype, v.sizes,
                               " differs from its target ", t.dtype, t.sizes, " or the result ",
                               e.dtype(), e.sizes()));
        defined[out] = true;
        continue;
      }
      const bool is_view = schema.has_flag(ops::kView);
      const ValueId first = n.inputs.empty() ? kNoValue : n.inputs[0];
      if (is_view && (first == kNoValue || v.storage != values[first].storage))
        fail(i, n, detail::str_cat("view output %", out, " should alias input %", first));
      if (!is_view && g.storages()[static_cast<size_t>(v.storage)].root != out)
        fail(i, n, detail::str_cat("output %", out, " should own a new storage"));
      if (e.sizes() != sym::hints(v.sizes) || e.dtype() != v.dtype || e.device() != v.device)
        fail(i, n,
             detail::str_cat("output %", out, " is recorded as ", v.dtype, v.sizes, " ", v.device,
                             ", the shape rule gives ", e.dtype(), e.sizes(), " ", e.device()));
      if (schema.has_flag(ops::kView) &&
          (e.strides() != sym::hints(v.strides) || e.storage_offset() != v.offset.hint()))
        fail(i, n,
             detail::str_cat("view output %", out, " has strides ", v.strides, "+", v.offset,
                             ", the shape rule gives ", e.strides(), "+", e.storage_offset()));
      defined[out] = true;
    }
  }
  for (ValueId id : g.outputs()) {
    if (id < 0 || static_cast<size_t>(id) >= values.size() || !defined[id])
      throw Error(detail::str_cat("compiler: verify: graph output %", id, " is not defined"));
  }
}

std::vector<bool> written_storages(const Graph& g) {
  std::vector<bool> written(g.storages().size(), false);
  for (const Node& n : g.nodes())
    if (n.inplace()) written[static_cast<size_t>(g.value(n.target).storage)] = true;
  return written;
}

std::vector<bool> returned_storages(const Graph& g) {
  std::vector<bool> returned(g.storages().size(), false);
  for (ValueId id : g.outputs()) returned[static_cast<size_t>(g.value(id).storage)] = true;
  return returned;
}

std::string to_text(const Graph& g, const LayoutText& layout) {
  std::ostringstream os;
  print_values(os, g, "graph", g.inputs(), layout);
  if (!g.captured().empty()) print_values(os << " ", g, "captured", g.captured(), layout);
  if (!g.constants().empty()) print_values(os << " ", g, "constants", g.constants(), layout);
  os << " {\n";
  for (const Node& n : g.nodes()) print_node(os, g, n, layout);
  os << "  return (";
  for (size_t i = 0; i < g.outputs().size(); ++i) os << (i ? ", " : "") << "%" << g.outputs()[i];
  os << ")\n}\n";
  return os.str();
}

std::string to_dot(const Graph& g, const LayoutText& layout) {
  // Sizes only: the layout's text up to its strides.
  const auto sizes = [&](ValueId id) {
    if (!layout) return detail::str_cat(g.value(id).sizes);
    const std::string text = layout(id);
    return text.substr(0, text.find('{'));
  };
  std::ostringstream os;
  os << "digraph kiln {\n  rankdir=TB;\n  node [fontname=\"monospace\", fontsize=10];\n";
  for (size_t i = 0; i < g.values().size(); ++i) {
    const Value& v = g.values()[i];
    if (v.kind == ValueKind::kNode) continue;
    os << "  v" << i << " [shape=ellipse, label=\"%" << i << " " << kind_name(v.kind) << "\\n"
       << v.dtype << sizes(static_cast<ValueId>(i)) << "\"];\n";
  }
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const Node& n = g.nodes()[i];
    os << "  n" << i << " [shape=box, label=\"" << op_name(n) << (n.inplace() ? "_" : "") << "\""
       << (n.inplace() ? ", style=filled, fillcolor=\"#f4d6a0\"" : "") << "];\n";
    for (ValueId in : n.inputs) {
      if (in == kNoValue) continue;
      const Value& v = g.value(in);
      os << "  " << (v.kind == ValueKind::kNode ? "n" : "v")
         << (v.kind == ValueKind::kNode ? v.producer : in) << " -> n" << i << " [label=\"%" << in
         << " " << v.dtype << sizes(in) << "\"];\n";
    }
  }
  os << "  out [shape=plaintext, label=\"return\"];\n";
  for (ValueId id : g.outputs()) {
    const Value& v = g.value(id);
    os << "  " << (v.kind == ValueKind::kNode ? "n" : "v")
       << (v.kind == ValueKind::kNode ? v.producer : id) << " -> out [label=\"%" << id << "\"];\n";
  }
  os << "}\n";
  return os.str();
}

namespace {

uint64_t hash_graph(const Graph& g, bool with_sizes) {
  Hasher h;
  h.with_sizes = with_sizes;
  for (const auto* list : {&g.inputs(), &g.captured(), &g.constants()}) {
    h.add(list->size());
    for (ValueId id : *list) h.add_value(g.value(id));
  }
  if (with_sizes) {
    for (size_t slot = 0; slot < g.constants().size(); ++slot) {
      if (g.lazy_constant(slot)) continue;  // a folded weight: a tensor, not a number
      if (const Tensor c = g.constant(slot); c.numel() == 1) h.add_scalar(c.item());
    }
  }
  h.add(g.nodes().size());
  for (const Node& n : g.nodes()) {
    const ops::OpSchema& schema = ops::op_schema(n.op);
    h.add(static_cast<uint64_t>(n.op));
    h.add(static_cast<uint64_t>(n.target));
    h.add(n.grad_enabled);
    h.add(n.inputs.size());
    for (ValueId in : n.inputs) h.add(static_cast<uint64_t>(in));
    h.add(n.attrs.size());
    for (size_t i = 0; i < n.attrs.size(); ++i) {
      const std::string_view name = i < schema.attrs.size() ? schema.attrs[i].name : "";
      if (schema.has_flag(ops::kRandom) && (name == "seed" || name == "offset"))
        continue;  // drawn per call
      h.add_attr(n.attrs[i]);
    }
    for (ValueId out : n.outputs) h.add_value(g.value(out));
  }
  h.add(g.outputs().size());
  for (ValueId id : g.outputs()) h.add(static_cast<uint64_t>(id));
  return h.h;
}

}  // namespace

uint64_t structural_hash(const Graph& g) { return hash_graph(g, true); }

uint64_t program_hash(const Graph& g) { return hash_graph(g, false); }

bool symbolic(const Value& v) {
  if (v.offset.is_symbolic()) return true;
  for (const SymShape* s : {&v.sizes, &v.strides})
    for (const SymInt& d : *s)
      if (d.is_symbolic()) return true;
  return false;
}

bool Graph::symbolic() const {
  return std::any_of(values_.begin(), values_.end(),
                     [](const Value& v) { return compiler::symbolic(v); });
}

std::ostream& operator<<(std::ostream& os, const Graph& g) { return os << to_text(g); }

}  // namespace kiln::compiler
