// nn::Module: registration, recursive listings, modes, in-place conversion,
// state dicts and printing.
#include "kiln/nn/module.h"

#include <cxxabi.h>

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <sstream>
#include <typeinfo>
#include <unordered_set>

#include "kiln/autograd.h"
#include "kiln/ops/factory.h"
#include "nn/module_state.h"
#include "ops/tracing.h"

namespace kiln::nn {

namespace {

// "kiln::nn::Linear" -> "Linear", "(anonymous namespace)::Net" -> "Net"; the
// qualifiers of template arguments stay.
std::string strip_namespaces(const std::string& qualified) {
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i < qualified.size(); ++i) {
    const char c = qualified[i];
    if (c == '<' || c == '(') ++depth;
    if (c == '>' || c == ')') --depth;
    if (depth == 0 && c == ':' && i + 1 < qualified.size() && qualified[i + 1] == ':') {
      start = i + 2;
      ++i;
    }
  }
  return qualified.substr(start);
}

std::string demangle(const char* mangled) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> out(
      abi::__cxa_demangle(mangled, nullptr, nullptr, &status), std::free);
  return status == 0 && out ? std::string(out.get()) : std::string(mangled);
}

std::string join_name(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

std::string quoted_list(const std::vector<std::string>& keys) {
  std::string out;
  for (size_t i = 0; i < keys.size(); ++i) out += (i ? ", \"" : "\"") + keys[i] + "\"";
  return out;
}

// Gives t's TensorImpl the converted data, so every handle on it sees the change.
void convert_tensor(const Tensor& t, std::optional<Device> device, std::optional<DType> dtype) {
  Tensor converted = t.detach();
  if (device) converted = converted.to(*device);
  if (dtype && is_floating(t.dtype())) converted = converted.to(*dtype);
  if (converted.storage() == t.storage() && converted.dtype() == t.dtype()) return;
  converted = converted.contiguous();
  TensorImpl& impl = t.impl();
  impl.storage = converted.storage();
  impl.sizes = converted.sizes();
  impl.strides = converted.strides();
  impl.offset = converted.storage_offset();
  impl.dtype = converted.dtype();
  impl.view_base = nullptr;  // the new storage is its own
  impl.view_version = 0;
}

// Every live module, for internal::find_slots: a module registers itself
// when made and leaves when destroyed.
std::mutex g_modules_mutex;
std::unordered_set<const Module*> g_modules;

}  // namespace

namespace internal {

struct ModuleAccess {
  // Fills out[i] for each wanted[i] that one of m's slots holds.
  static void find(const Module& m, const std::unordered_map<const TensorImpl*, size_t>& wanted,
                   std::vector<std::optional<SlotRef>>& out) {
    for (const auto* list : {&m.parameters_, &m.buffers_}) {
      for (const auto& s : *list) {
        if (!s.slot->defined()) continue;
        const auto it = wanted.find(s.slot->impl_ptr().get());
        if (it == wanted.end() || out[it->second]) continue;
        out[it->second] =
            SlotRef{m.state_, s.slot,
                    kiln::detail::str_cat(list == &m.parameters_ ? "parameter '" : "buffer '",
                                          s.name, "' of a ", m.name())};
      }
    }
  }
};

std::vector<std::optional<SlotRef>> find_slots(const TensorList& tensors) {
  std::unordered_map<const TensorImpl*, size_t> wanted;
  for (size_t i = 0; i < tensors.size(); ++i)
    if (tensors[i].defined()) wanted.emplace(tensors[i].impl_ptr().get(), i);
  std::vector<std::optional<SlotRef>> out(tensors.size());
  if (wanted.empty()) return out;
  std::lock_guard lock(g_modules_mutex);
  for (const Module* m : g_modules) ModuleAccess::find(*m, wanted, out);
  return out;
}

}  // namespace internal

Module::Module() : state_(std::make_shared<internal::ModuleState>()) {
  std::lock_guard lock(g_modules_mutex);
  g_modules.insert(this);
}

Module::~Module() {
  state_->alive = false;
  std::lock_guard lock(g_modules_mutex);
  g_modules.erase(this);
}

std::string type_name(const std::type_info& type) {
  return strip_namespaces(demangle(type.name()));
}

std::string Module::name() const { return type_name(typeid(*this)); }

// --- registration ---------------------------------------------------------------

void Module::check_new_name(const std::string& name, std::string_view what) const {
  const std::string where = detail::str_cat(what, ": ", this->name());
  if (name.empty()) throw ValueError(where + ": the name must not be empty");
  if (name.find('.') != std::string::npos) {
    throw ValueError(where + ": the name \"" + name + "\" must not contain '.'");
  }
  auto taken = [&](const auto& slots) {
    for (const auto& s : slots)
      if (s.name == name) return true;
    return false;
  };
  if (taken(parameters_) || taken(buffers_) || taken(children_)) {
    throw ValueError(where + ": the name \"" + name + "\" is already registered");
  }
}

Tensor& Module::register_parameter(std::string name, Tensor& slot, bool requires_grad) {
  check_new_name(name, "register_parameter");
  if (slot.defined()) {
    if (!slot.is_leaf()) slot = slot.detach();
    slot.requires_grad_(requires_grad);
  }
  parameters_.push_back({std::move(name), &slot, true});
  return slot;
}

Tensor& Module::register_buffer(std::string name, Tensor& slot, bool persistent) {
  check_new_name(name, "register_buffer");
  buffers_.push_back({std::move(name), &slot, persistent});
  return slot;
}

Module& Module::checked_deref(const std::string& name, Module* child) {
  if (!child) throw ValueError("register_module: the module \"" + name + "\" is null");
  return *child;
}

void Module::register_child(std::string name, Module& child, std::shared_ptr<Module> owned) {
  check_new_name(name, "register_module");
  if (&child == this) {
    throw ValueError("register_module: " + this->name() + " can't be its own child \"" + name +
                     "\"");
  }
  children_.push_back({std::move(name), &child, std::move(owned)});
}

// --- listings -----------------------------------------------------------------------

std::vector<std::pair<std::string, Module*>> Module::named_modules() const {
  std::vector<std::pair<std::string, Module*>> out;
  std::unordered_set<const Module*> seen;
  // Depth first, each module before its children, as PyTorch's named_modules.
  auto visit = [&](auto& self, const Module& m, const std::string& prefix) -> void {
    if (!seen.insert(&m).second) return;
    out.emplace_back(prefix, const_cast<Module*>(&m));
    for (const auto& c : m.children_) self(self, *c.module, join_name(prefix, c.name));
  };
  visit(visit, *this, "");
  return out;
}

std::vector<Module*> Module::modules() const {
  std::vector<Module*> out;
  for (auto& [name, m] : named_modules()) out.push_back(m);
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_children() const {
  std::vector<std::pair<std::string, Module*>> out;
  std::unordered_set<const Module*> seen;
  for (const auto& c : children_)
    if (seen.insert(c.module).second) out.emplace_back(c.name, c.module);
  return out;
}

std::vector<Module*> Module::children() const {
  std::vector<Module*> out;
  for (auto& [name, m] : named_children()) out.push_back(m);
  return out;
}

namespace {

// The defined tensors of slots(m) over this module (or its whole tree), each
// TensorImpl once.
template <typename Slots>
std::vector<std::pair<std::string, Tensor>> named_tensors(
    const std::vector<std::pair<std::string, Module*>>& modules, Slots slots) {
  std::vector<std::pair<std::string, Tensor>> out;
  std::unordered_set<const TensorImpl*> seen;
  for (const auto& [prefix, m] : modules) {
    for (const auto& [name, slot] : slots(*m)) {
      if (!slot->defined() || !seen.insert(&slot->impl()).second) continue;
      out.emplace_back(join_name(prefix, name), *slot);
    }
  }
  return out;
}

TensorList values_of(const std::vector<std::pair<std::string, Tensor>>& named) {
  TensorList out;
  out.reserve(named.size());
  for (const auto& [name, t] : named) out.push_back(t);
  return out;
}

}  // namespace

std::vector<std::pair<std::string, Tensor>> Module::named_parameters(bool recurse) const {
  auto modules =
      recurse ? named_modules()
              : std::vector<std::pair<std::string, Module*>>{{"", const_cast<Module*>(this)}};
  return named_tensors(modules, [](const Module& m) {
    std::vector<std::pair<std::string, Tensor*>> slots;
    for (const auto& p : m.parameters_) slots.emplace_back(p.name, p.slot);
    return slots;
  });
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers(bool recurse) const {
  auto modules =
      recurse ? named_modules()
              : std::vector<std::pair<std::string, Module*>>{{"", const_cast<Module*>(this)}};
  return named_tensors(modules, [](const Module& m) {
    std::vector<std::pair<std::string, Tensor*>> slots;
    for (const auto& b : m.buffers_) slots.emplace_back(b.name, b.slot);
    return slots;
  });
}

TensorList Module::parameters(bool recurse) const { return values_of(named_parameters(recurse)); }
TensorList Module::buffers(bool recurse) const { return values_of(named_buffers(recurse)); }

// --- modes and conversion -------------------------------------------------------------

void Module::train(bool on) {
  state_->training = on;
  for (const auto& c : children_) c.module->train(on);
}

bool Module::is_training() const {
  if (ops::TraceRecorder* tracer = ops::TraceRecorder::active()) {
    // The graph depends on the flag: guarded by the module's state, which
    // the guard shares (the module may be gone before the graph).
    std::shared_ptr<const internal::ModuleState> state = state_;
    tracer->add_host_guard(
        detail::str_cat("the training flag of a ", name()),
        [state] { return state->training ? 1.0 : 0.0; }, state.get(),
        /*flag=*/true);
  }
  return state_->training;
}

void Module::convert(std::optional<Device> device, std::optional<DType> dtype) {
  if (dtype && !is_floating(*dtype)) {
    throw DTypeError(detail::str_cat("to: ", name(),
                                     " can only be converted to a floating dtype, got ", *dtype));
  }
  NoGradGuard no_grad;
  TensorList tensors = parameters();
  for (const Tensor& b : buffers()) tensors.push_back(b);
  for (const Tensor& t : tensors) {
    convert_tensor(t, device, dtype);
    const Tensor grad = t.grad();
    if (grad.defined()) convert_tensor(grad, device, dtype);
  }
}

void Module::to(Device device) { convert(device, std::nullopt); }
void Module::to(DType dtype) { convert(std::nullopt, dtype); }
void Module::to(Device device, DType dtype) { convert(device, dtype); }

void Module::zero_grad(bool set_to_none) {
  NoGradGuard no_grad;
  for (const Tensor& p : parameters()) {
    Tensor grad = p.grad();
    if (!grad.defined()) continue;
    if (set_to_none) {
      p.set_grad({});
    } else if (!grad.is_leaf()) {
      p.set_grad(zeros_like(grad));  // a gradient with history (create_graph) is replaced
    } else {
      grad.zero_();
    }
  }
}

void Module::requires_grad_(bool requires_grad) {
  for (const Tensor& p : parameters()) p.requires_grad_(requires_grad);
}

void Module::apply(const std::function<void(Module&)>& fn) {
  for (Module* child : children()) child->apply(fn);
  fn(*this);
}

// --- state dicts -------------------------------------------------------------------------

void Module::collect_state(const std::string& prefix,
                           std::vector<std::pair<std::string, Tensor*>>& out) const {
  for (const auto& p : parameters_)
    if (p.slot->defined()) out.emplace_back(join_name(prefix, p.name), p.slot);
  for (const auto& b : buffers_)
    if (b.persistent && b.slot->defined()) out.emplace_back(join_name(prefix, b.name), b.slot);
  for (const auto& c : children_) c.module->collect_state(join_name(prefix, c.name), out);
}

StateDict Module::state_dict() const {
  std::vector<std::pair<std::string, Tensor*>> slots;
  collect_state("", slots);
  StateDict dict;
  for (const auto& [name, slot] : slots) dict.set(name, slot->detach());
  return dict;
}

LoadResult Module::load_state_dict(const StateDict& dict, bool strict) {
  std::vector<std::pair<std::string, Tensor*>> slots;
  collect_state("", slots);
  LoadResult result;
  std::vector<std::string> mismatches;
  std::unordered_set<std::string> expected;
  for (const auto& [name, slot] : slots) {
    expected.insert(name);
    const Tensor* source = dict.find(name);
    if (!source) {
      result.missing_keys.push_back(name);
    } else if (!source->defined()) {
      mismatches.push_back(name + ": an undefined tensor in the dict");
    } else if (source->is_meta() && !slot->is_meta()) {
      mismatches.push_back(name + ": a meta tensor in the dict, which has no values to load");
    } else if (source->sizes() != slot->sizes()) {
      mismatches.push_back(detail::str_cat("size mismatch for ", name, ": shape ", source->sizes(),
                                           " in the dict, ", slot->sizes(), " in the module"));
    }
  }
  for (const auto& [name, t] : dict)
    if (!expected.count(name)) result.unexpected_keys.push_back(name);

  const bool unmatched = !result.missing_keys.empty() || !result.unexpected_keys.empty();
  if (!mismatches.empty() || (strict && unmatched)) {
    std::string message = "load_state_dict: error(s) loading a state dict into " + name();
    if (strict && !result.missing_keys.empty())
      message += "; missing keys: " + quoted_list(result.missing_keys);
    if (strict && !result.unexpected_keys.empty())
      message += "; unexpected keys: " + quoted_list(result.unexpected_keys);
    for (const auto& m : mismatches) message += "; " + m;
    throw ValueError(message);
  }
  NoGradGuard no_grad;
  for (const auto& [name, slot] : slots) {
    const Tensor* source = dict.find(name);
    if (source) slot->copy_(*source);
  }
  return result;
}

// --- printing -------------------------------------------------------------------------

std::string Module::repr() const {
  std::vector<std::string> lines;
  const std::string extra = extra_repr();
  if (!extra.empty()) {
    std::istringstream in(extra);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
  }
  for (const auto& c : children_)
    lines.push_back("(" + c.name + "): " + repr::indent_tail(c.module->repr()));
  std::string out = name() + "(";
  if (children_.empty() && lines.size() == 1) return out + lines[0] + ")";
  if (!lines.empty()) {
    for (const auto& line : lines) out += "\n  " + line;
    out += "\n";
  }
  return out + ")";
}

std::ostream& operator<<(std::ostream& os, const Module& module) { return os << module.repr(); }

namespace repr {

std::string number(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  // The shortest digits that read back exactly, laid out as Python does: plain
  // notation for exponents in [-4, 16), scientific with two exponent digits otherwise.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, value, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  const size_t e = sci.find('e');
  const int exponent = std::stoi(sci.substr(e + 1));
  std::string digits = sci.substr(0, e);
  const bool negative = digits[0] == '-';
  if (negative) digits.erase(0, 1);
  if (digits.size() > 1) digits.erase(1, 1);  // drop the decimal point
  std::string out;
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) {
      out = "0." + std::string(-exponent - 1, '0') + digits;
    } else if (static_cast<size_t>(exponent) + 1 >= digits.size()) {
      out = digits + std::string(exponent + 1 - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, exponent + 1) + "." + digits.substr(exponent + 1);
    }
  } else {
    out = digits.substr(0, 1) + (digits.size() > 1 ? "." + digits.substr(1) : "") + "e" +
          (exponent < 0 ? "-" : "+") + (std::abs(exponent) < 10 ? "0" : "") +
          std::to_string(std::abs(exponent));
  }
  return negative ? "-" + out : out;
}

std::string boolean(bool value) { return value ? "True" : "False"; }

std::string indent_tail(const std::string& text) {
  std::string out;
  for (char c : text) {
    out += c;
    if (c == '\n') out += "  ";
  }
  return out;
}

std::string tuple(const std::vector<int64_t>& values) {
  std::string out = "(";
  for (size_t i = 0; i < values.size(); ++i) out += (i ? ", " : "") + std::to_string(values[i]);
  return out + (values.size() == 1 ? ",)" : ")");
}

}  // namespace repr

}  // namespace kiln::nn
