// nn::MultiheadAttention with PyTorch's semantics, parameter names and initialization.
//
//   kiln::nn::MultiheadAttention mha{64, 8, {.batch_first = true}};
//   auto x = kiln::randn({2, 10, 64});                        // [N, L, E]
//   auto [out, weights] = mha(x, x, x);                       // [2, 10, 64], [2, 10, 10]
//   auto causal = mha(x, x, x, {.need_weights = false, .is_causal = true}).output;
//   auto pad = kiln::zeros({2, 10}, {.dtype = kiln::kBool});  // true = ignore that key
//   auto masked = mha(x, x, x, {.key_padding_mask = pad}).output;
//
// Masks follow nn.MultiheadAttention, not scaled_dot_product_attention: a true
// entry of a bool mask blocks that position; a floating mask is added to the
// scores.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "kiln/nn/linear.h"
#include "kiln/nn/module.h"
#include "kiln/tensor.h"

namespace kiln::nn {

struct MultiheadAttentionOptions {
  double dropout = 0;                // on the attention weights, when training
  bool bias = true;                  // in_proj_bias and out_proj.bias
  bool batch_first = false;          // [N, L, E] instead of [L, N, E]
  std::optional<int64_t> kdim = {};  // key features; embed_dim when unset
  std::optional<int64_t> vdim = {};  // value features; embed_dim when unset
};

struct AttentionForwardOptions {
  // [N, S] (or [S] unbatched), bool (true = ignore that key) or floating (added).
  Tensor key_padding_mask = {};
  bool need_weights = true;  // also return the attention weights
  // [L, S] or [N * num_heads, L, S], bool (true = blocked) or floating (added).
  Tensor attn_mask = {};
  bool average_attn_weights = true;  // weights [N, L, S] averaged over heads, else [N, H, L, S]
  // Query i attends to keys j <= i. With an attn_mask it is a hint (the mask is
  // used as given, as PyTorch does); without one the causal mask is built here.
  bool is_causal = false;
};

struct AttentionResult {
  Tensor output;   // the query's layout with embed_dim features
  Tensor weights;  // undefined unless need_weights; without the batch dim for unbatched input
};

// Parameters, in PyTorch's order: in_proj_weight [3E, E] when kdim == vdim == E,
// else q_proj_weight [E, E], k_proj_weight [E, kdim], v_proj_weight [E, vdim];
// then in_proj_bias [3E] and the child out_proj (Linear E -> E). Projection
// weights start Xavier-uniform, both biases zero.
class MultiheadAttention : public Module {
 public:
  using Options = MultiheadAttentionOptions;
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, MultiheadAttentionOptions options = {});
  // query [L, N, E], key [S, N, kdim], value [S, N, vdim] ([N, *, *] with
  // batch_first, without N for unbatched input).
  AttentionResult forward(const Tensor& query, const Tensor& key, const Tensor& value,
                          const AttentionForwardOptions& options = {});
  AttentionResult operator()(const Tensor& query, const Tensor& key, const Tensor& value,
                             const AttentionForwardOptions& options = {}) {
    return forward(query, key, value, options);
  }

  const int64_t embed_dim, num_heads, kdim, vdim;
  Tensor in_proj_weight, q_proj_weight, k_proj_weight, v_proj_weight, in_proj_bias;
  Linear out_proj;

 private:
  MultiheadAttentionOptions options_;
};

}  // namespace kiln::nn
