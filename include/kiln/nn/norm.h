// Normalization layers: BatchNorm1d, BatchNorm2d, LayerNorm, GroupNorm, RMSNorm,
// InstanceNorm1d, InstanceNorm2d, InstanceNorm3d.
//
//   kiln::nn::BatchNorm2d bn{16};                             // running stats, momentum 0.1
//   kiln::nn::BatchNorm1d avg{8, {.momentum = std::nullopt}}; // cumulative average
//   kiln::nn::LayerNorm ln{512};                              // or {{16, 32}} for 2 trailing dims
//   kiln::nn::GroupNorm gn{4, 16};
//   kiln::nn::RMSNorm rms{4096, {.eps = 1e-6}};
//   kiln::nn::InstanceNorm2d in{16, {.affine = true}};
//   auto y = bn(x);   // batch statistics when training, running statistics after eval()
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "kiln/nn/module.h"
#include "kiln/tensor.h"

namespace kiln::nn {

struct BatchNormOptions {
  double eps = 1e-5;
  // Weight of the new batch in the running statistics; nullopt averages all
  // batches seen so far (1 / num_batches_tracked).
  std::optional<double> momentum = 0.1;
  bool affine = true;               // learnable weight (ones) and bias (zeros)
  bool track_running_stats = true;  // buffers running_mean, running_var, num_batches_tracked
};

// What BatchNorm1d and BatchNorm2d share. Parameters weight [C], bias [C];
// buffers running_mean [C] (zeros), running_var [C] (ones), num_batches_tracked
// (int64, 0-dim). Training normalizes with the batch statistics and folds them
// into the running ones; eval() normalizes with the running ones (or with the
// batch's when track_running_stats is off).
class BatchNormBase : public Module {
 public:
  using Options = BatchNormOptions;
  BatchNormBase(int64_t num_features, Options options);

  void reset_running_stats();
  void reset_parameters();  // also resets the running statistics
  std::string extra_repr() const override;

  const int64_t num_features;
  const Options options;
  Tensor weight, bias;
  Tensor running_mean, running_var, num_batches_tracked;

 protected:
  // Checks that input has one of the dim counts the layer accepts, then normalizes.
  Tensor normalize(const Tensor& input, int64_t min_dim, int64_t max_dim);
};

// input [N, C] or [N, C, L].
class BatchNorm1d : public BatchNormBase {
 public:
  explicit BatchNorm1d(int64_t num_features, Options options = {})
      : BatchNormBase(num_features, options) {}
  Tensor forward(const Tensor& input) { return normalize(input, 2, 3); }
  Tensor operator()(const Tensor& input) { return forward(input); }
};

// input [N, C, H, W].
class BatchNorm2d : public BatchNormBase {
 public:
  explicit BatchNorm2d(int64_t num_features, Options options = {})
      : BatchNormBase(num_features, options) {}
  Tensor forward(const Tensor& input) { return normalize(input, 4, 4); }
  Tensor operator()(const Tensor& input) { return forward(input); }
};

struct LayerNormOptions {
  double eps = 1e-5;
  bool elementwise_affine = true;  // learnable weight (ones) with normalized_shape
  bool bias = true;                // and bias (zeros), when elementwise_affine
};

// Normalizes over the trailing dims given by normalized_shape.
class LayerNorm : public Module {
 public:
  using Options = LayerNormOptions;
  explicit LayerNorm(Shape normalized_shape, Options options = {});
  explicit LayerNorm(int64_t normalized_size, Options options = {})
      : LayerNorm(Shape{normalized_size}, options) {}

  Tensor forward(const Tensor& input);
  Tensor operator()(const Tensor& input) { return forward(input); }
  void reset_parameters();
  std::string extra_repr() const override;

  const Shape normalized_shape;
  const Options options;
  Tensor weight, bias;
};

struct GroupNormOptions {
  double eps = 1e-5;
  bool affine = true;  // learnable weight (ones) and bias (zeros), [num_channels]
};

// Normalizes input [N, C, ...] over groups of C / num_groups channels.
class GroupNorm : public Module {
 public:
  using Options = GroupNormOptions;
  GroupNorm(int64_t num_groups, int64_t num_channels, Options options = {});

  Tensor forward(const Tensor& input);
  Tensor operator()(const Tensor& input) { return forward(input); }
  void reset_parameters();
  std::string extra_repr() const override;

  const int64_t num_groups, num_channels;
  const Options options;
  Tensor weight, bias;
};

struct RMSNormOptions {
  std::optional<double> eps = {};  // the input dtype's machine epsilon when not given
  bool elementwise_affine = true;  // learnable weight (ones) with normalized_shape
};

// Divides by the root mean square over the trailing dims given by
// normalized_shape (functional::rms_norm), then scales by weight.
class RMSNorm : public Module {
 public:
  using Options = RMSNormOptions;
  explicit RMSNorm(Shape normalized_shape, Options options = {});
  explicit RMSNorm(int64_t normalized_size, Options options = {})
      : RMSNorm(Shape{normalized_size}, options) {}

  Tensor forward(const Tensor& input);
  Tensor operator()(const Tensor& input) { return forward(input); }
  void reset_parameters();
  std::string extra_repr() const override;

  const Shape normalized_shape;
  const Options options;
  Tensor weight;
};

struct InstanceNormOptions {
  double eps = 1e-5;
  double momentum = 0.1;
  bool affine = false;               // learnable weight (ones) and bias (zeros), [C]
  bool track_running_stats = false;  // buffers running_mean, running_var, num_batches_tracked
};

// What InstanceNorm1d/2d/3d share: each sample's channel is normalized over
// its own spatial dims (functional::instance_norm). With track_running_stats,
// training folds the statistics into running ones, which eval() then uses.
// Parameters and buffers are named as BatchNorm's.
class InstanceNormBase : public BatchNormBase {
 public:
  InstanceNormBase(int64_t num_features, InstanceNormOptions options);

 protected:
  // input [N, C, spatial...] or, unbatched, [C, spatial...].
  Tensor normalize_instances(const Tensor& input, int64_t spatial_dims);
};

// input [N, C, L] or [C, L].
class InstanceNorm1d : public InstanceNormBase {
 public:
  explicit InstanceNorm1d(int64_t num_features, InstanceNormOptions options = {})
      : InstanceNormBase(num_features, options) {}
  Tensor forward(const Tensor& input) { return normalize_instances(input, 1); }
  Tensor operator()(const Tensor& input) { return forward(input); }
};

// input [N, C, H, W] or [C, H, W].
class InstanceNorm2d : public InstanceNormBase {
 public:
  explicit InstanceNorm2d(int64_t num_features, InstanceNormOptions options = {})
      : InstanceNormBase(num_features, options) {}
  Tensor forward(const Tensor& input) { return normalize_instances(input, 2); }
  Tensor operator()(const Tensor& input) { return forward(input); }
};

// input [N, C, D, H, W] or [C, D, H, W].
class InstanceNorm3d : public InstanceNormBase {
 public:
  explicit InstanceNorm3d(int64_t num_features, InstanceNormOptions options = {})
      : InstanceNormBase(num_features, options) {}
  Tensor forward(const Tensor& input) { return normalize_instances(input, 3); }
  Tensor operator()(const Tensor& input) { return forward(input); }
};

}  // namespace kiln::nn
