// Mixed precision (docs/optim.md, "Mixed precision"): autocast regions
// (torch.autocast), which run matrix products and convolutions in float16 or
// bfloat16 and the ops that need range in float32, and dynamic loss scaling
// (torch.amp.GradScaler), so that float16 gradients neither underflow nor,
// when they overflow, update the parameters.
//
//   {
//     amp::Autocast bf16(Device::cpu(), kBFloat16);
//     logits = net.forward(x);                       // linear and conv in bfloat16
//     loss = F::cross_entropy(logits, y);            // log_softmax and nll_loss in float32
//   }
//   loss.backward();  // each op's backward in its forward's dtype
//
//   amp::GradScaler scaler;
//   for (...) {
//     opt.zero_grad();
//     scaler.scale(loss(net, x, y)).backward();
//     scaler.unscale_(opt);                           // optional: to clip true gradients
//     optim::clip_grad_norm_(net.parameters(), 1.0);
//     scaler.step(opt);                               // skipped when a gradient is inf or NaN
//     scaler.update();                                // backoff then; growth after 2000 clean
//   }
//
// autocast_check (below) runs a step both ways and names the first layer
// whose activations or gradients autocast moved past a threshold.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/nn/module.h"
#include "kiln/optim.h"
#include "kiln/state_dict.h"
#include "kiln/tensor.h"

namespace kiln::amp {

// While alive, out-of-place ops on this thread whose inputs are on `device`'s
// kind of device cast their floating inputs (not float64) by PyTorch's
// lists: matmul, linear, convolutions and attention to `dtype`; the ops
// that need range (softmax, norms, exp and log, sums, losses) to float32
// (on the CPU only prod and the losses, as PyTorch); scatter_add's two
// floating inputs to the wider (CUDA). Others run as they are. Scopes
// nest; enabled = false turns it off inside another. A compiled function's
// graphs are kept per autocast state (a guard). ValueError for a dtype
// other than float16 and bfloat16.
class Autocast {
 public:
  explicit Autocast(Device device, DType dtype, bool enabled = true);
  // The device's usual dtype: float16 on CUDA, bfloat16 on the CPU.
  explicit Autocast(Device device, bool enabled = true);
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  DeviceKind kind_;
  bool was_enabled_;
  DType was_dtype_;
};

// Whether autocast is on for the device's kind on this thread, and its dtype.
bool is_autocast_enabled(Device device) noexcept;
DType autocast_dtype(Device device) noexcept;

// --- autocast_check ------------------------------------------------------
// Where mixed precision goes wrong, layer by layer: runs `step` (a forward
// and its loss, returning the loss) twice from the same state, in float32
// and under Autocast(device, dtype), backpropagates each loss, and compares
// per layer (each module owning parameters, by its dotted name) the relative
// error of its activation (the last result of an op that read its
// parameters in the forward) and of its parameters' gradients: max |autocast
// - float32| / max |float32|. The parameters' gradients and the default
// generator are as they were afterwards (the step may hold dropout); nothing
// is updated.
//
//   amp::AutocastCheckReport r = amp::autocast_check(net, [&] {
//     return F::cross_entropy(net.forward(x), y);
//   }, Device::cpu());
//   std::cout << r.to_string();   // each layer, and the first above the threshold
struct LayerCheck {
  std::string layer;        // "layer1.0.conv1"; "" for the model's own parameters
  double activation_error;  // NaN where autocast's run did not use the layer
  double gradient_error;    // the largest of its parameters'; NaN where one got none
  bool above;               // either is above the threshold (or NaN)
};
struct AutocastCheckReport {
  Device device;
  DType dtype;
  double threshold;
  double loss_float32, loss_autocast;
  std::vector<LayerCheck> layers;  // in the order the float32 forward first used them
  // Where autocast went wrong first: the forward's first layer whose
  // activation is above the threshold, else the backward's first (the
  // forward's last) whose gradient is; the layers before it in the forward
  // inherit its error in their gradients.
  std::optional<std::string> first_above;
  std::string to_string() const;
};
// dtype: autocast's default for the device when unset (float16 on CUDA,
// bfloat16 on the CPU). ValueError for threshold <= 0, a step that returns
// no single value, or a call inside a compiled function.
AutocastCheckReport autocast_check(nn::Module& model, const std::function<Tensor()>& step,
                                   Device device, std::optional<DType> dtype = std::nullopt,
                                   double threshold = 0.05);

struct GradScalerOptions {
  double init_scale = 65536.0;     // > 0
  double growth_factor = 2.0;      // > 1
  double backoff_factor = 0.5;     // in (0, 1)
  int64_t growth_interval = 2000;  // clean steps before the scale grows, >= 1
  bool enabled = true;             // false: every call passes through
};

class GradScaler {
 public:
  // ValueError naming the option for values outside the ranges above.
  //
  // The whole iteration may be one compiled function: scale, backward,
  // unscale_, step and update inside it. There a step is skipped on the
  // device (Optimizer::step_unless) and the scale and its growth tracker
  // change on the device, so that a replay decides as eager code would.
  // unscale_/step and update must then be in the same compiled function
  // (a ValueError says so where they are not).
  explicit GradScaler(GradScalerOptions options = {});

  // loss * scale. The scale is a float32 0-dim tensor on loss's device, made
  // at the first call (and read where it is by compiled functions, so a
  // change of scale needs no recompile).
  Tensor scale(const Tensor& loss);

  // Divides the gradients of opt's parameters by the scale, in place, and
  // notes whether any holds an inf or a NaN. Once per optimizer between
  // update()s (ValueError otherwise); step() calls it where it was not.
  void unscale_(optim::Optimizer& opt);

  // opt.step(), unless a gradient of opt's held an inf or a NaN; returns
  // whether it stepped. Eagerly the check is read on the host; inside a
  // compiled function the step is undone on the device where it holds one,
  // and it returns true.
  bool step(optim::Optimizer& opt);

  // After the iteration's step()s: the scale times backoff_factor where a
  // step was skipped, times growth_factor after growth_interval steps in a
  // row that were not. ValueError where no step() came since the last update.
  void update();
  // Sets the scale (> 0).
  void update(double new_scale);

  double get_scale() const;  // 1 while disabled; init_scale before the first scale()
  bool is_enabled() const noexcept { return options_.enabled; }
  // Steps skipped, eagerly and in compiled steps (read from the device).
  int64_t skipped_steps() const;

  // PyTorch's keys: scale (float32), growth_factor, backoff_factor
  // (float64), growth_interval, _growth_tracker (int64), all 0-dim.
  StateDict state_dict() const;
  // ValueError naming a key that is absent or out of range.
  void load_state_dict(const StateDict& state);

 private:
  struct PerOptimizer {
    bool unscaled = false;
    bool stepped = false;
    bool found_inf = false;  // read by step()
    bool traced = false;     // unscale_ ran inside a compiled function
    Tensor found;            // any inf or NaN, on the scale's device (bool, 0-dim)
  };
  void check_scaled(const char* op) const;

  GradScalerOptions options_;
  Tensor scale_;          // float32, 0-dim; undefined before the first scale()
  double pending_scale_;  // the scale to make at the first scale() (init, or loaded)
  // Clean steps in a row (int64, 0-dim, beside the scale), made with it;
  // before, the value to make it with.
  Tensor growth_tracker_;
  int64_t pending_tracker_ = 0;
  int64_t skipped_ = 0;    // skips decided on the host
  Tensor skipped_device_;  // skips decided in compiled steps (int64, 0-dim)
  std::unordered_map<const optim::Optimizer*, PerOptimizer> per_optimizer_;
};

}  // namespace kiln::amp
