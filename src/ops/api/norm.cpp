// The normalizations composed of other ops: rms_norm and instance_norm.
#include "kiln/autograd.h"
#include "kiln/ops/nn.h"
#include "kiln/ops/pointwise.h"
#include "kiln/ops/reduce.h"
#include "ops/tracing.h"

namespace kiln::nn::functional {
namespace {

// The machine epsilon of a floating dtype: rms_norm's eps when none is given.
double machine_epsilon(DType dtype) {
  switch (dtype) {
    case kFloat64:
      return 2.220446049250313e-16;
    case kFloat16:
      return 0.0009765625;
    case kBFloat16:
      return 0.0078125;
    default:
      return 1.1920928955078125e-07;
  }
}

}  // namespace

Tensor rms_norm(const Tensor& input, const Shape& normalized_shape, const Tensor& weight,
                std::optional<double> eps) {
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  KILN_CHECK(is_floating(input.dtype()), DTypeError, "rms_norm: expected a floating input, got ",
             input.dtype());
  bool fits = input.dim() >= k;
  for (int64_t d = 0; fits && d < k; ++d)
    fits = input.size(input.dim() - k + d) == normalized_shape[static_cast<size_t>(d)];
  KILN_CHECK(fits, ShapeError, "rms_norm: input shape ", input.sizes(),
             " does not end with normalized_shape ", normalized_shape);
  KILN_CHECK(!weight.defined() || weight.sizes() == normalized_shape, ShapeError,
             "rms_norm: weight shape ", weight.defined() ? weight.sizes() : Shape{},
             " must equal normalized_shape ", normalized_shape);
  const double e = eps.value_or(machine_epsilon(input.dtype()));
  KILN_CHECK(e >= 0, ValueError, "rms_norm: eps must be non-negative, got ", e);
  Dims dims;
  for (int64_t d = -k; d < 0; ++d) dims.push_back(d);
  // Half-precision inputs are normalized in float32 and rounded back before
  // the weight multiplies them, as PyTorch does.
  const DType compute = input.dtype() == kFloat64 ? kFloat64 : kFloat32;
  const Tensor x = input.to(compute);
  Tensor y = (x * rsqrt(mean(x * x, dims, /*keepdim=*/true) + e)).to(input.dtype());
  return weight.defined() ? y * weight : y;
}

Tensor instance_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                     const Tensor& weight, const Tensor& bias, bool use_input_stats,
                     double momentum, double eps) {
  KILN_CHECK(input.dim() >= 3, ShapeError,
             "instance_norm: expected an input [N, C, ...] with spatial dims, got ", input.sizes());
  const int64_t channels = input.size(1);
  for (const Tensor* t : {&running_mean, &running_var, &weight, &bias}) {
    KILN_CHECK(!t->defined() || t->sizes() == Shape{channels}, ShapeError,
               "instance_norm: running statistics, weight and bias must be [", channels,
               "] for input ", input.sizes(), ", got ", t->sizes());
  }
  if (!use_input_stats) {
    KILN_CHECK(running_mean.defined() && running_var.defined(), ValueError,
               "instance_norm: use_input_stats=false needs running_mean and running_var");
    return batch_norm(input, running_mean, running_var, weight, bias, /*training=*/false, momentum,
                      eps);
  }
  // One group per channel: each sample's channel is normalized over its own spatial dims.
  Tensor out = group_norm(input, channels, weight, bias, eps);
  if (!running_mean.defined() && !running_var.defined()) return out;
  // Meta inputs update nothing, unless they are a trace's proxies (as batch_norm's).
  if (input.is_meta() && ops::TraceRecorder::active() == nullptr) return out;
  NoGradGuard no_grad;  // running statistics are state, not part of the graph
  Dims spatial;
  for (int64_t d = 2; d < input.dim(); ++d) spatial.push_back(d);
  // The running statistics move toward the batch's mean of the per-instance
  // mean and unbiased variance.
  if (running_mean.defined()) {
    Tensor r = running_mean;
    r.mul_(1 - momentum).add_(mean(mean(input, spatial), {0}).to(r.dtype()), momentum);
  }
  if (running_var.defined()) {
    Tensor r = running_var;
    r.mul_(1 - momentum).add_(mean(var(input, spatial, 1.0), {0}).to(r.dtype()), momentum);
  }
  return out;
}

}  // namespace kiln::nn::functional
