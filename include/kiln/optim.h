// Optimizers, learning-rate schedulers and gradient clipping, with PyTorch's
// semantics (torch.optim, torch.optim.lr_scheduler, torch.nn.utils.clip_grad_*).
//
//   optim::AdamW opt(net.parameters(), {.lr = 1e-3, .weight_decay = 0.01});
//   optim::LinearLR warmup(opt, {.start_factor = 0.1, .total_iters = 5});
//   optim::CosineAnnealingLR cosine(opt, {.t_max = 95});
//   optim::SequentialLR sched(opt, {warmup, cosine}, {5});
//   for (int epoch = 0; epoch < 100; ++epoch) {
//     opt.zero_grad();
//     loss(net).backward();
//     optim::clip_grad_norm_(net.parameters(), 1.0);
//     opt.step();
//     sched.step();
//   }
//   save_safetensors("opt.safetensors", opt.state_dict());
//
// Parameter groups give parts of a model their own hyperparameters; the
// optimizer's options fill in what a group leaves unset:
//
//   optim::SGD opt({{.params = body}, {.params = head, .options = {{"lr", 0.1}}}},
//                  {.lr = 0.01, .momentum = 0.9});
//
// step() runs under NoGradGuard and updates every parameter that has a gradient
// in place (the parameter keeps its TensorImpl); parameters without one are
// skipped. State tensors live on the parameter's device with its dtype.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/state_dict.h"
#include "kiln/tensor.h"

namespace kiln::optim {

// Hyperparameters by name, in the order the state dict lists them. Booleans are
// 0 or 1; PyTorch's betas tuple is the two names "betas.0" and "betas.1".
using GroupOptions = std::vector<std::pair<std::string, double>>;

struct ParamGroup {
  std::vector<Tensor> params = {};
  // The values this group sets; unset ones take the optimizer's options.
  GroupOptions options = {};

  // ValueError naming the option when the group has none of that name.
  double get(std::string_view name) const;
  const double* find(std::string_view name) const;
  // Replaces the value, or appends the option when the group has none of that name.
  void set(std::string_view name, double value);
};

// What an optimizer keeps per parameter: PyTorch's optimizer.state[p].
struct ParamState {
  int64_t step = 0;  // the number of updates, for optimizers that count them
  // The count on the parameter's device (0-dim float32), made when a step is
  // recorded by kiln::compile (a recorded graph cannot count on the host);
  // from then on it is the count, in eager steps too.
  Tensor step_count;
  std::vector<std::pair<std::string, Tensor>> tensors;  // e.g. exp_avg, momentum_buffer

  Tensor* find(std::string_view name);
  // The tensor of that name, made as zeros like `like` when absent.
  Tensor& get_or_zeros(std::string_view name, const Tensor& like);
  bool empty() const noexcept { return step == 0 && tensors.empty(); }
};

// The base of every optimizer (torch.optim.Optimizer).
//
// state_dict() layout (every value a tensor, so that it round-trips through
// safetensors); parameters are numbered across groups in order, as PyTorch does:
//   state.<i>.step                  0-dim float32 (optimizers that count steps)
//   state.<i>.<name>                e.g. exp_avg: the parameter's shape and dtype
//   param_groups.<g>.<option>       0-dim float64: lr, momentum, betas.0, ...
//   param_groups.<g>.params         1-dim int64: the indices of the group's parameters
// The state tensors are the optimizer's own buffers, not copies (as in PyTorch):
// clone them to keep a snapshot while training goes on. load_state_dict copies.
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // Schedulers hold a reference to their optimizer: it never moves.
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of every parameter that has a gradient.
  void step();
  // The same update, undone where `skip` (a 0-dim bool tensor) is true;
  // returns whether it stepped. Eagerly the flag is read on the host, and
  // the step runs or not. Inside kiln::compile, where a replay cannot ask the
  // host, the step is recorded and every tensor it changed (parameters,
  // their state, the device step counts) takes its old value back on the
  // device where skip is true, so that one graph serves both outcomes (it
  // returns true there). State a first step made is zeros where it was
  // skipped, which the optimizers read as no state (amp::GradScaler's step).
  bool step_unless(const Tensor& skip);
  // Drops the gradients (set_to_none) or zeroes them in place.
  void zero_grad(bool set_to_none = true);
  // Appends a group; its unset options take the optimizer's. Its parameters
  // must be floating leaves that require grad and appear in no other group.
  void add_param_group(ParamGroup group);

  const std::vector<ParamGroup>& param_groups() const noexcept { return groups_; }
  double lr(size_t group) const;
  void set_lr(size_t group, double lr);
  double option(size_t group, std::string_view name) const;
  // Changes one option of a group; ValueError for unknown names or invalid values.
  void set_option(size_t group, std::string_view name, double value);
  // "SGD", "Adam", "AdamW".
  const std::string& name() const noexcept { return name_; }
  // The optimizer-wide values that fill in unset group options.
  const GroupOptions& defaults() const noexcept { return defaults_; }

  StateDict state_dict() const;
  // Takes hyperparameters and per-parameter state from a state_dict() of an
  // optimizer of the same kind whose groups hold as many parameters, matched by
  // position (as PyTorch does). Validates everything before changing anything:
  // group and parameter counts, state names and shapes; ValueError or ShapeError
  // naming the key and the values.
  void load_state_dict(const StateDict& state);

 protected:
  // defaults: every option the optimizer has, with its value, in state-dict order.
  Optimizer(std::string name, GroupOptions defaults);
  // The derived constructor's last act (check_options is virtual).
  void init(std::vector<ParamGroup> groups);

  // ValueError naming the optimizer and the value for an invalid option.
  virtual void check_options(const GroupOptions& options) const = 0;
  // The update of one group; states[i] belongs to group.params[i].
  virtual void update_group(const ParamGroup& group, std::span<ParamState> states) = 0;
  // The state tensors a stepped parameter of a group with these options holds.
  virtual std::vector<std::string> state_names(const GroupOptions& options) const = 0;
  // Whether ParamState::step is part of the state (state.<i>.step).
  virtual bool counts_steps() const noexcept = 0;

  // Checks that the option is 0 or 1 (a bool kept as a double).
  void check_flag(const GroupOptions& options, std::string_view name) const;

 private:
  GroupOptions complete_options(const GroupOptions& given, size_t group_index) const;
  void check_params(const std::vector<Tensor>& params, size_t group_index) const;
  // The parts of load_state_dict: they check and build, and change nothing.
  GroupOptions load_group_options(const StateDict& group, size_t group_index) const;
  ParamState load_param_state(const StateDict& entries, int64_t index, const GroupOptions& options,
                              const Tensor& param) const;
  ParamGroup& group_at(size_t group, const char* what);
  const ParamGroup& group_at(size_t group, const char* what) const;

  std::string name_;
  GroupOptions defaults_;
  std::vector<ParamGroup> groups_;
  std::vector<std::vector<ParamState>> state_;  // parallel to groups_ and their params
  uint64_t state_epoch_ = 0;  // bumped when load_state_dict replaces the state (guarded by traces)
};

// --- SGD ----------------------------------------------------------------------

// torch.optim.SGD, whose lr defaults to 1e-3 since PyTorch 2.2. Per parameter:
//   g = maximize ? -grad : grad;  g += weight_decay * p
//   buf = first step ? g : momentum * buf + (1 - dampening) * g     (momentum != 0)
//   g = nesterov ? g + momentum * buf : buf
//   p -= lr * g
// State: momentum_buffer (with momentum only); no step count. A step
// recorded by kiln::compile makes the buffer as zeros, which the update takes
// g whole into on the first step (with dampening, counting on the device).
struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;  // needs momentum > 0 and dampening == 0
  bool maximize = false;
};

class SGD final : public Optimizer {
 public:
  explicit SGD(std::vector<Tensor> params, SGDOptions options = {});
  explicit SGD(std::vector<ParamGroup> groups, SGDOptions options = {});

 protected:
  void check_options(const GroupOptions& options) const override;
  void update_group(const ParamGroup& group, std::span<ParamState> states) override;
  std::vector<std::string> state_names(const GroupOptions& options) const override;
  bool counts_steps() const noexcept override { return false; }
};

// --- Adam and AdamW --------------------------------------------------------------

// torch.optim.Adam. Per parameter, with t the step count after incrementing:
//   g = maximize ? -grad : grad
//   Adam: g += weight_decay * p            AdamW: p *= 1 - lr * weight_decay
//   m = beta1 * m + (1 - beta1) * g;   v = beta2 * v + (1 - beta2) * g * g
//   v_max = max(v_max, v)                                     (amsgrad)
//   p -= lr / (1 - beta1^t) * m / (sqrt(amsgrad ? v_max : v) / sqrt(1 - beta2^t) + eps)
// State: step, exp_avg, exp_avg_sq, max_exp_avg_sq (amsgrad).
struct AdamOptions {
  double lr = 1e-3;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0;  // L2: added to the gradient
  bool amsgrad = false;
  bool maximize = false;
};

// torch.optim.AdamW: Adam with decoupled weight decay, 0.01 by default.
struct AdamWOptions {
  double lr = 1e-3;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 1e-2;  // decoupled: p *= 1 - lr * weight_decay
  bool amsgrad = false;
  bool maximize = false;
};

class Adam : public Optimizer {
 public:
  explicit Adam(std::vector<Tensor> params, AdamOptions options = {});
  explicit Adam(std::vector<ParamGroup> groups, AdamOptions options = {});

 protected:
  Adam(std::string name, GroupOptions defaults, bool decoupled_weight_decay);
  void check_options(const GroupOptions& options) const override;
  void update_group(const ParamGroup& group, std::span<ParamState> states) override;
  std::vector<std::string> state_names(const GroupOptions& options) const override;
  bool counts_steps() const noexcept override { return true; }

 private:
  bool decoupled_weight_decay_ = false;
};

class AdamW final : public Adam {
 public:
  explicit AdamW(std::vector<Tensor> params, AdamWOptions options = {});
  explicit AdamW(std::vector<ParamGroup> groups, AdamWOptions options = {});
};

// --- learning-rate schedulers -----------------------------------------------------

// The base of the schedulers (torch.optim.lr_scheduler.LRScheduler), following
// PyTorch's behaviour with last_epoch = -1:
// - the constructor sets each group's "initial_lr" option to its lr when the
//   group has none, takes the initial_lr values as base_lrs, and makes the
//   initial step to epoch 0, which writes the epoch-0 lr into the optimizer
//   (LinearLR's start_factor applies at once, as in PyTorch);
// - step() advances last_epoch and writes each group's lr.
// The lr is the closed form f(base_lr, last_epoch) PyTorch documents for each
// scheduler (its _get_closed_form_lr). PyTorch's chainable step gives the same
// values (up to rounding) unless other code changes the lr between steps;
// here each step overwrites it.
//
// state_dict(): last_epoch (0-dim int64), base_lrs and last_lr (1-dim float64,
// one per group); SequentialLR adds schedulers.<i>.<key> for each scheduler.
// Like PyTorch's, load_state_dict does not touch the optimizer: load the
// optimizer's state (which holds the lr) after constructing the schedulers.
class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  virtual void step();
  // The lr of each group the last step wrote.
  const std::vector<double>& get_last_lr() const noexcept { return last_lr_; }
  int64_t last_epoch() const noexcept { return last_epoch_; }
  const std::vector<double>& base_lrs() const noexcept { return base_lrs_; }
  Optimizer& optimizer() const noexcept { return optimizer_; }
  const std::string& name() const noexcept { return name_; }

  StateDict state_dict() const;
  // ValueError naming the key and the values on a missing key, an unknown one,
  // or a group count that differs; changes nothing then.
  void load_state_dict(const StateDict& state);

 protected:
  LRScheduler(Optimizer& optimizer, std::string name);
  // PyTorch's _initial_step: the derived constructor's last act.
  void initial_step() { step(); }
  // The lr of a group with this base lr at epoch (>= 0).
  virtual double lr_at(int64_t epoch, double base_lr) const = 0;
  virtual void add_state(StateDict& state) const;
  virtual void check_state(const StateDict& state) const;
  virtual void apply_state(const StateDict& state);
  // Sets last_epoch and writes the lr of that epoch into the optimizer.
  void step_to(int64_t epoch);

 private:
  friend class SequentialLR;
  void check_own_state(const StateDict& state, bool allow_schedulers) const;

  Optimizer& optimizer_;
  std::string name_;
  std::vector<double> base_lrs_;
  std::vector<double> last_lr_;
  int64_t last_epoch_ = -1;
};

// lr = base_lr * gamma^(last_epoch / step_size) (integer division).
struct StepLROptions {
  int64_t step_size = 1;  // >= 1
  double gamma = 0.1;
};
class StepLR final : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, StepLROptions options);

 protected:
  double lr_at(int64_t epoch, double base_lr) const override;

 private:
  StepLROptions options_;
};

// lr = eta_min + (base_lr - eta_min) * (1 + cos(pi * last_epoch / t_max)) / 2,
// which rises again after t_max (period 2 * t_max), as PyTorch's does.
struct CosineAnnealingLROptions {
  int64_t t_max = 0;  // >= 1, required
  double eta_min = 0;
};
class CosineAnnealingLR final : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, CosineAnnealingLROptions options);

 protected:
  double lr_at(int64_t epoch, double base_lr) const override;

 private:
  CosineAnnealingLROptions options_;
};

// lr = base_lr * (start + (end - start) * min(last_epoch, total_iters) / total_iters):
// the usual linear warm-up.
struct LinearLROptions {
  double start_factor = 1.0 / 3;  // in (0, 1]
  double end_factor = 1.0;        // in [0, 1]
  int64_t total_iters = 5;        // >= 1
};
class LinearLR final : public LRScheduler {
 public:
  LinearLR(Optimizer& optimizer, LinearLROptions options = {});

 protected:
  double lr_at(int64_t epoch, double base_lr) const override;

 private:
  LinearLROptions options_;
};

// Runs schedulers[0] until milestones[0], then schedulers[1] from its epoch 0, and
// so on (torch.optim.lr_scheduler.SequentialLR). The constructor resets every
// group's lr to its initial_lr, moves every scheduler back one epoch and repeats
// the initial step of the first only, as PyTorch's does. The schedulers must
// drive the same optimizer and outlive this one, and may not be SequentialLRs;
// milestones must be positive and increasing.
class SequentialLR final : public LRScheduler {
 public:
  SequentialLR(Optimizer& optimizer, std::vector<std::reference_wrapper<LRScheduler>> schedulers,
               std::vector<int64_t> milestones);

  void step() override;

 protected:
  double lr_at(int64_t epoch, double base_lr) const override;
  void add_state(StateDict& state) const override;
  void check_state(const StateDict& state) const override;
  void apply_state(const StateDict& state) override;

 private:
  size_t scheduler_index(int64_t epoch) const;
  std::vector<StateDict> split_state(const StateDict& state) const;

  std::vector<LRScheduler*> schedulers_;
  std::vector<int64_t> milestones_;
};

// --- gradient clipping --------------------------------------------------------------

// torch.nn.utils.clip_grad_norm_: the norm_type-norm of all gradients together
// (norm_type may be infinity), returned as a 0-dim tensor on the first
// gradient's device, in the gradients' dtype; every gradient is scaled in
// place by min(max_norm / (total + 1e-6), 1), on its device, without reading
// the total on the host (a compiled training step stays one graph).
// Parameters without a gradient are ignored (a float32 0 when none has one).
// error_if_nonfinite: reads the total and throws ValueError when it is NaN or
// infinite. A negative max_norm is a ValueError.
Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);

// torch.nn.utils.clip_grad_value_: clamps every gradient into [-clip_value,
// clip_value] in place. A negative clip_value is a ValueError.
void clip_grad_value_(const std::vector<Tensor>& params, double clip_value);

}  // namespace kiln::optim
