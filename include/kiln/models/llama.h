// A Llama-style decoder with Hugging Face transformers.LlamaForCausalLM's
// structure, parameter names, initialization and numerics, a key/value cache
// (growing or preallocated) and token generation, eager or compiled
// (docs/decoder.md).
//
//   using namespace kiln::models;
//   Llama llama(LlamaConfig::from_json_file("llama_small/config.json"));
//   llama.load_hf_state_dict(kiln::load_safetensors("llama_small/model.safetensors"));
//   auto prompt = kiln::from_vector<int64_t>({1, 306, 4658}, kiln::Shape{1, 3});
//   LlamaOutput out = llama.forward(prompt);            // logits [1, 3, vocab], out.cache
//   out = llama.forward(next_token, out.cache);         // [1, 1]: attends to the cache too
//   GenerateResult r = generate(llama, prompt, {.max_new_tokens = 20});   // greedy
//   auto fast = CompiledGenerate(llama);                // one decode trace for every length
//   r = fast(prompt, {.max_new_tokens = 20, .greedy = false, .top_k = 40, .seed = 7});
//
// attention_mask follows Hugging Face: [B, S] with 1 where a token may be
// attended and 0 for padding. forward takes padding on either side; generate
// takes prompts padded on the left (each row's new tokens then follow its
// last prompt token).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/compile.h"
#include "kiln/nn/container.h"
#include "kiln/nn/embedding.h"
#include "kiln/nn/linear.h"
#include "kiln/nn/module.h"
#include "kiln/nn/norm.h"
#include "kiln/ops/factory.h"
#include "kiln/state_dict.h"
#include "kiln/tensor.h"

namespace kiln::models {

// transformers.LlamaConfig's fields and defaults (Llama 2 7B's sizes).
struct LlamaConfig {
  int64_t vocab_size = 32000, hidden_size = 4096, intermediate_size = 11008, num_hidden_layers = 32,
          num_attention_heads = 32;
  int64_t num_key_value_heads = 0;  // 0: num_attention_heads (no grouping)
  int64_t head_dim = 0;             // 0: hidden_size / num_attention_heads
  int64_t max_position_embeddings = 2048;
  double rms_norm_eps = 1e-6, rope_theta = 10000.0, initializer_range = 0.02;
  bool tie_word_embeddings = false, attention_bias = false, mlp_bias = false;
  int64_t bos_token_id = 1;               // negative: none (JSON null)
  std::vector<int64_t> eos_token_ids{2};  // eos_token_id: a number, a list, or null (none)
  // The rotary embedding's frequencies, as transformers' rope_type says:
  // "default" (rope_theta^(-2i/d)), "linear" (those divided by factor: the
  // positions stretched) or "llama3" (Llama 3.1's bands: wavelengths longer
  // than original_max_position_embeddings / low_freq_factor divided by
  // factor, shorter than ... / high_freq_factor kept, those between blended).
  struct RopeScaling {
    std::string type = "default";
    double factor = 1.0, low_freq_factor = 1.0, high_freq_factor = 4.0;
    int64_t original_max_position_embeddings = 8192;
  } rope_scaling;

  // Reads a Hugging Face config.json: rope_theta at the top level or in
  // rope_parameters (transformers 5), the rope type and its values in
  // rope_parameters or rope_scaling (transformers 4). Unknown keys are
  // ignored; IOError when the file cannot be read, ValueError naming the
  // file and key for a value of the wrong type or range, or for a variant
  // this model does not implement (hidden_act other than "silu", a
  // rope_type other than "default", "linear" and "llama3").
  static LlamaConfig from_json_file(const std::string& path);

  int64_t kv_heads() const noexcept {
    return num_key_value_heads > 0 ? num_key_value_heads : num_attention_heads;
  }
  int64_t head_size() const noexcept {
    return head_dim > 0 ? head_dim : hidden_size / num_attention_heads;
  }
};

// Keys and values of the tokens seen so far, one [B, kv_heads, S, head_dim]
// pair per layer (keys after the rotary embedding). A forward returns a new
// cache with its tokens appended (cat); empty before the first.
struct KVCache {
  std::vector<Tensor> keys, values;

  bool empty() const noexcept { return keys.empty(); }
  int64_t length() const { return empty() ? 0 : keys.front().size(2); }
};

// Keys and values preallocated for `capacity` slots, [B, kv_heads, capacity,
// head_dim] per layer, written in place at the slots a forward names: every
// decode step has the same shapes, as one CUDA graph per step needs.
struct StaticKVCache {
  std::vector<Tensor> keys, values;

  int64_t batch() const { return keys.empty() ? 0 : keys.front().size(0); }
  int64_t capacity() const { return keys.empty() ? 0 : keys.front().size(2); }
};

struct LlamaOutput {
  Tensor logits;  // [B, T, vocab], or [B, 1, vocab] with last_logits_only
  KVCache cache;  // the past's keys and values and this call's
};

struct LlamaForwardOptions {
  // [B, S]: 1 attend, 0 padding, any numeric dtype or bool. S counts the
  // cache's tokens and this call's (a growing cache), or the capacity (a
  // static cache; slots after a query's own are never attended).
  Tensor attention_mask = {};
  // int64 [B, T] or [T]. By default each token's position counts the
  // attended tokens before it (the mask's cumulative sum, as transformers'
  // generate), or is its slot without a mask.
  Tensor position_ids = {};
  bool last_logits_only = false;  // the lm_head on the last position only (generation)
};

// What the attention layers of one forward share, made once by Llama::forward.
struct LlamaAttentionContext {
  Tensor cos, sin;  // rotary tables [B or 1, 1, T, head_dim]
  // bool [B or 1, 1, 1, T, S], true where a query may attend a key; undefined
  // when is_causal says it all, or when every key may be attended.
  Tensor mask;
  bool is_causal = false;  // query i attends keys 0..i (no cache, no padding)
  Tensor cache_position;   // a static cache's slots [T] this call writes; else undefined
};

// Rotary q and k, grouped-query attention over the cache's keys and values, o_proj.
class LlamaAttention : public nn::Module {
 public:
  explicit LlamaAttention(const LlamaConfig& config);
  // hidden [B, T, hidden]. keys and values: a growing cache's [B, kv_heads,
  // P, head_dim] (undefined for none), replaced by the past and this call's;
  // or a static cache's buffers, written at ctx.cache_position.
  Tensor forward(const Tensor& hidden, const LlamaAttentionContext& ctx, Tensor& keys,
                 Tensor& values);

  const int64_t num_heads, num_kv_heads, head_dim;
  nn::Linear q_proj, k_proj, v_proj, o_proj;
};

// down_proj(silu(gate_proj(x)) * up_proj(x)).
class LlamaMLP : public nn::Module {
 public:
  explicit LlamaMLP(const LlamaConfig& config);
  Tensor forward(const Tensor& x);

  nn::Linear gate_proj, up_proj, down_proj;
};

// x + attention(norm(x)), then h + mlp(norm(h)).
class LlamaDecoderLayer : public nn::Module {
 public:
  explicit LlamaDecoderLayer(const LlamaConfig& config);
  Tensor forward(const Tensor& hidden, const LlamaAttentionContext& ctx, Tensor& keys,
                 Tensor& values);

  LlamaAttention self_attn;
  LlamaMLP mlp;
  nn::RMSNorm input_layernorm, post_attention_layernorm;
};

// embed_tokens, the decoder layers and the final norm (transformers' LlamaModel).
class LlamaModel : public nn::Module {
 public:
  explicit LlamaModel(const LlamaConfig& config);
  // The final hidden states [B, T, hidden]; keys and values hold one entry
  // per layer, as LlamaAttention::forward takes them.
  Tensor forward(const Tensor& input_ids, const LlamaAttentionContext& ctx,
                 std::vector<Tensor>& keys, std::vector<Tensor>& values);

  nn::Embedding embed_tokens;
  nn::ModuleList layers;  // LlamaDecoderLayer "0", "1", ...
  nn::RMSNorm norm;
};

// transformers.LlamaForCausalLM: "model" and "lm_head" (sharing the
// embedding's weight with tie_word_embeddings).
class Llama : public nn::Module {
 public:
  // ValueError naming the field for a config it cannot build.
  explicit Llama(LlamaConfig config);

  // input_ids int64 [B, T] (T >= 1); past: a cache from an earlier forward of
  // the same batch, or empty. Returns the logits and the cache with this
  // call's keys and values appended.
  LlamaOutput forward(const Tensor& input_ids, const KVCache& past = {},
                      const LlamaForwardOptions& options = {});
  // With a static cache: this call's keys and values are written at the
  // slots cache_position (int64 [T], ascending) of every layer, and each
  // token attends to the written slots up to its own. Returns the logits.
  Tensor forward(const Tensor& input_ids, StaticKVCache& cache, const Tensor& cache_position,
                 const LlamaForwardOptions& options = {});
  Tensor operator()(const Tensor& input_ids) { return forward(input_ids).logits; }

  // Zeros for `capacity` slots of `batch` rows, in the model's dtype and on its device.
  StaticKVCache make_static_cache(int64_t batch, int64_t capacity) const;

  // Loads a Hugging Face LlamaForCausalLM state dict (or a LlamaModel's,
  // without "model." and lm_head). Skipped and returned in unexpected_keys:
  // keys of no parameter here; ignored: rotary_emb.inv_freq buffers, and
  // lm_head.weight when the embeddings are tied. strict: a missing key is a
  // ValueError listing them (and nothing is copied); a wrong shape always is,
  // naming the key and both shapes.
  nn::LoadResult load_hf_state_dict(const StateDict& dict, bool strict = true);

  const LlamaConfig& config() const noexcept { return config_; }

 private:
  LlamaConfig config_;

 public:
  LlamaModel model;
  nn::Linear lm_head;
};

// --- generation ------------------------------------------------------------------

enum class KVCacheKind {
  Growing,  // KVCache: the keys and values grow by cat at every step
  Static,   // StaticKVCache: preallocated, written in place, same shapes every step
};

struct GenerateOptions {
  int64_t max_new_tokens = 32;
  // Greedy: the most likely token. Otherwise sampled from softmax(logits /
  // temperature) over the top_k most likely tokens (0: all of them).
  bool greedy = true;
  double temperature = 1.0;
  int64_t top_k = 50;
  // What sampling draws from: generator when given, else a Generator seeded
  // with seed, else the default generator. The generator is advanced as the
  // draws advance it.
  Generator* generator = nullptr;
  std::optional<uint64_t> seed = {};
  // A row that emits one of these stops: its later tokens are pad_token_id,
  // and generation ends once every row has stopped.
  std::vector<int64_t> eos_token_ids = {};
  int64_t pad_token_id = 0;
  // [B, P] for prompts padded on the left (1 for tokens, 0 for padding).
  Tensor attention_mask = {};
  KVCacheKind cache = KVCacheKind::Growing;
  // Slots of a static cache: 0 for the prompt and max_new_tokens, rounded up
  // to a multiple of 64 so that nearby lengths share one cache (and graph).
  int64_t static_capacity = 0;
  bool output_logits = false;  // keep each step's logits
};

struct GenerateResult {
  Tensor sequences;            // int64 [B, P + new_tokens]: the prompts, then the new tokens
  int64_t new_tokens = 0;      // steps taken (fewer than max_new_tokens after EOS)
  std::vector<Tensor> logits;  // with output_logits: [B, vocab] per step, before sampling
};

// Generates up to max_new_tokens after each row of prompt_ids (int64 [B, P]),
// eagerly, under NoGradGuard.
GenerateResult generate(Llama& model, const Tensor& prompt_ids,
                        const GenerateOptions& options = {});

// generate with the prompt's forward and the decode step compiled
// (kiln::compile), kept from call to call. The decode step is compiled once
// for all lengths: with a growing cache its length dims are marked dynamic,
// so later lengths are instances of the first trace; a static cache has the
// same shapes at every step. Sampled tokens equal generate's for the same
// seed. The model must outlive it (docs/decoder.md, "Compiled").
class CompiledGenerate {
 public:
  explicit CompiledGenerate(Llama& model, CompileOptions options = {});
  ~CompiledGenerate();
  CompiledGenerate(CompiledGenerate&&) noexcept;
  CompiledGenerate& operator=(CompiledGenerate&&) noexcept;

  GenerateResult operator()(const Tensor& prompt_ids, const GenerateOptions& options = {});

  // What each compiled function of a cache kind recorded: the prompt's
  // forward and the decode step. A static cache's are made afresh when a
  // call needs another batch size or capacity (they capture its buffers).
  CompileStats prefill_stats(KVCacheKind kind) const;
  CompileStats decode_stats(KVCacheKind kind) const;
  ExplainReport decode_explain(KVCacheKind kind) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::models
