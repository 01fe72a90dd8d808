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
    // Real tensors even while a compiled function is traced: the graph
    // reads and writes them where they are, so later scales need no new trace.
    ops::TracePause real;
    NoGradGuard no_grad;
    const Device d = loss.device();
    if (scale_.defined()) {
      scale_ = scale_.to(d);
      growth_tracker_ = growth_tracker_.to(d);
      skipped_device_ = skipped_device_.to(d);
    } else {
      scale_ = full({}, pending_scale_, {.dtype = kFloat32, .device = d});
      growth_tracker_ = full({}, pending_tracker_, {.dtype = kInt64, .device = d});
      skipped_device_ = zeros({}, {.dtype = kInt64, .device = d});
    }
  }
  return loss * scale_;
}

void GradScaler::check_scaled(const char* op) const {
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
  s.traced = ops::TraceRecorder::active() != nullptr;
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
  const bool traced = ops::TraceRecorder::active() != nullptr;
  if (s.unscaled && s.traced != traced) {
    throw ValueError(
        detail::str_cat("GradScaler.step: unscale_ ran ", s.traced ? "inside" : "outside",
                        " a compiled function and step ", traced ? "inside" : "outside",
                        " one: call them (and update) all inside it or all outside it"));
  }
  if (!s.unscaled) unscale_(opt);
  s.stepped = true;
  if (traced) {  // decided on the device at each replay
    NoGradGuard no_grad;
    opt.step_unless(s.found);
    skipped_device_.add_(s.found.to(kInt64));
    return true;
  }
  s.found_inf = s.found.item<bool>();
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
  const bool traced = ops::TraceRecorder::active() != nullptr;
  bool any_step = false;
  Tensor found;
  for (const auto& [opt, s] : per_optimizer_) {
    if (s.traced != traced) {
      throw ValueError(detail::str_cat("GradScaler.update: called ", traced ? "inside" : "outside",
                                       " a compiled function after unscale_/step ",
                                       s.traced ? "inside" : "outside",
                                       " one: call them all inside it or all outside it"));
    }
    any_step = any_step || s.stepped;
    found = found.defined() ? logical_or(found, s.found) : s.found;
  }
  if (!any_step) throw ValueError("GradScaler.update: no step() since the last update()");
  NoGradGuard no_grad;
  // On the device, eagerly and in compiled steps alike: after an inf, the
  // scale backs off and the count of clean steps restarts; after
  // growth_interval clean steps in a row, it grows.
  const Tensor clean = where(found, zeros_like(growth_tracker_), growth_tracker_ + 1);
  const Tensor grow = clean == options_.growth_interval;
  scale_.mul_(where(found, full_like(scale_, options_.backoff_factor),
                    where(grow, full_like(scale_, options_.growth_factor), ones_like(scale_))));
  growth_tracker_.copy_(where(grow, zeros_like(clean), clean));
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
    growth_tracker_.zero_();
  } else {
    pending_scale_ = new_scale;
    pending_tracker_ = 0;
  }
  per_optimizer_.clear();
}

int64_t GradScaler::skipped_steps() const {
  if (!skipped_device_.defined()) return skipped_;
  return skipped_ + skipped_device_.to(Device::cpu()).item<int64_t>();
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
  const int64_t tracker = growth_tracker_.defined()
                              ? growth_tracker_.to(Device::cpu()).item<int64_t>()
                              : pending_tracker_;
  sd.set("_growth_tracker", full({}, tracker, {.dtype = kInt64}));
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
  if (scale_.defined()) {
    NoGradGuard no_grad;
    scale_.fill_(o.init_scale);
    growth_tracker_.fill_(tracker);
  } else {
    pending_scale_ = o.init_scale;
    pending_tracker_ = tracker;
  }
  per_optimizer_.clear();
}

}  // namespace kiln::amp
