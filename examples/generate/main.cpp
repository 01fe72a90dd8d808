// Generates token ids with a Llama-style decoder and prints them with the
// tokens per second. Without --config it builds a random model (tiny: the
// parity tests' shape; medium: 8 layers of 512, vocab 32000); with a Hugging
// Face config.json and model.safetensors it runs that checkpoint (prompt ids
// from its tokenizer: "1 15043 3186" is "<s> Hello world" for Llama 2's).
//
//   generate [--config config.json [--weights model.safetensors]] [--random tiny|medium]
//            [--prompt-ids "1 2 3"] [--max-new-tokens 32] [--batch 1]
//            [--greedy | --top-k K --temperature T --seed S] [--eos "2" | --eos none]
//            [--cache growing|static] [--compile] [--bench [--runs 5]]
//            [--device cpu|cuda] [--mode default|reduce-overhead|max-autotune]
//
// --compile generates with the decode step compiled (kiln::compile), then
// eagerly, and checks that the tokens agree. --bench times eager and compiled
// generation with both caches after a warm-up run, and prints the median
// tokens per second of each and their ratio (docs/decoder.md, "Speed").
//
// Exits with 2 on bad arguments, 1 when a file cannot be read or the
// self-check fails.
#include <kiln/kiln.h>
#include <kiln/models/llama.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

using namespace kiln;
using models::CompiledGenerate;
using models::GenerateOptions;
using models::GenerateResult;
using models::KVCacheKind;
using models::Llama;
using models::LlamaConfig;

namespace {

constexpr const char* kUsage =
    "usage: generate [--config config.json [--weights model.safetensors]] [--random tiny|medium]\n"
    "                [--prompt-ids \"1 2 3\"] [--max-new-tokens 32] [--batch 1]\n"
    "                [--greedy | --top-k K --temperature T --seed S] [--eos \"2\" | --eos none]\n"
    "                [--cache growing|static] [--compile] [--bench [--runs 5]]\n"
    "                [--device cpu|cuda] [--mode default|reduce-overhead|max-autotune]\n"
    "  --config          a Hugging Face Llama config.json (default: a random model)\n"
    "  --weights         its model.safetensors (needs --config)\n"
    "  --random          the random model's size: tiny (hidden 64) or medium (hidden 512)\n"
    "  --prompt-ids      token ids separated by spaces, repeated for each row of --batch\n"
    "  --greedy          the most likely token at each step (the default)\n"
    "  --top-k, --temperature, --seed   sample from the top K instead\n"
    "  --eos             ids that end a row (default: the config's eos_token_id; none\n"
    "                    for a random model)\n"
    "  --cache           growing (cat at each step, the default) or static (preallocated)\n"
    "  --compile         compile the decode step, and check it against eager generation\n"
    "  --bench           median tokens/s of eager and compiled generation, both caches\n"
    "  --device          where the model runs (default: cpu)\n"
    "  --mode            kiln::compile's mode for --compile and --bench (default: default;\n"
    "                    reduce-overhead replays each decode step as one CUDA graph)\n";

struct Args {
  std::string config, weights, random = "tiny";
  std::vector<int64_t> prompt = {1, 2, 3};
  int64_t max_new_tokens = 32, batch = 1, top_k = 0, runs = 5;
  double temperature = 1.0;
  uint64_t seed = 0;
  bool sample = false, greedy_flag = false, compile = false, bench = false;
  std::optional<std::vector<int64_t>> eos;
  KVCacheKind cache = KVCacheKind::Growing;
  Device device = Device::cpu();
  Mode mode = Mode::Default;
};

// Whitespace-separated integers; nullopt when a word is not one.
std::optional<std::vector<int64_t>> parse_ints(const std::string& text) {
  std::istringstream in(text);
  std::vector<int64_t> out;
  std::string word;
  while (in >> word) {
    size_t used = 0;
    try {
      out.push_back(std::stoll(word, &used));
    } catch (const std::exception&) {
      return std::nullopt;
    }
    if (used != word.size()) return std::nullopt;
  }
  return out;
}

std::optional<double> parse_number(const std::string& text) {
  size_t used = 0;
  try {
    const double v = std::stod(text, &used);
    if (used == text.size()) return v;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

// nullopt (after printing why) for arguments that are not understood.
std::optional<Args> parse_args(int argc, char** argv) {
  Args a;
  const auto bad = [](const char* flag, const std::string& value) {
    std::fprintf(stderr, "generate: %s does not take \"%s\"\n", flag, value.c_str());
    return std::nullopt;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    if (flag == "-h" || flag == "--help") return std::nullopt;
    if (flag == "--greedy" || flag == "--compile" || flag == "--bench") {
      (flag == "--greedy" ? a.greedy_flag : flag == "--compile" ? a.compile : a.bench) = true;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "generate: %s needs a value\n", argv[i]);
      return std::nullopt;
    }
    const std::string value = argv[++i];
    const std::optional<double> number = parse_number(value);
    const bool whole = number && *number == static_cast<double>(static_cast<int64_t>(*number));
    if (flag == "--config") {
      a.config = value;
    } else if (flag == "--weights") {
      a.weights = value;
    } else if (flag == "--random") {
      if (value != "tiny" && value != "medium") return bad(argv[i - 1], value);
      a.random = value;
    } else if (flag == "--cache") {
      if (value != "growing" && value != "static") return bad(argv[i - 1], value);
      a.cache = value == "static" ? KVCacheKind::Static : KVCacheKind::Growing;
    } else if (flag == "--device") {
      if (value != "cpu" && value != "cuda") return bad(argv[i - 1], value);
      a.device = value == "cuda" ? Device::cuda() : Device::cpu();
    } else if (flag == "--mode") {
      if (value == "default") {
        a.mode = Mode::Default;
      } else if (value == "reduce-overhead") {
        a.mode = Mode::ReduceOverhead;
      } else if (value == "max-autotune") {
        a.mode = Mode::MaxAutotune;
      } else {
        return bad(argv[i - 1], value);
      }
    } else if (flag == "--prompt-ids" || flag == "--eos") {
      auto ints = flag == "--eos" && value == "none" ? std::vector<int64_t>{} : parse_ints(value);
      if (!ints || (flag == "--prompt-ids" && ints->empty())) return bad(argv[i - 1], value);
      (flag == "--eos" ? a.eos.emplace() : a.prompt) = *ints;
    } else if (flag == "--temperature") {
      if (!number || !(*number > 0)) return bad(argv[i - 1], value);
      a.temperature = *number, a.sample = true;
    } else if (flag == "--max-new-tokens" || flag == "--batch" || flag == "--top-k" ||
               flag == "--seed" || flag == "--runs") {
      const bool positive_needed = flag == "--batch" || flag == "--runs";
      if (!whole || *number < (positive_needed ? 1 : 0)) return bad(argv[i - 1], value);
      const auto n = static_cast<int64_t>(*number);
      if (flag == "--max-new-tokens") a.max_new_tokens = n;
      if (flag == "--batch") a.batch = n;
      if (flag == "--top-k") a.top_k = n, a.sample = true;
      if (flag == "--seed") a.seed = static_cast<uint64_t>(n);
      if (flag == "--runs") a.runs = n;
    } else {
      std::fprintf(stderr, "generate: unknown argument %s\n", argv[i - 1]);
      return std::nullopt;
    }
  }
  if (!a.weights.empty() && a.config.empty()) {
    std::fprintf(stderr, "generate: --weights needs --config\n");
    return std::nullopt;
  }
  if (a.greedy_flag && a.sample) {
    std::fprintf(stderr, "generate: --greedy excludes --top-k and --temperature\n");
    return std::nullopt;
  }
  return a;
}

LlamaConfig random_config(const std::string& size) {
  LlamaConfig c;
  if (size == "tiny") {  // the parity tests' model (tests/parity/make_llama_reference.py)
    c.vocab_size = 256, c.hidden_size = 64, c.intermediate_size = 176, c.num_hidden_layers = 2;
    c.num_attention_heads = 4, c.num_key_value_heads = 2, c.max_position_embeddings = 128;
  } else {
    c.vocab_size = 32000, c.hidden_size = 512, c.intermediate_size = 1408, c.num_hidden_layers = 8;
    c.num_attention_heads = 8, c.num_key_value_heads = 4, c.max_position_embeddings = 2048;
  }
  return c;
}

std::string describe(const LlamaConfig& c) {
  std::ostringstream out;
  out << "vocab " << c.vocab_size << ", hidden " << c.hidden_size << ", " << c.num_hidden_layers
      << " layers, " << c.num_attention_heads << " heads, " << c.kv_heads() << " key/value heads";
  return out.str();
}

struct Timed {
  GenerateResult result;
  double seconds = 0;
  double tokens_per_second() const {
    return static_cast<double>(result.new_tokens * result.sequences.size(0)) / seconds;
  }
};

template <typename F>
Timed timed(F&& run) {
  const auto start = std::chrono::steady_clock::now();
  GenerateResult r = run();
  // CUDA work is queued: the time is the time until the device is done.
  if (r.sequences.device().is_cuda()) cuda::synchronize(r.sequences.device().index());
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
  return {std::move(r), took.count()};
}

const char* name_of(KVCacheKind kind) { return kind == KVCacheKind::Static ? "static" : "growing"; }

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// Median tokens/s of eager and compiled generation with each cache. The runs
// alternate, so that a load that comes and goes slows both alike.
void bench(Llama& model, const Tensor& prompt, GenerateOptions options, int64_t runs,
           const CompileOptions& compile_options) {
  std::printf(
      "tokens/s, median of %lld runs after a warm-up (batch %lld, %lld-token prompt, up to %lld "
      "new tokens, %s, prompt's forward included):\n",
      static_cast<long long>(runs), static_cast<long long>(prompt.size(0)),
      static_cast<long long>(prompt.size(1)), static_cast<long long>(options.max_new_tokens),
      options.greedy ? "greedy" : "sampled");
  std::printf("%-8s %10s %10s %16s\n", "cache", "eager", "compiled", "compiled/eager");
  for (KVCacheKind kind : {KVCacheKind::Growing, KVCacheKind::Static}) {
    options.cache = kind;
    CompiledGenerate fast(model, compile_options);
    const auto eager = [&] { return models::generate(model, prompt, options); };
    const auto compiled = [&] { return fast(prompt, options); };
    (void)eager();
    (void)compiled();  // traces and compiles
    std::vector<double> eager_rates, compiled_rates;
    for (int64_t i = 0; i < runs; ++i) {
      eager_rates.push_back(timed(eager).tokens_per_second());
      compiled_rates.push_back(timed(compiled).tokens_per_second());
    }
    const double e = median(eager_rates), c = median(compiled_rates);
    std::printf("%-8s %10.1f %10.1f %15.2fx\n", name_of(kind), e, c, c / e);
  }
}

void print_rows(const GenerateResult& r, int64_t prompt_length) {
  for (int64_t row = 0; row < r.sequences.size(0); ++row) {
    std::printf("row %lld:", static_cast<long long>(row));
    for (int64_t id : r.sequences[row].narrow(0, prompt_length, r.new_tokens).to_vector<int64_t>())
      std::printf(" %lld", static_cast<long long>(id));
    std::printf("\n");
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::optional<Args> args = parse_args(argc, argv);
  if (!args) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  std::optional<Llama> model;
  std::vector<int64_t> eos;
  try {
    if (args->config.empty()) {
      manual_seed(0);
      model.emplace(random_config(args->random));
      std::printf("no --config: a random %s Llama (%s), not a trained one\n", args->random.c_str(),
                  describe(model->config()).c_str());
    } else {
      model.emplace(LlamaConfig::from_json_file(args->config));
      eos = model->config().eos_token_ids;
      if (args->weights.empty()) {
        std::printf("no --weights: random weights for %s\n", args->config.c_str());
      } else {
        const nn::LoadResult loaded =
            model->load_hf_state_dict(load_safetensors(args->weights), /*strict=*/false);
        for (const auto& key : loaded.missing_keys)
          std::fprintf(stderr, "generate: %s has no %s: it stays random\n", args->weights.c_str(),
                       key.c_str());
      }
      std::printf("%s (%s)\n", args->config.c_str(), describe(model->config()).c_str());
    }
    model->to(args->device);
  } catch (const Error& e) {  // unreadable or malformed files, or no CUDA device
    std::fprintf(stderr, "generate: %s\n", e.what());
    return 1;
  }
  if (args->eos) eos = *args->eos;

  const auto length = static_cast<int64_t>(args->prompt.size());
  const Tensor prompt =
      from_vector(args->prompt, Shape{1, length}).expand({args->batch, length}).to(args->device);
  CompileOptions compile_options;
  compile_options.mode = args->mode;
  const GenerateOptions options{.max_new_tokens = args->max_new_tokens,
                                .greedy = !args->sample,
                                .temperature = args->temperature,
                                .top_k = args->top_k,
                                .seed = args->seed,
                                .eos_token_ids = eos,
                                .cache = args->cache};
  try {
    if (args->bench) {
      bench(*model, prompt, options, args->runs, compile_options);
      return 0;
    }
    CompiledGenerate fast(*model, compile_options);
    const Timed run = timed([&] {
      return args->compile ? fast(prompt, options) : models::generate(*model, prompt, options);
    });
    print_rows(run.result, length);
    std::printf("%lld new tokens x %lld rows in %.1f ms: %.1f tokens/s (%s, %s cache%s)\n",
                static_cast<long long>(run.result.new_tokens), static_cast<long long>(args->batch),
                run.seconds * 1e3, run.tokens_per_second(), args->compile ? "compiled" : "eager",
                name_of(args->cache), args->compile ? ", the first call: compiling included" : "");
    if (args->compile) {
      const GenerateResult eager = models::generate(*model, prompt, options);
      if (eager.sequences.to_vector<int64_t>() != run.result.sequences.to_vector<int64_t>()) {
        std::fprintf(stderr, "generate: compiled and eager generation differ\n");
        return 1;
      }
      const CompileStats decode = fast.decode_stats(args->cache);
      std::printf(
          "compiled tokens equal eager's; decode step: calls %lld, traces %lld, graphs %lld, "
          "CUDA graph launches %lld\n",
          static_cast<long long>(decode.calls), static_cast<long long>(decode.traces),
          static_cast<long long>(decode.graphs), static_cast<long long>(decode.graph_launches));
    }
  } catch (const Error& e) {  // ids outside the vocabulary: the message names generate
    std::fprintf(stderr, "%s\n%s", e.what(), kUsage);
    return 2;
  }
  return 0;
}
