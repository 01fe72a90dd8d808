// torch.optim.SGD: momentum, dampening, Nesterov, weight decay, maximize.
//
// A first step with momentum makes the buffer from the gradient. Recorded by
// kiln::compile, the buffer is made as zeros outside the graph instead, and
// the graph's update `momentum * buf + (1 - dampening) * g` takes g whole on
// the first call: with dampening 0 that is eager's first step as it stands;
// otherwise the step counts on the device (ParamState::step_count) and the
// first call's factor is 1.
#include <cmath>

#include "kiln/ops/factory.h"
#include "kiln/ops/pointwise.h"
#include "kiln/optim.h"
#include "ops/tracing.h"
#include "optim/options.h"

namespace kiln::optim {
namespace {

constexpr std::string_view kMomentumBuffer = "momentum_buffer";

GroupOptions sgd_defaults(const SGDOptions& o) {
  return {{"lr", o.lr},
          {"momentum", o.momentum},
          {"dampening", o.dampening},
          {"weight_decay", o.weight_decay},
          {"nesterov", o.nesterov ? 1.0 : 0.0},
          {"maximize", o.maximize ? 1.0 : 0.0}};
}

}  // namespace

SGD::SGD(std::vector<Tensor> params, SGDOptions options) : Optimizer("SGD", sgd_defaults(options)) {
  init({ParamGroup{std::move(params), {}}});
}

SGD::SGD(std::vector<ParamGroup> groups, SGDOptions options)
    : Optimizer("SGD", sgd_defaults(options)) {
  init(std::move(groups));
}

void SGD::check_options(const GroupOptions& options) const {
  const double lr = option_value(options, "lr");
  const double momentum = option_value(options, "momentum");
  const double dampening = option_value(options, "dampening");
  const double weight_decay = option_value(options, "weight_decay");
  // KILN_CHECK throws unless the condition holds, so NaN fails these checks too.
  KILN_CHECK(lr >= 0, ValueError, "SGD: invalid learning rate ", lr, " (must be >= 0)");
  KILN_CHECK(momentum >= 0, ValueError, "SGD: invalid momentum ", momentum, " (must be >= 0)");
  KILN_CHECK(std::isfinite(dampening), ValueError, "SGD: invalid dampening ", dampening);
  KILN_CHECK(weight_decay >= 0, ValueError, "SGD: invalid weight_decay ", weight_decay,
             " (must be >= 0)");
  check_flag(options, "nesterov");
  check_flag(options, "maximize");
  if (option_flag(options, "nesterov")) {
    KILN_CHECK(momentum > 0 && dampening == 0, ValueError,
               "SGD: nesterov needs momentum > 0 and dampening == 0, got momentum ", momentum,
               " and dampening ", dampening);
  }
}

std::vector<std::string> SGD::state_names(const GroupOptions& options) const {
  if (option_value(options, "momentum") == 0) return {};
  return {std::string(kMomentumBuffer)};
}

void SGD::update_group(const ParamGroup& group, std::span<ParamState> states) {
  const GroupOptions& o = group.options;
  const double lr = option_value(o, "lr");
  const double momentum = option_value(o, "momentum");
  const double dampening = option_value(o, "dampening");
  const double weight_decay = option_value(o, "weight_decay");
  const bool nesterov = option_flag(o, "nesterov");
  const bool maximize = option_flag(o, "maximize");
  const bool traced = ops::TraceRecorder::active() != nullptr;
  for (size_t i = 0; i < group.params.size(); ++i) {
    Tensor p = group.params[i];
    Tensor g = p.grad();
    if (!g.defined()) continue;
    // New tensors, never writes into p.grad().
    if (maximize) g = neg(g);
    if (weight_decay != 0) g = add(g, p, weight_decay);
    if (momentum != 0) {
      ParamState& st = states[i];
      Tensor* buf = st.find(kMomentumBuffer);
      if (!buf && traced) {
        ops::TracePause untraced;
        buf = &st.get_or_zeros(kMomentumBuffer, p);
        if (dampening != 0)
          st.step_count = scalar_tensor(0.0, {.dtype = kFloat32, .device = p.device()});
      }
      if (!buf) {
        st.tensors.emplace_back(std::string(kMomentumBuffer), g.clone());
        buf = &st.tensors.back().second;
      } else if (st.step_count.defined()) {
        // 1 on the first step, then 1 - dampening.
        const Tensor factor =
            st.step_count.clamp(std::nullopt, 1.0).mul_(-dampening).add_(1.0).to(g.dtype());
        st.step_count.add_(1);
        buf->mul_(momentum).add_(mul(g, factor));
      } else {
        buf->mul_(momentum).add_(g, 1 - dampening);
      }
      g = nesterov ? add(g, *buf, momentum) : *buf;
    }
    p.add_(g, -lr);
  }
}

}  // namespace kiln::optim
