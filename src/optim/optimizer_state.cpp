// Optimizer::state_dict and load_state_dict: PyTorch's nested optimizer state,
// flattened into named tensors (the layout is in kiln/optim.h).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <optional>
#include <string>

#include "kiln/ops/factory.h"
#include "kiln/optim.h"
#include "optim/options.h"

namespace kiln::optim {
namespace {

constexpr std::string_view kStatePrefix = "state.";
constexpr std::string_view kGroupPrefix = "param_groups.";

// "<number>.<rest>" -> (number, rest); nullopt when malformed.
std::optional<std::pair<int64_t, std::string>> split_index(std::string_view key) {
  const size_t dot = key.find('.');
  if (dot == std::string_view::npos || dot == 0 || dot + 1 == key.size()) return std::nullopt;
  int64_t index = 0;
  const auto [end, ec] = std::from_chars(key.data(), key.data() + dot, index);
  if (ec != std::errc() || end != key.data() + dot || index < 0) return std::nullopt;
  return std::pair{index, std::string(key.substr(dot + 1))};
}

std::string group_key(size_t group, std::string_view name) {
  return detail::str_cat(kGroupPrefix, group, ".", name);
}

std::string state_key(int64_t param, std::string_view name) {
  return detail::str_cat(kStatePrefix, param, ".", name);
}

// The keys of a state dict by group and by parameter, the prefix and the index cut off.
struct SortedKeys {
  std::map<int64_t, StateDict> groups;
  std::map<int64_t, StateDict> state;
};

}  // namespace

StateDict Optimizer::state_dict() const {
  StateDict sd;
  size_t index = 0;
  for (const auto& group_state : state_) {
    for (const ParamState& st : group_state) {
      const auto prefix = detail::str_cat(kStatePrefix, index++, ".");
      if (st.empty()) continue;
      // float32, PyTorch's dtype for the step count.
      if (counts_steps()) {
        const Tensor step = st.step_count.defined()
                                ? st.step_count.to(Device::cpu()).clone()
                                : scalar_tensor(static_cast<double>(st.step), {.dtype = kFloat32});
        sd.set(prefix + "step", step);
      }
      for (const auto& [name, tensor] : st.tensors) sd.set(prefix + name, tensor);
    }
  }
  index = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (const auto& [name, value] : groups_[g].options)
      sd.set(group_key(g, name), scalar_tensor(value, {.dtype = kFloat64}));
    std::vector<int64_t> ids(groups_[g].params.size());
    for (auto& id : ids) id = static_cast<int64_t>(index++);
    sd.set(group_key(g, "params"), from_vector(ids));
  }
  return sd;
}

namespace {

SortedKeys sort_keys(const StateDict& sd, const std::string& where) {
  SortedKeys sorted;
  for (const auto& [key, tensor] : sd) {
    std::string_view rest = key;
    std::map<int64_t, StateDict>* target = nullptr;
    if (rest.starts_with(kStatePrefix)) {
      rest.remove_prefix(kStatePrefix.size());
      target = &sorted.state;
    } else if (rest.starts_with(kGroupPrefix)) {
      rest.remove_prefix(kGroupPrefix.size());
      target = &sorted.groups;
    }
    const auto parts = target ? split_index(rest) : std::nullopt;
    KILN_CHECK(parts, ValueError, where, ": unexpected key '", key,
               "'; expected state.<param>.<name> or param_groups.<group>.<name>");
    (*target)[parts->first].set(parts->second, tensor);
  }
  return sorted;
}

double one_value(const Tensor& t, std::string_view key, const std::string& where) {
  KILN_CHECK(t.numel() == 1, ShapeError, where, ": ", key, " must hold one value, got shape ",
             t.sizes());
  return t.item<double>();
}

// A copy on the parameter's device with its dtype, never aliasing the state dict.
Tensor copy_like(const Tensor& src, const Tensor& param) {
  Tensor t = src.to(param.dtype()).to(param.device());
  return t.shares_storage(src) ? t.clone() : t.contiguous();
}

// The parameter indices a group lists (param_groups.<g>.params).
std::vector<int64_t> listed_params(const StateDict& group, size_t g, size_t expected,
                                   const std::string& where) {
  const std::string key = group_key(g, "params");
  const Tensor* ids = group.find("params");
  KILN_CHECK(ids, ValueError, where, ": missing key '", key, "'");
  KILN_CHECK(ids->dim() == 1 && is_integral(ids->dtype()), ValueError, where, ": ", key,
             " must be a 1-dim integer tensor, got ", ids->dtype(), " of shape ", ids->sizes());
  const size_t count = static_cast<size_t>(ids->numel());
  KILN_CHECK(count == expected, ValueError, where, ": ", key, " lists ", count,
             " parameters, the optimizer's group ", g, " has ", expected);
  return ids->to_vector<int64_t>();
}

}  // namespace

GroupOptions Optimizer::load_group_options(const StateDict& group, size_t g) const {
  const std::string where = name_ + ".load_state_dict";
  GroupOptions options;
  for (const auto& [name, tensor] : group) {
    if (name == "params") continue;
    const bool known = name == kInitialLr || find_option(defaults_, name);
    KILN_CHECK(known, ValueError, where, ": unknown option key '", group_key(g, name), "'");
    options.emplace_back(name, one_value(tensor, group_key(g, name), where));
  }
  for (const auto& [name, value] : defaults_) {
    KILN_CHECK(find_option(options, name), ValueError, where, ": missing key '", group_key(g, name),
               "'");
  }
  // The defaults' order, initial_lr last, as add_param_group makes it.
  options = complete_options(options, g);
  check_options(options);
  return options;
}

ParamState Optimizer::load_param_state(const StateDict& entries, int64_t index,
                                       const GroupOptions& options, const Tensor& param) const {
  const std::string where = name_ + ".load_state_dict";
  std::vector<std::string> names = state_names(options);
  if (counts_steps()) names.insert(names.begin(), "step");
  for (const auto& [name, tensor] : entries) {
    const bool known = std::find(names.begin(), names.end(), name) != names.end();
    KILN_CHECK(known, ValueError, where, ": unknown state key '", state_key(index, name), "'");
  }
  ParamState st;
  for (const std::string& name : names) {
    const std::string key = state_key(index, name);
    const Tensor* t = entries.find(name);
    KILN_CHECK(t, ValueError, where, ": missing key '", key, "'");
    if (name == "step") {
      const double step = one_value(*t, key, where);
      KILN_CHECK(step >= 0 && std::floor(step) == step, ValueError, where, ": ", key,
                 " must be a step count, got ", step);
      st.step = static_cast<int64_t>(step);
      continue;
    }
    KILN_CHECK(t->sizes() == param.sizes(), ShapeError, where, ": ", key, " has shape ", t->sizes(),
               ", its parameter has shape ", param.sizes());
    st.tensors.emplace_back(name, copy_like(*t, param));
  }
  return st;
}

void Optimizer::load_state_dict(const StateDict& sd) {
  const std::string where = name_ + ".load_state_dict";
  SortedKeys sorted = sort_keys(sd, where);
  const size_t saved_groups = sorted.groups.empty() ? 0 : sorted.groups.rbegin()->first + 1;
  KILN_CHECK(saved_groups == groups_.size(), ValueError, where, ": the state dict has ",
             saved_groups, " parameter groups, the optimizer has ", groups_.size());

  // Parameter index in the state dict -> (group, position) here.
  std::map<int64_t, std::pair<size_t, size_t>> param_of;
  std::vector<GroupOptions> options(groups_.size());
  for (size_t g = 0; g < groups_.size(); ++g) {
    const StateDict& group = sorted.groups[static_cast<int64_t>(g)];
    const auto ids = listed_params(group, g, groups_[g].params.size(), where);
    for (size_t i = 0; i < ids.size(); ++i) {
      const bool fresh = param_of.emplace(ids[i], std::pair{g, i}).second;
      KILN_CHECK(fresh, ValueError, where, ": parameter index ", ids[i],
                 " appears twice in param_groups");
    }
    options[g] = load_group_options(group, g);
  }

  std::vector<std::vector<ParamState>> state(groups_.size());
  for (size_t g = 0; g < groups_.size(); ++g) state[g].resize(groups_[g].params.size());
  for (const auto& [index, entries] : sorted.state) {
    auto found = param_of.find(index);
    KILN_CHECK(found != param_of.end(), ValueError, where, ": ",
               state_key(index, entries.begin()->first), " belongs to parameter ", index,
               ", which no group of the state dict lists");
    const auto [g, i] = found->second;
    state[g][i] = load_param_state(entries, index, options[g], groups_[g].params[i]);
  }

  // Everything checked: now change the optimizer.
  for (size_t g = 0; g < groups_.size(); ++g) groups_[g].options = std::move(options[g]);
  state_ = std::move(state);
  ++state_epoch_;
}

}  // namespace kiln::optim
