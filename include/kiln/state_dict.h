// StateDict: tensors by name, in insertion order (PyTorch's OrderedDict of a
// state_dict). Modules and optimizers produce and load them; safetensors files
// hold them.
//
//   kiln::StateDict sd = net.state_dict();
//   sd.at("fc.weight").sizes();            // [10, 16]
//   for (const auto& [name, tensor] : sd) std::cout << name << "\n";
//   kiln::save_safetensors("net.safetensors", sd);
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kiln/tensor.h"

namespace kiln {

class StateDict {
 public:
  using Entry = std::pair<std::string, Tensor>;

  // Adds name at the end, or replaces its tensor in place when it exists.
  void set(std::string name, Tensor tensor);
  bool contains(std::string_view name) const;
  // ValueError naming the key (and the dict's size) when it is absent.
  const Tensor& at(std::string_view name) const;
  // Null when absent.
  const Tensor* find(std::string_view name) const;
  // Removes name; returns whether it was there.
  bool erase(std::string_view name);

  size_t size() const noexcept { return entries_.size(); }
  bool empty() const noexcept { return entries_.empty(); }
  std::vector<std::string> keys() const;
  auto begin() const noexcept { return entries_.begin(); }
  auto end() const noexcept { return entries_.end(); }

 private:
  std::vector<Entry> entries_;
  std::unordered_map<std::string, size_t> index_;
};

}  // namespace kiln
