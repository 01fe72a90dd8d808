// The public network functions (kiln::nn::functional).
#include "kiln/ops/nn.h"

#include <algorithm>
#include <cmath>

#include "core/shape_util.h"
#include "kiln/autograd.h"
#include "kiln/ops/pointwise.h"
#include "ops/dispatch.h"
#include "ops/random.h"
#include "ops/tracing.h"

namespace kiln::nn::functional {

using ops::AttrValue;
using ops::dispatch;
using ops::dispatch1;
using ops::OpId;

namespace {

AttrValue optional_int(std::optional<int64_t> v) {
  return v ? AttrValue(*v) : AttrValue(std::monostate{});
}

// PyTorch's output size for a scale factor: floor(in * scale).
std::vector<int64_t> resolve_size(const Tensor& input, const InterpolateOptions& o) {
  if (o.size.has_value() == o.scale_factor.has_value()) {
    throw ValueError("interpolate: exactly one of size and scale_factor must be given");
  }
  const int64_t spatial = std::max<int64_t>(input.dim() - 2, 0);
  auto per_dim = [&](const auto& values, const char* what) {
    if (values.size() != 1 && static_cast<int64_t>(values.size()) != spatial) {
      throw ShapeError(detail::str_cat("interpolate: ", what, " ", values, " must have 1 or ",
                                       spatial, " entries for input ", input.sizes()));
    }
    return [&values](int64_t d) { return values[values.size() == 1 ? 0 : d]; };
  };
  std::vector<int64_t> size(spatial);
  if (o.size) {
    auto at = per_dim(*o.size, "size");
    for (int64_t d = 0; d < spatial; ++d) size[d] = at(d);
    return size;
  }
  auto at = per_dim(*o.scale_factor, "scale_factor");
  for (int64_t d = 0; d < spatial; ++d) {
    const double scale = at(d);
    if (!(scale > 0) || !std::isfinite(scale)) {
      throw ValueError(
          detail::str_cat("interpolate: scale_factor must be positive and finite, got ", scale));
    }
    size[d] = static_cast<int64_t>(std::floor(static_cast<double>(input.size(d + 2)) * scale));
  }
  return size;
}

}  // namespace

Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, bool training, double momentum,
                  double eps) {
  const Tensor inputs[] = {input, weight, bias, running_mean, running_var};
  TensorList out = dispatch(OpId::batch_norm, inputs, {training, eps});
  // Meta inputs update nothing, unless they are a trace's proxies: the trace
  // records the updates, for its replays to make.
  if (!training || (input.is_meta() && ops::TraceRecorder::active() == nullptr)) return out[0];
  const int64_t count = input.size(1) == 0 ? 0 : input.numel() / input.size(1);
  if (count == 0) return out[0];  // no statistics to fold in
  const double unbiased = static_cast<double>(count) / static_cast<double>(count - 1);
  NoGradGuard no_grad;  // running statistics are state, not part of the graph
  if (running_mean.defined()) {
    Tensor r = running_mean;
    r.mul_(1 - momentum).add_(out[1], momentum);
  }
  if (running_var.defined()) {
    Tensor r = running_var;
    r.mul_(1 - momentum).add_(out[2], momentum * unbiased);
  }
  return out[0];
}

Tensor layer_norm(const Tensor& input, const Shape& normalized_shape, const Tensor& weight,
                  const Tensor& bias, double eps) {
  return dispatch1(OpId::layer_norm, {input, weight, bias}, {normalized_shape, eps});
}

Tensor group_norm(const Tensor& input, int64_t num_groups, const Tensor& weight, const Tensor& bias,
                  double eps) {
  return dispatch1(OpId::group_norm, {input, weight, bias}, {num_groups, eps});
}

Tensor embedding(const Tensor& input, const Tensor& weight, std::optional<int64_t> padding_idx) {
  return dispatch1(OpId::embedding, {weight, input}, {optional_int(padding_idx)});
}

Tensor dropout(const Tensor& input, double p, bool training, Generator* generator) {
  if (!(p >= 0 && p <= 1)) {
    throw ValueError(detail::str_cat("dropout: probability p must be in [0, 1], got ", p));
  }
  if (!training || p == 0) return input;
  // A number per element, read unnoted: a trace keeps the count as the
  // node's draw, which is made again for new sizes (compiler/capture/capture.h).
  const auto [seed, offset] = ops::draw_philox(generator, shape_numel(input.impl().sizes));
  return dispatch1(OpId::dropout, {input}, {p, seed, offset});
}

Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const AttentionOptions& o) {
  return dispatch1(OpId::scaled_dot_product_attention, {query, key, value, o.attn_mask},
                   {o.is_causal, o.scale ? AttrValue(*o.scale) : AttrValue(std::monostate{})});
}

Tensor pad(const Tensor& input, const std::vector<int64_t>& pad, std::string_view mode,
           double value) {
  return dispatch1(OpId::pad, {input}, {pad, std::string(mode), value});
}

Tensor interpolate(const Tensor& input, const InterpolateOptions& o) {
  if (o.align_corners.has_value() && o.mode != "bilinear") {
    throw ValueError(detail::str_cat("interpolate: align_corners can only be set with mode ",
                                     "'bilinear', got mode '", o.mode, "'"));
  }
  // One scale for every spatial dim: the rule computes the sizes from it,
  // so a compiled program keeps them symbolic. Otherwise they are read here.
  if (o.scale_factor && !o.size && input.dim() > 2) {
    const std::vector<double>& s = *o.scale_factor;
    const bool one =
        !s.empty() && std::all_of(s.begin(), s.end(), [&](double v) { return v == s[0]; });
    if (one && (s.size() == 1 || static_cast<int64_t>(s.size()) == input.dim() - 2) && s[0] > 0 &&
        std::isfinite(s[0])) {
      return dispatch1(OpId::interpolate, {input},
                       {Shape{}, o.mode, o.align_corners.value_or(false), s[0]});
    }
  }
  return dispatch1(
      OpId::interpolate, {input},
      {resolve_size(input, o), o.mode, o.align_corners.value_or(false), std::monostate{}});
}

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const NllLossOptions& o) {
  return dispatch1(OpId::nll_loss, {log_probs, target, o.weight}, {o.ignore_index, o.reduction});
}

}  // namespace kiln::nn::functional
