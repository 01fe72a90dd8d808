// amp::GradScaler (include/kiln/amp.h): dynamic loss scaling.
#include <cmath>

#include "kiln/amp.h"
#include "kiln/autograd.h"
#include "kiln/error.h"
#include "kiln/ops/factory.h"
#include "kiln/ops/pointwise.h"
#include "kiln/ops/reduce.h"
#include "ops/tracing.h"

namespace kiln::amp {
namespace {

void check_options(const GradScalerOptions& o) {
  auto fail = [](const char* name, double v, const char* range) {
    throw ValueError(detail::str_cat("GradScaler: ", name, " = ", v, ", expected ", range));
  };
  if (!(o.init_scale > 0) || !std::isfinite(o.init_scale)) fail("init_scale", o.init_scale, "> 0");
  if (!(o.growth_factor > 1) || !std::isfinite(o.growth_factor))
    fail("growth_factor", o.growth_factor, "> 1");
  if (!(o.backoff_factor > 0 && o.backoff_factor < 1))
    fail("backoff_factor", o.backoff_factor, "in (0, 1)");
  if (o.growth_interval < 1)
    fail("growth_interval", static_cast<double>(o.growth_interval), ">= 1");
}

double scalar_of(const StateDict& state, const char* key) {
  const Tensor& t = state.at(key);
  if (t.numel() != 1) {
    throw ValueError(detail::str_cat("GradScaler.load_state_dict: '", key, "' has shape ",
                                     t.sizes(), ", expected one value"));
  }
  return t.to(Device::cpu()).to(kFloat64).item<double>();
}

}  // namespace

GradScaler::GradScaler(GradScalerOptions options)
    : options_(options), pending_scale_(options.init_scale) {
  check_options(options_);
}

Tensor GradScaler::scale(const Tensor& loss) {
  if (!options_.enabled) return loss;
  if (!loss.defined()) throw ValueError("GradScaler.scale: the loss is an undefined tensor");
  if (!is_floating(loss.dtype())) {
    throw DTypeError(detail::str_cat("GradScaler.scale: the loss is ", loss.dtype(),
                                     ", expected a floating dtype"));
  }
  if (!scale_.defined() || scale_.device() != loss.device()) {
    // A real tensor even while a compiled function is traced: the graph
    // reads it where it is, so later scales need no new trace.
    ops::TracePause real;
    NoGradGuard no_grad;
    scale_ = scale_.defined()
                 ? scale_.to(loss.device())
                 : full({}, pending_scale_, {.dtype = kFloat32, .device = loss.device()});
  }
  return loss * scale_;
}

void GradScaler::check_scaled(const char* op) const {
  if (ops::TraceRecorder::active()) {
    throw ValueError(detail::str_cat(
        "GradScaler.", op,
        ": called inside a compiled function; its decisions are the host's, "
        "which a replay does not repeat: call unscale_, step and update outside it (scale "
        "may be inside)"));
  }
  if (!scale_.defined()) {
    throw ValueError(
        detail::str_cat("GradScaler.", op, ": no loss was scaled yet (call scale(loss) first)"));
  }
}

void GradScaler::unscale_(optim::Optimizer& opt) {
  if (!options_.enabled) return;
  check_scaled("unscale_");
  PerOptimizer& s = per_optimizer_[&opt];
  if (s.unscaled) {
    throw ValueError(
        "GradScaler.unscale_: called again for this optimizer since the last update()");
  }
  if (s.stepped) throw ValueError("GradScaler.unscale_: called after step() for this optimizer");
  NoGradGuard no_grad;
  // The reciprocal in float64, as PyTorch takes it, then float32.
  const Tensor inv = reciprocal(scale_.to(kFloat64)).to(kFloat32);
  Tensor found = zeros({}, {.dtype = kBool, .device = scale_.device()});
  for (const optim::ParamGroup& group : opt.param_groups()) {
    for (const Tensor& p : group.params) {
      Tensor g = p.grad();
      if (!g.defined()) continue;
      const Tensor bad = any(logical_or(isnan(g), isinf(g)));
      found = logical_or(found, bad.to(scale_.device()));
      g.mul_(g.device() == inv.device() ? inv : inv.to(g.device()));
    }
  }
  s.found = found;
  s.unscaled = true;
}

bool GradScaler::step(optim::Optimizer& opt) {
  if (!options_.enabled) {
    opt.step();
    return true;
  }
  check_scaled("step");
  PerOptimizer& s = per_optimizer_[&opt];
  if (s.stepped)
    throw ValueError("GradScaler.step: called again for this optimizer since update()");
  if (!s.unscaled) unscale_(opt);
  s.found_inf = s.found.item<bool>();
  s.stepped = true;
  if (s.found_inf) {
    ++skipped_;
    return false;
  }
  opt.step();
  return true;
}

void GradScaler::update() {
  if (!options_.enabled) return;
  check_scaled("update");
  bool any_step = false, found_inf = false;
  for (const auto& [opt, s] : per_optimizer_) {
    any_step = any_step || s.stepped;
    found_inf = found_inf || (s.stepped ? s.found_inf : s.found.item<bool>());
  }
  if (!any_step) throw ValueError("GradScaler.update: no step() since the last update()");
  NoGradGuard no_grad;
  if (found_inf) {
    scale_.mul_(options_.backoff_factor);
    growth_tracker_ = 0;
  } else if (++growth_tracker_ == options_.growth_interval) {
    scale_.mul_(options_.growth_factor);
    growth_tracker_ = 0;
  }
  per_optimizer_.clear();
}

void GradScaler::update(double new_scale) {
  if (!options_.enabled) return;
  if (scale_.defined()) check_scaled("update");
  if (!(new_scale > 0) || !std::isfinite(new_scale))
    throw ValueError(
        detail::str_cat("GradScaler.update: new_scale = ", new_scale, ", expected > 0"));
  if (scale_.defined()) {
    NoGradGuard no_grad;
    scale_.fill_(new_scale);
  } else {
    pending_scale_ = new_scale;
  }
  growth_tracker_ = 0;
  per_optimizer_.clear();
}

double GradScaler::get_scale() const {
  if (!options_.enabled) return 1.0;
  if (!scale_.defined()) return pending_scale_;
  return scale_.to(Device::cpu()).to(kFloat64).item<double>();
}

StateDict GradScaler::state_dict() const {
  StateDict sd;
  if (!options_.enabled) return sd;
  sd.set("scale", full({}, get_scale(), {.dtype = kFloat32}));
  sd.set("growth_factor", full({}, options_.growth_factor, {.dtype = kFloat64}));
  sd.set("backoff_factor", full({}, options_.backoff_factor, {.dtype = kFloat64}));
  sd.set("growth_interval", full({}, options_.growth_interval, {.dtype = kInt64}));
  sd.set("_growth_tracker", full({}, growth_tracker_, {.dtype = kInt64}));
  return sd;
}

void GradScaler::load_state_dict(const StateDict& state) {
  if (!options_.enabled) return;
  GradScalerOptions o = options_;
  o.init_scale = scalar_of(state, "scale");
  o.growth_factor = scalar_of(state, "growth_factor");
  o.backoff_factor = scalar_of(state, "backoff_factor");
  o.growth_interval = static_cast<int64_t>(scalar_of(state, "growth_interval"));
  const auto tracker = static_cast<int64_t>(scalar_of(state, "_growth_tracker"));
  try {
    check_options(o);
  } catch (const ValueError& e) {
    throw ValueError(detail::str_cat("GradScaler.load_state_dict: ", e.what()));
  }
  if (tracker < 0 || tracker >= o.growth_interval) {
    throw ValueError(detail::str_cat("GradScaler.load_state_dict: _growth_tracker = ", tracker,
                                     ", expected in [0, growth_interval)"));
  }
  options_.growth_factor = o.growth_factor;
  options_.backoff_factor = o.backoff_factor;
  options_.growth_interval = o.growth_interval;
  growth_tracker_ = tracker;
  if (scale_.defined()) {
    NoGradGuard no_grad;
    scale_.fill_(o.init_scale);
  } else {
    pending_scale_ = o.init_scale;
  }
  per_optimizer_.clear();
}

}  // namespace kiln::amp
