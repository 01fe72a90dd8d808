// nn::Embedding: a lookup table of num_embeddings vectors of embedding_dim.
//
//   kiln::nn::Embedding emb{10000, 256, {.padding_idx = 0}};  // row 0 starts at zero
//   auto h = emb(tokens);                                      // int64 [B, T] -> [B, T, 256]
//   auto frozen = kiln::nn::Embedding::from_pretrained(vectors);  // weight shares vectors' data
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "kiln/nn/module.h"
#include "kiln/tensor.h"

namespace kiln::nn {

struct EmbeddingOptions {
  // A row whose gradient is always zero (and that starts at zero); negative
  // values count from num_embeddings.
  std::optional<int64_t> padding_idx = std::nullopt;
};

struct EmbeddingFromPretrainedOptions {
  bool freeze = true;  // the weight does not require grad
  std::optional<int64_t> padding_idx = std::nullopt;
};

// weight [num_embeddings, embedding_dim] drawn from N(0, 1), as PyTorch does.
class Embedding : public Module {
 public:
  using Options = EmbeddingOptions;
  Embedding(int64_t num_embeddings, int64_t embedding_dim, Options options = {});
  // An Embedding whose weight is embeddings [num_embeddings, embedding_dim]
  // (sharing its data, detached from any graph).
  static Embedding from_pretrained(const Tensor& embeddings,
                                   EmbeddingFromPretrainedOptions options = {});

  // Integer indices [...] -> [..., embedding_dim].
  Tensor forward(const Tensor& input);
  Tensor operator()(const Tensor& input) { return forward(input); }
  void reset_parameters();
  std::string extra_repr() const override;

  const int64_t num_embeddings, embedding_dim;
  const std::optional<int64_t> padding_idx;  // normalized to [0, num_embeddings)
  Tensor weight;

 private:
  Embedding(const Tensor& embeddings, EmbeddingFromPretrainedOptions options);
};

}  // namespace kiln::nn
