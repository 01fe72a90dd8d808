// Learning-rate schedulers: the shared epoch bookkeeping, the closed forms of
// StepLR, CosineAnnealingLR and LinearLR, and SequentialLR.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <numbers>

#include "kiln/ops/factory.h"
#include "kiln/optim.h"
#include "optim/options.h"

namespace kiln::optim {
namespace {

constexpr std::string_view kSchedulersPrefix = "schedulers.";

std::vector<double> read_lrs(const StateDict& sd, std::string_view key, size_t groups,
                             const std::string& where) {
  const Tensor& t = sd.at(key);
  KILN_CHECK(t.dim() == 1 && static_cast<size_t>(t.numel()) == groups, ValueError, where, ": ", key,
             " has shape ", t.sizes(), ", expected [", groups, "] (one value per parameter group)");
  return t.to_vector<double>();
}

}  // namespace

LRScheduler::LRScheduler(Optimizer& optimizer, std::string name)
    : optimizer_(optimizer), name_(std::move(name)) {
  for (size_t g = 0; g < optimizer.param_groups().size(); ++g) {
    const ParamGroup& group = optimizer.param_groups()[g];
    if (!group.find(kInitialLr)) optimizer.set_option(g, kInitialLr, optimizer.lr(g));
    base_lrs_.push_back(optimizer.option(g, kInitialLr));
  }
}

void LRScheduler::step() { step_to(last_epoch_ + 1); }

void LRScheduler::step_to(int64_t epoch) {
  const size_t groups = optimizer_.param_groups().size();
  KILN_CHECK(groups == base_lrs_.size(), ValueError, name_, ": the optimizer has ", groups,
             " parameter groups, the scheduler was made for ", base_lrs_.size());
  std::vector<double> lrs(groups);
  for (size_t g = 0; g < groups; ++g) lrs[g] = lr_at(epoch, base_lrs_[g]);
  for (size_t g = 0; g < groups; ++g) optimizer_.set_lr(g, lrs[g]);
  last_epoch_ = epoch;
  last_lr_ = std::move(lrs);
}

StateDict LRScheduler::state_dict() const {
  StateDict sd;
  add_state(sd);
  return sd;
}

void LRScheduler::load_state_dict(const StateDict& state) {
  check_state(state);
  apply_state(state);
}

void LRScheduler::add_state(StateDict& sd) const {
  sd.set("last_epoch", scalar_tensor(last_epoch_));
  sd.set("base_lrs", from_vector(base_lrs_));
  sd.set("last_lr", from_vector(last_lr_));
}

void LRScheduler::check_state(const StateDict& sd) const { check_own_state(sd, false); }

void LRScheduler::check_own_state(const StateDict& sd, bool allow_schedulers) const {
  const std::string where = name_ + ".load_state_dict";
  for (const auto& [key, tensor] : sd) {
    const bool known = key == "last_epoch" || key == "base_lrs" || key == "last_lr" ||
                       (allow_schedulers && key.starts_with(kSchedulersPrefix));
    KILN_CHECK(known, ValueError, where, ": unexpected key '", key, "'");
  }
  for (const char* key : {"last_epoch", "base_lrs", "last_lr"})
    KILN_CHECK(sd.contains(key), ValueError, where, ": missing key '", key, "'");
  const Tensor& epoch = sd.at("last_epoch");
  KILN_CHECK(epoch.numel() == 1, ValueError, where, ": last_epoch must hold one value, got shape ",
             epoch.sizes());
  KILN_CHECK(epoch.item<double>() >= -1, ValueError, where, ": last_epoch must be >= -1, got ",
             epoch.item<double>());
  const size_t groups = optimizer_.param_groups().size();
  read_lrs(sd, "base_lrs", groups, where);
  read_lrs(sd, "last_lr", groups, where);
}

void LRScheduler::apply_state(const StateDict& sd) {
  const std::string where = name_ + ".load_state_dict";
  const size_t groups = optimizer_.param_groups().size();
  last_epoch_ = static_cast<int64_t>(sd.at("last_epoch").item<double>());
  base_lrs_ = read_lrs(sd, "base_lrs", groups, where);
  last_lr_ = read_lrs(sd, "last_lr", groups, where);
}

// --- the closed forms ------------------------------------------------------------

StepLR::StepLR(Optimizer& optimizer, StepLROptions options)
    : LRScheduler(optimizer, "StepLR"), options_(options) {
  KILN_CHECK(options.step_size >= 1, ValueError, "StepLR: step_size must be >= 1, got ",
             options.step_size);
  initial_step();
}

double StepLR::lr_at(int64_t epoch, double base_lr) const {
  return base_lr * std::pow(options_.gamma, static_cast<double>(epoch / options_.step_size));
}

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, CosineAnnealingLROptions options)
    : LRScheduler(optimizer, "CosineAnnealingLR"), options_(options) {
  KILN_CHECK(options.t_max >= 1, ValueError, "CosineAnnealingLR: t_max must be >= 1, got ",
             options.t_max);
  initial_step();
}

double CosineAnnealingLR::lr_at(int64_t epoch, double base_lr) const {
  const double angle =
      std::numbers::pi * static_cast<double>(epoch) / static_cast<double>(options_.t_max);
  return options_.eta_min + (base_lr - options_.eta_min) * (1 + std::cos(angle)) / 2;
}

LinearLR::LinearLR(Optimizer& optimizer, LinearLROptions options)
    : LRScheduler(optimizer, "LinearLR"), options_(options) {
  // PyTorch's ranges: a zero start would make its chainable form divide by zero.
  KILN_CHECK(options.start_factor > 0 && options.start_factor <= 1, ValueError,
             "LinearLR: start_factor must be in (0, 1], got ", options.start_factor);
  KILN_CHECK(options.end_factor >= 0 && options.end_factor <= 1, ValueError,
             "LinearLR: end_factor must be in [0, 1], got ", options.end_factor);
  KILN_CHECK(options.total_iters >= 1, ValueError, "LinearLR: total_iters must be >= 1, got ",
             options.total_iters);
  initial_step();
}

double LinearLR::lr_at(int64_t epoch, double base_lr) const {
  const double done = static_cast<double>(std::min(epoch, options_.total_iters)) /
                      static_cast<double>(options_.total_iters);
  return base_lr * (options_.start_factor + (options_.end_factor - options_.start_factor) * done);
}

// --- SequentialLR ------------------------------------------------------------------

SequentialLR::SequentialLR(Optimizer& optimizer,
                           std::vector<std::reference_wrapper<LRScheduler>> schedulers,
                           std::vector<int64_t> milestones)
    : LRScheduler(optimizer, "SequentialLR"), milestones_(std::move(milestones)) {
  KILN_CHECK(!schedulers.empty(), ValueError, "SequentialLR: needs at least one scheduler");
  KILN_CHECK(milestones_.size() + 1 == schedulers.size(), ValueError,
             "SequentialLR: ", schedulers.size(), " schedulers need ", schedulers.size() - 1,
             " milestones, got ", milestones_.size());
  for (size_t i = 0; i < milestones_.size(); ++i) {
    const int64_t previous = i == 0 ? 0 : milestones_[i - 1];
    KILN_CHECK(milestones_[i] > previous, ValueError,
               "SequentialLR: milestones must be positive and increasing, got ", milestones_);
  }
  for (size_t i = 0; i < schedulers.size(); ++i) {
    LRScheduler& s = schedulers[i].get();
    KILN_CHECK(&s.optimizer() == &optimizer, ValueError, "SequentialLR: scheduler ", i, " (",
               s.name(), ") drives another optimizer than the one given");
    // A nested one would restart at a milestone without restarting its own schedulers.
    KILN_CHECK(dynamic_cast<SequentialLR*>(&s) == nullptr, ValueError, "SequentialLR: scheduler ",
               i, " is a SequentialLR; nesting them is not supported");
    schedulers_.push_back(&s);
  }
  for (size_t g = 0; g < base_lrs_.size(); ++g) optimizer.set_lr(g, base_lrs_[g]);
  for (LRScheduler* s : schedulers_) --s->last_epoch_;
  schedulers_[0]->initial_step();
  last_epoch_ = 0;
  last_lr_ = schedulers_[0]->get_last_lr();
}

size_t SequentialLR::scheduler_index(int64_t epoch) const {
  return static_cast<size_t>(std::upper_bound(milestones_.begin(), milestones_.end(), epoch) -
                             milestones_.begin());
}

void SequentialLR::step() {
  ++last_epoch_;
  const size_t index = scheduler_index(last_epoch_);
  LRScheduler& s = *schedulers_[index];
  // At a milestone the next scheduler starts from its epoch 0 (PyTorch's step(0)).
  if (index > 0 && milestones_[index - 1] == last_epoch_) {
    s.step_to(0);
  } else {
    s.step();
  }
  last_lr_ = s.get_last_lr();
}

double SequentialLR::lr_at(int64_t epoch, double base_lr) const {
  const size_t index = scheduler_index(epoch);
  const int64_t start = index == 0 ? 0 : milestones_[index - 1];
  return schedulers_[index]->lr_at(epoch - start, base_lr);
}

void SequentialLR::add_state(StateDict& sd) const {
  LRScheduler::add_state(sd);
  for (size_t i = 0; i < schedulers_.size(); ++i) {
    for (const auto& [key, tensor] : schedulers_[i]->state_dict())
      sd.set(detail::str_cat(kSchedulersPrefix, i, ".", key), tensor);
  }
}

std::vector<StateDict> SequentialLR::split_state(const StateDict& sd) const {
  std::vector<StateDict> parts(schedulers_.size());
  for (const auto& [key, tensor] : sd) {
    if (!key.starts_with(kSchedulersPrefix)) continue;
    const std::string_view rest = std::string_view(key).substr(kSchedulersPrefix.size());
    const size_t dot = rest.find('.');
    size_t index = 0;
    const auto [end, ec] =
        std::from_chars(rest.data(), rest.data() + std::min(dot, rest.size()), index);
    const bool valid = dot != std::string_view::npos && dot > 0 && ec == std::errc() &&
                       end == rest.data() + dot && index < schedulers_.size();
    KILN_CHECK(valid, ValueError, "SequentialLR.load_state_dict: unexpected key '", key,
               "' (this SequentialLR has ", schedulers_.size(), " schedulers)");
    parts[index].set(std::string(rest.substr(dot + 1)), tensor);
  }
  return parts;
}

void SequentialLR::check_state(const StateDict& sd) const {
  check_own_state(sd, /*allow_schedulers=*/true);
  const std::vector<StateDict> parts = split_state(sd);
  for (size_t i = 0; i < schedulers_.size(); ++i) schedulers_[i]->check_state(parts[i]);
}

void SequentialLR::apply_state(const StateDict& sd) {
  LRScheduler::apply_state(sd);
  const std::vector<StateDict> parts = split_state(sd);
  for (size_t i = 0; i < schedulers_.size(); ++i) schedulers_[i]->apply_state(parts[i]);
}

}  // namespace kiln::optim
