// MultiheadAttention: input projections, per-head scaled dot-product attention
// with PyTorch's mask conventions, output projection.
#include "kiln/nn/attention.h"

#include <cmath>
#include <limits>
#include <vector>

#include "kiln/autograd.h"
#include "kiln/nn/init.h"
#include "kiln/ops/factory.h"
#include "kiln/ops/linalg.h"
#include "kiln/ops/nn.h"
#include "kiln/ops/pointwise.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape.h"

namespace kiln::nn {
namespace {

constexpr const char* kName = "MultiheadAttention";

int64_t checked_embed_dim(int64_t embed_dim, int64_t num_heads,
                          const MultiheadAttentionOptions& o) {
  KILN_CHECK(embed_dim > 0 && num_heads > 0, ValueError, kName,
             ": embed_dim and num_heads must be positive, got ", embed_dim, " and ", num_heads);
  KILN_CHECK(embed_dim % num_heads == 0, ValueError, kName, ": embed_dim ", embed_dim,
             " is not divisible by num_heads ", num_heads);
  KILN_CHECK(o.dropout >= 0 && o.dropout <= 1, ValueError, kName,
             ": dropout must be in [0, 1], got ", o.dropout);
  KILN_CHECK(o.kdim.value_or(1) > 0 && o.vdim.value_or(1) > 0, ValueError, kName,
             ": kdim and vdim must be positive, got ", o.kdim.value_or(embed_dim), " and ",
             o.vdim.value_or(embed_dim));
  return embed_dim;
}

// A bool mask (true = blocked) as -inf/0 in dtype; a floating mask as it is.
Tensor additive_mask(const Tensor& mask, DType dtype, const char* which) {
  if (mask.dtype() == kBool) {
    return where(mask, -std::numeric_limits<double>::infinity(),
                 zeros({}, {.dtype = dtype, .device = mask.device()}));
  }
  KILN_CHECK(is_floating(mask.dtype()), DTypeError, kName, ": ", which,
             " must be bool or floating, got ", mask.dtype());
  return mask;
}

// One call's layout. Its sizes are compared (size_is), never read, so a
// compiled program serves every batch size and sequence length from one
// trace; `seq` is the dim of the query, key and value that runs over tokens.
struct Dims {
  int64_t seq = 0;
  bool batched = false;
};

Dims check_inputs(const MultiheadAttention& m, const Tensor& q, const Tensor& k, const Tensor& v,
                  bool batch_first) {
  KILN_CHECK(q.dim() == 2 || q.dim() == 3, ShapeError, kName,
             ": expected a 2-D (unbatched) or 3-D query, got shape ", q.sizes());
  KILN_CHECK(k.dim() == q.dim() && v.dim() == q.dim(), ShapeError, kName,
             ": key and value must have the query's ", q.dim(), " dims, got key ", k.sizes(),
             " and value ", v.sizes());
  KILN_CHECK(q.size_is(-1, SizeCmp::kEq, m.embed_dim), ShapeError, kName, ": query has ",
             q.size(-1), " features in its last dim, expected embed_dim ", m.embed_dim);
  KILN_CHECK(k.size_is(-1, SizeCmp::kEq, m.kdim), ShapeError, kName, ": key has ", k.size(-1),
             " features in its last dim, expected kdim ", m.kdim);
  KILN_CHECK(v.size_is(-1, SizeCmp::kEq, m.vdim), ShapeError, kName, ": value has ", v.size(-1),
             " features in its last dim, expected vdim ", m.vdim);
  const bool batched = q.dim() == 3;
  const int64_t seq = batched && batch_first ? 1 : 0;
  KILN_CHECK(k.size_is(seq, SizeCmp::kEq, v, seq), ShapeError, kName,
             ": key and value have different sequence lengths: key ", k.sizes(), ", value ",
             v.sizes());
  if (batched) {
    const int64_t b = 1 - seq;
    KILN_CHECK(k.size_is(b, SizeCmp::kEq, q, b) && v.size_is(b, SizeCmp::kEq, q, b), ShapeError,
               kName, ": query, key and value have different batch sizes: ", q.sizes(), ", ",
               k.sizes(), ", ", v.sizes());
  }
  return {seq, batched};
}

// The additive mask of a call, broadcastable to scores [N, H, L, S]; undefined
// when nothing is masked. q and k are the call's query and key as given.
Tensor combined_mask(const AttentionForwardOptions& o, const Dims& d, const Tensor& q,
                     const Tensor& k, int64_t heads, DType dtype, Device device) {
  const int64_t b = 1 - d.seq;
  Tensor mask;
  if (o.attn_mask.defined()) {
    const Tensor& a = o.attn_mask;
    // [L, S], or [N * heads, L, S] (then its first dim is read: N * heads is no size of a tensor).
    const bool ok = (a.dim() == 2 || a.dim() == 3) && a.size_is(-2, SizeCmp::kEq, q, d.seq) &&
                    a.size_is(-1, SizeCmp::kEq, k, d.seq) &&
                    (a.dim() == 2 || a.size(0) == (d.batched ? q.size(b) : 1) * heads);
    if (!ok) {
      const int64_t L = q.size(d.seq), S = k.size(d.seq), N = d.batched ? q.size(b) : 1;
      throw ShapeError(detail::str_cat(kName, ": attn_mask must be ", Shape{L, S}, " or ",
                                       Shape{N * heads, L, S}, ", got ", a.sizes()));
    }
    mask = additive_mask(a, dtype, "attn_mask");
    if (a.dim() == 3) mask = mask.unflatten(0, {-1, heads});
  } else if (o.is_causal) {
    mask = additive_mask(
        triu(ones({q.sym_size(d.seq), k.sym_size(d.seq)}, {.dtype = kBool, .device = device}), 1),
        dtype, "attn_mask");
  }
  if (o.key_padding_mask.defined()) {
    const Tensor& p = o.key_padding_mask;
    const bool ok = d.batched ? p.dim() == 2 && p.size_is(0, SizeCmp::kEq, q, b) &&
                                    p.size_is(1, SizeCmp::kEq, k, d.seq)
                              : p.dim() == 1 && p.size_is(0, SizeCmp::kEq, k, d.seq);
    if (!ok) {
      const Shape expected = d.batched ? Shape{q.size(b), k.size(d.seq)} : Shape{k.size(d.seq)};
      throw ShapeError(
          detail::str_cat(kName, ": key_padding_mask must be ", expected, ", got ", p.sizes()));
    }
    // [N, S] -> [N, 1, 1, S] ([S] -> [1, 1, 1, S]).
    Tensor padding = additive_mask(p, dtype, "key_padding_mask").unsqueeze(-2).unsqueeze(-2);
    if (!d.batched) padding = padding.unsqueeze(0);
    mask = mask.defined() ? mask + padding : padding;
  }
  return mask;
}

// [T, N, E] -> [N, H, T, E / H].
Tensor split_heads(const Tensor& x, int64_t heads) {
  return x.unflatten(2, {heads, -1}).permute({1, 2, 0, 3});
}

}  // namespace

MultiheadAttention::MultiheadAttention(int64_t embed_dim_, int64_t num_heads_,
                                       MultiheadAttentionOptions options)
    : embed_dim(checked_embed_dim(embed_dim_, num_heads_, options)),
      num_heads(num_heads_),
      kdim(options.kdim.value_or(embed_dim_)),
      vdim(options.vdim.value_or(embed_dim_)),
      out_proj(embed_dim_, embed_dim_, {.bias = options.bias}),
      options_(options) {
  if (kdim == embed_dim && vdim == embed_dim) {
    in_proj_weight = init::xavier_uniform_(empty({3 * embed_dim, embed_dim}));
    register_parameter("in_proj_weight", in_proj_weight);
  } else {
    q_proj_weight = init::xavier_uniform_(empty({embed_dim, embed_dim}));
    k_proj_weight = init::xavier_uniform_(empty({embed_dim, kdim}));
    v_proj_weight = init::xavier_uniform_(empty({embed_dim, vdim}));
    register_parameter("q_proj_weight", q_proj_weight);
    register_parameter("k_proj_weight", k_proj_weight);
    register_parameter("v_proj_weight", v_proj_weight);
  }
  if (options.bias) {
    in_proj_bias = zeros({3 * embed_dim});
    register_parameter("in_proj_bias", in_proj_bias);
    init::zeros_(out_proj.bias);
  }
  register_module("out_proj", out_proj);
}

AttentionResult MultiheadAttention::forward(const Tensor& query, const Tensor& key,
                                            const Tensor& value, const AttentionForwardOptions& o) {
  const Dims d = check_inputs(*this, query, key, value, options_.batch_first);
  // Sequence-first with a batch dim: [L, N, E].
  auto canonical = [&](const Tensor& x) {
    if (!d.batched) return x.unsqueeze(1);
    return options_.batch_first ? x.transpose(0, 1) : x;
  };
  const bool packed = in_proj_weight.defined();
  const auto w = packed ? chunk(in_proj_weight, 3, 0)
                        : std::vector<Tensor>{q_proj_weight, k_proj_weight, v_proj_weight};
  const auto b = in_proj_bias.defined() ? chunk(in_proj_bias, 3, 0) : std::vector<Tensor>(3);
  const Tensor q = split_heads(linear(canonical(query), w[0], b[0]), num_heads);
  const Tensor k = split_heads(linear(canonical(key), w[1], b[1]), num_heads);
  const Tensor v = split_heads(linear(canonical(value), w[2], b[2]), num_heads);
  const Tensor mask = combined_mask(o, d, query, key, num_heads, q.dtype(), q.device());

  const bool drop = is_training() && options_.dropout > 0;
  Tensor heads, weights;
  // The fused op returns no weights and has no dropout: the explicit softmax
  // serves the calls that need either.
  if (!o.need_weights && !drop) {
    heads = functional::scaled_dot_product_attention(q, k, v, {.attn_mask = mask});
  } else {
    const double scale = 1.0 / std::sqrt(static_cast<double>(embed_dim / num_heads));
    Tensor scores = matmul(q * scale, k.transpose(-2, -1));
    if (mask.defined()) scores = scores + mask;
    weights = softmax(scores, -1);
    if (drop) weights = functional::dropout(weights, options_.dropout, true);
    heads = matmul(weights, v);
  }
  // [N, H, L, d] -> [L, N, E]
  Tensor output = out_proj(heads.permute({2, 0, 1, 3}).contiguous().flatten(2));
  output = d.batched ? (options_.batch_first ? output.transpose(0, 1) : output) : output.squeeze(1);
  if (!o.need_weights) return {std::move(output), Tensor()};
  if (o.average_attn_weights) weights = weights.mean({1});
  if (!d.batched) weights = weights.squeeze(0);
  return {std::move(output), std::move(weights)};
}

}  // namespace kiln::nn
