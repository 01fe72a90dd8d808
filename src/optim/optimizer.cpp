// The optimizer base: parameter groups, their options, zero_grad and step.
#include <algorithm>
#include <cmath>
#include <optional>
#include <unordered_map>

#include "kiln/autograd.h"
#include "kiln/ops/factory.h"
#include "kiln/ops/pointwise.h"
#include "kiln/optim.h"
#include "ops/tracing.h"
#include "optim/options.h"

namespace kiln::optim {

double ParamGroup::get(std::string_view name) const {
  const double* value = find(name);
  if (!value) {
    std::vector<std::string> names;
    for (const auto& option : options) names.push_back(option.first);
    throw ValueError(detail::str_cat("ParamGroup: no option named '", name, "'; it has ", names));
  }
  return *value;
}

const double* ParamGroup::find(std::string_view name) const { return find_option(options, name); }

void ParamGroup::set(std::string_view name, double value) {
  for (auto& [key, v] : options) {
    if (key == name) {
      v = value;
      return;
    }
  }
  options.emplace_back(std::string(name), value);
}

Tensor* ParamState::find(std::string_view name) {
  for (auto& [key, tensor] : tensors)
    if (key == name) return &tensor;
  return nullptr;
}

Tensor& ParamState::get_or_zeros(std::string_view name, const Tensor& like) {
  if (Tensor* t = find(name)) return *t;
  tensors.emplace_back(std::string(name), zeros_like(like));
  return tensors.back().second;
}

Optimizer::Optimizer(std::string name, GroupOptions defaults)
    : name_(std::move(name)), defaults_(std::move(defaults)) {}

void Optimizer::init(std::vector<ParamGroup> groups) {
  check_options(defaults_);
  size_t count = 0;
  for (const auto& group : groups) count += group.params.size();
  KILN_CHECK(count > 0, ValueError, name_, ": got an empty parameter list");
  for (auto& group : groups) add_param_group(std::move(group));
}

void Optimizer::add_param_group(ParamGroup group) {
  const size_t index = groups_.size();
  check_params(group.params, index);
  group.options = complete_options(group.options, index);
  check_options(group.options);
  state_.emplace_back(group.params.size());
  groups_.push_back(std::move(group));
}

GroupOptions Optimizer::complete_options(const GroupOptions& given, size_t group_index) const {
  GroupOptions options = defaults_;
  std::optional<double> initial_lr;
  for (size_t i = 0; i < given.size(); ++i) {
    const auto& [name, value] = given[i];
    for (size_t j = 0; j < i; ++j) {
      KILN_CHECK(given[j].first != name, ValueError, name_, ": parameter group ", group_index,
                 " sets option '", name, "' twice");
    }
    if (name == kInitialLr) {
      initial_lr = value;
      continue;
    }
    auto it = std::find_if(options.begin(), options.end(),
                           [&](const auto& option) { return option.first == name; });
    if (it == options.end()) {
      std::vector<std::string> known;
      for (const auto& option : defaults_) known.push_back(option.first);
      throw ValueError(detail::str_cat(name_, ": parameter group ", group_index,
                                       " sets unknown option '", name,
                                       "'; known options: ", known));
    }
    it->second = value;
  }
  if (initial_lr) options.emplace_back(std::string(kInitialLr), *initial_lr);
  return options;
}

void Optimizer::check_params(const std::vector<Tensor>& params, size_t group_index) const {
  // Where each parameter already is, by identity (its TensorImpl).
  std::unordered_map<const TensorImpl*, std::pair<size_t, size_t>> seen;
  for (size_t g = 0; g < groups_.size(); ++g)
    for (size_t i = 0; i < groups_[g].params.size(); ++i)
      seen.emplace(groups_[g].params[i].impl_ptr().get(), std::pair{g, i});
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    const auto where = detail::str_cat(name_, ": parameter ", i, " of group ", group_index);
    KILN_CHECK(p.defined(), ValueError, where, " is an undefined tensor");
    KILN_CHECK(is_floating(p.dtype()), DTypeError, where, " has dtype ", p.dtype(),
               "; only floating-point tensors can be optimized");
    if (!p.is_leaf()) {
      throw ValueError(detail::str_cat(where, " is not a leaf (computed by '", p.grad_fn()->name(),
                                       "'); optimize the tensor it was computed from"));
    }
    KILN_CHECK(p.requires_grad(), ValueError, where,
               " does not require grad; call requires_grad_() on it first");
    auto [it, inserted] = seen.emplace(p.impl_ptr().get(), std::pair{group_index, i});
    KILN_CHECK(inserted, ValueError, where, " is also parameter ", it->second.second, " of group ",
               it->second.first, "; a parameter can appear only once");
  }
}

void Optimizer::step() {
  NoGradGuard no_grad;
  if (ops::TraceRecorder* tracer = ops::TraceRecorder::active()) {
    // Inside kiln::compile the update is recorded. A graph holds numbers as
    // constants: the options are guarded (a changed learning rate traces
    // anew). State a first step makes is made outside the graph and captured
    // (each optimizer's update_group); a state_dict loaded in place of the
    // captured tensors traces anew.
    tracer->add_host_guard(detail::str_cat(name_, " load_state_dict calls"),
                           [this] { return static_cast<double>(state_epoch_); });
    for (size_t g = 0; g < groups_.size(); ++g) {
      for (const auto& [option, value] : groups_[g].options) {
        tracer->add_host_guard(detail::str_cat(name_, " group ", g, " ", option), [this, g, option = option] {
          return g < groups_.size() ? groups_[g].get(option) : std::nan("");
        });
      }
    }
  }
  for (size_t g = 0; g < groups_.size(); ++g) update_group(groups_[g], state_[g]);
}

bool Optimizer::step_unless(const Tensor& skip) {
  if (!skip.defined() || skip.numel() != 1 || skip.dtype() != kBool) {
    throw ValueError(detail::str_cat(name_, ".step_unless: skip must be one bool, got ",
                                     skip.defined() ? detail::str_cat(skip.dtype(), skip.sizes())
                                                    : std::string("an undefined tensor")));
  }
  if (!ops::TraceRecorder::active()) {
    if (skip.item<bool>()) return false;
    step();
    return true;
  }
  NoGradGuard no_grad;
  // What the step may change, as it was: the stepped parameters and their
  // state tensors (by name: a step may add some) and device counts.
  struct Before {
    size_t group, index;
    Tensor param;
    std::vector<std::pair<std::string, Tensor>> state;
    Tensor count;
  };
  std::vector<Before> before;
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      const Tensor& p = groups_[g].params[i];
      if (!p.grad().defined()) continue;
      Before b{g, i, p.clone(), {}, {}};
      for (const auto& [name, t] : state_[g][i].tensors) b.state.emplace_back(name, t.clone());
      if (state_[g][i].step_count.defined()) b.count = state_[g][i].step_count.clone();
      before.push_back(std::move(b));
    }
  }
  step();
  for (const Before& b : before) {
    Tensor p = groups_[b.group].params[b.index];
    const Tensor skip_here = skip.to(p.device()).reshape({});
    p.copy_(where(skip_here, b.param, p));
    ParamState& st = state_[b.group][b.index];
    for (auto& [name, t] : st.tensors) {
      const auto old = std::find_if(b.state.begin(), b.state.end(),
                                    [&](const auto& e) { return e.first == name; });
      t.copy_(where(skip_here, old != b.state.end() ? old->second : zeros_like(t), t));
    }
    // A count the step made began one below what it holds now.
    if (st.step_count.defined()) {
      const Tensor old = b.count.defined() ? b.count : st.step_count - 1;
      st.step_count.copy_(where(skip_here, old, st.step_count));
    }
  }
  return true;
}

void Optimizer::zero_grad(bool set_to_none) {
  NoGradGuard no_grad;
  for (const auto& group : groups_) {
    for (const Tensor& p : group.params) {
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      if (set_to_none) {
        p.set_grad({});
        continue;
      }
      // A gradient made with create_graph carries history: zero a detached alias instead.
      if (grad.requires_grad()) {
        grad = grad.detach();
        p.set_grad(grad);
      }
      grad.zero_();
    }
  }
}

ParamGroup& Optimizer::group_at(size_t group, const char* what) {
  KILN_CHECK(group < groups_.size(), IndexError, name_, ".", what, ": group ", group,
             " out of range for ", groups_.size(), " parameter groups");
  return groups_[group];
}

const ParamGroup& Optimizer::group_at(size_t group, const char* what) const {
  return const_cast<Optimizer*>(this)->group_at(group, what);
}

double Optimizer::lr(size_t group) const { return group_at(group, "lr").get("lr"); }

void Optimizer::set_lr(size_t group, double lr) { set_option(group, "lr", lr); }

double Optimizer::option(size_t group, std::string_view name) const {
  const ParamGroup& g = group_at(group, "option");
  const double* value = g.find(name);
  KILN_CHECK(value, ValueError, name_, ".option: group ", group, " has no option '", name, "'");
  return *value;
}

void Optimizer::set_option(size_t group, std::string_view name, double value) {
  ParamGroup& g = group_at(group, "set_option");
  const bool known = name == kInitialLr || find_option(defaults_, name);
  KILN_CHECK(known, ValueError, name_, ".set_option: unknown option '", name, "'");
  ParamGroup changed{{}, g.options};
  changed.set(name, value);
  check_options(changed.options);
  g.options = std::move(changed.options);
}

void Optimizer::check_flag(const GroupOptions& options, std::string_view name) const {
  const double value = option_value(options, name);
  KILN_CHECK(value == 0 || value == 1, ValueError, name_, ": option '", name,
             "' is a flag (0 or 1), got ", value);
}

}  // namespace kiln::optim
