// Optimizer::state_dict and load_state_dict: PyTorch's nested optimizer state,
// flattened into named tensors (the layout is in kiln/optim.h).
#include <charconv>
#include <cmath>
#include <map>
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

// One key of a state dict, sorted by what it describes.
struct StateEntry {
  std::string key;
  std::string name;
  Tensor tensor;
};

// The keys of a state dict, sorted into groups and per-parameter state.
struct SortedKeys {
  std::map<int64_t, std::vector<StateEntry>> groups;  // by group index
  std::map<int64_t, std::vector<StateEntry>> state;   // by parameter index
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
      if (counts_steps())
        sd.set(prefix + "step", scalar_tensor(static_cast<double>(st.step), {.dtype = kFloat32}));
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
    std::map<int64_t, std::vector<StateEntry>>* target = nullptr;
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
    (*target)[parts->first].push_back({key, parts->second, tensor});
  }
  return sorted;
}

double one_value(const StateEntry& entry, const std::string& where) {
  KILN_CHECK(entry.tensor.numel() == 1, ShapeError, where, ": ", entry.key,
             " must hold one value, got shape ", entry.tensor.sizes());
  return entry.tensor.item<double>();
}

// A copy on the parameter's device with its dtype, never aliasing the state dict.
Tensor copy_like(const Tensor& src, const Tensor& param) {
  Tensor t = src.to(param.dtype()).to(param.device());
  return t.shares_storage(src) ? t.clone() : t.contiguous();
}

}  // namespace

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
    const std::vector<StateEntry>& entries = sorted.groups[static_cast<int64_t>(g)];
    const StateEntry* params = nullptr;
    for (const StateEntry& e : entries) {
      if (e.name == "params") {
        params = &e;
      } else if (e.name == kInitialLr || find_option(defaults_, e.name)) {
        options[g].emplace_back(e.name, one_value(e, where));
      } else {
        throw ValueError(detail::str_cat(where, ": unknown option key '", e.key, "'"));
      }
    }
    KILN_CHECK(params, ValueError, where, ": missing key '", group_key(g, "params"), "'");
    const Tensor& ids = params->tensor;
    KILN_CHECK(ids.dim() == 1 && is_integral(ids.dtype()), ValueError, where, ": ", params->key,
               " must be a 1-dim integer tensor, got ", ids.dtype(), " of shape ", ids.sizes());
    const size_t count = static_cast<size_t>(ids.numel());
    KILN_CHECK(count == groups_[g].params.size(), ValueError, where, ": ", params->key, " lists ",
               count, " parameters, the optimizer's group ", g, " has ",
               groups_[g].params.size());
    const auto id_values = ids.to_vector<int64_t>();
    for (size_t i = 0; i < count; ++i) {
      const bool fresh = param_of.emplace(id_values[i], std::pair{g, i}).second;
      KILN_CHECK(fresh, ValueError, where, ": parameter index ", id_values[i], " appears twice in ",
                 "param_groups");
    }
    for (const auto& [name, value] : defaults_) {
      KILN_CHECK(find_option(options[g], name), ValueError, where, ": missing key '",
                 group_key(g, name), "'");
    }
    // The defaults' order, initial_lr last, as complete_options makes it.
    options[g] = complete_options(options[g], g);
    check_options(options[g]);
  }

  std::vector<std::vector<ParamState>> state(groups_.size());
  for (size_t g = 0; g < groups_.size(); ++g) state[g].resize(groups_[g].params.size());
  for (auto& [id, entries] : sorted.state) {
    auto found = param_of.find(id);
    KILN_CHECK(found != param_of.end(), ValueError, where, ": ", entries.front().key,
               " belongs to parameter ", id, ", which no group of the state dict lists");
    const auto [g, i] = found->second;
    const Tensor& param = groups_[g].params[i];
    ParamState& st = state[g][i];
    std::vector<std::string> names = state_names(options[g]);
    for (const StateEntry& e : entries) {
      const bool known = (counts_steps() && e.name == "step") ||
                         std::find(names.begin(), names.end(), e.name) != names.end();
      KILN_CHECK(known, ValueError, where, ": unknown state key '", e.key, "'");
    }
    if (counts_steps()) names.insert(names.begin(), "step");
    for (const std::string& name : names) {
      auto e = std::find_if(entries.begin(), entries.end(),
                            [&](const StateEntry& entry) { return entry.name == name; });
      KILN_CHECK(e != entries.end(), ValueError, where, ": missing key 'state.", id, ".", name, "'");
      if (name == "step") {
        const double step = one_value(*e, where);
        KILN_CHECK(step >= 0 && std::floor(step) == step, ValueError, where, ": ", e->key,
                   " must be a step count, got ", step);
        st.step = static_cast<int64_t>(step);
        continue;
      }
      KILN_CHECK(e->tensor.sizes() == param.sizes(), ShapeError, where, ": ", e->key,
                 " has shape ", e->tensor.sizes(), ", parameter ", i, " of group ", g,
                 " has shape ", param.sizes());
      st.tensors.emplace_back(name, copy_like(e->tensor, param));
    }
  }

  for (size_t g = 0; g < groups_.size(); ++g) groups_[g].options = std::move(options[g]);
  state_ = std::move(state);
}

}  // namespace kiln::optim
