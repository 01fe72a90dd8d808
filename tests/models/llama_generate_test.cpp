// Llama generation: greedy tokens and each step's logits against
// transformers' generate (tests/parity/make_llama_reference.py), left-padded
// batches and EOS, sampling, both caches, and compiled generation: its
// tokens equal eager's and what it compiles is pinned (docs/decoder.md).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kiln/autograd.h"
#include "kiln/compile.h"
#include "kiln/models/llama.h"
#include "kiln/ops/factory.h"
#include "kiln/ops/pointwise.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape.h"
#include "models/llama_testing.h"
#include "models/model_testing.h"
#include "unit/expect_error.h"

namespace kiln::models {
namespace {

using kiln::testing::expect_error_with;
using kiln::testing::within_scaled_bound;

constexpr KVCacheKind kBothCaches[] = {KVCacheKind::Growing, KVCacheKind::Static};

const char* name_of(KVCacheKind kind) {
  return kind == KVCacheKind::Growing ? "growing cache" : "static cache";
}

// Each step's logits against transformers' ([steps, B, V]).
void expect_step_logits(const GenerateResult& r, const Tensor& expected) {
  ASSERT_EQ(static_cast<int64_t>(r.logits.size()), expected.size(0));
  for (int64_t i = 0; i < expected.size(0); ++i)
    EXPECT_TRUE(within_scaled_bound(r.logits[i], expected[i], 1e-5)) << "step " << i;
}

TEST(LlamaParity, GreedyGenerationEqualsTransformers) {
  const StateDict io = llama_small_io();
  for (KVCacheKind kind : kBothCaches) {
    const GenerateResult r = generate(llama_small(), io.at("prompt.ids"),
                                      {.max_new_tokens = 16, .cache = kind, .output_logits = true});
    EXPECT_EQ(r.new_tokens, 16);
    EXPECT_EQ(ints(r.sequences), ints(io.at("greedy.sequences"))) << name_of(kind);
    expect_step_logits(r, io.at("greedy.logits"));
  }
}

// Four prompts of 8, 5, 3 and 6 tokens padded on the left, as transformers
// pads for generation: the same tokens and logits as its generate.
TEST(LlamaParity, LeftPaddedBatchOfFourGeneratesAsTransformers) {
  const StateDict io = llama_small_io();
  for (KVCacheKind kind : kBothCaches) {
    const GenerateResult r = generate(llama_small(), io.at("left.ids"),
                                      {.max_new_tokens = 12,
                                       .attention_mask = io.at("left.mask"),
                                       .cache = kind,
                                       .output_logits = true});
    EXPECT_EQ(ints(r.sequences), ints(io.at("left.sequences"))) << name_of(kind);
    expect_step_logits(r, io.at("left.logits"));
  }
}

// The row that emits EOS keeps it, then gets padding, while the others go on.
TEST(LlamaParity, EosStopsItsRowAsTransformersDoes) {
  const StateDict io = llama_small_io();
  const int64_t eos = io.at("left_eos.eos").item<int64_t>();
  for (KVCacheKind kind : kBothCaches) {
    const GenerateResult r = generate(llama_small(), io.at("left.ids"),
                                      {.max_new_tokens = 12,
                                       .eos_token_ids = {eos},
                                       .attention_mask = io.at("left.mask"),
                                       .cache = kind});
    EXPECT_EQ(ints(r.sequences), ints(io.at("left_eos.sequences"))) << name_of(kind);
  }
  // Every row stopping ends generation: row 0 alone, with its 5th new token as EOS.
  const Tensor row = io.at("left.ids").narrow(0, 0, 1);
  const int64_t fifth = io.at("left.sequences")[0][8 + 4].item<int64_t>();
  const GenerateResult r =
      generate(llama_small(), row, {.max_new_tokens = 12, .eos_token_ids = {fifth}});
  EXPECT_EQ(r.new_tokens, 5);
  EXPECT_EQ(ints(r.sequences), ints(io.at("left.sequences").narrow(0, 0, 1).narrow(1, 0, 13)));
}

// A row padded on the left generates what it generates alone, at batch 4.
TEST(LlamaGenerate, EachLeftPaddedRowGeneratesWhatItGeneratesAlone) {
  const StateDict io = llama_small_io();
  const Tensor ids = io.at("left.ids"), mask = io.at("left.mask");
  const GenerateResult batch =
      generate(llama_small(), ids, {.max_new_tokens = 6, .attention_mask = mask});
  const std::vector<int64_t> lengths = {8, 5, 3, 6};
  for (int64_t r = 0; r < 4; ++r) {
    const Tensor alone_prompt = ids.narrow(0, r, 1).narrow(1, 8 - lengths[r], lengths[r]);
    const GenerateResult alone = generate(llama_small(), alone_prompt, {.max_new_tokens = 6});
    EXPECT_EQ(ints(batch.sequences.narrow(0, r, 1).narrow(1, 8, 6)),
              ints(alone.sequences.narrow(1, lengths[r], 6)))
        << "row " << r;
  }
}

// Sampling: one seed gives one sequence (whatever the cache), top_k 1 is
// greedy, and every token drawn is among the top k of its step's logits.
TEST(LlamaGenerate, SamplingFollowsTheSeedAndTopK) {
  Llama& model = llama_small();
  const Tensor prompt = llama_small_io().at("left.ids").narrow(0, 0, 2);
  GenerateOptions o{.max_new_tokens = 10,
                    .greedy = false,
                    .temperature = 0.8,
                    .top_k = 3,
                    .seed = 5,
                    .output_logits = true};
  const GenerateResult a = generate(model, prompt, o);
  EXPECT_EQ(ints(generate(model, prompt, o).sequences), ints(a.sequences));
  o.cache = KVCacheKind::Static;
  EXPECT_EQ(ints(generate(model, prompt, o).sequences), ints(a.sequences));
  for (size_t i = 0; i < a.logits.size(); ++i) {
    const Tensor top = topk(a.logits[i], 3, -1).indices;                         // [2, 3]
    const Tensor drawn = a.sequences.narrow(1, 8 + static_cast<int64_t>(i), 1);  // [2, 1]
    EXPECT_TRUE(all(any(top == drawn, {-1})).item<bool>()) << "step " << i;
  }
  o.seed = 6;
  EXPECT_NE(ints(generate(model, prompt, o).sequences), ints(a.sequences));
  o.top_k = 1;
  EXPECT_EQ(ints(generate(model, prompt, o).sequences),
            ints(generate(model, prompt, {.max_new_tokens = 10}).sequences));
  // A generator of the caller's is advanced by the draws.
  Generator g(5), h(5);
  o = {.max_new_tokens = 4, .greedy = false, .top_k = 0, .generator = &g};
  (void)generate(model, prompt, o);
  EXPECT_FALSE(same(rand({4}, {}, &g), rand({4}, {}, &h)));
}

TEST(LlamaGenerate, ErrorsNameTheArgumentAndTheValue) {
  Llama& model = llama_small();
  const Tensor ids = zeros({2, 4}, {.dtype = kInt64});
  const Tensor right_padded = from_vector<int64_t>({1, 1, 1, 1, 1, 1, 0, 0}, Shape{2, 4});
  expect_error_with<ValueError>(
      [&] { (void)generate(model, ids, {.attention_mask = right_padded}); },
      {"generate: prompt row 1 has padding at position 2", "pad prompts on the left"});
  expect_error_with<ValueError>(
      [&] { (void)generate(model, ids, {.greedy = false, .temperature = 0}); },
      {"generate: temperature must be positive, got 0"});
  expect_error_with<ValueError>([&] { (void)generate(model, ids, {.eos_token_ids = {256}}); },
                                {"generate: eos token id 256", "[0, 256)"});
  expect_error_with<ValueError>(
      [&] {
        (void)generate(model, ids,
                       {.max_new_tokens = 8, .cache = KVCacheKind::Static, .static_capacity = 10});
      },
      {"generate: static_capacity 10", "12 slots"});
  const Tensor outside = from_vector<int64_t>({5, 6, 7, 8, 9, 300}, Shape{2, 3});
  expect_error_with<IndexError>([&] { (void)generate(model, outside); },
                                {"generate: prompt id 300 (row 1, position 2)", "[0, 256)"});
  CompiledGenerate fast(model);
  expect_error_with<IndexError>([&] { (void)fast(outside); }, {"generate: prompt id 300"});
}

// --- compiled generation ------------------------------------------------------------

// With a growing cache the decode step's cache length changes at every
// step: its dims are marked dynamic, so the first step's trace is symbolic
// in the length, its program is compiled once for all lengths, and every
// later length binds it (an instance: no trace, no recompile). The prompt's
// forward is a compiled function of its own, traced once per prompt length.
TEST(LlamaCompiled, GrowingCacheDecodeIsTracedOnceForEveryLength) {
  Llama& model = llama_small();
  const StateDict io = llama_small_io();
  const Tensor prompt = io.at("prompt.ids");
  CompiledGenerate fast(model);
  const GenerateResult compiled = fast(prompt, {.max_new_tokens = 12});
  EXPECT_EQ(ints(compiled.sequences),
            ints(generate(model, prompt, {.max_new_tokens = 12}).sequences));
  EXPECT_EQ(ints(compiled.sequences), ints(io.at("greedy.sequences").narrow(1, 0, 20)));

  // 11 decode steps over cache lengths 8..18.
  CompileStats decode = fast.decode_stats(KVCacheKind::Growing);
  EXPECT_EQ(decode.calls, 11);
  EXPECT_EQ(decode.traces, 1);
  EXPECT_EQ(decode.recompiles, 0);
  EXPECT_EQ(decode.graph_breaks, 0);
  EXPECT_EQ(decode.eager_calls, 0);
  EXPECT_EQ(decode.graphs, 11);  // one per length: the first traced, 10 instances
  EXPECT_EQ(decode.dynamic_instances, 10);
  EXPECT_EQ(decode.bound_sizes, 10);
  const CompileStats prefill = fast.prefill_stats(KVCacheKind::Growing);
  EXPECT_EQ(prefill.traces, 1);
  EXPECT_EQ(prefill.graphs, 1);

  // Again: every length replays what the first call compiled.
  EXPECT_EQ(ints(fast(prompt, {.max_new_tokens = 12}).sequences), ints(compiled.sequences));
  decode = fast.decode_stats(KVCacheKind::Growing);
  EXPECT_EQ(decode.traces, 1);
  EXPECT_EQ(decode.graphs, 11);
  EXPECT_EQ(decode.replays, 22);

  // A prompt of 5 tokens: its forward changes length, a recompile that makes
  // the prompt's length dynamic; the decode step binds lengths 5..7 to its program.
  const Tensor shorter = prompt.narrow(1, 3, 5);
  EXPECT_EQ(ints(fast(shorter, {.max_new_tokens = 12}).sequences),
            ints(generate(model, shorter, {.max_new_tokens = 12}).sequences));
  decode = fast.decode_stats(KVCacheKind::Growing);
  EXPECT_EQ(decode.traces, 1);
  EXPECT_EQ(decode.recompiles, 0);
  EXPECT_EQ(decode.graphs, 14);
  EXPECT_EQ(fast.prefill_stats(KVCacheKind::Growing).recompiles, 1);
}

// A static cache has the same shapes at every step (the position is a
// tensor argument), so the decode step is one graph that every step and
// every later call replays: what one CUDA graph per step needs.
TEST(LlamaCompiled, StaticCacheDecodeIsOneGraphForEveryStep) {
  Llama& model = llama_small();
  const Tensor prompt = llama_small_io().at("prompt.ids");
  const GenerateOptions options{.max_new_tokens = 12, .cache = KVCacheKind::Static};
  CompiledGenerate fast(model);
  const GenerateResult compiled = fast(prompt, options);
  EXPECT_EQ(ints(compiled.sequences), ints(generate(model, prompt, options).sequences));
  CompileStats decode = fast.decode_stats(KVCacheKind::Static);
  EXPECT_EQ(decode.calls, 11);
  EXPECT_EQ(decode.traces, 1);
  EXPECT_EQ(decode.graphs, 1);
  EXPECT_EQ(decode.replays, 11);
  EXPECT_EQ(decode.recompiles, 0);
  EXPECT_EQ(decode.graph_breaks, 0);
  EXPECT_EQ(decode.dynamic_instances, 0);
  EXPECT_EQ(fast.prefill_stats(KVCacheKind::Static).traces, 1);
  EXPECT_EQ(ints(fast(prompt, options).sequences), ints(compiled.sequences));
  EXPECT_EQ(fast.decode_stats(KVCacheKind::Static).replays, 22);

  // A shorter prompt fits the same 64 slots: only the prompt's forward is traced anew.
  const Tensor shorter = prompt.narrow(1, 3, 5);
  EXPECT_EQ(ints(fast(shorter, options).sequences),
            ints(generate(model, shorter, options).sequences));
  decode = fast.decode_stats(KVCacheKind::Static);
  EXPECT_EQ(decode.traces, 1);
  EXPECT_EQ(decode.graphs, 1);
  EXPECT_EQ(decode.replays, 33);
  EXPECT_EQ(fast.prefill_stats(KVCacheKind::Static).traces, 2);
  EXPECT_EQ(fast.prefill_stats(KVCacheKind::Static).recompiles, 1);
}

// Sampled with one seed, compiled and eager draw the same tokens at batch 4
// with left padding, and leave the generator where eager leaves it; greedy,
// with EOS, they give transformers' tokens.
TEST(LlamaCompiled, BatchOfFourSamplesAndStopsAsEager) {
  Llama& model = llama_small();
  const StateDict io = llama_small_io();
  const Tensor ids = io.at("left.ids"), mask = io.at("left.mask");
  CompiledGenerate fast(model);
  for (KVCacheKind kind : kBothCaches) {
    Generator eager_rng(9), compiled_rng(9);
    GenerateOptions o{.max_new_tokens = 10,
                      .greedy = false,
                      .temperature = 0.7,
                      .top_k = 20,
                      .generator = &eager_rng,
                      .attention_mask = mask,
                      .cache = kind};
    const GenerateResult eager = generate(model, ids, o);
    o.generator = &compiled_rng;
    EXPECT_EQ(ints(fast(ids, o).sequences), ints(eager.sequences)) << name_of(kind);
    EXPECT_TRUE(same(rand({4}, {}, &compiled_rng), rand({4}, {}, &eager_rng))) << name_of(kind);

    const GenerateResult stopped =
        fast(ids, {.max_new_tokens = 12,
                   .eos_token_ids = {io.at("left_eos.eos").item<int64_t>()},
                   .attention_mask = mask,
                   .cache = kind,
                   .output_logits = true});
    EXPECT_EQ(ints(stopped.sequences), ints(io.at("left_eos.sequences"))) << name_of(kind);
    // The rows that went on (row 1 stopped and was fed padding) chose from transformers' logits.
    const Tensor went_on = from_vector<int64_t>({0, 2, 3});
    for (int64_t i = 0; i < 12; ++i) {
      EXPECT_TRUE(within_scaled_bound(index_select(stopped.logits[i], 0, went_on),
                                      index_select(io.at("left.logits")[i], 0, went_on), 1e-5))
          << name_of(kind) << ", step " << i;
    }
    // The greedy call after the sampled one is the one recompile: the
    // sampling settings are arguments of the step, guarded by value.
    EXPECT_EQ(fast.decode_stats(kind).recompiles, 1) << name_of(kind);
    EXPECT_EQ(fast.decode_stats(kind).graph_breaks, 0) << name_of(kind);
  }
}

}  // namespace
}  // namespace kiln::models
