// amp::autocast_check (include/kiln/amp.h): one step in float32 and one under
// autocast from the same state, compared layer by layer.
//
// The layers are the modules that own parameters. While a step runs, an
// observer stands where kiln::compile's tracer would (ops/tracing.h): every
// op runs eagerly as usual, and the first result of each forward op that
// reads a layer's parameters (directly, or through autocast's cast or a view
// of them) is kept as that layer's activation, the last one of the forward.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <sstream>
#include <unordered_map>

#include "kiln/amp.h"
#include "kiln/autograd.h"
#include "kiln/nn/module.h"
#include "kiln/ops/factory.h"
#include "ops/dispatch.h"
#include "ops/op_table.h"
#include "ops/random.h"
#include "ops/tracing.h"

namespace kiln::amp {
namespace {

// Runs every op eagerly and notes the layers' activations.
class LayerObserver final : public ops::TraceRecorder {
 public:
  // owner: each parameter's layer, by its TensorImpl.
  explicit LayerObserver(std::unordered_map<const TensorImpl*, std::string> owner)
      : owner_(std::move(owner)) {
    activate();
  }
  ~LayerObserver() override { deactivate(); }

  // Each layer's last forward activation, and the layers in the order the
  // forward first used them.
  std::map<std::string, Tensor> activations;
  std::vector<std::string> order;

  TensorList record(ops::OpId op, std::span<const Tensor> inputs, ops::Attrs attrs) override {
    TensorList out;
    {
      ops::TracePause eager;
      out = ops::dispatch(op, inputs, std::move(attrs));
    }
    if (backward_ || out.empty()) return out;
    const std::string* layer = nullptr;
    for (const Tensor& t : inputs) {
      if (!t.defined()) continue;
      if (auto it = owner_.find(t.impl_ptr().get()); it != owner_.end()) {
        layer = &it->second;
        break;
      }
    }
    if (!layer) return out;
    const ops::OpSchema& schema = ops::op_schema(op);
    if (schema.has_flag(ops::kView) || op == ops::OpId::copy || op == ops::OpId::to_device) {
      // The parameter itself, cast or moved or seen another way.
      // (held until the step ends, so that no later tensor takes its address)
      for (const Tensor& t : out) {
        owner_.emplace(t.impl_ptr().get(), *layer);
        derived_.push_back(t);
      }
      return out;
    }
    if (!activations.contains(*layer)) order.push_back(*layer);
    activations[*layer] = out[0];
    return out;
  }
  void record_inplace(ops::OpId op, Tensor& self, std::span<const Tensor> inputs,
                      ops::Attrs attrs) override {
    ops::TracePause eager;
    ops::dispatch_inplace(op, self, inputs, std::move(attrs));
  }
  ops::PhiloxDraw note_random_draw(Generator* generator, int64_t count) override {
    ops::TracePause eager;
    return ops::draw_philox(generator, count);
  }
  Tensor materialize(const Tensor& proxy, const ops::HostRead&) override { return proxy; }
  void note_layout_read(const TensorImpl&, LayoutField, int64_t,
                        const std::source_location&) override {}
  void note_size_compare(const TensorImpl&, int64_t, SizeCmp, int64_t, bool,
                         const std::source_location&) override {}
  void note_size_relation(const TensorImpl&, int64_t, SizeCmp, const TensorImpl&, int64_t, bool,
                          const std::source_location&) override {}
  void note_backward() noexcept override { backward_ = true; }
  void note_grad_owner(const Tensor&) override {}
  void alias(const Tensor&, const Tensor&) override {}
  void add_host_guard(std::string, std::function<double()>, const void*, bool) override {}

 private:
  std::unordered_map<const TensorImpl*, std::string> owner_;
  TensorList derived_;  // the casts and views of parameters in owner_
  bool backward_ = false;
};

// max |a - b| / max |b| in float64; 0 where both are 0, infinity where only
// b is, NaN where either holds a NaN.
double relative_error(const Tensor& a, const Tensor& b) {
  NoGradGuard no_grad;
  const Tensor x = a.detach().to(Device::cpu()).to(kFloat64);
  const Tensor y = b.detach().to(Device::cpu()).to(kFloat64);
  if (x.sizes() != y.sizes()) return std::numeric_limits<double>::quiet_NaN();
  const double diff = (x - y).abs().max().item<double>(), scale = y.abs().max().item<double>();
  if (std::isnan(diff) || std::isnan(scale)) return std::numeric_limits<double>::quiet_NaN();
  if (diff == 0) return 0;
  return scale == 0 ? std::numeric_limits<double>::infinity() : diff / scale;
}

struct Run {
  double loss = 0;
  std::map<std::string, Tensor> activations;
  std::vector<std::string> order;
  std::map<std::string, Tensor> gradients;  // by parameter name
};

}  // namespace

std::string AutocastCheckReport::to_string() const {
  std::ostringstream out;
  out << "autocast_check: " << dtype << " on " << device << " against float32, threshold "
      << threshold << "; loss " << loss_autocast << " against " << loss_float32 << "\n";
  for (const LayerCheck& l : layers) {
    out << "  " << (l.layer.empty() ? "(the model's own parameters)" : l.layer) << ": activation "
        << l.activation_error << ", gradient " << l.gradient_error << (l.above ? "  <- above" : "")
        << "\n";
  }
  out << (first_above ? "first layer above the threshold: " + *first_above
                      : std::string("no layer above the threshold"))
      << "\n";
  return out.str();
}

AutocastCheckReport autocast_check(nn::Module& model, const std::function<Tensor()>& step,
                                   Device device, std::optional<DType> dtype, double threshold) {
  if (!(threshold > 0))
    throw ValueError(detail::str_cat("autocast_check: threshold = ", threshold, ", expected > 0"));
  if (ops::TraceRecorder::active())
    throw ValueError("autocast_check: called inside a compiled function (call it eagerly)");
  const DType low = dtype.value_or(device.is_cuda() ? kFloat16 : kBFloat16);
  std::unordered_map<const TensorImpl*, std::string> owner;
  std::vector<std::pair<std::string, Tensor>> params = model.named_parameters();
  for (const auto& [name, p] : params) {
    const size_t dot = name.rfind('.');
    owner.emplace(p.impl_ptr().get(), dot == std::string::npos ? "" : name.substr(0, dot));
  }
  // The user's gradients and random stream, given back at the end.
  std::vector<Tensor> saved_grads;
  for (const auto& [name, p] : params) saved_grads.push_back(p.grad());
  const Generator stream = default_generator();
  const auto run = [&](bool autocast) {
    for (auto& [name, p] : params) p.set_grad({});
    default_generator() = stream;
    Run r;
    {
      LayerObserver observer(owner);
      Tensor loss;
      {
        Autocast region(device, low, autocast);
        loss = step();
      }
      if (!loss.defined() || loss.numel() != 1)
        throw ValueError("autocast_check: the step must return the loss, one value");
      loss.backward();
      r.loss = loss.detach().to(Device::cpu()).to(kFloat64).item<double>();
      r.activations = std::move(observer.activations);
      r.order = std::move(observer.order);
    }
    for (const auto& [name, p] : params)
      if (p.grad().defined()) r.gradients[name] = p.grad();
    return r;
  };
  Run exact, lower;
  try {
    exact = run(false);
    lower = run(true);
  } catch (...) {
    for (size_t i = 0; i < params.size(); ++i) params[i].second.set_grad(saved_grads[i]);
    default_generator() = stream;
    throw;
  }
  for (size_t i = 0; i < params.size(); ++i) params[i].second.set_grad(saved_grads[i]);
  default_generator() = stream;

  AutocastCheckReport report{device, low, threshold, exact.loss, lower.loss, {}, std::nullopt};
  for (const std::string& layer : exact.order) {
    LayerCheck c{layer, std::numeric_limits<double>::quiet_NaN(), 0.0, false};
    if (lower.activations.contains(layer))
      c.activation_error = relative_error(lower.activations[layer], exact.activations[layer]);
    const std::string prefix = layer.empty() ? "" : layer + ".";
    for (const auto& [name, g] : exact.gradients) {
      if (name.rfind(prefix, 0) != 0 || name.find('.', prefix.size()) != std::string::npos)
        continue;
      const auto it = lower.gradients.find(name);
      const double e = it == lower.gradients.end() ? std::numeric_limits<double>::quiet_NaN()
                                                   : relative_error(it->second, g);
      c.gradient_error = std::isnan(e) || std::isnan(c.gradient_error)
                             ? std::numeric_limits<double>::quiet_NaN()
                             : std::max(c.gradient_error, e);
    }
    c.above = !(c.activation_error <= threshold) || !(c.gradient_error <= threshold);
    report.layers.push_back(std::move(c));
  }
  // Where autocast went wrong first: the forward's first layer whose
  // activation is off; else the backward's first (the forward's last) whose
  // gradient is. Gradients of the layers before it inherit its error.
  for (const LayerCheck& c : report.layers) {
    if (!(c.activation_error <= threshold)) {
      report.first_above = c.layer;
      break;
    }
  }
  for (auto c = report.layers.rbegin(); !report.first_above && c != report.layers.rend(); ++c)
    if (!(c->gradient_error <= threshold)) report.first_above = c->layer;
  return report;
}

}  // namespace kiln::amp
