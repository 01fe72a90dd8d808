// Containers of modules: Sequential (a chain), ModuleList, ModuleDict.
//
//   kiln::nn::Sequential mlp(std::make_shared<kiln::nn::Linear>(784, 128),
//                            std::make_shared<kiln::nn::ReLU>());
//   mlp.emplace_back<kiln::nn::Linear>(128, 10);      // built in place, owned
//   auto logits = mlp(x);                               // children "0", "1", "2"
//   mlp.at<kiln::nn::Linear>(2).weight;                 // typed access
//
//   kiln::nn::ModuleDict heads;
//   heads.emplace<kiln::nn::Linear>("cls", 128, 10);
//   heads["cls"];                                       // a Module&
//
// A container owns what it was given as std::shared_ptr (or built by emplace);
// a module given by reference is a member of someone else and must outlive it.
#pragma once

#include <concepts>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <typeinfo>
#include <utility>
#include <vector>

#include "kiln/nn/module.h"
#include "kiln/tensor.h"

namespace kiln::nn {

// A module Sequential can chain: Tensor forward(const Tensor&).
template <typename M>
concept TensorModule = std::derived_from<M, Module> && requires(M& m, const Tensor& x) {
  { m.forward(x) } -> std::convertible_to<Tensor>;
};

namespace container_detail {
// ValueError naming the container when a module is not of type M.
[[noreturn]] void throw_wrong_type(const char* container, const std::string& key,
                                   const Module& found, const std::type_info& wanted);
template <typename M>
M& checked_cast(const char* container, const std::string& key, Module& m) {
  M* typed = dynamic_cast<M*>(&m);
  if (!typed) throw_wrong_type(container, key, m, typeid(M));
  return *typed;
}
}  // namespace container_detail

// Calls its modules in order, each on the previous one's output.
class Sequential : public Module {
 public:
  Sequential() = default;
  template <TensorModule... M>
  explicit Sequential(std::shared_ptr<M>... modules) {
    (push_back(std::move(modules)), ...);
  }

  template <TensorModule M>
  M& push_back(M& module) {
    append(module, nullptr, [&module](const Tensor& x) -> Tensor { return module.forward(x); });
    return module;
  }
  template <TensorModule M>
  M& push_back(std::shared_ptr<M> module) {
    M& ref = *module;
    append(ref, std::move(module), [&ref](const Tensor& x) -> Tensor { return ref.forward(x); });
    return ref;
  }
  template <TensorModule M, typename... Args>
  M& emplace_back(Args&&... args) {
    return push_back(std::make_shared<M>(std::forward<Args>(args)...));
  }

  Tensor forward(const Tensor& input);
  Tensor operator()(const Tensor& input) { return forward(input); }

  size_t size() const noexcept { return layers_.size(); }
  bool empty() const noexcept { return layers_.empty(); }
  // IndexError when i >= size().
  Module& operator[](size_t i) const;
  // The module at i as M; ValueError when it is another type.
  template <typename M>
  M& at(size_t i) const {
    return container_detail::checked_cast<M>("Sequential", std::to_string(i), (*this)[i]);
  }

 private:
  struct Layer {
    Module* module;
    std::function<Tensor(const Tensor&)> call;
  };
  void append(Module& module, std::shared_ptr<Module> owned,
              std::function<Tensor(const Tensor&)> call);
  std::vector<Layer> layers_;
};

// Holds modules under the names "0", "1", ... with no forward of its own.
class ModuleList : public Module {
 public:
  ModuleList() = default;
  template <std::derived_from<Module>... M>
  explicit ModuleList(std::shared_ptr<M>... modules) {
    (push_back(std::move(modules)), ...);
  }

  template <std::derived_from<Module> M>
  M& push_back(M& module) {
    modules_.push_back(&register_module(std::to_string(modules_.size()), module));
    return module;
  }
  template <std::derived_from<Module> M>
  M& push_back(std::shared_ptr<M> module) {
    M& ref = *register_module(std::to_string(modules_.size()), std::move(module));
    modules_.push_back(&ref);
    return ref;
  }
  template <std::derived_from<Module> M, typename... Args>
  M& emplace_back(Args&&... args) {
    return push_back(std::make_shared<M>(std::forward<Args>(args)...));
  }

  size_t size() const noexcept { return modules_.size(); }
  bool empty() const noexcept { return modules_.empty(); }
  Module& operator[](size_t i) const;
  template <typename M>
  M& at(size_t i) const {
    return container_detail::checked_cast<M>("ModuleList", std::to_string(i), (*this)[i]);
  }
  // for (nn::Module* m : list)
  auto begin() const noexcept { return modules_.begin(); }
  auto end() const noexcept { return modules_.end(); }
  // Runs of modules that print the same are printed once, as PyTorch does:
  // "(0-11): 12 x Block(...)".
  std::string repr() const override;

 private:
  std::vector<Module*> modules_;
};

// Modules by name, in insertion order.
class ModuleDict : public Module {
 public:
  template <std::derived_from<Module> M>
  M& insert(std::string name, M& module) {
    register_module(name, module);
    entries_.emplace_back(std::move(name), &module);
    return module;
  }
  template <std::derived_from<Module> M>
  M& insert(std::string name, std::shared_ptr<M> module) {
    M& ref = *register_module(name, std::move(module));
    entries_.emplace_back(std::move(name), &ref);
    return ref;
  }
  template <std::derived_from<Module> M, typename... Args>
  M& emplace(std::string name, Args&&... args) {
    return insert(std::move(name), std::make_shared<M>(std::forward<Args>(args)...));
  }

  size_t size() const noexcept { return entries_.size(); }
  bool empty() const noexcept { return entries_.empty(); }
  bool contains(std::string_view name) const noexcept;
  std::vector<std::string> keys() const;
  // ValueError naming the key and the keys present when it is absent.
  Module& operator[](std::string_view name) const;
  template <typename M>
  M& at(std::string_view name) const {
    return container_detail::checked_cast<M>("ModuleDict", std::string(name), (*this)[name]);
  }
  // for (const auto& [name, module] : dict)
  auto begin() const noexcept { return entries_.begin(); }
  auto end() const noexcept { return entries_.end(); }

 private:
  std::vector<std::pair<std::string, Module*>> entries_;
};

}  // namespace kiln::nn
