// kiln's tokenizer against Hugging Face's (transformers' PreTrainedTokenizerFast,
// checked there against the raw tokenizers library) on every string of
// tests/data/tokenizers/strings.json: ids, tokens, type ids, byte offsets and
// decoded text, for single texts, pairs and padded, truncated batches.
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "kiln/text/tokenizer.h"
#include "text/tokenizer_data.h"

namespace kiln::text {
namespace {

using nlohmann::json;
using testing::escaped;

std::vector<size_t> flat(const std::vector<Offsets>& offsets) {
  std::vector<size_t> out;
  for (const Offsets& o : offsets) out.insert(out.end(), {o.begin, o.end});
  return out;
}

// Counts mismatches, reporting the first few in full.
class Mismatches {
 public:
  template <typename T>
  void expect_equal(const T& got, const T& expected, const char* what, const std::string& text) {
    if (got == expected) return;
    if (++count_ <= kReported)
      ADD_FAILURE() << what << " of " << escaped(text)
                    << "\n  kiln:         " << ::testing::PrintToString(got)
                    << "\n  Hugging Face: " << ::testing::PrintToString(expected);
  }
  ~Mismatches() { EXPECT_EQ(count_, 0u) << "mismatches (the first " << kReported << " shown)"; }

 private:
  static constexpr size_t kReported = 12;
  size_t count_ = 0;
};

class TokenizerParity : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const std::string name = GetParam();
    tokenizer_.emplace(Tokenizer::from_file(testing::tokenizer_data_path(name + ".json")));
    expected_ = testing::read_json_file(testing::tokenizer_data_path(name + ".expected.json"));
    vocabulary_ = testing::vocabulary_of(
        testing::read_json_file(testing::tokenizer_data_path(name + ".json")));
    strings_ = testing::read_json_file(testing::tokenizer_data_path("strings.json"));
  }

  // The saved tokens, or (where the script left them out because they are
  // the vocabulary's) the file's tokens for the ids.
  std::vector<std::string> expected_tokens(const json& ref) {
    if (ref.contains("tokens")) return ref["tokens"].get<std::vector<std::string>>();
    std::vector<std::string> tokens;
    for (int64_t id : ref["ids"].get<std::vector<int64_t>>()) tokens.push_back(vocabulary_.at(id));
    return tokens;
  }

  static std::vector<int64_t> expected_type_ids(const json& ref) {
    if (ref.contains("type_ids")) return ref["type_ids"].get<std::vector<int64_t>>();
    return std::vector<int64_t>(ref["ids"].size(), 0);
  }

  std::optional<Tokenizer> tokenizer_;
  json expected_, strings_;
  std::unordered_map<int64_t, std::string> vocabulary_;
};

TEST_P(TokenizerParity, VocabularySizeMatches) {
  EXPECT_EQ(tokenizer_->vocab_size(), expected_["vocab_size"].get<int64_t>());
}

TEST_P(TokenizerParity, EveryTestStringEncodesAndDecodesAsHuggingFaceDoes) {
  const json& singles = expected_["single"];
  ASSERT_GE(singles.size(), 500u);
  ASSERT_LE(singles.size(), strings_.size());
  Mismatches mismatches;
  for (size_t i = 0; i < singles.size(); ++i) {
    const std::string text = strings_[i].get<std::string>();
    const json& ref = singles[i];
    const auto ids = ref["ids"].get<std::vector<int64_t>>();
    const Encoding e = tokenizer_->encode(text);
    mismatches.expect_equal(e.ids, ids, "ids", text);
    mismatches.expect_equal(e.tokens, expected_tokens(ref), "tokens", text);
    mismatches.expect_equal(e.type_ids, expected_type_ids(ref), "type ids", text);
    mismatches.expect_equal(flat(e.offsets), ref["offsets"].get<std::vector<size_t>>(), "offsets",
                            text);
    mismatches.expect_equal(tokenizer_->decode(ids), ref["decoded"].get<std::string>(),
                            "decoded text", text);
    if (ref.contains("decoded_with_special"))
      mismatches.expect_equal(tokenizer_->decode(ids, /*skip_special_tokens=*/false),
                              ref["decoded_with_special"].get<std::string>(),
                              "decoded text with special tokens", text);
    if (ref.contains("ids_without_special"))
      mismatches.expect_equal(tokenizer_->encode(text, /*add_special_tokens=*/false).ids,
                              ref["ids_without_special"].get<std::vector<int64_t>>(),
                              "ids without special tokens", text);
  }
}

TEST_P(TokenizerParity, PairsEncodeAsHuggingFaceDoes) {
  ASSERT_GE(expected_["pairs"].size(), 50u);
  Mismatches mismatches;
  for (const json& ref : expected_["pairs"]) {
    const std::string text = ref["text"].get<std::string>(), pair = ref["pair"].get<std::string>();
    const Encoding e = tokenizer_->encode(text, pair);
    const std::string both = text + "' + '" + pair;
    mismatches.expect_equal(e.ids, ref["ids"].get<std::vector<int64_t>>(), "pair ids", both);
    mismatches.expect_equal(e.tokens, expected_tokens(ref), "pair tokens", both);
    mismatches.expect_equal(e.type_ids, expected_type_ids(ref), "pair type ids", both);
    mismatches.expect_equal(flat(e.offsets), ref["offsets"].get<std::vector<size_t>>(),
                            "pair offsets", both);
  }
}

std::optional<Padding> padding_of(const json& batch) {
  const json& spec = batch["padding"];
  if (spec.is_null()) return std::nullopt;
  Padding p;
  if (spec["strategy"] == "fixed") p.length = spec["length"].get<size_t>();
  if (spec.contains("pad_to_multiple_of")) p.pad_to_multiple_of = spec["pad_to_multiple_of"];
  if (spec.value("direction", "right") == "left") p.direction = Side::kLeft;
  p.pad_token = batch["pad_token"].get<std::string>();
  return p;
}

std::optional<Truncation> truncation_of(const json& batch) {
  const json& spec = batch["truncation"];
  if (spec.is_null()) return std::nullopt;
  Truncation t;
  t.max_length = spec["max_length"].get<size_t>();
  if (spec.value("direction", "right") == "left") t.direction = Side::kLeft;
  const std::string strategy = spec.value("strategy", "longest_first");
  if (strategy == "only_first") t.strategy = TruncationStrategy::kOnlyFirst;
  if (strategy == "only_second") t.strategy = TruncationStrategy::kOnlySecond;
  return t;
}

TEST_P(TokenizerParity, PaddedAndTruncatedBatchesMatchHuggingFace) {
  ASSERT_FALSE(expected_["batches"].empty());
  Mismatches mismatches;
  for (const json& batch : expected_["batches"]) {
    tokenizer_->set_padding(padding_of(batch));
    tokenizer_->set_truncation(truncation_of(batch));
    const auto texts = batch["texts"].get<std::vector<std::string>>();
    std::vector<Encoding> got;
    if (batch["pairs"].is_null()) {
      got = tokenizer_->encode_batch(texts);
    } else {
      got = tokenizer_->encode_batch(texts, batch["pairs"].get<std::vector<std::string>>());
    }
    const json& encodings = batch["encodings"];
    ASSERT_EQ(got.size(), encodings.size());
    const std::string what = batch["padding"].dump() + " " + batch["truncation"].dump();
    for (size_t i = 0; i < got.size(); ++i) {
      const json& ref = encodings[i];
      mismatches.expect_equal(got[i].ids, ref["ids"].get<std::vector<int64_t>>(), "batch ids",
                              what + " " + texts[i]);
      mismatches.expect_equal(got[i].tokens, ref["tokens"].get<std::vector<std::string>>(),
                              "batch tokens", what + " " + texts[i]);
      mismatches.expect_equal(got[i].type_ids, ref["type_ids"].get<std::vector<int64_t>>(),
                              "batch type ids", what + " " + texts[i]);
      mismatches.expect_equal(got[i].attention_mask,
                              ref["attention_mask"].get<std::vector<int64_t>>(),
                              "batch attention mask", what + " " + texts[i]);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(HuggingFaceFiles, TokenizerParity,
                         ::testing::Values("bert_uncased", "bert_cased", "gpt2", "roberta",
                                           "llama3", "llama2", "misc", "nfd_wordpiece"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace kiln::text
