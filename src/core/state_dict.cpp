#include "kiln/state_dict.h"

namespace kiln {

void StateDict::set(std::string name, Tensor tensor) {
  auto it = index_.find(name);
  if (it != index_.end()) {
    entries_[it->second].second = std::move(tensor);
    return;
  }
  index_.emplace(name, entries_.size());
  entries_.emplace_back(std::move(name), std::move(tensor));
}

bool StateDict::contains(std::string_view name) const { return find(name) != nullptr; }

const Tensor* StateDict::find(std::string_view name) const {
  auto it = index_.find(std::string(name));
  return it == index_.end() ? nullptr : &entries_[it->second].second;
}

const Tensor& StateDict::at(std::string_view name) const {
  const Tensor* t = find(name);
  if (!t) {
    throw ValueError(detail::str_cat("state dict: no tensor named '", name, "' among its ",
                                     entries_.size(), " entries"));
  }
  return *t;
}

bool StateDict::erase(std::string_view name) {
  auto it = index_.find(std::string(name));
  if (it == index_.end()) return false;
  const size_t pos = it->second;
  index_.erase(it);
  entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(pos));
  for (auto& [key, i] : index_)
    if (i > pos) --i;
  return true;
}

std::vector<std::string> StateDict::keys() const {
  std::vector<std::string> names;
  names.reserve(entries_.size());
  for (const auto& e : entries_) names.push_back(e.first);
  return names;
}

}  // namespace kiln
