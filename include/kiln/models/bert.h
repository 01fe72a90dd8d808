// BERT encoder with Hugging Face transformers.BertModel's structure, parameter
// names, initialization and eval-mode numerics.
//
//   using namespace kiln::models;
//   BertModel bert(BertConfig::from_json_file("bert-base-uncased/config.json"));
//   bert.load_hf_state_dict(kiln::load_safetensors("bert-base-uncased/model.safetensors"));
//   bert.eval();
//   auto ids = kiln::from_vector<int64_t>({101, 7592, 2088, 102}, kiln::Shape{1, 4});
//   auto out = bert(ids);               // out.last_hidden_state [1, 4, 768]
//   auto cls = out.pooler_output;       // [1, 768]: tanh(dense(hidden[:, 0]))
//
// Masks follow Hugging Face: attention_mask is 1 where a key may be attended and
// 0 where it is padding; it becomes the additive mask (1 - mask) * lowest float,
// so a query whose every key is masked attends uniformly to all keys (as
// transformers does), not to nothing.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "kiln/nn/container.h"
#include "kiln/nn/dropout.h"
#include "kiln/nn/embedding.h"
#include "kiln/nn/linear.h"
#include "kiln/nn/module.h"
#include "kiln/nn/norm.h"
#include "kiln/state_dict.h"
#include "kiln/tensor.h"

namespace kiln::models {

// transformers.BertConfig's fields and defaults (bert-base-uncased).
struct BertConfig {
  int64_t vocab_size = 30522, hidden_size = 768, num_hidden_layers = 12, num_attention_heads = 12,
          intermediate_size = 3072, max_position_embeddings = 512, type_vocab_size = 2;
  int64_t pad_token_id = 0;  // the word embedding's padding row; negative: none (JSON null)
  // "gelu" (erf), "gelu_new" / "gelu_pytorch_tanh" (tanh approximation), "relu", "silu".
  std::string hidden_act = "gelu";
  double hidden_dropout_prob = 0.1, attention_probs_dropout_prob = 0.1, layer_norm_eps = 1e-12;
  double initializer_range = 0.02;  // std of the normal initialization

  // Reads a Hugging Face config.json. Unknown keys are ignored; IOError when the
  // file cannot be read, ValueError naming the file and key for a value of the
  // wrong type or range, or for a variant this model does not implement
  // (position_embedding_type other than "absolute", is_decoder).
  static BertConfig from_json_file(const std::string& path);

  // The sizes a Hugging Face or PyTorch state dict (keys with or without
  // "bert.") fixes: vocab_size, hidden_size, max_position_embeddings and
  // type_vocab_size from the embeddings, num_hidden_layers and
  // intermediate_size from the encoder's layers. No tensor says
  // num_attention_heads (query, key and value are [hidden, hidden] for any
  // number of heads), hidden_act, layer_norm_eps, pad_token_id or the dropout
  // rates: those are rest's (transformers' defaults without it). ValueError
  // saying what the dict holds when it is no BERT's, or when rest's heads do
  // not divide its hidden size.
  static BertConfig from_state_dict(const StateDict& dict, const BertConfig& rest);
  static BertConfig from_state_dict(const StateDict& dict);
};

struct BertOutput {
  Tensor last_hidden_state;  // [B, S, hidden_size]
  Tensor pooler_output;      // [B, hidden_size]; undefined without the pooling layer
};

// Word + position + token type embeddings, LayerNorm, dropout.
class BertEmbeddings : public nn::Module {
 public:
  explicit BertEmbeddings(const BertConfig& config);
  // input_ids [B, S]; token_type_ids [B, S] or undefined (type 0); position_ids
  // [B, S] or [S] or undefined (0..S-1). Ids are checked by the caller's shapes.
  Tensor forward(const Tensor& input_ids, const Tensor& token_type_ids, const Tensor& position_ids);

  nn::Embedding word_embeddings, position_embeddings, token_type_embeddings;
  nn::LayerNorm layer_norm;  // "LayerNorm"
  nn::Dropout dropout;
};

// Multi-head self-attention projections; the heads run in one
// scaled_dot_product_attention call.
class BertSelfAttention : public nn::Module {
 public:
  explicit BertSelfAttention(const BertConfig& config);
  // hidden [B, S, H]; additive_mask [B, 1, 1, S] or undefined -> [B, S, H].
  Tensor forward(const Tensor& hidden, const Tensor& additive_mask);

  const int64_t num_heads, head_dim;
  nn::Linear query, key, value;
  nn::Dropout dropout;  // on the attention probabilities, when training
};

// dense, dropout, then LayerNorm of the sum with the block's input. Serves both
// the attention output ("attention.output") and the feed-forward output
// ("output"), which have the same form.
class BertResidualOutput : public nn::Module {
 public:
  BertResidualOutput(int64_t in_features, const BertConfig& config, std::string type_name);
  Tensor forward(const Tensor& hidden, const Tensor& residual);
  std::string name() const override { return type_name_; }

  nn::Linear dense;
  nn::LayerNorm layer_norm;  // "LayerNorm"
  nn::Dropout dropout;

 private:
  std::string type_name_;  // "BertSelfOutput" or "BertOutput", as transformers prints them
};

class BertAttention : public nn::Module {
 public:
  explicit BertAttention(const BertConfig& config);
  Tensor forward(const Tensor& hidden, const Tensor& additive_mask);

  BertSelfAttention self_attention;  // "self"
  BertResidualOutput output;
};

// dense to intermediate_size and the activation.
class BertIntermediate : public nn::Module {
 public:
  explicit BertIntermediate(const BertConfig& config);
  Tensor forward(const Tensor& hidden);

  nn::Linear dense;

 private:
  std::string hidden_act_;
};

class BertLayer : public nn::Module {
 public:
  explicit BertLayer(const BertConfig& config);
  Tensor forward(const Tensor& hidden, const Tensor& additive_mask);

  BertAttention attention;
  BertIntermediate intermediate;
  BertResidualOutput output;
};

class BertEncoder : public nn::Module {
 public:
  explicit BertEncoder(const BertConfig& config);
  Tensor forward(const Tensor& hidden, const Tensor& additive_mask);

  nn::ModuleList layer;  // BertLayer "0", "1", ...
};

// tanh(dense(hidden[:, 0])): the [CLS] vector.
class BertPooler : public nn::Module {
 public:
  explicit BertPooler(const BertConfig& config);
  Tensor forward(const Tensor& hidden);

  nn::Linear dense;
};

class BertModel : public nn::Module {
 public:
  // ValueError for a config it cannot build (non-positive sizes, hidden_size
  // not divisible by num_attention_heads, unknown hidden_act).
  explicit BertModel(BertConfig config = {}, bool add_pooling_layer = true);

  // input_ids int64 [B, S]; attention_mask [B, S] of 1 (attend) / 0 (padding),
  // any numeric dtype or bool; token_type_ids int64 [B, S] (zeros when
  // undefined); position_ids int64 [B, S] or [S] (0..S-1 when undefined).
  BertOutput forward(const Tensor& input_ids, const Tensor& attention_mask = {},
                     const Tensor& token_type_ids = {}, const Tensor& position_ids = {});
  BertOutput operator()(const Tensor& input_ids, const Tensor& attention_mask = {},
                        const Tensor& token_type_ids = {}, const Tensor& position_ids = {}) {
    return forward(input_ids, attention_mask, token_type_ids, position_ids);
  }

  const BertConfig& config() const noexcept { return config_; }

  // Loads a Hugging Face / PyTorch state dict. Keys may carry the "bert."
  // prefix (BertForPreTraining, BertForSequenceClassification); other keys
  // ("cls.*", "classifier.*", "pooler.*" without a pooler) are skipped and
  // returned in unexpected_keys; old "LayerNorm.gamma"/"beta" names are read as
  // weight/bias; "embeddings.position_ids" is ignored. strict: a missing key is
  // a ValueError listing them (and nothing is copied). A wrong shape is always
  // a ValueError.
  nn::LoadResult load_hf_state_dict(const StateDict& dict, bool strict = true);

 private:
  BertConfig config_;

 public:
  BertEmbeddings embeddings;
  BertEncoder encoder;
  std::shared_ptr<BertPooler> pooler;  // null without the pooling layer
};

}  // namespace kiln::models
