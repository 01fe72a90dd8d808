// nn::Embedding.
#include "kiln/nn/embedding.h"

#include "kiln/autograd.h"
#include "kiln/nn/init.h"
#include "kiln/ops/factory.h"
#include "kiln/ops/nn.h"

namespace kiln::nn {

namespace {

std::optional<int64_t> normalize_padding_idx(std::optional<int64_t> idx, int64_t num_embeddings) {
  if (!idx) return std::nullopt;
  KILN_CHECK(*idx >= -num_embeddings && *idx < num_embeddings, ValueError,
             "Embedding: padding_idx ", *idx, " is out of range for ", num_embeddings,
             " embeddings");
  return *idx < 0 ? *idx + num_embeddings : *idx;
}

int64_t checked_rows(const Tensor& embeddings) {
  KILN_CHECK(embeddings.defined() && embeddings.dim() == 2, ShapeError,
             "Embedding::from_pretrained: embeddings must be 2-D [num_embeddings, "
             "embedding_dim], got shape ",
             embeddings.defined() ? embeddings.sizes() : Shape{});
  return embeddings.size(0);
}

}  // namespace

Embedding::Embedding(int64_t num_embeddings_, int64_t embedding_dim_, Options options)
    : num_embeddings(num_embeddings_),
      embedding_dim(embedding_dim_),
      padding_idx(normalize_padding_idx(options.padding_idx, num_embeddings_)) {
  KILN_CHECK(num_embeddings >= 0 && embedding_dim >= 0, ValueError,
             "Embedding: sizes must be non-negative, got num_embeddings=", num_embeddings,
             ", embedding_dim=", embedding_dim);
  weight = empty({num_embeddings, embedding_dim});
  register_parameter("weight", weight);
  reset_parameters();
}

Embedding::Embedding(const Tensor& embeddings, EmbeddingFromPretrainedOptions options)
    : num_embeddings(checked_rows(embeddings)),
      embedding_dim(embeddings.size(1)),
      padding_idx(normalize_padding_idx(options.padding_idx, embeddings.size(0))),
      weight(embeddings.detach()) {
  register_parameter("weight", weight, /*requires_grad=*/!options.freeze);
}

Embedding Embedding::from_pretrained(const Tensor& embeddings,
                                     EmbeddingFromPretrainedOptions options) {
  return Embedding(embeddings, options);
}

void Embedding::reset_parameters() {
  init::normal_(weight);
  if (padding_idx) {
    NoGradGuard no_grad;
    weight.select(0, *padding_idx).zero_();
  }
}

Tensor Embedding::forward(const Tensor& input) {
  return functional::embedding(input, weight, padding_idx);
}

std::string Embedding::extra_repr() const {
  std::string out = std::to_string(num_embeddings) + ", " + std::to_string(embedding_dim);
  if (padding_idx) out += ", padding_idx=" + std::to_string(*padding_idx);
  return out;
}

}  // namespace kiln::nn
