// The tokenizer's API beyond the reference encodings: vocabulary lookups,
// offsets into the input, padding and truncation from the file, the tensors
// BERT takes, and calls from several threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "kiln/models/bert.h"
#include "kiln/text/tokenizer.h"
#include "text/tokenizer_data.h"

namespace kiln::text {
namespace {

using nlohmann::json;

Tokenizer open(const std::string& name) {
  return Tokenizer::from_file(testing::tokenizer_data_path(name + ".json"));
}

TEST(Tokenizer, LooksUpEveryTokenOfTheFileBothWays) {
  for (const std::string name : {"bert_cased", "gpt2", "llama2"}) {
    const Tokenizer t = open(name);
    const auto vocabulary = testing::vocabulary_of(
        testing::read_json_file(testing::tokenizer_data_path(name + ".json")));
    for (const auto& [id, token] : vocabulary) {
      EXPECT_EQ(t.token_to_id(token), id) << name << " " << token;
      EXPECT_EQ(t.id_to_token(id), token) << name << " " << id;
    }
    EXPECT_EQ(t.token_to_id("no such token in any vocabulary"), std::nullopt);
    EXPECT_EQ(t.id_to_token(-1), std::nullopt);
    EXPECT_EQ(t.id_to_token(int64_t{1} << 40), std::nullopt);
    EXPECT_EQ(t.id_to_token(t.vocab_size() + 1000), std::nullopt);
  }
}

// An added token matched on normalized text reads back normalized, as in
// Hugging Face's library; its id still comes from the file's spelling.
TEST(Tokenizer, LooksUpANormalizedAddedTokenAsTheLibraryDoes) {
  const Tokenizer t = open("bert_uncased");
  const auto id = t.token_to_id("Kiln Tokens");
  ASSERT_TRUE(id);
  EXPECT_EQ(t.id_to_token(*id), "kiln tokens");
  EXPECT_EQ(t.token_to_id("kiln tokens"), std::nullopt);
  EXPECT_EQ(t.encode("x KILN TOKENS y", false).ids[1], *id);
}

TEST(Tokenizer, OffsetsAreBytesOfTheInput) {
  const Tokenizer cased = open("bert_cased");
  const std::string text = "Größere Übungen, naïve 東京!";
  const Encoding e = cased.encode(text);
  ASSERT_GT(e.size(), 4u);
  for (size_t i = 0; i < e.size(); ++i) {
    if (e.sequence_ids[i] < 0) {
      EXPECT_EQ(e.offsets[i], Offsets{});
      continue;
    }
    std::string token = e.tokens[i];
    if (token.starts_with("##")) token.erase(0, 2);
    if (token != "[UNK]") {
      EXPECT_EQ(text.substr(e.offsets[i].begin, e.offsets[i].end - e.offsets[i].begin), token);
    }
  }
  // Byte-level tokens of one character's bytes all point at the whole character.
  const Encoding gpt2 = open("gpt2").encode("a \U0001F600");
  ASSERT_GE(gpt2.size(), 3u);
  EXPECT_EQ(gpt2.offsets[gpt2.size() - 2], (Offsets{2, 6}));
  EXPECT_EQ(gpt2.offsets.back(), (Offsets{2, 6}));
}

TEST(Tokenizer, EncodesPairsFromStringLiterals) {
  const Tokenizer t = open("bert_uncased");
  const Encoding e = t.encode("first", "second");
  EXPECT_EQ(e.tokens.front(), "[CLS]");
  EXPECT_EQ(e.type_ids.back(), 1);
  EXPECT_EQ(e.sequence_ids.back(), -1);
  EXPECT_NE(std::find(e.sequence_ids.begin(), e.sequence_ids.end(), 1), e.sequence_ids.end());
  EXPECT_EQ(t.encode("", false).size(), 0u);
  EXPECT_EQ(t.encode("").tokens, (std::vector<std::string>{"[CLS]", "[SEP]"}));
}

TEST(Tokenizer, DecodeSkipsIdsWithoutATokenAndSpecialTokensWhenAsked) {
  const Tokenizer t = open("bert_uncased");
  const Encoding e = t.encode("hello world");
  std::vector<int64_t> ids = e.ids;
  ids.insert(ids.begin() + 1, {-5, 1'000'000});
  EXPECT_EQ(t.decode(ids), "hello world");
  EXPECT_EQ(t.decode(ids, /*skip_special_tokens=*/false), "[CLS] hello world [SEP]");
}

TEST(Tokenizer, ReadsPaddingAndTruncationFromTheFile) {
  json file = testing::read_json_file(testing::tokenizer_data_path("bert_uncased.json"));
  file["padding"] = {{"strategy", {{"Fixed", 12}}},
                     {"direction", "Left"},
                     {"pad_to_multiple_of", nullptr},
                     {"pad_id", 0},
                     {"pad_type_id", 1},
                     {"pad_token", "[PAD]"}};
  file["truncation"] = {
      {"direction", "Right"}, {"max_length", 8}, {"strategy", "LongestFirst"}, {"stride", 0}};
  const Tokenizer t = Tokenizer::from_json(file.dump(), "padded.json");
  ASSERT_TRUE(t.padding() && t.truncation());
  EXPECT_EQ(t.padding()->length, 12u);
  EXPECT_EQ(t.truncation()->max_length, 8u);
  const Encoding e = t.encode("one two three four five six seven eight nine ten");
  ASSERT_EQ(e.size(), 12u);
  EXPECT_EQ(std::vector<int64_t>(e.ids.begin(), e.ids.begin() + 4), std::vector<int64_t>(4, 0));
  EXPECT_EQ(e.type_ids.front(), 1);
  EXPECT_EQ(e.tokens[4], "[CLS]");
  EXPECT_EQ(e.tokens.back(), "[SEP]");
  EXPECT_EQ(std::count(e.attention_mask.begin(), e.attention_mask.end(), 1), 8);
  EXPECT_EQ(std::count(e.special_tokens_mask.begin(), e.special_tokens_mask.end(), 1), 6);
}

TEST(Tokenizer, BatchBecomesTheTensorsBertTakes) {
  Tokenizer t = open("bert_uncased");
  t.set_padding(Padding{});
  const std::vector<std::string> texts = {"a question?", "a much longer second question here"},
                                 pairs = {"an answer", "another"};
  const std::vector<Encoding> batch = t.encode_batch(texts, pairs);
  const BertInputs in = bert_inputs(batch);
  const int64_t length = static_cast<int64_t>(batch[0].size());
  EXPECT_EQ(in.input_ids.sizes(), (Shape{2, length}));
  EXPECT_EQ(in.input_ids.dtype(), kInt64);
  EXPECT_EQ(in.attention_mask.dtype(), kInt64);
  EXPECT_EQ(in.token_type_ids.dtype(), kInt64);
  std::vector<int64_t> ids = batch[0].ids, mask = batch[0].attention_mask;
  ids.insert(ids.end(), batch[1].ids.begin(), batch[1].ids.end());
  mask.insert(mask.end(), batch[1].attention_mask.begin(), batch[1].attention_mask.end());
  EXPECT_EQ(in.input_ids.contiguous().to_vector<int64_t>(), ids);
  EXPECT_EQ(in.attention_mask.contiguous().to_vector<int64_t>(), mask);
  EXPECT_NE(std::find(mask.begin(), mask.end(), 0), mask.end());

  models::BertConfig config;
  config.vocab_size = t.vocab_size();
  config.hidden_size = 32;
  config.num_hidden_layers = 1;
  config.num_attention_heads = 2;
  config.intermediate_size = 64;
  models::BertModel bert(config);
  bert.eval();
  const models::BertOutput out = bert(in.input_ids, in.attention_mask, in.token_type_ids);
  EXPECT_EQ(out.last_hidden_state.sizes(), (Shape{2, length, 32}));
}

TEST(Tokenizer, EncodesTheSameFromSeveralThreads) {
  const Tokenizer t = open("llama3");
  const auto strings = testing::read_json_file(testing::tokenizer_data_path("strings.json"))
                           .get<std::vector<std::string>>();
  std::vector<std::vector<int64_t>> serial;
  for (const std::string& s : strings) serial.push_back(t.encode(s).ids);
  std::vector<size_t> wrong(4, 0);
  std::vector<std::thread> threads;
  for (size_t k = 0; k < wrong.size(); ++k)
    threads.emplace_back([&, k] {
      // Each thread starts elsewhere, so that they fill the BPE cache together.
      for (size_t n = 0; n < strings.size(); ++n) {
        const size_t i = (n + k * strings.size() / wrong.size()) % strings.size();
        wrong[k] += t.encode(strings[i]).ids != serial[i];
      }
    });
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(wrong, std::vector<size_t>(4, 0));
}

}  // namespace
}  // namespace kiln::text
