// Token generation with a Llama: greedy or top-k sampling, eagerly (generate)
// or with the prompt's forward and the decode step compiled
// (CompiledGenerate); both run the same step functions (docs/decoder.md).
#include <algorithm>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/autograd.h"
#include "kiln/compile.h"
#include "kiln/error.h"
#include "kiln/models/llama.h"
#include "kiln/ops/factory.h"
#include "kiln/ops/pointwise.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape.h"

namespace kiln::models {
namespace {

using detail::str_cat;

// How one step turns logits into tokens; numbers, so that a compiled step
// is guarded on them.
struct Sampling {
  bool greedy = true;
  double temperature = 1.0;
  int64_t top_k = 0;
};

// The token of each row after logits [B, V]: int64 [B, 1].
Tensor choose_tokens(const Tensor& logits, const Sampling& s, Generator* generator) {
  if (s.greedy) return argmax(logits, -1, /*keepdim=*/true);
  const Tensor scaled = logits / s.temperature;
  if (s.top_k > 0 && s.top_k < logits.size(-1)) {
    const ValuesIndices best = topk(scaled, s.top_k, -1);
    const Tensor drawn = multinomial(softmax(best.values, -1), 1, /*replacement=*/true, generator);
    return gather(best.indices, -1, drawn);
  }
  return multinomial(softmax(scaled, -1), 1, /*replacement=*/true, generator);
}

// One step's result: the chosen tokens [B, 1], the logits they were chosen
// from [B, V], and (growing caches) the cache after the step.
struct GrowingStep {
  Tensor next, logits;
  KVCache cache;
};
struct Step {
  Tensor next, logits;
};

GrowingStep growing_step(Llama& model, const Tensor& ids, const KVCache& past, const Tensor& mask,
                         const Sampling& s, Generator* generator) {
  LlamaOutput out = model.forward(ids, past, {.attention_mask = mask, .last_logits_only = true});
  const Tensor logits = out.logits.select(1, 0);
  return {choose_tokens(logits, s, generator), logits, std::move(out.cache)};
}

Step static_step(Llama& model, StaticKVCache& cache, const Tensor& ids,
                 const Tensor& cache_position, const Tensor& mask, const Sampling& s,
                 Generator* generator) {
  const Tensor logits =
      model.forward(ids, cache, cache_position, {.attention_mask = mask, .last_logits_only = true})
          .select(1, 0);
  return {choose_tokens(logits, s, generator), logits};
}

// The checks of generate's options.
void check_options(const Llama& model, const GenerateOptions& o) {
  constexpr std::string_view kWho = "generate";
  if (o.max_new_tokens < 0) {
    throw ValueError(str_cat(kWho, ": max_new_tokens must be >= 0, got ", o.max_new_tokens));
  }
  if (!o.greedy && !(o.temperature > 0)) {
    throw ValueError(str_cat(kWho, ": temperature must be positive, got ", o.temperature));
  }
  if (o.top_k < 0) throw ValueError(str_cat(kWho, ": top_k must be >= 0, got ", o.top_k));
  const int64_t vocab = model.config().vocab_size;
  for (int64_t id : o.eos_token_ids) {
    if (id < 0 || id >= vocab) {
      throw ValueError(
          str_cat(kWho, ": eos token id ", id, " is outside the vocabulary [0, ", vocab, ")"));
    }
  }
  if (o.pad_token_id < 0 || o.pad_token_id >= vocab) {
    throw ValueError(str_cat(kWho, ": pad_token_id ", o.pad_token_id,
                             " is outside the vocabulary [0, ", vocab, ")"));
  }
}

// The checks of the prompt and its mask, read on the host once per call,
// where an error can name the row (a compiled forward's embedding would only
// name the index).
void check_prompt(const Llama& model, const Tensor& prompt, const Tensor& mask) {
  constexpr std::string_view kWho = "generate";
  if (!prompt.defined() || prompt.dim() != 2 || prompt.dtype() != kInt64 || prompt.size(1) == 0 ||
      prompt.size(0) == 0) {
    throw ShapeError(str_cat(kWho, ": prompt_ids must be int64 [batch, tokens] with tokens, got ",
                             prompt.defined() ? str_cat(prompt.dtype(), " ", prompt.sizes())
                                              : std::string("undefined")));
  }
  const int64_t vocab = model.config().vocab_size, length = prompt.size(1);
  const std::vector<int64_t> ids = prompt.contiguous().to_vector<int64_t>();
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) {
      throw IndexError(str_cat(
          kWho, ": prompt id ", ids[i], " (row ", static_cast<int64_t>(i) / length, ", position ",
          static_cast<int64_t>(i) % length, ") is outside the vocabulary [0, ", vocab, ")"));
    }
  }
  if (!mask.defined()) return;
  if (mask.sizes() != prompt.sizes()) {
    throw ShapeError(str_cat(kWho, ": attention_mask must have the shape of prompt_ids ",
                             prompt.sizes(), ", got ", mask.sizes()));
  }
  const std::vector<int64_t> values = mask.to(kInt64).contiguous().to_vector<int64_t>();
  for (int64_t r = 0; r < prompt.size(0); ++r) {
    const auto row = values.begin() + r * length, end = row + length;
    const auto first = std::find_if(row, end, [](int64_t v) { return v != 0; });
    if (first == end) throw ValueError(str_cat(kWho, ": prompt row ", r, " is all padding"));
    if (const auto gap = std::find(first, end, 0); gap != end) {
      throw ValueError(str_cat(kWho, ": prompt row ", r, " has padding at position ", gap - row,
                               " after its first token: pad prompts on the left"));
    }
  }
}

// Capacity of a static cache: the prompt and the new tokens, rounded up to
// a multiple of 64 so that nearby lengths share a cache (and compiled graphs).
int64_t static_capacity(const Tensor& prompt, const GenerateOptions& o) {
  const int64_t needed = prompt.size(1) + std::max<int64_t>(o.max_new_tokens, 1);
  if (o.static_capacity == 0) return (needed + 63) / 64 * 64;
  if (o.static_capacity < needed) {
    throw ValueError(str_cat("generate: static_capacity ", o.static_capacity,
                             " holds fewer than the ", needed,
                             " slots of the prompt and max_new_tokens"));
  }
  return o.static_capacity;
}

// A static cache's mask [B, capacity]: the prompt's, then ones; undefined without padding.
Tensor static_mask(const Tensor& prompt_mask, int64_t capacity) {
  if (!prompt_mask.defined()) return {};
  const Tensor m = prompt_mask.to(kInt64);
  return cat({m, ones({m.size(0), capacity - m.size(1)}, {.dtype = kInt64, .device = m.device()})},
             1);
}

// The step functions, as generate calls them and CompiledGenerate compiles
// them: the sampling settings are plain arguments, guarded by value.
using GrowingFn =
    std::function<GrowingStep(const Tensor& ids, const KVCache& past, const Tensor& mask,
                              bool greedy, double temperature, int64_t top_k)>;
using StaticFn =
    std::function<Step(const Tensor& ids, const Tensor& cache_position, const Tensor& mask,
                       bool greedy, double temperature, int64_t top_k)>;

GrowingFn growing_fn(Llama& model, Generator* generator) {
  return [&model, generator](const Tensor& ids, const KVCache& past, const Tensor& mask,
                             bool greedy, double temperature, int64_t top_k) {
    return growing_step(model, ids, past, mask, {greedy, temperature, top_k}, generator);
  };
}

StaticFn static_fn(Llama& model, std::shared_ptr<StaticKVCache> cache, Generator* generator) {
  return [&model, cache = std::move(cache), generator](
             const Tensor& ids, const Tensor& cache_position, const Tensor& mask, bool greedy,
             double temperature, int64_t top_k) {
    return static_step(model, *cache, ids, cache_position, mask, {greedy, temperature, top_k},
                       generator);
  };
}

// How the steps of one generation run: the prompt's forward, then one
// decode step per new token, each given the previous step's tokens [B, 1]
// and their index among the new tokens.
struct StepRunner {
  std::function<Step(const Tensor& prompt, const Tensor& mask)> prefill;
  std::function<Step(const Tensor& ids, int64_t step)> decode;
};

// A growing cache's steps: the cache and the mask grow by a token per step.
StepRunner growing_runner(GrowingFn prefill, GrowingFn decode, const Sampling& s) {
  auto state = std::make_shared<std::pair<KVCache, Tensor>>();  // the cache and the mask
  return {[prefill = std::move(prefill), s, state](const Tensor& ids, const Tensor& mask) {
            state->second = mask;
            GrowingStep r = prefill(ids, KVCache{}, mask, s.greedy, s.temperature, s.top_k);
            state->first = std::move(r.cache);
            return Step{r.next, r.logits};
          },
          [decode = std::move(decode), s, state](const Tensor& ids, int64_t) {
            auto& [cache, mask] = *state;
            if (mask.defined()) mask = cat({mask, ones_like(ids).to(mask.dtype())}, 1);
            // The length grows at every step: marked dynamic, one trace of a
            // compiled step serves every length (eager calls ignore marks).
            for (size_t l = 0; l < cache.keys.size(); ++l) {
              compiler::mark_dynamic(cache.keys[l], 2);
              compiler::mark_dynamic(cache.values[l], 2);
            }
            if (mask.defined()) compiler::mark_dynamic(mask, 1);
            GrowingStep r = decode(ids, cache, mask, s.greedy, s.temperature, s.top_k);
            cache = std::move(r.cache);
            return Step{r.next, r.logits};
          }};
}

// A static cache's steps: the prompt at slots 0..P-1, new token i at slot P + i.
StepRunner static_runner(StaticFn prefill, StaticFn decode, const Sampling& s, const Tensor& prompt,
                         const Tensor& mask) {
  const int64_t length = prompt.size(1);
  const Device device = prompt.device();
  return {
      [prefill = std::move(prefill), s, mask, length, device](const Tensor& ids, const Tensor&) {
        const Tensor slots = arange(length, {.dtype = kInt64, .device = device});
        return prefill(ids, slots, mask, s.greedy, s.temperature, s.top_k);
      },
      [decode = std::move(decode), s, mask, length, device](const Tensor& ids, int64_t step) {
        const Tensor slot = full({1}, length + step, {.dtype = kInt64, .device = device});
        return decode(ids, slot, mask, s.greedy, s.temperature, s.top_k);
      }};
}

// The loop shared by every runner: EOS, padding of finished rows, results.
GenerateResult run_generation(const Tensor& prompt, const GenerateOptions& o, StepRunner& runner) {
  GenerateResult result;
  if (o.max_new_tokens == 0) {
    result.sequences = prompt;
    return result;
  }
  const bool stops = !o.eos_token_ids.empty();
  const Tensor eos = stops ? from_vector(o.eos_token_ids).to(prompt.device()) : Tensor();
  Tensor finished;  // bool [B, 1]
  std::vector<Tensor> tokens{prompt};
  Step step = runner.prefill(prompt, o.attention_mask);
  for (int64_t i = 0;; ++i) {
    Tensor next = step.next;
    if (stops) {
      if (finished.defined()) next = where(finished, full_like(next, o.pad_token_id), next);
      const Tensor hit = any(next.unsqueeze(-1) == eos, {-1});
      finished = finished.defined() ? logical_or(finished, hit) : hit;
    }
    tokens.push_back(next);
    if (o.output_logits) result.logits.push_back(step.logits);
    result.new_tokens = i + 1;
    if (i + 1 == o.max_new_tokens || (stops && all(finished).item<bool>())) break;
    step = runner.decode(next, i);
  }
  result.sequences = cat(tokens, 1);
  return result;
}

// The prompt and its mask where the model's weights are.
std::pair<Tensor, GenerateOptions> on_model_device(const Llama& model, const Tensor& prompt,
                                                   GenerateOptions o) {
  const Device device = model.model.embed_tokens.weight.device();
  if (o.attention_mask.defined()) o.attention_mask = o.attention_mask.to(device);
  return {prompt.to(device), std::move(o)};
}

Sampling sampling_of(const GenerateOptions& o) {
  return {.greedy = o.greedy, .temperature = o.greedy ? 1.0 : o.temperature, .top_k = o.top_k};
}

}  // namespace

GenerateResult generate(Llama& model, const Tensor& prompt_ids, const GenerateOptions& options) {
  check_options(model, options);
  check_prompt(model, prompt_ids, options.attention_mask);
  NoGradGuard no_grad;
  const auto [prompt, o] = on_model_device(model, prompt_ids, options);
  std::optional<Generator> seeded;
  if (o.seed && !o.generator) seeded.emplace(*o.seed);
  Generator* generator = o.generator ? o.generator : seeded ? &*seeded : &default_generator();
  StepRunner runner;
  if (o.cache == KVCacheKind::Growing) {
    const GrowingFn step = growing_fn(model, generator);
    runner = growing_runner(step, step, sampling_of(o));
  } else {
    const int64_t capacity = static_capacity(prompt, o);
    const StaticFn step = static_fn(
        model, std::make_shared<StaticKVCache>(model.make_static_cache(prompt.size(0), capacity)),
        generator);
    runner =
        static_runner(step, step, sampling_of(o), prompt, static_mask(o.attention_mask, capacity));
  }
  return run_generation(prompt, o, runner);
}

// --- CompiledGenerate --------------------------------------------------------------

namespace {

CompileOptions named(CompileOptions options, const char* name) {
  if (options.name.empty()) options.name = name;
  return options;
}

// A compiled function called as a step function.
template <typename Fn>
Fn called(const Compiled<Fn>& compiled) {
  return [&compiled](const auto&... args) { return compiled(args...); };
}

}  // namespace

// The step functions draw from rng, whose address the compiled graphs keep:
// a call copies the caller's generator state in, and back out.
struct CompiledGenerate::Impl {
  Impl(Llama& m, CompileOptions o)
      : model(m),
        options(std::move(o)),
        growing_prefill(growing_fn(model, &rng), named(options, "llama prefill")),
        growing_decode(growing_fn(model, &rng), named(options, "llama decode")) {}

  // The compiled static steps capture the cache's buffers (a CUDA graph
  // writes them where they are): another batch or capacity makes new ones.
  void ensure_static_cache(int64_t batch, int64_t capacity) {
    if (static_cache && static_cache->batch() == batch && static_cache->capacity() == capacity)
      return;
    static_cache = std::make_shared<StaticKVCache>(model.make_static_cache(batch, capacity));
    static_prefill.emplace(static_fn(model, static_cache, &rng),
                           named(options, "llama prefill (static cache)"));
    static_decode.emplace(static_fn(model, static_cache, &rng),
                          named(options, "llama decode (static cache)"));
  }

  StepRunner runner(const Tensor& prompt, const GenerateOptions& o) {
    if (o.cache == KVCacheKind::Growing)
      return growing_runner(called(growing_prefill), called(growing_decode), sampling_of(o));
    const int64_t capacity = static_capacity(prompt, o);
    ensure_static_cache(prompt.size(0), capacity);
    return static_runner(called(*static_prefill), called(*static_decode), sampling_of(o), prompt,
                         static_mask(o.attention_mask, capacity));
  }

  Llama& model;
  CompileOptions options;
  Generator rng;
  Compiled<GrowingFn> growing_prefill, growing_decode;
  std::shared_ptr<StaticKVCache> static_cache;
  std::optional<Compiled<StaticFn>> static_prefill, static_decode;
};

CompiledGenerate::CompiledGenerate(Llama& model, CompileOptions options)
    : impl_(std::make_unique<Impl>(model, std::move(options))) {}
CompiledGenerate::~CompiledGenerate() = default;
CompiledGenerate::CompiledGenerate(CompiledGenerate&&) noexcept = default;
CompiledGenerate& CompiledGenerate::operator=(CompiledGenerate&&) noexcept = default;

GenerateResult CompiledGenerate::operator()(const Tensor& prompt_ids,
                                            const GenerateOptions& options) {
  check_options(impl_->model, options);
  check_prompt(impl_->model, prompt_ids, options.attention_mask);
  NoGradGuard no_grad;
  const auto [prompt, o] = on_model_device(impl_->model, prompt_ids, options);
  Generator& source = o.generator ? *o.generator : default_generator();
  impl_->rng = o.seed && !o.generator ? Generator(*o.seed) : source;
  StepRunner runner = impl_->runner(prompt, o);
  GenerateResult result = run_generation(prompt, o, runner);
  if (o.generator || !o.seed) source = impl_->rng;
  return result;
}

CompileStats CompiledGenerate::prefill_stats(KVCacheKind kind) const {
  if (kind == KVCacheKind::Growing) return impl_->growing_prefill.stats();
  return impl_->static_prefill ? impl_->static_prefill->stats() : CompileStats{};
}

CompileStats CompiledGenerate::decode_stats(KVCacheKind kind) const {
  if (kind == KVCacheKind::Growing) return impl_->growing_decode.stats();
  return impl_->static_decode ? impl_->static_decode->stats() : CompileStats{};
}

ExplainReport CompiledGenerate::decode_explain(KVCacheKind kind) const {
  if (kind == KVCacheKind::Growing) return impl_->growing_decode.explain();
  return impl_->static_decode ? impl_->static_decode->explain() : ExplainReport{};
}

}  // namespace kiln::models
