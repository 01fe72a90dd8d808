// Network functions, as PyTorch's torch.nn.functional: normalizations,
// embedding, dropout, attention, padding, resampling and losses.
//
//   namespace F = kiln::nn::functional;
//   auto h = F::layer_norm(x, {512}, gamma, beta);
//   auto r = F::rms_norm(x, {512}, gamma);
//   auto [cos, sin] = F::rotary_embedding(arange(seq_len), head_dim);
//   auto q_rotated = F::apply_rotary_emb(q, cos, sin);
//   auto a = F::scaled_dot_product_attention(q, k, v, {.is_causal = true});
//   auto y = F::interpolate(img, {.scale_factor = std::vector<double>{2}, .mode = "bilinear"});
//   auto loss = F::nll_loss(log_probs, target, {.ignore_index = 0});
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/ops/factory.h"
#include "kiln/tensor.h"

namespace kiln::nn::functional {

// Normalizes over N and the spatial dims of input [N, C, ...] per channel. When
// training, uses the batch statistics and, when running_mean/running_var are
// given, updates them in place: r = (1 - momentum) * r + momentum * batch stat
// (the variance unbiased). In eval mode the running statistics are required.
Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight = {}, const Tensor& bias = {}, bool training = false,
                  double momentum = 0.1, double eps = 1e-5);

// Normalizes over the trailing dims given by normalized_shape; weight and bias
// have that shape.
Tensor layer_norm(const Tensor& input, const Shape& normalized_shape, const Tensor& weight = {},
                  const Tensor& bias = {}, double eps = 1e-5);

// Normalizes input [N, C, ...] over groups of C / num_groups channels; weight and bias are [C].
Tensor group_norm(const Tensor& input, int64_t num_groups, const Tensor& weight = {},
                  const Tensor& bias = {}, double eps = 1e-5);

// Divides by the root mean square over the trailing dims given by
// normalized_shape, then multiplies by weight (that shape) when given. eps
// defaults to the dtype's machine epsilon; half-precision inputs are
// normalized in float32, as PyTorch's rms_norm.
Tensor rms_norm(const Tensor& input, const Shape& normalized_shape, const Tensor& weight = {},
                std::optional<double> eps = std::nullopt);

// Normalizes each sample's channels of input [N, C, ...] over their spatial
// dims (use_input_stats), updating running_mean/running_var when given with
// the batch's mean of the per-instance statistics; without use_input_stats the
// running statistics normalize, as batch_norm in eval mode.
Tensor instance_norm(const Tensor& input, const Tensor& running_mean = {},
                     const Tensor& running_var = {}, const Tensor& weight = {},
                     const Tensor& bias = {}, bool use_input_stats = true, double momentum = 0.1,
                     double eps = 1e-5);

// Rotary position embeddings. rotary_embedding gives, for integer (or
// float32) positions [...], the tables cos and sin [..., dim] (float32) of the
// angles position * base^(-2i / dim), i < dim / 2, each repeated over both
// halves; apply_rotary_emb(x, cos, sin) = x * cos + rotate_half(x) * sin with
// the tables broadcast to x [..., dim] and cast to its dtype; rotate_half
// turns the halves (a, b) of the last dim into (-b, a).
struct RotaryTables {
  Tensor cos, sin;
};
RotaryTables rotary_embedding(const Tensor& positions, int64_t dim, double base = 10000.0);
Tensor rotate_half(const Tensor& x);
Tensor apply_rotary_emb(const Tensor& x, const Tensor& cos, const Tensor& sin);

// Rows of weight [V, D] at the int32/int64 indices: [..., D]. padding_idx only
// matters for gradients (as in PyTorch); negative values count from V.
Tensor embedding(const Tensor& input, const Tensor& weight,
                 std::optional<int64_t> padding_idx = std::nullopt);

// Zeroes each element with probability p and scales the rest by 1 / (1 - p).
// Returns input itself when not training or p == 0. Draws from generator (the
// default generator when null).
Tensor dropout(const Tensor& input, double p = 0.5, bool training = true,
               Generator* generator = nullptr);

struct AttentionOptions {
  Tensor attn_mask =
      {};  // bool (true = attend) or floating (added to the scores), broadcast to [..., L, S]
  bool is_causal = false;            // query i attends to keys j <= i; exclusive with attn_mask
  std::optional<double> scale = {};  // default 1 / sqrt(E)
};

// softmax(query @ key^T * scale + mask) @ value for query [..., L, E], key
// [..., S, E], value [..., S, Ev] with broadcast batch dims: [..., L, Ev]. A
// query row whose keys are all masked gives zeros, as PyTorch 2.11 on the CPU.
Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const AttentionOptions& options = {});

// pad lists (before, after) pairs from the last dim backwards, as PyTorch's
// F.pad; negative values crop. mode: "constant" (with value), "reflect" (pads
// smaller than the dim) or "replicate".
Tensor pad(const Tensor& input, const std::vector<int64_t>& pad, std::string_view mode = "constant",
           double value = 0);

struct InterpolateOptions {
  // Exactly one of size and scale_factor; one entry applies to every spatial dim.
  std::optional<std::vector<int64_t>> size = {};
  std::optional<std::vector<double>> scale_factor = {};  // output size floor(in * scale)
  std::string mode = "nearest";                          // "nearest" (legacy) or "bilinear" (4-D)
  std::optional<bool> align_corners = {};                // bilinear only; default false
};

// Resamples the spatial dims of input [N, C, (D, H,) W].
Tensor interpolate(const Tensor& input, const InterpolateOptions& options);

struct NllLossOptions {
  Tensor weight = {};  // [C] class weights
  int64_t ignore_index = -100;
  std::string reduction =
      "mean";  // "none", "mean" (weighted by the targets' class weights) or "sum"
};

// Negative log likelihood of log_probs [N, C, d...] (or [C]) at int64 targets [N, d...] (or []).
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const NllLossOptions& options = {});

}  // namespace kiln::nn::functional
