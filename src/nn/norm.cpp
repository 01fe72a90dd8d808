// Normalization layers.
#include "kiln/nn/norm.h"

#include "kiln/autograd.h"
#include "kiln/nn/init.h"
#include "kiln/ops/factory.h"
#include "kiln/ops/nn.h"

namespace kiln::nn {

namespace F = functional;

// --- BatchNorm ---------------------------------------------------------------------------

BatchNormBase::BatchNormBase(int64_t num_features_, Options options_)
    : num_features(num_features_), options(options_) {
  // name() would say BatchNormBase while the base is being built.
  KILN_CHECK(num_features > 0, ValueError, "BatchNorm: num_features must be positive, got ",
             num_features);
  KILN_CHECK(!options.momentum || (*options.momentum >= 0 && *options.momentum <= 1), ValueError,
             "BatchNorm: momentum must be in [0, 1], got ", options.momentum.value_or(0));
  KILN_CHECK(options.eps >= 0, ValueError, "BatchNorm: eps must be non-negative, got ",
             options.eps);
  if (options.affine) {
    weight = empty({num_features});
    bias = empty({num_features});
  }
  if (options.track_running_stats) {
    running_mean = empty({num_features});
    running_var = empty({num_features});
    num_batches_tracked = zeros({}, {.dtype = kInt64});
  }
  register_parameter("weight", weight);
  register_parameter("bias", bias);
  register_buffer("running_mean", running_mean);
  register_buffer("running_var", running_var);
  register_buffer("num_batches_tracked", num_batches_tracked);
  reset_parameters();
}

void BatchNormBase::reset_running_stats() {
  if (!options.track_running_stats) return;
  init::zeros_(running_mean);
  init::ones_(running_var);
  init::zeros_(num_batches_tracked);
}

void BatchNormBase::reset_parameters() {
  reset_running_stats();
  if (options.affine) {
    init::ones_(weight);
    init::zeros_(bias);
  }
}

Tensor BatchNormBase::normalize(const Tensor& input, int64_t min_dim, int64_t max_dim) {
  const std::string dims =
      min_dim == max_dim ? std::to_string(min_dim) + "-D"
                         : std::to_string(min_dim) + "-D or " + std::to_string(max_dim) + "-D";
  KILN_CHECK(input.dim() >= min_dim && input.dim() <= max_dim, ShapeError, name(), ": expected a ",
             dims, " input, got shape ", input.sizes());
  KILN_CHECK(input.size_is(1, SizeCmp::kEq, num_features), ShapeError, name(), ": input has ",
             input.size(1), " channels in dim 1 (shape ", input.sizes(), "), expected ",
             num_features);
  const bool training = is_training();
  if (training) {
    // More than 1 value per channel: no dim but the channels' is 0, and one is
    // over 1. Compared (size_is), not read: the check ties no size.
    bool empty = false, over_one = false;
    for (int64_t d = 0; d < input.dim(); ++d) {
      if (d == 1) continue;
      empty = empty || input.size_is(d, SizeCmp::kEq, 0);
      over_one = over_one || input.size_is(d, SizeCmp::kGt, 1);
    }
    KILN_CHECK(!empty && over_one, ValueError, name(),
               ": training needs more than 1 value per channel, got input shape ", input.sizes());
  }
  double momentum = options.momentum.value_or(0.0);
  if (training && options.track_running_stats) {
    NoGradGuard no_grad;
    num_batches_tracked.add_(1);
    if (!options.momentum) momentum = 1.0 / num_batches_tracked.item<double>();
  }
  // Without running statistics even eval() normalizes with the batch's.
  const bool use_batch_stats = training || !options.track_running_stats;
  return F::batch_norm(input, running_mean, running_var, weight, bias, use_batch_stats, momentum,
                       options.eps);
}

std::string BatchNormBase::extra_repr() const {
  return std::to_string(num_features) + ", eps=" + repr::number(options.eps) +
         ", momentum=" + (options.momentum ? repr::number(*options.momentum) : "None") +
         ", affine=" + repr::boolean(options.affine) +
         ", track_running_stats=" + repr::boolean(options.track_running_stats);
}

// --- LayerNorm ---------------------------------------------------------------------------

LayerNorm::LayerNorm(Shape normalized_shape_, Options options_)
    : normalized_shape(std::move(normalized_shape_)), options(options_) {
  KILN_CHECK(!normalized_shape.empty(), ValueError,
             "LayerNorm: normalized_shape must not be empty");
  for (int64_t s : normalized_shape) {
    KILN_CHECK(s > 0, ValueError, "LayerNorm: normalized_shape must be positive, got ",
               normalized_shape);
  }
  if (options.elementwise_affine) {
    weight = empty(normalized_shape);
    if (options.bias) bias = empty(normalized_shape);
  }
  register_parameter("weight", weight);
  register_parameter("bias", bias);
  reset_parameters();
}

void LayerNorm::reset_parameters() {
  if (weight.defined()) init::ones_(weight);
  if (bias.defined()) init::zeros_(bias);
}

Tensor LayerNorm::forward(const Tensor& input) {
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  // The trailing dims, read one by one (a traced program reads no other).
  bool fits = input.dim() >= k;
  for (int64_t d = 0; fits && d < k; ++d)
    fits = input.size(input.dim() - k + d) == normalized_shape[static_cast<size_t>(d)];
  KILN_CHECK(fits, ShapeError, "LayerNorm: input shape ", input.sizes(),
             " does not end with normalized_shape ", normalized_shape);
  return F::layer_norm(input, normalized_shape, weight, bias, options.eps);
}

std::string LayerNorm::extra_repr() const {
  return repr::tuple(normalized_shape) + ", eps=" + repr::number(options.eps) +
         ", elementwise_affine=" + repr::boolean(options.elementwise_affine);
}

// --- GroupNorm ---------------------------------------------------------------------------

GroupNorm::GroupNorm(int64_t num_groups_, int64_t num_channels_, Options options_)
    : num_groups(num_groups_), num_channels(num_channels_), options(options_) {
  KILN_CHECK(num_groups > 0 && num_channels > 0 && num_channels % num_groups == 0, ValueError,
             "GroupNorm: num_channels (", num_channels, ") must be a positive multiple of ",
             "num_groups (", num_groups, ")");
  if (options.affine) {
    weight = empty({num_channels});
    bias = empty({num_channels});
  }
  register_parameter("weight", weight);
  register_parameter("bias", bias);
  reset_parameters();
}

void GroupNorm::reset_parameters() {
  if (!options.affine) return;
  init::ones_(weight);
  init::zeros_(bias);
}

Tensor GroupNorm::forward(const Tensor& input) {
  KILN_CHECK(input.dim() >= 2 && input.size(1) == num_channels, ShapeError,
             "GroupNorm: expected input [N, ", num_channels, ", ...], got shape ", input.sizes());
  return F::group_norm(input, num_groups, weight, bias, options.eps);
}

std::string GroupNorm::extra_repr() const {
  return std::to_string(num_groups) + ", " + std::to_string(num_channels) +
         ", eps=" + repr::number(options.eps) + ", affine=" + repr::boolean(options.affine);
}

// --- RMSNorm -----------------------------------------------------------------------------

RMSNorm::RMSNorm(Shape normalized_shape_, Options options_)
    : normalized_shape(std::move(normalized_shape_)), options(options_) {
  KILN_CHECK(!normalized_shape.empty(), ValueError, "RMSNorm: normalized_shape must not be empty");
  for (int64_t s : normalized_shape) {
    KILN_CHECK(s > 0, ValueError, "RMSNorm: normalized_shape must be positive, got ",
               normalized_shape);
  }
  KILN_CHECK(options.eps.value_or(0) >= 0, ValueError, "RMSNorm: eps must be non-negative, got ",
             options.eps.value_or(0));
  if (options.elementwise_affine) weight = empty(normalized_shape);
  register_parameter("weight", weight);
  reset_parameters();
}

void RMSNorm::reset_parameters() {
  if (weight.defined()) init::ones_(weight);
}

Tensor RMSNorm::forward(const Tensor& input) {
  return F::rms_norm(input, normalized_shape, weight, options.eps);
}

std::string RMSNorm::extra_repr() const {
  return repr::tuple(normalized_shape) +
         ", eps=" + (options.eps ? repr::number(*options.eps) : "None") +
         ", elementwise_affine=" + repr::boolean(options.elementwise_affine);
}

// --- InstanceNorm ------------------------------------------------------------------------

InstanceNormBase::InstanceNormBase(int64_t num_features_, InstanceNormOptions options_)
    : BatchNormBase(num_features_, {.eps = options_.eps,
                                    .momentum = options_.momentum,
                                    .affine = options_.affine,
                                    .track_running_stats = options_.track_running_stats}) {}

Tensor InstanceNormBase::normalize_instances(const Tensor& input, int64_t spatial_dims) {
  const bool batched = input.dim() == spatial_dims + 2;
  KILN_CHECK(batched || input.dim() == spatial_dims + 1, ShapeError, name(), ": expected a ",
             spatial_dims + 1, "-D (unbatched) or ", spatial_dims + 2, "-D input, got shape ",
             input.sizes());
  const Tensor x = batched ? input : input.unsqueeze(0);
  KILN_CHECK(x.size_is(1, SizeCmp::kEq, num_features), ShapeError, name(), ": input has ",
             x.size(1), " channels (shape ", input.sizes(), "), expected ", num_features);
  const bool training = is_training();
  if (training && options.track_running_stats) {
    NoGradGuard no_grad;
    num_batches_tracked.add_(1);
  }
  const bool use_input_stats = training || !options.track_running_stats;
  Tensor y = F::instance_norm(x, running_mean, running_var, weight, bias, use_input_stats,
                              options.momentum.value_or(0.1), options.eps);
  return batched ? y : y.squeeze(0);
}

}  // namespace kiln::nn
