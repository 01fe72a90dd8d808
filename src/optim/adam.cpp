// torch.optim.Adam and AdamW: bias-corrected moments, amsgrad, L2 or decoupled
// weight decay, maximize.
#include <cmath>

#include "kiln/ops/pointwise.h"
#include "kiln/optim.h"
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
  for (size_t i = 0; i < group.params.size(); ++i) {
    Tensor p = group.params[i];
    Tensor g = p.grad();
    if (!g.defined()) continue;
    ParamState& st = states[i];
    // Made on the first update; references are taken once every insertion is done.
    st.get_or_zeros("exp_avg", p);
    st.get_or_zeros("exp_avg_sq", p);
    if (amsgrad) st.get_or_zeros("max_exp_avg_sq", p);
    Tensor& exp_avg = *st.find("exp_avg");
    Tensor& exp_avg_sq = *st.find("exp_avg_sq");
    const double step = static_cast<double>(++st.step);

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
    const double bias_correction1 = 1 - std::pow(beta1, step);
    const double bias_correction2 = 1 - std::pow(beta2, step);
    Tensor denom = second.sqrt();
    denom.div_(std::sqrt(bias_correction2)).add_(eps);
    p.add_(exp_avg / denom, -lr / bias_correction1);
  }
}

}  // namespace kiln::optim
