// torch.optim.Adam and AdamW: bias-corrected moments, amsgrad, L2 or decoupled
// weight decay, maximize.
//
// A step recorded by kiln::compile counts on the device (ParamState::
// step_count, as PyTorch's capturable Adam): the bias corrections are then
// computed there, in float64, and applied as tensors.
#include <cmath>

#include "kiln/ops/factory.h"
#include "kiln/ops/pointwise.h"
#include "kiln/optim.h"
#include "ops/tracing.h"
#include "optim/options.h"

namespace kiln::optim {
namespace {

template <typename Options>
GroupOptions adam_defaults(const Options& o) {
  return {{"lr", o.lr},
          {"betas.0", o.betas.first},
          {"betas.1", o.betas.second},
          {"eps", o.eps},
          {"weight_decay", o.weight_decay},
          {"amsgrad", o.amsgrad ? 1.0 : 0.0},
          {"maximize", o.maximize ? 1.0 : 0.0}};
}

}  // namespace

Adam::Adam(std::vector<Tensor> params, AdamOptions options)
    : Optimizer("Adam", adam_defaults(options)) {
  init({ParamGroup{std::move(params), {}}});
}

Adam::Adam(std::vector<ParamGroup> groups, AdamOptions options)
    : Optimizer("Adam", adam_defaults(options)) {
  init(std::move(groups));
}

Adam::Adam(std::string name, GroupOptions defaults, bool decoupled_weight_decay)
    : Optimizer(std::move(name), std::move(defaults)),
      decoupled_weight_decay_(decoupled_weight_decay) {}

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions options)
    : Adam("AdamW", adam_defaults(options), /*decoupled_weight_decay=*/true) {
  init({ParamGroup{std::move(params), {}}});
}

AdamW::AdamW(std::vector<ParamGroup> groups, AdamWOptions options)
    : Adam("AdamW", adam_defaults(options), /*decoupled_weight_decay=*/true) {
  init(std::move(groups));
}

void Adam::check_options(const GroupOptions& options) const {
  const double lr = option_value(options, "lr");
  const double beta1 = option_value(options, "betas.0");
  const double beta2 = option_value(options, "betas.1");
  const double eps = option_value(options, "eps");
  const double weight_decay = option_value(options, "weight_decay");
  // KILN_CHECK throws unless the condition holds, so NaN fails these checks too.
  KILN_CHECK(lr >= 0, ValueError, name(), ": invalid learning rate ", lr, " (must be >= 0)");
  KILN_CHECK(eps >= 0, ValueError, name(), ": invalid eps ", eps, " (must be >= 0)");
  KILN_CHECK(beta1 >= 0 && beta1 < 1, ValueError, name(), ": invalid beta1 ", beta1,
             " (betas must be in [0, 1))");
  KILN_CHECK(beta2 >= 0 && beta2 < 1, ValueError, name(), ": invalid beta2 ", beta2,
             " (betas must be in [0, 1))");
  KILN_CHECK(weight_decay >= 0, ValueError, name(), ": invalid weight_decay ", weight_decay,
             " (must be >= 0)");
  check_flag(options, "amsgrad");
  check_flag(options, "maximize");
}

std::vector<std::string> Adam::state_names(const GroupOptions& options) const {
  std::vector<std::string> names = {"exp_avg", "exp_avg_sq"};
  if (option_flag(options, "amsgrad")) names.emplace_back("max_exp_avg_sq");
  return names;
}

void Adam::update_group(const ParamGroup& group, std::span<ParamState> states) {
  const GroupOptions& o = group.options;
  const double lr = option_value(o, "lr");
  const double beta1 = option_value(o, "betas.0");
  const double beta2 = option_value(o, "betas.1");
  const double eps = option_value(o, "eps");
  const double weight_decay = option_value(o, "weight_decay");
  const bool amsgrad = option_flag(o, "amsgrad");
  const bool maximize = option_flag(o, "maximize");
  const bool traced = ops::TraceRecorder::active() != nullptr;
  for (size_t i = 0; i < group.params.size(); ++i) {
    Tensor p = group.params[i];
    Tensor g = p.grad();
    if (!g.defined()) continue;
    ParamState& st = states[i];
    {
      // Made on the first update, outside any trace (a recorded step
      // captures them); references are taken once every insertion is done.
      ops::TracePause untraced;
      st.get_or_zeros("exp_avg", p);
      st.get_or_zeros("exp_avg_sq", p);
      if (amsgrad) st.get_or_zeros("max_exp_avg_sq", p);
      if (traced && !st.step_count.defined())
        st.step_count = scalar_tensor(static_cast<double>(st.step), {.dtype = kFloat32, .device = p.device()});
    }
    Tensor& exp_avg = *st.find("exp_avg");
    Tensor& exp_avg_sq = *st.find("exp_avg_sq");
    // -lr / (1 - beta1^t) and sqrt(1 - beta2^t): numbers on the host, or
    // tensors of the parameter's dtype computed from the device's count.
    double step_size = 0, bias_correction2_sqrt = 0;
    Tensor step_size_t, bias_correction2_sqrt_t;
    if (st.step_count.defined()) {
      st.step_count.add_(1);
      const Tensor t = st.step_count.to(kFloat64);
      step_size_t = reciprocal(neg(pow(beta1, t)).add_(1)).mul_(-lr).to(p.dtype());
      bias_correction2_sqrt_t = sqrt(neg(pow(beta2, t)).add_(1)).to(p.dtype());
    } else {
      const double step = static_cast<double>(++st.step);
      step_size = -lr / (1 - std::pow(beta1, step));
      bias_correction2_sqrt = std::sqrt(1 - std::pow(beta2, step));
    }

    // New tensors, never writes into p.grad().
    if (maximize) g = neg(g);
    if (weight_decay != 0) {
      if (decoupled_weight_decay_) {
        p.mul_(1 - lr * weight_decay);
      } else {
        g = add(g, p, weight_decay);
      }
    }
    exp_avg.mul_(beta1).add_(g, 1 - beta1);
    exp_avg_sq.mul_(beta2).add_(g.square(), 1 - beta2);

    Tensor second = exp_avg_sq;
    if (amsgrad) {
      Tensor& max_exp_avg_sq = *st.find("max_exp_avg_sq");
      max_exp_avg_sq.copy_(maximum(max_exp_avg_sq, exp_avg_sq));
      second = max_exp_avg_sq;
    }
    Tensor denom = second.sqrt();
    if (st.step_count.defined()) {
      denom.div_(bias_correction2_sqrt_t).add_(eps);
      p.add_(exp_avg / denom * step_size_t);
    } else {
      denom.div_(bias_correction2_sqrt).add_(eps);
      p.add_(exp_avg / denom, step_size);
    }
  }
}

}  // namespace kiln::optim
