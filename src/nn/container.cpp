// Sequential, ModuleList, ModuleDict.
#include "kiln/nn/container.h"

namespace kiln::nn {

namespace container_detail {

void throw_wrong_type(const char* container, const std::string& key, const Module& found,
                      const std::type_info& wanted) {
  throw ValueError(kiln::detail::str_cat(container, ": the module at ", key, " is a ", found.name(),
                                         ", not a ", type_name(wanted)));
}

}  // namespace container_detail

// --- Sequential ------------------------------------------------------------------------

void Sequential::append(Module& module, std::shared_ptr<Module> owned,
                        std::function<Tensor(const Tensor&)> call) {
  const std::string name = std::to_string(layers_.size());
  if (owned) {
    register_module(name, std::move(owned));
  } else {
    register_module(name, module);
  }
  layers_.push_back({&module, std::move(call)});
}

Tensor Sequential::forward(const Tensor& input) {
  Tensor x = input;
  for (const Layer& layer : layers_) x = layer.call(x);
  return x;
}

Module& Sequential::operator[](size_t i) const {
  KILN_CHECK(i < layers_.size(), IndexError, "Sequential: index ", i, " is out of range for ",
             layers_.size(), " modules");
  return *layers_[i].module;
}

// --- ModuleList ------------------------------------------------------------------------

Module& ModuleList::operator[](size_t i) const {
  KILN_CHECK(i < modules_.size(), IndexError, "ModuleList: index ", i, " is out of range for ",
             modules_.size(), " modules");
  return *modules_[i];
}

std::string ModuleList::repr() const {
  if (modules_.empty()) return name() + "()";
  std::string out = name() + "(";
  for (size_t first = 0; first < modules_.size();) {
    const std::string text = modules_[first]->repr();
    size_t last = first;
    while (last + 1 < modules_.size() && modules_[last + 1]->repr() == text) ++last;
    std::string line = last > first ? detail::str_cat("(", first, "-", last, "): ",
                                                      last - first + 1, " x ", text)
                                    : detail::str_cat("(", first, "): ", text);
    out += "\n  " + repr::indent_tail(line);
    first = last + 1;
  }
  return out + "\n)";
}

// --- ModuleDict ------------------------------------------------------------------------

bool ModuleDict::contains(std::string_view name) const noexcept {
  for (const auto& [key, m] : entries_)
    if (key == name) return true;
  return false;
}

std::vector<std::string> ModuleDict::keys() const {
  std::vector<std::string> out;
  for (const auto& [key, m] : entries_) out.push_back(key);
  return out;
}

Module& ModuleDict::operator[](std::string_view name) const {
  for (const auto& [key, m] : entries_)
    if (key == name) return *m;
  throw ValueError(
      kiln::detail::str_cat("ModuleDict: no module named \"", name, "\"; keys: ", keys()));
}

}  // namespace kiln::nn
