// The tokenizer's pipeline (docs/text.md): added tokens, normalizer,
// pre-tokenizer, model, then truncation, post-processor and padding; and
// decoding back to text.
#include "kiln/text/tokenizer.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <unordered_set>
#include <utility>

#include <nlohmann/json.hpp>

#include "kiln/error.h"
#include "text/added_vocabulary.h"
#include "text/decoders.h"
#include "text/json_reader.h"
#include "text/models.h"
#include "text/normalizers.h"
#include "text/post_processors.h"
#include "text/pre_tokenizers.h"

namespace kiln::text {
namespace {

Side side(const JsonValue& json) {
  const std::string name = json.string();
  if (name == "Right") return Side::kRight;
  if (name == "Left") return Side::kLeft;
  json.fail("expected Right or Left, got '" + name + "'");
}

size_t length(const JsonValue& json) {
  const int64_t n = json.integer();
  if (n < 0) json.fail("must not be negative, got " + std::to_string(n));
  return static_cast<size_t>(n);
}

Padding read_padding(const JsonValue& json) {
  Padding p;
  const JsonValue strategy = json.at("strategy");
  if (strategy.is_object()) {
    p.length = length(strategy.at("Fixed"));
  } else if (strategy.string() != "BatchLongest") {
    strategy.fail("expected \"BatchLongest\" or {\"Fixed\": n}, got '" + strategy.string() + "'");
  }
  if (const auto direction = json.find("direction")) p.direction = side(*direction);
  if (const auto multiple = json.find("pad_to_multiple_of"))
    p.pad_to_multiple_of = length(*multiple);
  p.pad_id = json.at("pad_id").id();
  p.pad_type_id = json.integer_or("pad_type_id", 0);
  p.pad_token = json.at("pad_token").string();
  return p;
}

Truncation read_truncation(const JsonValue& json) {
  Truncation t;
  t.max_length = length(json.at("max_length"));
  if (const auto direction = json.find("direction")) t.direction = side(*direction);
  const std::string strategy = json.string_or("strategy", "LongestFirst");
  if (strategy == "LongestFirst") {
    t.strategy = TruncationStrategy::kLongestFirst;
  } else if (strategy == "OnlyFirst") {
    t.strategy = TruncationStrategy::kOnlyFirst;
  } else if (strategy == "OnlySecond") {
    t.strategy = TruncationStrategy::kOnlySecond;
  } else {
    json.at("strategy")
        .fail("expected LongestFirst, OnlyFirst or OnlySecond, got '" + strategy + "'");
  }
  return t;
}

void check_utf8(std::string_view text, const char* which) {
  const auto bad = unicode::first_invalid_utf8(text);
  if (!bad) return;
  char byte[8];
  std::snprintf(byte, sizeof byte, "0x%02x", static_cast<unsigned char>(text[*bad]));
  throw ValueError(std::string("Tokenizer::encode: ") + which + " is not valid UTF-8: byte " +
                   std::to_string(*bad) + " (" + byte + ") starts no valid sequence");
}

}  // namespace

struct Tokenizer::Impl {
  std::string file;
  std::unique_ptr<Model> model;
  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  std::unique_ptr<PostProcessor> post_processor;
  std::unique_ptr<Decoder> decoder;
  AddedVocabulary added;
  std::optional<Padding> padding;
  std::optional<Truncation> truncation;
  int64_t vocab_size = 0;

  void load(const nlohmann::json& root);
  Encoding encode_one(std::string_view text, int64_t sequence) const;
  // text_pair: nullopt for a single text.
  Encoding encode(std::string_view text, std::optional<std::string_view> text_pair,
                  bool add_special) const;
  // Pads the encodings together, when padding is set.
  void pad_together(std::span<Encoding> batch) const;
};

void Tokenizer::Impl::load(const nlohmann::json& root_json) {
  const JsonValue root(root_json, "", file);
  if (!root.is_object()) root.fail("expected a tokenizer.json object");
  model = make_model(root.at("model"));
  if (const auto n = root.find("normalizer")) normalizer = make_normalizer(*n);
  if (const auto p = root.find("pre_tokenizer")) pre_tokenizer = make_pre_tokenizer(*p);
  if (const auto p = root.find("post_processor")) post_processor = make_post_processor(*p);
  if (const auto d = root.find("decoder")) decoder = make_decoder(*d);
  std::vector<AddedToken> tokens;
  if (const auto list = root.find("added_tokens")) {
    for (const JsonValue& item : list->array()) {
      AddedToken t;
      t.content = item.at("content").string();
      if (t.content.empty()) item.at("content").fail("an added token must not be empty");
      t.special = item.boolean_or("special", false);
      t.single_word = item.boolean_or("single_word", false);
      t.lstrip = item.boolean_or("lstrip", false);
      t.rstrip = item.boolean_or("rstrip", false);
      t.normalized = item.boolean_or("normalized", !t.special);
      // A token the model knows keeps the model's id, as in the tokenizers library.
      const auto known = model->vocab().id(t.content);
      t.id = known ? *known : item.at("id").id();
      tokens.push_back(std::move(t));
    }
  }
  std::unordered_set<std::string> extra;  // added tokens the model does not have
  for (const AddedToken& t : tokens)
    if (!model->vocab().id(t.content)) extra.insert(t.content);
  vocab_size = static_cast<int64_t>(model->vocab().size() + extra.size());
  added = AddedVocabulary(std::move(tokens), normalizer.get());
  if (const auto p = root.find("padding")) padding = read_padding(*p);
  if (const auto t = root.find("truncation")) truncation = read_truncation(*t);
}

Encoding Tokenizer::Impl::encode_one(std::string_view text, int64_t sequence) const {
  PreTokenizedString words;
  words.splits.push_back({NormalizedString(text), std::nullopt});
  added.extract_and_normalize(normalizer.get(), words);
  if (pre_tokenizer) pre_tokenizer->pre_tokenize(words);
  Encoding e;
  for (const PreTokenizedString::Split& split : words.splits) {
    const std::vector<Token> tokens =
        split.tokens ? *split.tokens : model->tokenize(split.normalized.text());
    for (const Token& t : tokens) {
      e.ids.push_back(t.id);
      e.tokens.push_back(t.value);
      e.offsets.push_back(split.normalized.input_range(t.begin, t.end));
    }
  }
  e.type_ids.assign(e.size(), sequence);
  e.attention_mask.assign(e.size(), 1);
  e.special_tokens_mask.assign(e.size(), 0);
  e.sequence_ids.assign(e.size(), sequence);
  return e;
}

Encoding Tokenizer::Impl::encode(std::string_view text, std::optional<std::string_view> text_pair,
                                 bool add_special) const {
  check_utf8(text, "the text");
  if (text_pair) check_utf8(*text_pair, "the text pair");
  std::vector<Encoding> parts;
  parts.push_back(encode_one(text, 0));
  if (text_pair) parts.push_back(encode_one(*text_pair, 1));
  if (truncation) {
    const size_t added_count =
        add_special && post_processor ? post_processor->added_tokens(text_pair.has_value()) : 0;
    if (truncation->max_length < added_count)
      throw ValueError("Tokenizer: truncation to " + std::to_string(truncation->max_length) +
                       " tokens leaves no room for the " + std::to_string(added_count) +
                       " special tokens of " + file + "'s post-processor");
    truncate(parts[0], text_pair ? &parts[1] : nullptr, truncation->max_length - added_count,
             *truncation);
  }
  const std::string_view texts[] = {text, text_pair.value_or("")};
  if (post_processor) post_processor->process(parts, texts, add_special);
  return concatenate(std::move(parts));
}

void Tokenizer::Impl::pad_together(std::span<Encoding> batch) const {
  if (!padding) return;
  size_t n = padding->length.value_or(0);
  if (!padding->length)
    for (const Encoding& e : batch) n = std::max(n, e.size());
  const size_t multiple = padding->pad_to_multiple_of;
  if (multiple > 0 && n % multiple != 0) n += multiple - n % multiple;
  for (Encoding& e : batch) pad(e, n, *padding, *padding->pad_id);
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_file(const std::string& path) {
  std::error_code error;
  if (std::filesystem::is_directory(path, error))
    throw IOError("Tokenizer::from_file: '" + path + "' is a directory, not a tokenizer.json");
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw IOError("Tokenizer::from_file: cannot open '" + path + "': " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw IOError("Tokenizer::from_file: cannot read '" + path + "'");
  return from_json(text.str(), path);
}

Tokenizer Tokenizer::from_json(std::string_view json, const std::string& name) {
  auto impl = std::make_unique<Impl>();
  impl->file = name;
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(json.begin(), json.end());
  } catch (const nlohmann::json::exception& e) {
    throw IOError(name + ": not valid JSON: " + e.what());
  }
  impl->load(root);
  return Tokenizer(std::move(impl));
}

Encoding Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  Encoding e = impl_->encode(text, std::nullopt, add_special_tokens);
  impl_->pad_together({&e, 1});
  return e;
}

Encoding Tokenizer::encode(std::string_view text, std::string_view text_pair,
                           bool add_special_tokens) const {
  Encoding e = impl_->encode(text, text_pair, add_special_tokens);
  impl_->pad_together({&e, 1});
  return e;
}

std::vector<Encoding> Tokenizer::encode_batch(std::span<const std::string> texts,
                                              bool add_special_tokens) const {
  std::vector<Encoding> out;
  out.reserve(texts.size());
  for (const std::string& text : texts)
    out.push_back(impl_->encode(text, std::nullopt, add_special_tokens));
  impl_->pad_together(out);
  return out;
}

std::vector<Encoding> Tokenizer::encode_batch(std::span<const std::string> texts,
                                              std::span<const std::string> text_pairs,
                                              bool add_special_tokens) const {
  if (texts.size() != text_pairs.size())
    throw ValueError("Tokenizer::encode_batch: " + std::to_string(texts.size()) + " texts but " +
                     std::to_string(text_pairs.size()) + " text pairs");
  std::vector<Encoding> out;
  out.reserve(texts.size());
  for (size_t i = 0; i < texts.size(); ++i)
    out.push_back(impl_->encode(texts[i], text_pairs[i], add_special_tokens));
  impl_->pad_together(out);
  return out;
}

std::string Tokenizer::decode(std::span<const int64_t> ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int64_t id : ids) {
    std::optional<std::string> token = id_to_token(id);
    if (!token || (skip_special_tokens && impl_->added.is_special(*token))) continue;
    tokens.push_back(std::move(*token));
  }
  if (impl_->decoder) tokens = impl_->decoder->decode_chain(std::move(tokens));
  std::string text;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i > 0 && !impl_->decoder) text += ' ';
    text += tokens[i];
  }
  return text;
}

std::optional<int64_t> Tokenizer::token_to_id(std::string_view token) const {
  if (const auto id = impl_->added.id(token)) return *id;
  if (const auto id = impl_->model->vocab().id(token)) return *id;
  return std::nullopt;
}

std::optional<std::string> Tokenizer::id_to_token(int64_t id) const {
  if (id < 0 || id > std::numeric_limits<uint32_t>::max()) return std::nullopt;
  const auto key = static_cast<uint32_t>(id);
  if (const AddedToken* t = impl_->added.token(key)) return t->text;
  if (const std::string* t = impl_->model->vocab().token(key)) return *t;
  return std::nullopt;
}

int64_t Tokenizer::vocab_size() const noexcept { return impl_->vocab_size; }

const std::optional<Padding>& Tokenizer::padding() const noexcept { return impl_->padding; }
const std::optional<Truncation>& Tokenizer::truncation() const noexcept {
  return impl_->truncation;
}

void Tokenizer::set_padding(std::optional<Padding> padding) {
  if (padding && !padding->pad_id) {
    padding->pad_id = token_to_id(padding->pad_token);
    if (!padding->pad_id)
      throw ValueError("Tokenizer::set_padding: the pad token '" + padding->pad_token +
                       "' is not in the vocabulary of " + impl_->file +
                       " (give pad_id, or a pad_token it has)");
  }
  impl_->padding = std::move(padding);
}

void Tokenizer::set_truncation(std::optional<Truncation> truncation) {
  impl_->truncation = std::move(truncation);
}

}  // namespace kiln::text
