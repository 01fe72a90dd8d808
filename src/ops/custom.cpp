// Custom ops: the registry, the public API of include/kiln/library.h, and
// the `custom` row's shape rule, kernel and backward (ops/custom.h).
#include "ops/custom.h"

#include <deque>
#include <mutex>
#include <shared_mutex>
#include <type_traits>
#include <unordered_map>

#include "core/symbolic.h"
#include "kiln/autograd.h"
#include "kiln/cuda.h"
#include "kiln/error.h"
#include "kiln/ops/factory.h"
#include "ops/dispatch.h"
#include "ops/op_table.h"
#include "ops/sym_tensor.h"

namespace kiln::library {

struct SizeAccess {
  static sym::SymInt to_sym(const Size& s) {
    return s.expr_ ? sym::SymInt(s.value_, s.expr_) : sym::SymInt(s.value_);
  }
  static Size from_sym(const sym::SymInt& v) {
    Size s(v.hint());
    s.expr_ = v.expr_ptr();
    return s;
  }
  static int64_t hint(const Size& s) noexcept { return s.value_; }
};

int OpEntry::attr_index(std::string_view name) const noexcept {
  for (size_t i = 0; i < def.attrs.size(); ++i)
    if (def.attrs[i].name == name) return static_cast<int>(i) + 1;
  return -1;
}

namespace {

// --- the registry -------------------------------------------------------------------

struct Registry {
  std::shared_mutex mutex;
  std::deque<OpEntry> entries;  // never moved: calls keep pointers into it
  std::unordered_map<std::string_view, const OpEntry*> by_name;
};

Registry& registry() {
  static Registry* r = new Registry();  // alive for ops called while statics are destroyed
  return *r;
}

const OpEntry* lookup(std::string_view name) {
  Registry& r = registry();
  std::shared_lock lock(r.mutex);
  auto it = r.by_name.find(name);
  return it == r.by_name.end() ? nullptr : it->second;
}

std::string_view type_name(AttrType t) noexcept {
  switch (t) {
    case AttrType::Int:
      return "int";
    case AttrType::Float:
      return "float";
    case AttrType::Bool:
      return "bool";
    case AttrType::Ints:
      return "ints";
    case AttrType::Str:
      return "str";
    case AttrType::DType:
      return "dtype";
  }
  return "?";
}

std::string_view value_type_name(const AttrValue& v) noexcept {
  constexpr std::string_view kNames[] = {"int", "float", "bool", "ints", "str", "dtype"};
  return kNames[v.index()];
}

// A call's attribute value as the op table stores it; kiln::ValueError
// naming the op and attribute for a value of another type.
ops::AttrValue to_attr(const OpEntry& e, const AttrDef& d, const AttrValue& v) {
  switch (d.type) {
    case AttrType::Int:
      if (auto* p = std::get_if<int64_t>(&v)) return *p;
      break;
    case AttrType::Float:
      if (auto* p = std::get_if<double>(&v)) return *p;
      if (auto* p = std::get_if<int64_t>(&v)) return static_cast<double>(*p);
      break;
    case AttrType::Bool:
      if (auto* p = std::get_if<bool>(&v)) return *p;
      break;
    case AttrType::Ints:
      if (auto* p = std::get_if<std::vector<int64_t>>(&v)) return *p;
      break;
    case AttrType::Str:
      if (auto* p = std::get_if<std::string>(&v)) return *p;
      break;
    case AttrType::DType:
      if (auto* p = std::get_if<DType>(&v)) return *p;
      break;
  }
  throw ValueError(detail::str_cat(e.def.name, ": attribute '", d.name, "' is ", type_name(d.type),
                                   ", got a ", value_type_name(v)));
}

ops::Attrs call_attrs(const OpEntry& e, std::span<const AttrValue> values) {
  if (values.size() != e.def.attrs.size()) {
    throw ValueError(detail::str_cat(e.def.name, ": expected ", e.def.attrs.size(),
                                     " attributes, got ", values.size()));
  }
  ops::Attrs attrs;
  attrs.push_back(e.def.name);
  for (size_t i = 0; i < values.size(); ++i) attrs.push_back(to_attr(e, e.def.attrs[i], values[i]));
  return attrs;
}

template <class T>
constexpr AttrType attr_type_of() {
  if constexpr (std::is_same_v<T, int64_t>) return AttrType::Int;
  if constexpr (std::is_same_v<T, double>) return AttrType::Float;
  if constexpr (std::is_same_v<T, bool>) return AttrType::Bool;
  if constexpr (std::is_same_v<T, std::vector<int64_t>>) return AttrType::Ints;
  if constexpr (std::is_same_v<T, std::string>) return AttrType::Str;
  if constexpr (std::is_same_v<T, DType>) return AttrType::DType;
}

template <class T>
T read_attr(const OpEntry& e, const void* attrs, std::string_view name) {
  const int k = e.attr_index(name);
  if (k < 0) throw ValueError(detail::str_cat(e.def.name, ": no attribute named '", name, "'"));
  const AttrDef& d = e.def.attrs[static_cast<size_t>(k - 1)];
  if (d.type != attr_type_of<T>()) {
    throw ValueError(detail::str_cat(e.def.name, ": attribute '", name, "' is ", type_name(d.type),
                                     ", read as ", type_name(attr_type_of<T>())));
  }
  return std::get<T>((*static_cast<const ops::Attrs*>(attrs))[static_cast<size_t>(k)]);
}

bool valid_name(std::string_view name) {
  const size_t sep = name.find("::");
  if (sep == std::string_view::npos || sep == 0 || sep + 2 >= name.size()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    if (i == sep || i == sep + 1) continue;
    const bool ok =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    if (!ok) return false;
  }
  return true;
}

template <class Names>
void check_unique(const std::string& op, std::string_view what, const Names& names) {
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i].empty()) throw ValueError(detail::str_cat(op, ": ", what, " ", i, " has no name"));
    for (size_t j = 0; j < i; ++j) {
      if (names[i] == names[j])
        throw ValueError(detail::str_cat(op, ": two ", what, "s are named '", names[i], "'"));
    }
  }
}

}  // namespace

}  // namespace kiln::library

namespace kiln::ops {

// The shape rule of op e on ctx: the checks every op makes, then the user's rule.
template <class Ctx>
void run_custom_rule(const library::OpEntry& e, Ctx& ctx) {
  const library::OpDef& d = e.def;
  if (ctx.attrs.size() != d.attrs.size() + 1) {
    throw ValueError(detail::str_cat(d.name, ": expected ", d.attrs.size(), " attributes, got ",
                                     ctx.attrs.size() - 1));
  }
  if (ctx.inputs.size() != d.inputs.size()) {
    throw ValueError(detail::str_cat(d.name, ": expected ", d.inputs.size(), " tensor inputs, got ",
                                     ctx.inputs.size()));
  }
  for (size_t i = 0; i < ctx.inputs.size(); ++i) {
    if (!ctx.inputs[i].defined()) {
      throw ValueError(
          detail::str_cat(d.name, ": input '", d.inputs[i], "' is an undefined tensor"));
    }
  }
  if (!ctx.inputs.empty()) {
    const Device device = ctx.common_device();
    if (!(device.is_cuda() ? d.cuda : d.cpu)) {
      throw DeviceError(detail::str_cat(d.name, ": no kernel for ", device, " (it has ",
                                        d.cpu ? "a CPU kernel" : "a CUDA kernel", ")"));
    }
  }
  library::ShapeContext shape(e, &ctx, std::is_same_v<Ctx, SymShapeCtx>);
  try {
    d.shape(shape);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& ex) {
    throw Error(detail::str_cat(d.name, ": the shape rule failed: ", ex.what()));
  }
  if (ctx.outputs.empty())
    throw ValueError(detail::str_cat(d.name, ": the shape rule describes no output"));
}

}  // namespace kiln::ops

namespace kiln::library {
namespace {

// Tries the rule on the definition's example (as meta tensors).
void check_example(const OpEntry& e) {
  const OpDef& d = e.def;
  if (d.example_inputs.empty() && d.example_attrs.empty()) return;
  TensorList metas;
  for (const Tensor& t : d.example_inputs) {
    metas.push_back(t.defined() ? ops::make_tensor(t.sizes(), t.dtype(), t.device(), true)
                                : Tensor());
  }
  try {
    ops::Attrs attrs = call_attrs(e, d.example_attrs);
    ops::ShapeCtx ctx{ops::op_schema(ops::OpId::custom), metas, attrs, {}, {}};
    ops::run_custom_rule(e, ctx);
  } catch (const std::exception& ex) {
    throw ValueError(detail::str_cat(
        "define_op: ", d.name, ": the shape rule fails on the definition's example: ", ex.what()));
  }
}

}  // namespace

// --- Size -------------------------------------------------------------------------

int64_t Size::value() const { return expr_ ? SizeAccess::to_sym(*this).specialize() : value_; }

namespace {

template <class Plain, class Symbolic>
Size size_op(const Size& a, const Size& b, Plain plain, Symbolic symbolic) {
  if (!a.is_symbolic() && !b.is_symbolic())
    return Size(plain(SizeAccess::hint(a), SizeAccess::hint(b)));
  return SizeAccess::from_sym(symbolic(SizeAccess::to_sym(a), SizeAccess::to_sym(b)));
}

void check_divisor(const Size& b) {
  if (SizeAccess::hint(b) == 0) throw ValueError("shape rule: a size divided by zero");
}

}  // namespace

Size operator+(const Size& a, const Size& b) {
  return size_op(a, b, std::plus<int64_t>(), std::plus<sym::SymInt>());
}
Size operator-(const Size& a, const Size& b) {
  return size_op(a, b, std::minus<int64_t>(), std::minus<sym::SymInt>());
}
Size operator*(const Size& a, const Size& b) {
  return size_op(a, b, std::multiplies<int64_t>(), std::multiplies<sym::SymInt>());
}
Size operator/(const Size& a, const Size& b) {
  check_divisor(b);
  return size_op(a, b, std::divides<int64_t>(), std::divides<sym::SymInt>());
}
Size operator%(const Size& a, const Size& b) {
  check_divisor(b);
  return size_op(a, b, std::modulus<int64_t>(), std::modulus<sym::SymInt>());
}
bool operator==(const Size& a, const Size& b) {
  if (!a.is_symbolic() && !b.is_symbolic()) return SizeAccess::hint(a) == SizeAccess::hint(b);
  return SizeAccess::to_sym(a) == SizeAccess::to_sym(b);
}
bool operator<(const Size& a, const Size& b) {
  if (!a.is_symbolic() && !b.is_symbolic()) return SizeAccess::hint(a) < SizeAccess::hint(b);
  return SizeAccess::to_sym(a) < SizeAccess::to_sym(b);
}

// --- contexts ---------------------------------------------------------------------

namespace {

template <class F>
decltype(auto) visit_ctx(void* ctx, bool symbolic, F&& f) {
  if (symbolic) return f(*static_cast<ops::SymShapeCtx*>(ctx));
  return f(*static_cast<ops::ShapeCtx*>(ctx));
}

}  // namespace

std::string_view ShapeContext::op() const noexcept { return op_.def.name; }

size_t ShapeContext::num_inputs() const noexcept {
  return visit_ctx(ctx_, symbolic_, [](auto& c) { return c.inputs.size(); });
}

int64_t ShapeContext::dim(size_t input) const {
  if (input >= num_inputs())
    throw IndexError(
        detail::str_cat(op(), ": shape rule reads input ", input, " of ", num_inputs()));
  return visit_ctx(ctx_, symbolic_, [&](auto& c) { return c.input(input).dim(); });
}

Sizes ShapeContext::sizes(size_t input) const {
  dim(input);  // checks the index
  return visit_ctx(ctx_, symbolic_, [&](auto& c) {
    Sizes out;
    for (const auto& s : c.input(input).sizes()) {
      if constexpr (std::is_same_v<std::decay_t<decltype(s)>, int64_t>) {
        out.emplace_back(s);
      } else {
        out.push_back(SizeAccess::from_sym(s));
      }
    }
    return out;
  });
}

Size ShapeContext::size(size_t input, int64_t d) const {
  const int64_t rank = dim(input);
  const int64_t k = d < 0 ? d + rank : d;
  if (k < 0 || k >= rank) {
    throw IndexError(
        detail::str_cat(op(), ": dim ", d, " of input ", input, ", which has ", rank, " dims"));
  }
  return sizes(input)[static_cast<size_t>(k)];
}

DType ShapeContext::dtype(size_t input) const {
  dim(input);
  return visit_ctx(ctx_, symbolic_, [&](auto& c) { return c.input(input).dtype(); });
}

Device ShapeContext::device(size_t input) const {
  dim(input);
  return visit_ctx(ctx_, symbolic_, [&](auto& c) { return c.input(input).device(); });
}

void ShapeContext::add_output(const Sizes& sizes, DType dtype, Device device) {
  for (const Size& s : sizes) {
    if (SizeAccess::hint(s) < 0)
      throw ShapeError(
          detail::str_cat(op(), ": shape rule gives an output size ", SizeAccess::hint(s)));
  }
  visit_ctx(ctx_, symbolic_, [&](auto& c) {
    using Ctx = std::decay_t<decltype(c)>;
    typename Ctx::Sizes out;
    for (const Size& s : sizes) {
      if constexpr (std::is_same_v<Ctx, ops::ShapeCtx>) {
        out.push_back(SizeAccess::hint(s));
      } else {
        out.push_back(SizeAccess::to_sym(s));
      }
    }
    c.add_output(std::move(out), dtype, device);
  });
}

void ShapeContext::add_output_like(size_t input) {
  dim(input);
  visit_ctx(ctx_, symbolic_, [&](auto& c) {
    const auto& t = c.input(input);
    c.add_output(t.sizes(), t.dtype(), t.device());
  });
}

template <class T>
T ShapeContext::attr(std::string_view name) const {
  return visit_ctx(ctx_, symbolic_, [&](auto& c) { return read_attr<T>(op_, &c.attrs, name); });
}

std::string_view KernelContext::op() const noexcept { return op_.def.name; }
template <class T>
T KernelContext::attr(std::string_view name) const {
  return read_attr<T>(op_, attrs_, name);
}

std::string_view BackwardContext::op() const noexcept { return op_.def.name; }
template <class T>
T BackwardContext::attr(std::string_view name) const {
  return read_attr<T>(op_, attrs_, name);
}

#define KILN_ATTR_INSTANCES(T)                                    \
  template T ShapeContext::attr<T>(std::string_view name) const;  \
  template T KernelContext::attr<T>(std::string_view name) const; \
  template T BackwardContext::attr<T>(std::string_view name) const;
KILN_ATTR_INSTANCES(int64_t)
KILN_ATTR_INSTANCES(double)
KILN_ATTR_INSTANCES(bool)
KILN_ATTR_INSTANCES(std::vector<int64_t>)
KILN_ATTR_INSTANCES(std::string)
KILN_ATTR_INSTANCES(DType)
#undef KILN_ATTR_INSTANCES

// --- definition and calls ---------------------------------------------------------

Op define_op(OpDef def) {
  if (!valid_name(def.name)) {
    throw ValueError(detail::str_cat("define_op: '", def.name,
                                     "' is not a name of the form namespace::name (letters, ",
                                     "digits and '_')"));
  }
  check_unique(def.name, "input", def.inputs);
  std::vector<std::string> attr_names;
  for (const AttrDef& a : def.attrs) attr_names.push_back(a.name);
  check_unique(def.name, "attribute", attr_names);
  if (!def.shape) throw ValueError(detail::str_cat("define_op: ", def.name, ": no shape rule"));
  if (!def.cpu && !def.cuda)
    throw ValueError(detail::str_cat("define_op: ", def.name, ": no kernel (cpu or cuda)"));
  if (def.cuda_graph_safe && !def.cuda) {
    throw ValueError(
        detail::str_cat("define_op: ", def.name, ": cuda_graph_safe, but it has no CUDA kernel"));
  }
  OpEntry entry{std::move(def)};
  check_example(entry);
  Registry& r = registry();
  std::unique_lock lock(r.mutex);
  if (r.by_name.count(entry.def.name))
    throw ValueError(detail::str_cat("define_op: ", entry.def.name, " is defined already"));
  const OpEntry& e = r.entries.emplace_back(std::move(entry));
  r.by_name.emplace(e.def.name, &e);
  return Op(e);
}

Op find_op(std::string_view name) {
  const OpEntry* e = lookup(name);
  if (!e) throw ValueError(detail::str_cat("find_op: no op is defined as '", name, "'"));
  return Op(*e);
}

TensorList Op::operator()(std::span<const Tensor> inputs, std::span<const AttrValue> attrs) const {
  return ops::dispatch(ops::OpId::custom, inputs, call_attrs(*entry_, attrs));
}

TensorList Op::operator()(std::initializer_list<Tensor> inputs,
                          std::initializer_list<AttrValue> attrs) const {
  return (*this)(std::span<const Tensor>(inputs.begin(), inputs.size()),
                 std::span<const AttrValue>(attrs.begin(), attrs.size()));
}

Tensor Op::one(std::initializer_list<Tensor> inputs, std::initializer_list<AttrValue> attrs) const {
  return std::move((*this)(inputs, attrs)[0]);
}

const std::string& Op::name() const noexcept { return entry_->def.name; }

}  // namespace kiln::library

namespace kiln::ops {

const library::OpEntry& custom_op(const Attrs& attrs) {
  if (attrs.size() == 0 || !std::holds_alternative<std::string>(attrs[0]))
    throw ValueError("custom: the attributes name no op");
  // The op this thread called last, without the registry's lock and hash
  // (entries live as long as the process).
  thread_local const library::OpEntry* t_last = nullptr;
  const std::string& name = attrs.str(0);
  if (t_last && t_last->def.name == name) return *t_last;
  const library::OpEntry* e = library::lookup(name);
  if (!e) throw ValueError(detail::str_cat("custom: no op is defined as '", name, "'"));
  t_last = e;
  return *e;
}

std::string_view custom_op_name(const Attrs& attrs) noexcept {
  if (attrs.size() == 0 || !std::holds_alternative<std::string>(attrs[0])) return "custom";
  return attrs.str(0);
}

std::string_view custom_attr_name(const Attrs& attrs, size_t i) noexcept {
  if (attrs.size() == 0 || !std::holds_alternative<std::string>(attrs[0]) || i == 0) return "?";
  const library::OpEntry* e = library::lookup(attrs.str(0));
  return e && i <= e->def.attrs.size() ? std::string_view(e->def.attrs[i - 1].name) : "?";
}

template <class Ctx>
void infer_custom(Ctx& ctx) {
  run_custom_rule(custom_op(ctx.attrs), ctx);
}
KILN_SHAPE_RULE_INSTANCES(infer_custom)

void run_custom_kernel(const backend::KernelCall& call) {
  const library::OpEntry& e = custom_op(call.attrs);
  const Device device = call.outputs[0].device();
  const library::KernelFn& kernel = device.is_cuda() ? e.def.cuda : e.def.cpu;
  if (!kernel) throw DeviceError(detail::str_cat(e.def.name, ": no kernel for ", device));
  NoGradGuard no_grad;
  // The call's own tensors where they are as the kernel takes them; copies
  // only where one is not (the common call allocates nothing here).
  std::span<const Tensor> inputs = call.inputs;
  TensorList input_copies;
  for (size_t i = 0; i < call.inputs.size(); ++i) {
    const Tensor& t = call.inputs[i];
    if (t.device() != device) {
      throw DeviceError(detail::str_cat(e.def.name, ": input ", i, " is on ", t.device(),
                                        ", the kernel runs on ", device));
    }
    if (e.def.contiguous_inputs && !t.is_contiguous()) {
      if (input_copies.empty()) input_copies.assign(call.inputs.begin(), call.inputs.end());
      input_copies[i] = t.contiguous();
      inputs = input_copies;
    }
  }
  // Outputs laid out otherwise (a compiled program's choice) are written through contiguous ones.
  std::span<Tensor> outputs = call.outputs;
  TensorList output_copies;
  bool copy_back = false;
  for (size_t k = 0; k < call.outputs.size(); ++k) {
    const Tensor& t = call.outputs[k];
    if (t.is_contiguous()) continue;
    if (output_copies.empty()) output_copies.assign(call.outputs.begin(), call.outputs.end());
    output_copies[k] = make_tensor(t.sizes(), t.dtype(), t.device());
    outputs = output_copies;
    copy_back = true;
  }
  void* stream = device.is_cuda() ? cuda::Stream::current(device.index()).handle() : nullptr;
  try {
    kernel(library::KernelContext(e, inputs, outputs, &call.attrs, device, stream));
  } catch (const Error&) {
    throw;
  } catch (const std::exception& ex) {
    throw Error(detail::str_cat(e.def.name, ": its ", device.is_cuda() ? "CUDA" : "CPU",
                                " kernel failed: ", ex.what()));
  }
  if (copy_back) {
    for (size_t k = 0; k < outputs.size(); ++k)
      if (outputs[k].impl_ptr() != call.outputs[k].impl_ptr()) call.outputs[k].copy_(outputs[k]);
  }
}

TensorList custom_backward(const Attrs& attrs, std::span<const Tensor> inputs,
                           std::span<const Tensor> results, const std::vector<bool>& needs_grad,
                           const TensorList& grads) {
  const library::OpEntry& e = custom_op(attrs);
  if (!e.def.backward) {
    throw Error(detail::str_cat(e.def.name, ": differentiated, but defined without a backward ",
                                "(OpDef::backward)"));
  }
  TensorList g(grads.begin(), grads.end());
  g.resize(results.size());
  for (size_t k = 0; k < g.size(); ++k)
    if (!g[k].defined() && results[k].defined()) g[k] = zeros_like(results[k]);
  TensorList out =
      e.def.backward(library::BackwardContext(e, inputs, results, &attrs, needs_grad), g);
  if (out.size() != inputs.size()) {
    throw Error(detail::str_cat(e.def.name, ": the backward returned ", out.size(),
                                " gradients for ", inputs.size(), " inputs"));
  }
  return out;
}

}  // namespace kiln::ops
