// BertModel: transformers.BertModel's encoder, layer by layer, on kiln's fused
// ops (linear, layer_norm, gelu, scaled_dot_product_attention).
#include "kiln/models/bert.h"

#include <cmath>
#include <limits>
#include <optional>
#include <string_view>
#include <utility>

#include "hf_checkpoint.h"
#include "hf_config.h"
#include "kiln/autograd.h"
#include "kiln/error.h"
#include "kiln/models/checkpoint.h"
#include "kiln/nn/init.h"
#include "kiln/ops/factory.h"
#include "kiln/ops/linalg.h"
#include "kiln/ops/nn.h"
#include "kiln/ops/pointwise.h"
#include "kiln/ops/reduce.h"

namespace kiln::models {
namespace {

using detail::str_cat;
namespace F = nn::functional;

bool known_activation(std::string_view act) {
  return act == "gelu" || act == "gelu_new" || act == "gelu_pytorch_tanh" || act == "relu" ||
         act == "silu";
}

Tensor activate(const Tensor& x, std::string_view act) {
  if (act == "gelu") return gelu(x);
  if (act == "relu") return relu(x);
  if (act == "silu") return silu(x);
  return gelu(x, "tanh");  // gelu_new and gelu_pytorch_tanh: known_activation checked the rest
}

// Throws ValueError naming who (the model or the config file) and the key for
// a config the model cannot be built from.
void check_config(const BertConfig& c, std::string_view who) {
  const std::pair<const char*, int64_t> positive[] = {
      {"vocab_size", c.vocab_size},
      {"hidden_size", c.hidden_size},
      {"num_attention_heads", c.num_attention_heads},
      {"intermediate_size", c.intermediate_size},
      {"max_position_embeddings", c.max_position_embeddings},
      {"type_vocab_size", c.type_vocab_size}};
  for (const auto& [key, value] : positive) {
    if (value <= 0) throw ValueError(str_cat(who, ": ", key, " must be positive, got ", value));
  }
  if (c.num_hidden_layers < 0) {
    throw ValueError(str_cat(who, ": num_hidden_layers must be >= 0, got ", c.num_hidden_layers));
  }
  if (c.hidden_size % c.num_attention_heads != 0) {
    throw ValueError(str_cat(who, ": hidden_size ", c.hidden_size,
                             " is not divisible by num_attention_heads ", c.num_attention_heads));
  }
  if (!known_activation(c.hidden_act)) {
    throw ValueError(str_cat(who, ": unknown hidden_act \"", c.hidden_act,
                             "\" (expected gelu, gelu_new, gelu_pytorch_tanh, relu or silu)"));
  }
  const std::pair<const char*, double> probabilities[] = {
      {"hidden_dropout_prob", c.hidden_dropout_prob},
      {"attention_probs_dropout_prob", c.attention_probs_dropout_prob}};
  for (const auto& [key, p] : probabilities) {
    if (!(p >= 0 && p <= 1))
      throw ValueError(str_cat(who, ": ", key, " must be in [0, 1], got ", p));
  }
  if (!(c.layer_norm_eps > 0)) {
    throw ValueError(str_cat(who, ": layer_norm_eps must be positive, got ", c.layer_norm_eps));
  }
  if (!(c.initializer_range >= 0)) {
    throw ValueError(str_cat(who, ": initializer_range must be >= 0, got ", c.initializer_range));
  }
  if (c.pad_token_id >= c.vocab_size) {
    throw ValueError(
        str_cat(who, ": pad_token_id ", c.pad_token_id, " is not below vocab_size ", c.vocab_size));
  }
}

// transformers' _init_weights: N(0, initializer_range) weights, zero biases.
void init_linear(nn::Linear& layer, double std) {
  nn::init::normal_(layer.weight, 0, std);
  nn::init::zeros_(layer.bias);
}

void init_embedding(nn::Embedding& table, double std) {
  nn::init::normal_(table.weight, 0, std);
  if (table.padding_idx) {
    NoGradGuard no_grad;
    table.weight.select(0, *table.padding_idx).zero_();
  }
}

// The most negative finite value of a floating dtype: the additive mask's "blocked".
double lowest_of(DType dtype) {
  switch (dtype) {
    case kFloat64:
      return std::numeric_limits<double>::lowest();
    case kFloat16:
      return -65504.0;
    case kBFloat16:
      return -3.3895313892515355e38;
    default:
      return std::numeric_limits<float>::lowest();
  }
}

// An embedding lookup whose out-of-range error names the model and the ids.
Tensor lookup(nn::Embedding& table, const Tensor& ids, std::string_view what) {
  try {
    return table(ids);
  } catch (const IndexError& e) {
    throw IndexError(
        str_cat("BertModel: ", what, " must be in [0, ", table.num_embeddings, "): ", e.what()));
  }
}

}  // namespace

// --- BertEmbeddings --------------------------------------------------------------

BertEmbeddings::BertEmbeddings(const BertConfig& c)
    : word_embeddings(c.vocab_size, c.hidden_size,
                      {.padding_idx = c.pad_token_id >= 0 ? std::optional<int64_t>(c.pad_token_id)
                                                          : std::nullopt}),
      position_embeddings(c.max_position_embeddings, c.hidden_size),
      token_type_embeddings(c.type_vocab_size, c.hidden_size),
      layer_norm(c.hidden_size, {.eps = c.layer_norm_eps}),
      dropout(c.hidden_dropout_prob) {
  register_module("word_embeddings", word_embeddings);
  register_module("position_embeddings", position_embeddings);
  register_module("token_type_embeddings", token_type_embeddings);
  register_module("LayerNorm", layer_norm);
  register_module("dropout", dropout);
  init_embedding(word_embeddings, c.initializer_range);
  init_embedding(position_embeddings, c.initializer_range);
  init_embedding(token_type_embeddings, c.initializer_range);
}

Tensor BertEmbeddings::forward(const Tensor& input_ids, const Tensor& token_type_ids,
                               const Tensor& position_ids) {
  // The defaults (type 0, positions 0..S-1) are broadcast over the batch. The
  // positions are made on the device from the ids' shape (a cumulative sum of
  // ones), so that a compiled forward never reads the sequence length and
  // serves every length from one trace (docs/compile.md, Dynamic dims).
  const Tensor types = token_type_ids.defined()
                           ? lookup(token_type_embeddings, token_type_ids, "token_type_ids")
                           : token_type_embeddings.weight.select(0, 0);
  const Tensor positions =
      position_ids.defined()
          ? lookup(position_embeddings, position_ids, "position_ids")
          : position_embeddings(cumsum(ones_like(input_ids.select(0, 0)), 0) - 1);
  // transformers' order of the sums: (words + types) + positions.
  Tensor x = lookup(word_embeddings, input_ids, "input_ids") + types;
  x = x + positions;
  return dropout(layer_norm(x));
}

// --- attention -----------------------------------------------------------------

BertSelfAttention::BertSelfAttention(const BertConfig& c)
    : num_heads(c.num_attention_heads),
      head_dim(c.hidden_size / c.num_attention_heads),
      query(c.hidden_size, c.hidden_size),
      key(c.hidden_size, c.hidden_size),
      value(c.hidden_size, c.hidden_size),
      dropout(c.attention_probs_dropout_prob) {
  register_module("query", query);
  register_module("key", key);
  register_module("value", value);
  register_module("dropout", dropout);
  for (nn::Linear* layer : {&query, &key, &value}) init_linear(*layer, c.initializer_range);
}

Tensor BertSelfAttention::forward(const Tensor& hidden, const Tensor& additive_mask) {
  // The views split and merge the last dim only: a compiled forward reads
  // neither the batch nor the length, and new sizes are made from its trace
  // (docs/compile.md, Dynamic dims).
  // [B, S, H] -> [B, heads, S, head_dim]: a view of each projection.
  auto split_heads = [&](const Tensor& t) {
    return t.unflatten(-1, {num_heads, head_dim}).transpose(1, 2);
  };
  const Tensor q = split_heads(query(hidden)), k = split_heads(key(hidden)),
               v = split_heads(value(hidden));
  Tensor context;
  if (is_training() && dropout.p > 0) {
    // Dropout on the probabilities needs them materialized; eval takes the fused path.
    Tensor scores =
        q.matmul(k.transpose(-1, -2)) * (1.0 / std::sqrt(static_cast<double>(head_dim)));
    if (additive_mask.defined()) scores = scores + additive_mask;
    context = dropout(scores.softmax(-1)).matmul(v);
  } else {
    context = F::scaled_dot_product_attention(q, k, v, {.attn_mask = additive_mask});
  }
  return context.transpose(1, 2).contiguous().flatten(-2);
}

BertResidualOutput::BertResidualOutput(int64_t in_features, const BertConfig& c,
                                       std::string type_name)
    : dense(in_features, c.hidden_size),
      layer_norm(c.hidden_size, {.eps = c.layer_norm_eps}),
      dropout(c.hidden_dropout_prob),
      type_name_(std::move(type_name)) {
  register_module("dense", dense);
  register_module("LayerNorm", layer_norm);
  register_module("dropout", dropout);
  init_linear(dense, c.initializer_range);
}

Tensor BertResidualOutput::forward(const Tensor& hidden, const Tensor& residual) {
  return layer_norm(dropout(dense(hidden)) + residual);
}

BertAttention::BertAttention(const BertConfig& c)
    : self_attention(c), output(c.hidden_size, c, "BertSelfOutput") {
  register_module("self", self_attention);
  register_module("output", output);
}

Tensor BertAttention::forward(const Tensor& hidden, const Tensor& additive_mask) {
  return output.forward(self_attention.forward(hidden, additive_mask), hidden);
}

// --- feed-forward, layers, encoder, pooler ---------------------------------------

BertIntermediate::BertIntermediate(const BertConfig& c)
    : dense(c.hidden_size, c.intermediate_size), hidden_act_(c.hidden_act) {
  register_module("dense", dense);
  init_linear(dense, c.initializer_range);
}

Tensor BertIntermediate::forward(const Tensor& hidden) {
  return activate(dense(hidden), hidden_act_);
}

BertLayer::BertLayer(const BertConfig& c)
    : attention(c), intermediate(c), output(c.intermediate_size, c, "BertOutput") {
  register_module("attention", attention);
  register_module("intermediate", intermediate);
  register_module("output", output);
}

Tensor BertLayer::forward(const Tensor& hidden, const Tensor& additive_mask) {
  const Tensor attended = attention.forward(hidden, additive_mask);
  return output.forward(intermediate.forward(attended), attended);
}

BertEncoder::BertEncoder(const BertConfig& c) {
  register_module("layer", layer);
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) layer.emplace_back<BertLayer>(c);
}

Tensor BertEncoder::forward(const Tensor& hidden, const Tensor& additive_mask) {
  Tensor x = hidden;
  for (size_t i = 0; i < layer.size(); ++i) x = layer.at<BertLayer>(i).forward(x, additive_mask);
  return x;
}

BertPooler::BertPooler(const BertConfig& c) : dense(c.hidden_size, c.hidden_size) {
  register_module("dense", dense);
  init_linear(dense, c.initializer_range);
}

Tensor BertPooler::forward(const Tensor& hidden) { return tanh(dense(hidden.select(1, 0))); }

// --- BertModel -------------------------------------------------------------------

namespace {

BertConfig checked(BertConfig c) {
  check_config(c, "BertModel");
  return c;
}

// The checks compare sizes with sizes (same_sizes, size_is), so that a
// compiled forward depends on their outcome rather than on the sizes.
void check_ids(const Tensor& ids, std::string_view what, const Tensor& input_ids, bool allow_1d) {
  if (ids.dtype() != kInt64) {
    throw DTypeError(str_cat("BertModel: ", what, " must be int64, got ", ids.dtype()));
  }
  const bool ok = ids.same_sizes(input_ids) ||
                  (allow_1d && ids.dim() == 1 && ids.size_is(0, SizeCmp::kEq, input_ids, 1));
  if (!ok) {
    const Shape& expected = input_ids.sizes();
    throw ShapeError(str_cat("BertModel: ", what, " must have the shape of input_ids ", expected,
                             allow_1d ? str_cat(" or [", expected.back(), "]") : "", ", got ",
                             ids.sizes()));
  }
}

void check_inputs(const BertConfig& c, const Tensor& input_ids, const Tensor& attention_mask,
                  const Tensor& token_type_ids, const Tensor& position_ids) {
  if (!input_ids.defined() || input_ids.dim() != 2) {
    throw ShapeError(str_cat("BertModel: input_ids must be [batch, sequence], got ",
                             input_ids.defined() ? str_cat(input_ids.sizes()) : "undefined"));
  }
  if (input_ids.dtype() != kInt64) {
    throw DTypeError(str_cat("BertModel: input_ids must be int64, got ", input_ids.dtype()));
  }
  // The checks compare sizes (size_is, same_sizes) and never read one, so
  // that a compiled forward depends on their outcome only, and serves new
  // batch sizes and lengths from its trace.
  if (input_ids.size_is(1, SizeCmp::kEq, 0)) {
    throw ShapeError(str_cat("BertModel: input_ids ", input_ids.sizes(),
                             " has no tokens (the pooler and ", "every layer need at least one)"));
  }
  if (!position_ids.defined() && input_ids.size_is(1, SizeCmp::kGt, c.max_position_embeddings)) {
    throw ValueError(str_cat("BertModel: sequence length ", input_ids.size(1),
                             " exceeds max_position_embeddings ", c.max_position_embeddings));
  }
  if (attention_mask.defined() && !attention_mask.same_sizes(input_ids)) {
    throw ShapeError(str_cat("BertModel: attention_mask must have the shape of input_ids ",
                             input_ids.sizes(), ", got ", attention_mask.sizes()));
  }
  if (token_type_ids.defined()) check_ids(token_type_ids, "token_type_ids", input_ids, false);
  if (position_ids.defined()) check_ids(position_ids, "position_ids", input_ids, true);
}

// attention_mask [B, S] (1 attend, 0 padding) -> (1 - mask) * lowest as
// [B, 1, 1, S], broadcast over heads and queries by the attention.
Tensor additive_mask_of(const Tensor& attention_mask, DType dtype) {
  const Tensor m = attention_mask.to(dtype);
  // (m - 1) * -lowest equals (1 - m) * lowest exactly, without a reversed subtraction.
  return ((m - 1) * -lowest_of(dtype)).unsqueeze(1).unsqueeze(2);
}

}  // namespace

BertModel::BertModel(BertConfig config, bool add_pooling_layer)
    : config_(checked(std::move(config))), embeddings(config_), encoder(config_) {
  register_module("embeddings", embeddings);
  register_module("encoder", encoder);
  if (add_pooling_layer) pooler = register_module("pooler", std::make_shared<BertPooler>(config_));
}

BertOutput BertModel::forward(const Tensor& input_ids, const Tensor& attention_mask,
                              const Tensor& token_type_ids, const Tensor& position_ids) {
  check_inputs(config_, input_ids, attention_mask, token_type_ids, position_ids);
  const Tensor x = embeddings.forward(input_ids, token_type_ids, position_ids);
  // Converted once for every layer.
  const Tensor mask =
      attention_mask.defined() ? additive_mask_of(attention_mask, x.dtype()) : Tensor();
  BertOutput out;
  out.last_hidden_state = encoder.forward(x, mask);
  if (pooler) out.pooler_output = pooler->forward(out.last_hidden_state);
  return out;
}

namespace {

// A Hugging Face key as this model names it: without "bert.", and with the old
// TensorFlow-era LayerNorm.gamma / beta read as weight / bias.
std::string model_key(std::string_view key) {
  constexpr std::string_view kPrefix = "bert.";
  if (key.starts_with(kPrefix)) key.remove_prefix(kPrefix.size());
  std::string name(key);
  for (const auto& [old_suffix, new_suffix] : {std::pair{".LayerNorm.gamma", ".LayerNorm.weight"},
                                               std::pair{".LayerNorm.beta", ".LayerNorm.bias"}}) {
    if (key.ends_with(old_suffix)) {
      name = str_cat(key.substr(0, key.size() - std::string_view(old_suffix).size()), new_suffix);
    }
  }
  return name;
}

}  // namespace

nn::LoadResult BertModel::load_hf_state_dict(const StateDict& dict, bool strict) {
  return load_hf_checkpoint(
      *this, dict, state_dict(), "BertModel.load_hf_state_dict", strict,
      [](const std::string& key, const StateDict&) -> std::optional<std::string> {
        std::string name = model_key(key);
        // A buffer transformers once saved.
        if (name == "embeddings.position_ids") return std::nullopt;
        return name;
      });
}

// --- BertConfig::from_state_dict ---------------------------------------------------

BertConfig BertConfig::from_state_dict(const StateDict& dict, const BertConfig& rest) {
  constexpr std::string_view kWho = "BertConfig.from_state_dict";
  StateDict own;  // the tensors under this model's names
  for (const auto& [key, tensor] : dict) own.set(model_key(key), tensor);
  auto table_rows = [&](const char* name) {  // of an embedding table [rows, hidden]
    const Tensor* t = own.find(name);
    if (!t || t->dim() != 2) {
      throw ValueError(str_cat(kWho, ": '", name, "' (with or without 'bert.') is ",
                               t ? str_cat("of shape ", t->sizes()) : std::string("absent"),
                               ": the dict holds ", describe_checkpoint(dict), ", not a BERT"));
    }
    return t->size(0);
  };
  BertConfig c = rest;
  c.vocab_size = table_rows("embeddings.word_embeddings.weight");
  c.hidden_size = own.at("embeddings.word_embeddings.weight").size(1);
  c.max_position_embeddings = table_rows("embeddings.position_embeddings.weight");
  c.type_vocab_size = table_rows("embeddings.token_type_embeddings.weight");
  if (own.contains("encoder.layer.0.attention.self.distance_embedding.weight")) {
    throw ValueError(str_cat(kWho,
                             ": the dict holds relative position embeddings "
                             "(distance_embedding); only absolute positions are supported"));
  }
  c.num_hidden_layers = 0;
  while (own.contains(str_cat("encoder.layer.", c.num_hidden_layers, ".output.dense.weight")))
    ++c.num_hidden_layers;
  if (c.num_hidden_layers > 0) {
    const Tensor* up = own.find("encoder.layer.0.intermediate.dense.weight");
    if (!up || up->dim() != 2)
      throw ValueError(str_cat(kWho, ": encoder layer 0 has no 2-D intermediate.dense.weight"));
    c.intermediate_size = up->size(0);
  }
  if (c.hidden_size % c.num_attention_heads != 0) {
    throw ValueError(str_cat(kWho, ": the hidden size ", c.hidden_size,
                             " is not divisible by num_attention_heads ", c.num_attention_heads,
                             ", and the tensors cannot say the number of heads (query, key and "
                             "value are [hidden, hidden] for any): take it from the model's "
                             "config.json"));
  }
  check_config(c, kWho);
  return c;
}

BertConfig BertConfig::from_state_dict(const StateDict& dict) {
  return from_state_dict(dict, BertConfig{});
}

// --- BertConfig::from_json_file ----------------------------------------------------

BertConfig BertConfig::from_json_file(const std::string& path) {
  const std::string where = str_cat("BertConfig.from_json_file: ", path);
  const Json json = read_config_json(path, where);
  const ConfigReader read(json, where);
  BertConfig c;
  read.integer("vocab_size", c.vocab_size);
  read.integer("hidden_size", c.hidden_size);
  read.integer("num_hidden_layers", c.num_hidden_layers);
  read.integer("num_attention_heads", c.num_attention_heads);
  read.integer("intermediate_size", c.intermediate_size);
  read.integer("max_position_embeddings", c.max_position_embeddings);
  read.integer("type_vocab_size", c.type_vocab_size);
  read.optional_integer("pad_token_id", c.pad_token_id);
  read.string("hidden_act", c.hidden_act);
  read.number("hidden_dropout_prob", c.hidden_dropout_prob);
  read.number("attention_probs_dropout_prob", c.attention_probs_dropout_prob);
  read.number("layer_norm_eps", c.layer_norm_eps);
  read.number("initializer_range", c.initializer_range);
  read.reject_unless("position_embedding_type", "absolute", "only absolute positions");
  read.reject_unless("is_decoder", false, "BertModel is the bidirectional encoder");
  check_config(c, where);
  return c;
}

}  // namespace kiln::models
