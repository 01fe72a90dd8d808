// Llama: transformers' parameter names, config.json, parity with PyTorch
// (tests/parity/make_llama_reference.py), the caches against a full forward,
// padding, and errors. Generation and compiled generation:
// llama_generate_test.cpp.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "kiln/autograd.h"
#include "kiln/models/checkpoint.h"
#include "kiln/models/llama.h"
#include "kiln/ops/factory.h"
#include "kiln/ops/pointwise.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape.h"
#include "kiln/safetensors.h"
#include "models/llama_testing.h"
#include "models/model_testing.h"
#include "unit/expect_error.h"

namespace kiln::models {
namespace {

namespace fs = std::filesystem;
using kiln::testing::expect_error_with;
using kiln::testing::within_scaled_bound;

// llama_small's config.json with fields replaced (or added), in a temporary file.
class ConfigFile {
 public:
  using Fields = std::vector<std::pair<std::string, std::string>>;
  explicit ConfigFile(const Fields& fields) {
    std::ifstream in(llama_small_dir() + "/config.json");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    for (const auto& [field, value] : fields) {
      const std::string key = "\"" + field + "\": ";
      const size_t at = text.find(key);
      if (at == std::string::npos) {
        text.insert(text.find('{') + 1, "\n  " + key + value + ",");
        continue;
      }
      // The old value runs to the comma or line end outside braces.
      const size_t start = at + key.size();
      size_t end = start;
      for (int depth = 0; end < text.size(); ++end) {
        if (depth == 0 && (text[end] == ',' || text[end] == '\n')) break;
        depth += text[end] == '{' ? 1 : text[end] == '}' ? -1 : 0;
      }
      text.replace(start, end - start, value);
    }
    path_ = (fs::temp_directory_path() / ("kiln_llama_" + fields.front().first + ".json")).string();
    std::ofstream(path_) << text;
  }
  ~ConfigFile() { fs::remove(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(Llama, HasTransformersParameterNamesAndShapes) {
  Llama model(LlamaConfig::from_json_file(llama_small_dir() + "/config.json"));
  const StateDict hf = load_safetensors(llama_small_dir() + "/model.safetensors");
  const StateDict own = model.state_dict();
  EXPECT_EQ(own.size(), hf.size());
  for (const auto& [key, tensor] : own) {
    const Tensor* theirs = hf.find(key);
    ASSERT_NE(theirs, nullptr) << key;
    EXPECT_EQ(tensor.sizes(), theirs->sizes()) << key;
  }
  EXPECT_EQ(own.keys().front(), "model.embed_tokens.weight");
  EXPECT_EQ(own.keys().back(), "lm_head.weight");
  EXPECT_TRUE(own.contains("model.layers.1.mlp.gate_proj.weight"));
  EXPECT_TRUE(own.contains("model.layers.1.post_attention_layernorm.weight"));
}

TEST(Llama, ReadsTransformersConfigJson) {
  const LlamaConfig c = LlamaConfig::from_json_file(llama_small_dir() + "/config.json");
  EXPECT_EQ(c.vocab_size, 256);
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.intermediate_size, 176);
  EXPECT_EQ(c.num_hidden_layers, 2);
  EXPECT_EQ(c.num_attention_heads, 4);
  EXPECT_EQ(c.kv_heads(), 2);
  EXPECT_EQ(c.head_size(), 16);
  EXPECT_EQ(c.max_position_embeddings, 128);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_DOUBLE_EQ(c.rope_theta, 10000.0);  // from rope_parameters
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{2});
  // Older files: rope_theta at the top level, eos_token_id a list or null.
  const ConfigFile old_style(
      ConfigFile::Fields{{"rope_parameters", "null"}, {"rope_theta", "500000.0"}});
  EXPECT_DOUBLE_EQ(LlamaConfig::from_json_file(old_style.path()).rope_theta, 500000.0);
  const ConfigFile eos(ConfigFile::Fields{{"eos_token_id", "[2, 7]"}});
  EXPECT_EQ(LlamaConfig::from_json_file(eos.path()).eos_token_ids, (std::vector<int64_t>{2, 7}));
  const ConfigFile no_eos(
      ConfigFile::Fields{{"eos_token_id", "null"}, {"num_key_value_heads", "null"}});
  const LlamaConfig plain = LlamaConfig::from_json_file(no_eos.path());
  EXPECT_TRUE(plain.eos_token_ids.empty());
  EXPECT_EQ(plain.kv_heads(), 4);
}

TEST(Llama, ConfigErrorsNameTheFileAndTheField) {
  const std::vector<std::tuple<std::string, std::string, std::vector<std::string>>> cases = {
      {"num_key_value_heads", "3", {"num_key_value_heads 3", "must divide num_attention_heads 4"}},
      {"vocab_size", "\"big\"", {"vocab_size must be an integer", "\"big\""}},
      {"hidden_act", "\"gelu\"", {"hidden_act \"gelu\" is not supported"}},
      {"rope_parameters",
       "{\"rope_type\": \"yarn\", \"rope_theta\": 500000.0}",
       {"rope_type 'yarn' is not implemented (default, linear and llama3 are)"}},
      {"rope_scaling",
       "{\"type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 4.0, "
       "\"high_freq_factor\": 1.0, \"original_max_position_embeddings\": 64}",
       {"rope high_freq_factor 1 must exceed low_freq_factor 4"}},
      {"rope_scaling",
       "{\"rope_type\": \"linear\", \"factor\": 0}",
       {"rope factor must be positive, got 0"}},
      {"rms_norm_eps", "0", {"rms_norm_eps must be positive, got 0"}},
      {"tie_word_embeddings", "1", {"tie_word_embeddings must be true or false"}},
  };
  for (const auto& [field, value, parts] : cases) {
    const ConfigFile file(ConfigFile::Fields{{field, value}});
    std::vector<std::string> expected = parts;
    expected.push_back("LlamaConfig.from_json_file: " + file.path());
    expect_error_with<ValueError>([&] { (void)LlamaConfig::from_json_file(file.path()); },
                                  expected);
  }
  expect_error_with<IOError>([] { (void)LlamaConfig::from_json_file("/no/such/config.json"); },
                             {"LlamaConfig.from_json_file: /no/such/config.json", "cannot open"});
}

// Llama 3's rope scaling (tests/parity/make_llama3_rope_reference.py): its
// frequencies in all three bands, and the logits of 48 positions.
TEST(LlamaParity, Llama3RopeScalingMatchesTransformers) {
  const std::string dir = testing::test_data_dir() + "/parity/llama_rope_llama3";
  const LlamaConfig c = LlamaConfig::from_json_file(dir + "/config.json");
  EXPECT_EQ(c.rope_scaling.type, "llama3");
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 8.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 64);
  Llama model(c);
  model.load_hf_state_dict(load_safetensors(dir + "/model.safetensors"));
  const StateDict io =
      load_safetensors(testing::test_data_dir() + "/parity/llama_rope_llama3.io.safetensors");
  NoGradGuard no_grad;
  EXPECT_TRUE(within_scaled_bound(model(io.at("prompt.ids")), io.at("forward.logits"), 1e-5));
  // The same weights with the original embedding differ from transformers'.
  LlamaConfig unscaled = c;
  unscaled.rope_scaling = {};
  Llama plain(unscaled);
  plain.load_hf_state_dict(load_safetensors(dir + "/model.safetensors"));
  EXPECT_FALSE(within_scaled_bound(plain(io.at("prompt.ids")), io.at("forward.logits"), 1e-3));
}

// Linear scaling divides the frequencies by factor: position p of a model
// scaled by 4 is position p / 4 of the unscaled one.
TEST(Llama, LinearRopeScalingStretchesThePositions) {
  LlamaConfig c = tiny_config();
  Llama plain(c);
  randomize(plain);
  c.rope_scaling.type = "linear";
  c.rope_scaling.factor = 4;
  Llama stretched(c);
  stretched.load_state_dict(plain.state_dict());
  const Tensor ids = from_vector<int64_t>({5, 9, 13, 2}).unsqueeze(0);
  NoGradGuard no_grad;
  const Tensor got =
      stretched.forward(ids, {}, {.position_ids = from_vector<int64_t>({0, 4, 8, 12})}).logits;
  const Tensor want =
      plain.forward(ids, {}, {.position_ids = from_vector<int64_t>({0, 1, 2, 3})}).logits;
  EXPECT_TRUE(within_scaled_bound(got, want, 1e-6));
}

TEST(LlamaParity, LogitsMatchTransformers) {
  Llama& model = llama_small();
  const StateDict io = llama_small_io();
  NoGradGuard no_grad;
  EXPECT_TRUE(within_scaled_bound(model(io.at("prompt.ids")), io.at("forward.logits"), 1e-5));
}

// Padded rows match transformers where there are tokens; what a padding
// position computes is nobody's business.
TEST(LlamaParity, PaddedBatchesOfFourMatchTransformersOnTheirTokens) {
  Llama& model = llama_small();
  const StateDict io = llama_small_io();
  NoGradGuard no_grad;
  for (const std::string side : {"left", "right"}) {
    const Tensor mask = io.at(side + ".mask");
    const Tensor logits = model.forward(io.at(side + ".ids"), {}, {.attention_mask = mask}).logits;
    const Tensor keep = (mask != 0).unsqueeze(-1);
    const Tensor expected = io.at(side + ".forward.logits");
    EXPECT_TRUE(within_scaled_bound(where(keep, logits, 0.0), where(keep, expected, 0.0), 1e-5))
        << side;
  }
}

TEST(Llama, DescribesItsCheckpoint) {
  EXPECT_EQ(describe_checkpoint(load_safetensors(llama_small_dir() + "/model.safetensors")),
            "a 64-wide, 2-layer Llama (intermediate 176, vocab 256, keys and values 32 wide)");
}

// Every way through the caches gives the logits of one forward over the
// whole sequence: a growing cache one token at a time or in chunks (a chunk
// after a cache needs the causal mask shifted by the cache's length), and a
// static cache.
TEST(Llama, CachesGiveTheLogitsOfAFullForward) {
  Llama model(tiny_config());
  randomize(model);
  NoGradGuard no_grad;
  const Tensor ids = randint(0, 50, {2, 9}, {.dtype = kInt64});
  const Tensor full = model(ids);

  for (const std::vector<int64_t>& chunks :
       std::vector<std::vector<int64_t>>{{4, 1, 1, 1, 1, 1}, {3, 4, 2}, {1, 8}}) {
    KVCache cache;
    std::vector<Tensor> logits;
    StaticKVCache fixed = model.make_static_cache(2, 16);
    std::vector<Tensor> fixed_logits;
    int64_t at = 0;
    for (int64_t n : chunks) {
      const Tensor chunk = ids.narrow(1, at, n);
      LlamaOutput out = model.forward(chunk, cache);
      cache = out.cache;
      logits.push_back(out.logits);
      fixed_logits.push_back(model.forward(chunk, fixed, arange(at, at + n, 1, {.dtype = kInt64})));
      at += n;
    }
    EXPECT_EQ(cache.length(), 9);
    EXPECT_TRUE(within_scaled_bound(cat(logits, 1), full, 1e-5)) << chunks.size() << " chunks";
    EXPECT_TRUE(within_scaled_bound(cat(fixed_logits, 1), full, 1e-5)) << chunks.size();
  }
}

// A left-padded row gives its tokens' logits as the row alone does, through
// the growing cache and the static one, and default positions count only
// its tokens.
TEST(Llama, LeftPaddingGivesEachRowItsLogitsAlone) {
  Llama model(tiny_config());
  randomize(model);
  NoGradGuard no_grad;
  const Tensor row = randint(0, 50, {1, 5}, {.dtype = kInt64});
  const Tensor alone = model(row);
  const Tensor ids = cat({zeros({1, 3}, {.dtype = kInt64}), row}, 1);
  const Tensor mask = cat({zeros({1, 3}, {.dtype = kInt64}), ones({1, 5}, {.dtype = kInt64})}, 1);
  const Tensor padded = model.forward(ids, {}, {.attention_mask = mask}).logits;
  EXPECT_TRUE(within_scaled_bound(padded.narrow(1, 3, 5), alone, 1e-5));

  StaticKVCache fixed = model.make_static_cache(1, 12);
  const Tensor fixed_mask = cat({mask, ones({1, 4}, {.dtype = kInt64})}, 1);
  const Tensor fixed_logits =
      model.forward(ids, fixed, arange(8, {.dtype = kInt64}), {.attention_mask = fixed_mask});
  EXPECT_TRUE(within_scaled_bound(fixed_logits.narrow(1, 3, 5), alone, 1e-5));
}

TEST(Llama, TiedEmbeddingsShareTheLmHeadWeight) {
  LlamaConfig c = tiny_config();
  c.tie_word_embeddings = true;
  Llama model(c);
  EXPECT_EQ(model.lm_head.weight.data_ptr(), model.model.embed_tokens.weight.data_ptr());
  // save_pretrained leaves lm_head.weight out of tied checkpoints; state_dict()
  // has both names, as PyTorch's: either loads, and the embedding wins.
  Llama source(c);
  randomize(source, 11);
  StateDict saved = source.state_dict();
  saved.erase("lm_head.weight");
  model.load_hf_state_dict(saved);
  EXPECT_TRUE(same(model.lm_head.weight, source.model.embed_tokens.weight));
  StateDict both = source.state_dict();
  both.set("lm_head.weight", zeros(model.lm_head.weight.sizes()));
  const nn::LoadResult r = model.load_hf_state_dict(both);
  EXPECT_TRUE(r.unexpected_keys.empty());
  EXPECT_TRUE(same(model.lm_head.weight, source.model.embed_tokens.weight));
}

TEST(Llama, LoadsALlamaModelStateDictWithoutItsPrefix) {
  Llama source(tiny_config());
  randomize(source, 3);
  StateDict base;  // transformers' LlamaModel: no "model.", no lm_head
  for (const auto& [key, t] : source.state_dict())
    if (key.starts_with("model.")) base.set(key.substr(6), t);
  Llama model(tiny_config());
  const nn::LoadResult r = model.load_hf_state_dict(base, /*strict=*/false);
  EXPECT_EQ(r.missing_keys, std::vector<std::string>{"lm_head.weight"});
  EXPECT_TRUE(same(model.model.norm.weight, source.model.norm.weight));
  expect_error_with<ValueError>([&] { (void)model.load_hf_state_dict(base); },
                                {"Llama.load_hf_state_dict", "missing key", "lm_head.weight"});
}

TEST(Llama, WrongCheckpointShapeNamesTheKey) {
  LlamaConfig c = LlamaConfig::from_json_file(llama_small_dir() + "/config.json");
  c.num_key_value_heads = 4;  // the file's keys and values are for 2 heads
  Llama model(c);
  expect_error_with<ValueError>(
      [&] {
        (void)model.load_hf_state_dict(load_safetensors(llama_small_dir() + "/model.safetensors"));
      },
      {"Llama.load_hf_state_dict", "keys and values 32 wide",
       "model.layers.0.self_attn.k_proj.weight: [32, 64] in the dict, [64, 64] expected"});
}

TEST(Llama, InputErrorsNameTheModelAndTheValues) {
  Llama model(tiny_config());
  NoGradGuard no_grad;
  expect_error_with<IndexError>(
      [&] {
        (void)model(from_vector<int64_t>({3, 50, 4}, Shape{1, 3}));
      },
      {"Llama: input_ids must be in [0, 50)"});
  expect_error_with<DTypeError>(
      [&] {
        (void)model(zeros({1, 3}));
      },
      {"Llama: input_ids must be int64", "float32"});
  expect_error_with<ShapeError>([&] { (void)model(zeros({3}, {.dtype = kInt64})); },
                                {"Llama: input_ids must be [batch, tokens]", "[3]"});
  const Tensor ids = zeros({2, 3}, {.dtype = kInt64});
  expect_error_with<ShapeError>(
      [&] {
        (void)model.forward(ids, {}, {.attention_mask = ones({2, 4})});
      },
      {"Llama: attention_mask must be [batch 2, attended tokens 3], got [2, 4]"});
  const KVCache other_batch = model.forward(zeros({3, 2}, {.dtype = kInt64})).cache;
  expect_error_with<ShapeError>([&] { (void)model.forward(ids, other_batch); },
                                {"Llama: the cache's layer 0 keys [3, 2, 2, 4]", "[batch 2"});
  StaticKVCache fixed = model.make_static_cache(2, 8);
  expect_error_with<ShapeError>(
      [&] { (void)model.forward(ids, fixed, arange(2, {.dtype = kInt64})); },
      {"Llama: cache_position must be int64 [3]", "[2]"});
  expect_error_with<ValueError>([&] { (void)model.make_static_cache(2, 0); },
                                {"Llama.make_static_cache", "0"});
  LlamaConfig bad = tiny_config();
  bad.head_dim = 5;
  expect_error_with<ValueError>([&] { Llama odd(bad); }, {"Llama: the head size 5 must be even"});
}

}  // namespace
}  // namespace kiln::models
