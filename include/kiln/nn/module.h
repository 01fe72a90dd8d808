// nn::Module: the base of every layer and model. Parameters, buffers and
// submodules are plain members that the constructor registers by name.
//
//   struct Net : kiln::nn::Module {
//     kiln::nn::Linear fc1{784, 128}, fc2{128, 10};
//     kiln::Tensor scale = kiln::ones({1});
//     Net() {
//       register_module("fc1", fc1);
//       register_module("fc2", fc2);
//       register_parameter("scale", scale);
//     }
//     kiln::Tensor forward(const kiln::Tensor& x) { return fc2(kiln::relu(fc1(x))) * scale; }
//   };
//
//   Net net;
//   net.named_parameters();        // fc1.weight, fc1.bias, fc2.weight, fc2.bias, scale
//   net.to(kiln::kFloat64);        // converts in place: optimizers keep working
//   net.eval();                    // recursive
//   auto sd = net.state_dict();    // detached tensors under dotted names
//   std::cout << net;              // Net(\n  (fc1): Linear(in_features=784, ...
//
// Registration keeps pointers to the members, so a Module can be neither copied
// nor moved; reassigning a registered member (net.scale = ...) is seen by the
// registry. Submodules built at run time are held by std::shared_ptr.
#pragma once

#include <concepts>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <typeinfo>
#include <utility>
#include <vector>

#include "kiln/device.h"
#include "kiln/dtype.h"
#include "kiln/state_dict.h"
#include "kiln/tensor.h"

namespace kiln::nn {

namespace internal {
struct ModuleState;
struct ModuleAccess;
}  // namespace internal

// What load_state_dict(..., strict = false) could not match.
struct LoadResult {
  std::vector<std::string> missing_keys;     // expected by the module, absent from the dict
  std::vector<std::string> unexpected_keys;  // in the dict, unknown to the module
};

class Module {
 public:
  Module();
  virtual ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  Module(Module&&) = delete;
  Module& operator=(Module&&) = delete;

  // The type's name for printing and errors ("Linear", "Net"): the demangled
  // class name without its namespaces unless a subclass says otherwise.
  virtual std::string name() const;

  // --- registration -----------------------------------------------------------
  // slot is a member of this module; the registry points at it, so it must keep
  // its address (size a std::vector of slots before registering). An undefined
  // slot (a layer built without bias) is registered but skipped by every
  // listing. A tensor with history is detached first: parameters are leaves.
  Tensor& register_parameter(std::string name, Tensor& slot, bool requires_grad = true);
  // State that is not trained (running statistics). Non-persistent buffers are
  // left out of state_dict.
  Tensor& register_buffer(std::string name, Tensor& slot, bool persistent = true);
  // A member submodule.
  template <std::derived_from<Module> M>
  M& register_module(std::string name, M& child) {
    register_child(std::move(name), child, nullptr);
    return child;
  }
  // A submodule this module owns (containers, models built at run time).
  template <std::derived_from<Module> M>
  std::shared_ptr<M> register_module(std::string name, std::shared_ptr<M> child) {
    Module& ref = checked_deref(name, child.get());
    register_child(std::move(name), ref, child);
    return child;
  }

  // --- listings (recursive unless recurse is false; registration order, depth
  // first; a tensor or module reachable twice is listed once) ------------------
  TensorList parameters(bool recurse = true) const;
  std::vector<std::pair<std::string, Tensor>> named_parameters(bool recurse = true) const;
  TensorList buffers(bool recurse = true) const;
  std::vector<std::pair<std::string, Tensor>> named_buffers(bool recurse = true) const;
  std::vector<Module*> children() const;
  std::vector<std::pair<std::string, Module*>> named_children() const;
  // This module first, then every descendant; the name of this module is "".
  std::vector<Module*> modules() const;
  std::vector<std::pair<std::string, Module*>> named_modules() const;

  // --- modes ------------------------------------------------------------------
  // Sets the training flag of this module and every descendant (Dropout and
  // BatchNorm read it).
  virtual void train(bool on = true);
  void eval() { train(false); }
  // The training flag. Inside kiln::compile, a read of it is a guard: a graph
  // traced in one mode never serves a call in the other (docs/compile.md).
  bool is_training() const;

  // --- conversion -------------------------------------------------------------
  // Moves every parameter and buffer to device and/or converts the floating ones
  // to dtype (a floating dtype), in place: each tensor keeps its identity and
  // requires_grad, so tensors handed out earlier (to an optimizer) see the
  // change. Gradients are converted with them.
  void to(Device device);
  void to(DType dtype);
  void to(Device device, DType dtype);

  // Clears every parameter's gradient (set_to_none) or fills it with zeros.
  void zero_grad(bool set_to_none = true);
  // Turns gradient recording on or off for every parameter (freezing a part of a model).
  void requires_grad_(bool requires_grad = true);
  // Calls fn on every descendant, children before parents, then on this module
  // (custom initialization: net.apply([](nn::Module& m) { ... })).
  void apply(const std::function<void(Module&)>& fn);

  // --- serialization ----------------------------------------------------------
  // Parameters and persistent buffers, detached (sharing data), under dotted
  // names; a module's own tensors come before its children's.
  StateDict state_dict() const;
  // Copies the dict's values into the registered tensors (converting dtypes).
  // strict: any missing, unexpected or wrongly shaped key is a ValueError that
  // lists all of them, and nothing is copied. Not strict: matching keys are
  // copied and the others returned; a wrong shape still throws.
  LoadResult load_state_dict(const StateDict& dict, bool strict = true);

  // --- printing ---------------------------------------------------------------
  // What goes between the parentheses of this module's line, as PyTorch's
  // extra_repr ("in_features=16, out_features=10, bias=True").
  virtual std::string extra_repr() const { return {}; }
  // The PyTorch-style tree: name(extra_repr) or name(\n  (child): ...\n).
  virtual std::string repr() const;

 private:
  friend struct internal::ModuleAccess;
  struct TensorSlot {
    std::string name;
    Tensor* slot;
    bool persistent;  // buffers only
  };
  struct ChildSlot {
    std::string name;
    Module* module;
    std::shared_ptr<Module> owned;  // null for members
  };

  static Module& checked_deref(const std::string& name, Module* child);
  void register_child(std::string name, Module& child, std::shared_ptr<Module> owned);
  void check_new_name(const std::string& name, std::string_view what) const;
  void collect_state(const std::string& prefix,
                     std::vector<std::pair<std::string, Tensor*>>& out) const;
  void convert(std::optional<Device> device, std::optional<DType> dtype);

  std::vector<TensorSlot> parameters_;
  std::vector<TensorSlot> buffers_;
  std::vector<ChildSlot> children_;
  std::shared_ptr<internal::ModuleState> state_;
};

// A class's name without its namespaces ("Linear" for kiln::nn::Linear).
std::string type_name(const std::type_info& type);

// Prints module.repr().
std::ostream& operator<<(std::ostream& os, const Module& module);

// Formatting helpers for extra_repr, matching how Python prints the values.
namespace repr {
// Python's repr of a float: 0.1, 1e-05, 1.0.
std::string number(double value);
// "True" / "False".
std::string boolean(bool value);
// A Python tuple: (3, 3), (3,).
std::string tuple(const std::vector<int64_t>& values);
// text with every line after the first indented by two spaces (a child's repr
// inside its parent's).
std::string indent_tail(const std::string& text);
}  // namespace repr

}  // namespace kiln::nn
