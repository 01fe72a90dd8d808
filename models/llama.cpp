// Llama: transformers.LlamaForCausalLM layer by layer on kiln's ops (linear,
// rms_norm, rotary embeddings, scaled_dot_product_attention), with a growing
// or a static key/value cache (docs/decoder.md).
#include "kiln/models/llama.h"

#include <numbers>
#include <string_view>
#include <utility>

#include "hf_checkpoint.h"
#include "hf_config.h"
#include "kiln/autograd.h"
#include "kiln/error.h"
#include "kiln/nn/init.h"
#include "kiln/ops/factory.h"
#include "kiln/ops/nn.h"
#include "kiln/ops/pointwise.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape.h"

namespace kiln::models {
namespace {

using detail::str_cat;
namespace F = nn::functional;

// Throws ValueError naming who (the model or the config file) and the field
// for a config the model cannot be built from.
void check_config(const LlamaConfig& c, std::string_view who) {
  const std::pair<const char*, int64_t> positive[] = {
      {"vocab_size", c.vocab_size},
      {"hidden_size", c.hidden_size},
      {"intermediate_size", c.intermediate_size},
      {"num_attention_heads", c.num_attention_heads},
      {"max_position_embeddings", c.max_position_embeddings}};
  for (const auto& [key, value] : positive) {
    if (value <= 0) throw ValueError(str_cat(who, ": ", key, " must be positive, got ", value));
  }
  if (c.num_hidden_layers < 0) {
    throw ValueError(str_cat(who, ": num_hidden_layers must be >= 0, got ", c.num_hidden_layers));
  }
  if (c.num_key_value_heads < 0 || c.num_attention_heads % c.kv_heads() != 0) {
    throw ValueError(str_cat(who, ": num_key_value_heads ", c.num_key_value_heads,
                             " must divide num_attention_heads ", c.num_attention_heads));
  }
  if (c.head_dim < 0) throw ValueError(str_cat(who, ": head_dim must be >= 0, got ", c.head_dim));
  if (c.head_dim == 0 && c.hidden_size % c.num_attention_heads != 0) {
    throw ValueError(str_cat(who, ": hidden_size ", c.hidden_size,
                             " is not divisible by num_attention_heads ", c.num_attention_heads));
  }
  if (c.head_size() % 2 != 0) {
    throw ValueError(str_cat(who, ": the head size ", c.head_size(),
                             " must be even (the rotary embedding turns pairs of features)"));
  }
  const std::pair<const char*, double> positive_reals[] = {
      {"rms_norm_eps", c.rms_norm_eps},
      {"rope_theta", c.rope_theta},
      {"rope factor", c.rope_scaling.factor},
      {"rope low_freq_factor", c.rope_scaling.low_freq_factor},
      {"rope original_max_position_embeddings",
       static_cast<double>(c.rope_scaling.original_max_position_embeddings)}};
  for (const auto& [key, value] : positive_reals) {
    if (!(value > 0)) throw ValueError(str_cat(who, ": ", key, " must be positive, got ", value));
  }
  const LlamaConfig::RopeScaling& rope = c.rope_scaling;
  if (rope.type != "default" && rope.type != "linear" && rope.type != "llama3") {
    throw ValueError(str_cat(who, ": rope_type '", rope.type,
                             "' is not implemented (default, linear and llama3 are)"));
  }
  if (rope.type == "llama3" && !(rope.high_freq_factor > rope.low_freq_factor)) {
    throw ValueError(str_cat(who, ": rope high_freq_factor ", rope.high_freq_factor,
                             " must exceed low_freq_factor ", rope.low_freq_factor));
  }
  if (!(c.initializer_range >= 0)) {
    throw ValueError(str_cat(who, ": initializer_range must be >= 0, got ", c.initializer_range));
  }
}

// The rotary embedding's inverse frequencies, in float32 as transformers'
// rope initializers compute them (default, linear and llama3).
Tensor inverse_frequency(const LlamaConfig& c, Device device) {
  const int64_t dim = c.head_size();
  const Tensor exponents = arange(0, dim, 2, {.dtype = kInt64, .device = device}).to(kFloat32) /
                           static_cast<double>(dim);
  const Tensor inv = reciprocal(pow(c.rope_theta, exponents));
  const LlamaConfig::RopeScaling& r = c.rope_scaling;
  if (r.type == "linear") return inv / r.factor;
  if (r.type != "llama3") return inv;
  const auto context = static_cast<double>(r.original_max_position_embeddings);
  const double low_wavelength = context / r.low_freq_factor;
  const double high_wavelength = context / r.high_freq_factor;
  const Tensor wavelength = (2 * std::numbers::pi) / inv;
  // Long wavelengths slowed by factor, short ones kept, those between blended.
  const Tensor scaled = where(wavelength > low_wavelength, inv / r.factor, inv);
  const Tensor smooth =
      (context / wavelength - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
  const Tensor blended = (1 - smooth) * scaled / r.factor + smooth * scaled;
  const Tensor medium = logical_and(wavelength >= high_wavelength, wavelength <= low_wavelength);
  return where(medium, blended, scaled);
}

// cos and sin of positions times the inverse frequencies, both halves.
F::RotaryTables rotary_tables(const Tensor& positions, const LlamaConfig& c) {
  if (c.rope_scaling.type == "default")
    return F::rotary_embedding(positions, c.head_size(), c.rope_theta);
  const Tensor angles =
      positions.to(kFloat32).unsqueeze(-1) * inverse_frequency(c, positions.device());
  const Tensor both_halves = cat({angles, angles}, -1);
  return {cos(both_halves), sin(both_halves)};
}

// transformers' _init_weights: N(0, initializer_range) weights, zero biases.
void init_linear(nn::Linear& layer, double std) {
  nn::init::normal_(layer.weight, 0, std);
  if (layer.bias.defined()) nn::init::zeros_(layer.bias);
}

nn::Linear::Options bias_if(bool bias) { return {.bias = bias}; }

}  // namespace

// --- layers ------------------------------------------------------------------------

LlamaAttention::LlamaAttention(const LlamaConfig& c)
    : num_heads(c.num_attention_heads),
      num_kv_heads(c.kv_heads()),
      head_dim(c.head_size()),
      q_proj(c.hidden_size, num_heads * head_dim, bias_if(c.attention_bias)),
      k_proj(c.hidden_size, num_kv_heads * head_dim, bias_if(c.attention_bias)),
      v_proj(c.hidden_size, num_kv_heads * head_dim, bias_if(c.attention_bias)),
      o_proj(num_heads * head_dim, c.hidden_size, bias_if(c.attention_bias)) {
  register_module("q_proj", q_proj);
  register_module("k_proj", k_proj);
  register_module("v_proj", v_proj);
  register_module("o_proj", o_proj);
  for (nn::Linear* layer : {&q_proj, &k_proj, &v_proj, &o_proj})
    init_linear(*layer, c.initializer_range);
}

Tensor LlamaAttention::forward(const Tensor& hidden, const LlamaAttentionContext& ctx, Tensor& keys,
                               Tensor& values) {
  // [B, T, heads * head_dim] -> [B, heads, T, head_dim]
  const auto split_heads = [this](nn::Linear& proj, const Tensor& x) {
    return proj(x).unflatten(-1, {-1, head_dim}).transpose(1, 2);
  };
  const Tensor q = F::apply_rotary_emb(split_heads(q_proj, hidden), ctx.cos, ctx.sin);
  const Tensor k = F::apply_rotary_emb(split_heads(k_proj, hidden), ctx.cos, ctx.sin);
  const Tensor v = split_heads(v_proj, hidden);
  if (ctx.cache_position.defined()) {
    index_copy_(keys, 2, ctx.cache_position, k);
    index_copy_(values, 2, ctx.cache_position, v);
  } else if (keys.defined()) {
    keys = cat({keys, k}, 2);
    values = cat({values, v}, 2);
  } else {
    // Contiguous as cat makes them, so that the first decode step's cache has
    // the layout of every later step's (a compiled step is keyed on strides).
    keys = k.contiguous();
    values = v.contiguous();
  }
  // Grouped-query attention without repeating the keys: the query heads that
  // share a key/value head become a dim of their own, over which its keys
  // and values broadcast ([B, kv_heads, group, T, head_dim]).
  const Tensor grouped = q.unflatten(1, {num_kv_heads, -1});
  const Tensor context =
      F::scaled_dot_product_attention(grouped, keys.unsqueeze(2), values.unsqueeze(2),
                                      {.attn_mask = ctx.mask, .is_causal = ctx.is_causal});
  return o_proj(context.flatten(1, 2).transpose(1, 2).contiguous().flatten(-2));
}

LlamaMLP::LlamaMLP(const LlamaConfig& c)
    : gate_proj(c.hidden_size, c.intermediate_size, bias_if(c.mlp_bias)),
      up_proj(c.hidden_size, c.intermediate_size, bias_if(c.mlp_bias)),
      down_proj(c.intermediate_size, c.hidden_size, bias_if(c.mlp_bias)) {
  register_module("gate_proj", gate_proj);
  register_module("up_proj", up_proj);
  register_module("down_proj", down_proj);
  for (nn::Linear* layer : {&gate_proj, &up_proj, &down_proj})
    init_linear(*layer, c.initializer_range);
}

Tensor LlamaMLP::forward(const Tensor& x) { return down_proj(silu(gate_proj(x)) * up_proj(x)); }

LlamaDecoderLayer::LlamaDecoderLayer(const LlamaConfig& c)
    : self_attn(c),
      mlp(c),
      input_layernorm(c.hidden_size, {.eps = c.rms_norm_eps}),
      post_attention_layernorm(c.hidden_size, {.eps = c.rms_norm_eps}) {
  register_module("self_attn", self_attn);
  register_module("mlp", mlp);
  register_module("input_layernorm", input_layernorm);
  register_module("post_attention_layernorm", post_attention_layernorm);
}

Tensor LlamaDecoderLayer::forward(const Tensor& hidden, const LlamaAttentionContext& ctx,
                                  Tensor& keys, Tensor& values) {
  const Tensor h = hidden + self_attn.forward(input_layernorm(hidden), ctx, keys, values);
  return h + mlp.forward(post_attention_layernorm(h));
}

LlamaModel::LlamaModel(const LlamaConfig& c)
    : embed_tokens(c.vocab_size, c.hidden_size), norm(c.hidden_size, {.eps = c.rms_norm_eps}) {
  register_module("embed_tokens", embed_tokens);
  register_module("layers", layers);
  register_module("norm", norm);
  nn::init::normal_(embed_tokens.weight, 0, c.initializer_range);
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) layers.emplace_back<LlamaDecoderLayer>(c);
}

Tensor LlamaModel::forward(const Tensor& input_ids, const LlamaAttentionContext& ctx,
                           std::vector<Tensor>& keys, std::vector<Tensor>& values) {
  if (keys.size() != layers.size() || values.size() != layers.size()) {
    throw ValueError(str_cat("LlamaModel: ", keys.size(), " keys and ", values.size(),
                             " values given for ", layers.size(), " layers"));
  }
  Tensor x;
  try {
    x = embed_tokens(input_ids);
  } catch (const IndexError& e) {
    throw IndexError(
        str_cat("Llama: input_ids must be in [0, ", embed_tokens.num_embeddings, "): ", e.what()));
  }
  for (size_t i = 0; i < layers.size(); ++i)
    x = layers.at<LlamaDecoderLayer>(i).forward(x, ctx, keys[i], values[i]);
  return norm(x);
}

// --- Llama ---------------------------------------------------------------------------

namespace {

LlamaConfig checked(LlamaConfig c) {
  check_config(c, "Llama");
  return c;
}

// The checks compare sizes with sizes (size_is, same_sizes) rather than
// reading them, so that a compiled decode step depends on their outcome and
// serves every cache length from one trace (docs/decoder.md, "Compiled").
void check_input_ids(const Tensor& ids) {
  if (!ids.defined() || ids.dim() != 2) {
    throw ShapeError(str_cat("Llama: input_ids must be [batch, tokens], got ",
                             ids.defined() ? str_cat(ids.sizes()) : "undefined"));
  }
  if (ids.dtype() != kInt64) {
    throw DTypeError(str_cat("Llama: input_ids must be int64, got ", ids.dtype()));
  }
  if (ids.size_is(1, SizeCmp::kEq, 0) || ids.size_is(0, SizeCmp::kEq, 0)) {
    throw ShapeError(str_cat("Llama: input_ids ", ids.sizes(), " holds no tokens"));
  }
}

void check_cache_tensors(const std::vector<Tensor>& keys, const std::vector<Tensor>& values,
                         const Tensor& ids, const LlamaConfig& c, std::string_view what) {
  const auto layers = static_cast<size_t>(c.num_hidden_layers);
  if (keys.size() != layers || values.size() != layers) {
    throw ValueError(str_cat("Llama: the ", what, " holds ", keys.size(), " keys and ",
                             values.size(), " values for ", layers, " layers"));
  }
  for (size_t i = 0; i < layers; ++i) {
    const Tensor& k = keys[i];
    const bool ok = k.defined() && values[i].defined() && k.dim() == 4 &&
                    k.size_is(0, SizeCmp::kEq, ids, 0) &&
                    k.size_is(1, SizeCmp::kEq, c.kv_heads()) &&
                    k.size_is(3, SizeCmp::kEq, c.head_size()) && values[i].same_sizes(k);
    if (!ok) {
      throw ShapeError(str_cat("Llama: the ", what, "'s layer ", i, " keys ",
                               k.defined() ? str_cat(k.sizes()) : "-", " and values ",
                               values[i].defined() ? str_cat(values[i].sizes()) : "-",
                               " must both be [batch ", ids.size(0), ", kv heads ", c.kv_heads(),
                               ", length, head size ", c.head_size(), "]"));
    }
  }
}

// Which keys a query attends when no attention_mask is given.
enum class KeysWithoutMask {
  kCausal,       // no cache: keys 0..i for query i (is_causal)
  kAll,          // one new token after a growing cache's: every key
  kUpToOwnSlot,  // the keys up to the query's slot (a mask is made)
};

// The attention context of one forward: query slots [T] (where this call's
// tokens go in the sequence) and key slots [S] (every token attended), as
// int64 tensors made on the device, so that no length is read on the host.
LlamaAttentionContext make_context(const LlamaConfig& c, const Tensor& ids,
                                   const Tensor& query_slots, const Tensor& key_slots,
                                   const LlamaForwardOptions& o,
                                   KeysWithoutMask keys_without_mask) {
  LlamaAttentionContext ctx;
  Tensor attend;  // bool [B, S]
  if (o.attention_mask.defined()) {
    const Tensor& m = o.attention_mask;
    if (m.dim() != 2 || !m.size_is(0, SizeCmp::kEq, ids, 0) ||
        !m.size_is(1, SizeCmp::kEq, key_slots, 0)) {
      throw ShapeError(str_cat("Llama: attention_mask must be [batch ", ids.size(0),
                               ", attended tokens ", key_slots.size(0), "], got ", m.sizes()));
    }
    attend = m.dtype() == kBool ? m : m != 0;
  }
  Tensor positions;  // [B, T] or [1, T]
  if (o.position_ids.defined()) {
    const Tensor& p = o.position_ids;
    const bool ok = p.dtype() == kInt64 &&
                    (p.same_sizes(ids) || (p.dim() == 1 && p.size_is(0, SizeCmp::kEq, ids, 1)));
    if (!ok) {
      throw ShapeError(str_cat("Llama: position_ids must be int64 of the shape of input_ids ",
                               ids.sizes(), " or [", ids.size(1), "], got ", p.dtype(), " ",
                               p.sizes()));
    }
    positions = p.dim() == 1 ? p.unsqueeze(0) : p;
  } else if (attend.defined()) {
    // A token's position counts the attended tokens before it; padding's is 0.
    const Tensor counted = masked_fill(cumsum(attend, -1, kInt64) - 1, logical_not(attend), 0);
    positions = index_select(counted, 1, query_slots);
  } else {
    positions = query_slots.unsqueeze(0);
  }
  const auto [cos, sin] = rotary_tables(positions, c);
  ctx.cos = cos.unsqueeze(1);
  ctx.sin = sin.unsqueeze(1);

  if (!attend.defined() && keys_without_mask == KeysWithoutMask::kCausal) {
    ctx.is_causal = true;
  } else if (attend.defined() || keys_without_mask == KeysWithoutMask::kUpToOwnSlot) {
    Tensor allowed = key_slots.unsqueeze(0) <= query_slots.unsqueeze(1);  // [T, S]
    if (attend.defined()) allowed = logical_and(allowed.unsqueeze(0), attend.unsqueeze(1));
    // Broadcast over the key/value heads and the query heads of each group.
    ctx.mask = allowed.unsqueeze(-3).unsqueeze(-3);
  }
  return ctx;
}

}  // namespace

Llama::Llama(LlamaConfig config)
    : config_(checked(std::move(config))),
      model(config_),
      lm_head(config_.hidden_size, config_.vocab_size, {.bias = false}) {
  register_module("model", model);
  register_module("lm_head", lm_head);
  init_linear(lm_head, config_.initializer_range);
  if (config_.tie_word_embeddings) lm_head.weight = model.embed_tokens.weight;
}

LlamaOutput Llama::forward(const Tensor& input_ids, const KVCache& past,
                           const LlamaForwardOptions& options) {
  check_input_ids(input_ids);
  if (!past.empty()) check_cache_tensors(past.keys, past.values, input_ids, config_, "cache");
  // Slots from cumulative sums of ones shaped like the tokens: the length
  // stays a size of the layouts, never a number on the host.
  const Tensor new_ones = ones_like(input_ids.select(0, 0));
  Tensor query_slots = cumsum(new_ones, 0) - 1, key_slots = query_slots;
  KeysWithoutMask keys_without_mask = KeysWithoutMask::kCausal;
  if (!past.empty()) {
    const Tensor past_ones =
        ones_like(past.keys.front().select(0, 0).select(0, 0).select(-1, 0)).to(kInt64);
    query_slots = query_slots + past_ones.sum();
    keys_without_mask = input_ids.size_is(1, SizeCmp::kEq, 1) ? KeysWithoutMask::kAll
                                                              : KeysWithoutMask::kUpToOwnSlot;
    // Only a mask reads the keys' slots; a decode step without padding makes none.
    if (options.attention_mask.defined() || keys_without_mask == KeysWithoutMask::kUpToOwnSlot)
      key_slots = cumsum(cat({past_ones, new_ones}), 0) - 1;
  }
  const LlamaAttentionContext ctx =
      make_context(config_, input_ids, query_slots, key_slots, options, keys_without_mask);

  LlamaOutput out;
  out.cache = past;
  if (out.cache.empty()) {
    out.cache.keys.resize(static_cast<size_t>(config_.num_hidden_layers));
    out.cache.values.resize(out.cache.keys.size());
  }
  Tensor hidden = model.forward(input_ids, ctx, out.cache.keys, out.cache.values);
  if (options.last_logits_only) hidden = hidden.select(1, -1).unsqueeze(1);
  out.logits = lm_head(hidden);
  return out;
}

Tensor Llama::forward(const Tensor& input_ids, StaticKVCache& cache, const Tensor& cache_position,
                      const LlamaForwardOptions& options) {
  check_input_ids(input_ids);
  check_cache_tensors(cache.keys, cache.values, input_ids, config_, "static cache");
  if (!cache_position.defined() || cache_position.dtype() != kInt64 || cache_position.dim() != 1 ||
      !cache_position.size_is(0, SizeCmp::kEq, input_ids, 1)) {
    throw ShapeError(str_cat(
        "Llama: cache_position must be int64 [", input_ids.size(1), "] (a slot per token), got ",
        cache_position.defined() ? str_cat(cache_position.dtype(), " ", cache_position.sizes())
                                 : "undefined"));
  }
  const Tensor key_slots =
      arange(cache.capacity(), {.dtype = kInt64, .device = input_ids.device()});
  LlamaAttentionContext ctx = make_context(config_, input_ids, cache_position, key_slots, options,
                                           KeysWithoutMask::kUpToOwnSlot);
  ctx.cache_position = cache_position;
  Tensor hidden = model.forward(input_ids, ctx, cache.keys, cache.values);
  if (options.last_logits_only) hidden = hidden.select(1, -1).unsqueeze(1);
  return lm_head(hidden);
}

StaticKVCache Llama::make_static_cache(int64_t batch, int64_t capacity) const {
  if (batch <= 0 || capacity <= 0) {
    throw ValueError(str_cat("Llama.make_static_cache: batch and capacity must be positive, got ",
                             batch, " and ", capacity));
  }
  const Tensor& w = model.embed_tokens.weight;
  StaticKVCache cache;
  for (int64_t i = 0; i < config_.num_hidden_layers; ++i) {
    for (std::vector<Tensor>* slots : {&cache.keys, &cache.values}) {
      slots->push_back(zeros({batch, config_.kv_heads(), capacity, config_.head_size()},
                             {.dtype = w.dtype(), .device = w.device()}));
    }
  }
  return cache;
}

nn::LoadResult Llama::load_hf_state_dict(const StateDict& dict, bool strict) {
  StateDict own = state_dict();
  // Tied, lm_head.weight is the embedding's tensor: loaded with it, whether
  // the dict repeats it (state_dict()) or not (save_pretrained).
  const bool tied = config_.tie_word_embeddings;
  if (tied) own.erase("lm_head.weight");
  return load_hf_checkpoint(
      *this, dict, own, "Llama.load_hf_state_dict", strict,
      [tied](const std::string& key, const StateDict& names) -> std::optional<std::string> {
        if (key.ends_with("rotary_emb.inv_freq")) return std::nullopt;  // older checkpoints'
        if (tied && key == "lm_head.weight") return std::nullopt;
        // A LlamaModel's dict: no "model." prefix.
        if (!names.contains(key) && names.contains("model." + key)) return "model." + key;
        return key;
      });
}

// --- LlamaConfig::from_json_file -------------------------------------------------------

LlamaConfig LlamaConfig::from_json_file(const std::string& path) {
  const std::string where = str_cat("LlamaConfig.from_json_file: ", path);
  const Json json = read_config_json(path, where);
  const ConfigReader read(json, where);
  LlamaConfig c;
  read.integer("vocab_size", c.vocab_size);
  read.integer("hidden_size", c.hidden_size);
  read.integer("intermediate_size", c.intermediate_size);
  read.integer("num_hidden_layers", c.num_hidden_layers);
  read.integer("num_attention_heads", c.num_attention_heads);
  read.optional_integer("num_key_value_heads", c.num_key_value_heads);
  read.optional_integer("head_dim", c.head_dim);
  read.integer("max_position_embeddings", c.max_position_embeddings);
  read.number("rms_norm_eps", c.rms_norm_eps);
  read.number("rope_theta", c.rope_theta);
  read.number("initializer_range", c.initializer_range);
  read.boolean("tie_word_embeddings", c.tie_word_embeddings);
  read.boolean("attention_bias", c.attention_bias);
  read.boolean("mlp_bias", c.mlp_bias);
  read.optional_integer("bos_token_id", c.bos_token_id);
  read.integer_list("eos_token_id", c.eos_token_ids);
  if (c.num_key_value_heads == -1) c.num_key_value_heads = 0;  // null: one per query head
  if (c.head_dim == -1) c.head_dim = 0;
  // transformers 5 keeps rope_theta and the rope type in rope_parameters,
  // transformers 4 the type (as rope_type or type) in rope_scaling.
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    const std::optional<ConfigReader> rope = read.object(key);
    if (!rope) continue;
    rope->number("rope_theta", c.rope_theta);
    rope->string("type", c.rope_scaling.type);
    rope->string("rope_type", c.rope_scaling.type);
    rope->number("factor", c.rope_scaling.factor);
    rope->number("low_freq_factor", c.rope_scaling.low_freq_factor);
    rope->number("high_freq_factor", c.rope_scaling.high_freq_factor);
    rope->integer("original_max_position_embeddings",
                  c.rope_scaling.original_max_position_embeddings);
  }
  read.reject_unless("hidden_act", "silu", "the MLP is SwiGLU");
  check_config(c, where);
  return c;
}

}  // namespace kiln::models
