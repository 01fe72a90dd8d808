// What the Llama tests share: the PyTorch reference model and its data
// (tests/parity/make_llama_reference.py), a tiny config, and token comparisons.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kiln/autograd.h"
#include "kiln/models/llama.h"
#include "kiln/ops/factory.h"
#include "kiln/safetensors.h"
#include "models/model_testing.h"

namespace kiln::models {

inline std::string llama_small_dir() { return testing::test_data_dir() + "/parity/llama_small"; }

// The reference model with transformers' weights, loaded once.
inline Llama& llama_small() {
  static Llama* model = [] {
    auto* m = new Llama(LlamaConfig::from_json_file(llama_small_dir() + "/config.json"));
    m->load_hf_state_dict(load_safetensors(llama_small_dir() + "/model.safetensors"));
    return m;
  }();
  return *model;
}

inline StateDict llama_small_io() {
  return load_safetensors(testing::test_data_dir() + "/parity/llama_small.io.safetensors");
}

// Vocab 50, hidden 16, 2 layers, 4 query heads sharing 2 key/value heads (head size 4).
inline LlamaConfig tiny_config() {
  LlamaConfig c;
  c.vocab_size = 50;
  c.hidden_size = 16;
  c.intermediate_size = 24;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.max_position_embeddings = 64;
  return c;
}

// Weights of std 1 / sqrt(fan in) (transformers' 0.02 leaves the logits
// flat), so that every layer changes the output visibly.
inline void randomize(Llama& model, uint64_t seed = 7) {
  Generator gen(seed);
  NoGradGuard no_grad;
  for (auto& [name, p] : model.named_parameters()) {
    const double scale = p.dim() == 2 && name.find("embed") == std::string::npos
                             ? 1.0 / std::sqrt(static_cast<double>(p.size(1)))
                             : 1.0;
    p.copy_(p.dim() == 1 ? rand(p.sizes(), {}, &gen) + 0.5 : randn(p.sizes(), {}, &gen) * scale);
  }
}

inline std::vector<int64_t> ints(const Tensor& t) {
  return t.to(kInt64).contiguous().to_vector<int64_t>();
}

inline bool same(const Tensor& a, const Tensor& b) {
  return a.sizes() == b.sizes() && a.dtype() == b.dtype() &&
         a.contiguous().to_vector<double>() == b.contiguous().to_vector<double>();
}

}  // namespace kiln::models
