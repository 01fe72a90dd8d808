// Encodes a text, or a sequence of token ids, with BERT and prints the
// embeddings: the shape of last_hidden_state, the first values of the [CLS]
// vector and of the pooler output. Without --config it builds a small random
// BERT (2 layers, hidden 128); with a Hugging Face config.json and
// model.safetensors it runs that checkpoint. --text goes through the
// checkpoint's tokenizer.json (kiln::text) and prints the tokens; --ids takes
// the ids as they are (bert-base-uncased's "101 7592 1010 2088 999 102" for
// "[CLS] hello, world! [SEP]").
//
//   bert_encode [--config config.json [--weights model.safetensors]]
//               [--tokenizer tokenizer.json --text "Hello, world!"]
//               [--ids "101 7592 2088 102"] [--mask "1 1 1 1"]
//
// Exits with 2 on bad arguments, 1 when a file cannot be read, the text is not
// UTF-8 or the outputs are not finite.
#include <kiln/kiln.h>
#include <kiln/models/bert.h>
#include <kiln/text/tokenizer.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

using namespace kiln;
using models::BertConfig;
using models::BertModel;

namespace {

constexpr const char* kUsage =
    "usage: bert_encode [--config config.json [--weights model.safetensors]]\n"
    "                   [--tokenizer tokenizer.json --text \"Hello, world!\"]\n"
    "                   [--ids \"101 7592 2088 102\"] [--mask \"1 1 1 1\"]\n"
    "  --config     a Hugging Face BERT config.json (default: a small random BERT)\n"
    "  --weights    its model.safetensors (needs --config)\n"
    "  --tokenizer  its tokenizer.json (needed by --text)\n"
    "  --text       a text to encode (instead of --ids)\n"
    "  --ids        token ids separated by spaces\n"
    "  --mask       1 (attend) / 0 (padding) per id\n";

struct Args {
  std::string config, weights, tokenizer;
  std::optional<std::string> text;
  std::vector<int64_t> ids = {101, 7592, 1010, 2088, 999, 102};
  bool ids_given = false;
  std::optional<std::vector<int64_t>> mask;
};

// Whitespace-separated integers; nullopt when a word is not one or there are none.
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
  if (out.empty()) return std::nullopt;
  return out;
}

// nullopt (after printing why) for arguments that are not understood.
std::optional<Args> parse_args(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    if (flag == "-h" || flag == "--help") return std::nullopt;
    if (i + 1 >= argc) {
      std::fprintf(stderr, "bert_encode: %s needs a value\n", argv[i]);
      return std::nullopt;
    }
    const std::string value = argv[++i];
    if (flag == "--config") {
      args.config = value;
    } else if (flag == "--weights") {
      args.weights = value;
    } else if (flag == "--tokenizer") {
      args.tokenizer = value;
    } else if (flag == "--text") {
      args.text = value;
    } else if (flag == "--ids" || flag == "--mask") {
      auto ints = parse_ints(value);
      if (!ints) {
        std::fprintf(stderr, "bert_encode: %s expects integers, got \"%s\"\n", argv[i - 1],
                     value.c_str());
        return std::nullopt;
      }
      (flag == "--ids" ? args.ids : args.mask.emplace()) = *ints;
      args.ids_given = args.ids_given || flag == "--ids";
    } else {
      std::fprintf(stderr, "bert_encode: unknown argument %s\n", argv[i - 1]);
      return std::nullopt;
    }
  }
  if (!args.weights.empty() && args.config.empty()) {
    std::fprintf(stderr, "bert_encode: --weights needs --config\n");
    return std::nullopt;
  }
  if (args.text && (args.tokenizer.empty() || args.ids_given || args.mask)) {
    std::fprintf(stderr, "bert_encode: --text needs --tokenizer, and takes no --ids or --mask\n");
    return std::nullopt;
  }
  if (!args.tokenizer.empty() && !args.text) {
    std::fprintf(stderr, "bert_encode: --tokenizer needs --text\n");
    return std::nullopt;
  }
  if (args.mask && args.mask->size() != args.ids.size()) {
    std::fprintf(stderr, "bert_encode: --mask has %zu values for %zu ids\n", args.mask->size(),
                 args.ids.size());
    return std::nullopt;
  }
  return args;
}

BertConfig small_random_config() {
  BertConfig c;
  c.num_hidden_layers = 2;
  c.hidden_size = 128;
  c.num_attention_heads = 2;
  c.intermediate_size = 512;
  return c;
}

void print_head(const char* label, const Tensor& vector, int64_t count) {
  const auto values = vector.narrow(0, 0, std::min(count, vector.size(0))).to_vector<float>();
  std::printf("%s (first %zu of %lld):", label, values.size(),
              static_cast<long long>(vector.size(0)));
  for (float v : values) std::printf(" %.5f", v);
  std::printf("\n");
}

// The length of ids without the trailing padding of mask.
int64_t unpadded_length(const Args& args) {
  int64_t n = static_cast<int64_t>(args.ids.size());
  while (args.mask && n > 0 && (*args.mask)[n - 1] == 0) --n;
  return n;
}

bool all_finite(const Tensor& t) {
  for (float v : t.contiguous().to_vector<float>())
    if (!std::isfinite(v)) return false;
  return true;
}

// The text's encoding, after printing its tokens and ids.
text::Encoding encode_text(const Args& args) {
  const text::Tokenizer tokenizer = text::Tokenizer::from_file(args.tokenizer);
  text::Encoding encoding = tokenizer.encode(*args.text);
  std::printf("tokens:");
  for (const std::string& token : encoding.tokens) std::printf(" %s", token.c_str());
  std::printf("\nids:");
  for (int64_t id : encoding.ids) std::printf(" %lld", static_cast<long long>(id));
  std::printf("\n");
  return encoding;
}

}  // namespace

int main(int argc, char** argv) {
  std::optional<Args> args = parse_args(argc, argv);
  if (!args) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  std::optional<BertModel> model;
  std::optional<text::Encoding> encoding;
  try {
    if (args->text) {
      encoding = encode_text(*args);
      args->ids = encoding->ids;
    }
    if (args->config.empty()) {
      manual_seed(0);
      model.emplace(small_random_config());
      std::printf("no --config: a small random BERT (2 layers, hidden 128), not a trained one\n");
    } else {
      model.emplace(BertConfig::from_json_file(args->config));
      if (args->weights.empty()) {
        std::printf("no --weights: random weights for %s\n", args->config.c_str());
      } else {
        const nn::LoadResult loaded =
            model->load_hf_state_dict(load_safetensors(args->weights), /*strict=*/false);
        for (const auto& key : loaded.missing_keys)
          std::fprintf(stderr, "bert_encode: %s has no %s: it stays random\n",
                       args->weights.c_str(), key.c_str());
      }
    }
  } catch (const Error& e) {  // unreadable or malformed files, text that is not UTF-8
    std::fprintf(stderr, "bert_encode: %s\n", e.what());
    return 1;
  }
  const int64_t vocab = model->config().vocab_size, seq = static_cast<int64_t>(args->ids.size());
  for (int64_t id : args->ids) {
    if (id < 0 || id >= vocab) {
      std::fprintf(stderr, "bert_encode: token id %lld is outside the vocabulary [0, %lld)\n%s",
                   static_cast<long long>(id), static_cast<long long>(vocab), kUsage);
      return 2;
    }
  }
  if (seq > model->config().max_position_embeddings) {
    std::fprintf(stderr, "bert_encode: %lld ids exceed max_position_embeddings %lld\n",
                 static_cast<long long>(seq),
                 static_cast<long long>(model->config().max_position_embeddings));
    return 2;
  }

  model->eval();
  InferenceModeGuard inference;
  // The tensors BERT takes: from the text's encoding, or from --ids and --mask.
  text::BertInputs in;
  if (encoding) {
    in = text::bert_inputs(*encoding);
  } else {
    in.input_ids = from_vector(args->ids, Shape{1, seq});
    if (args->mask) in.attention_mask = from_vector(*args->mask, Shape{1, seq});
  }
  const auto start = std::chrono::steady_clock::now();
  const models::BertOutput out = (*model)(in.input_ids, in.attention_mask, in.token_type_ids);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();

  std::printf("last_hidden_state: [%lld, %lld, %lld] in %.1f ms\n",
              static_cast<long long>(out.last_hidden_state.size(0)),
              static_cast<long long>(out.last_hidden_state.size(1)),
              static_cast<long long>(out.last_hidden_state.size(2)), ms);
  print_head("[CLS] vector", out.last_hidden_state[0][0], 8);
  print_head("pooler_output", out.pooler_output[0], 8);
  // Checks that cost nothing: the shapes, finite values, and tanh's range.
  const bool shapes_ok =
      out.last_hidden_state.sizes() == Shape{1, seq, model->config().hidden_size} &&
      out.pooler_output.sizes() == Shape{1, model->config().hidden_size};
  const bool values_ok = all_finite(out.last_hidden_state) && all_finite(out.pooler_output) &&
                         out.pooler_output.abs().max().item<float>() <= 1.0f;
  // Masked padding at the end must not change the real tokens' embeddings.
  bool padding_ok = true;
  const int64_t real = unpadded_length(*args);
  if (real > 0 && real < seq) {
    const models::BertOutput alone = (*model)(in.input_ids.narrow(1, 0, real));
    const float diff =
        std::max((alone.last_hidden_state - out.last_hidden_state.narrow(1, 0, real))
                     .abs()
                     .max()
                     .item<float>(),
                 (alone.pooler_output - out.pooler_output).abs().max().item<float>());
    std::printf("without the %lld padded tokens: max difference %.2g\n",
                static_cast<long long>(seq - real), diff);
    padding_ok = diff < 1e-4f;
  }
  if (!shapes_ok || !values_ok || !padding_ok) {
    std::fprintf(stderr,
                 "bert_encode: unexpected output (shapes ok: %d, values ok: %d, padding ok: %d)\n",
                 shapes_ok, values_ok, padding_ok);
    return 1;
  }
  return 0;
}
