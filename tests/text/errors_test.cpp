// Wrong files and wrong input: each a kiln::Error that names the file (or the
// call) and the offending value, never a crash.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "kiln/text/tokenizer.h"
#include "text/tokenizer_data.h"
#include "unit/expect_error.h"

namespace kiln::text {
namespace {

using nlohmann::json;
using testing::expect_error;
using testing::expect_error_with;

json bert_file() {
  return testing::read_json_file(testing::tokenizer_data_path("bert_uncased.json"));
}
json gpt2_file() { return testing::read_json_file(testing::tokenizer_data_path("gpt2.json")); }

Tokenizer load(const json& file, const std::string& name) {
  return Tokenizer::from_json(file.dump(), name);
}

TEST(TokenizerErrors, MalformedJsonIsAnIOErrorNamingTheFile) {
  expect_error<IOError>([] { Tokenizer::from_json(R"({"model": {"type": )", "broken.json"); },
                        "broken.json", "not valid JSON");
  const auto path = std::filesystem::temp_directory_path() / "kiln_text_broken_tokenizer.json";
  {
    std::FILE* f = std::fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("[1, 2", f);
    std::fclose(f);
  }
  expect_error<IOError>([&] { Tokenizer::from_file(path.string()); }, path.string(),
                        "not valid JSON");
  std::filesystem::remove(path);
}

TEST(TokenizerErrors, APathThatDoesNotExistIsAnIOErrorNamingIt) {
  expect_error<IOError>([] { Tokenizer::from_file("/nonexistent/dir/tokenizer.json"); },
                        "/nonexistent/dir/tokenizer.json", "cannot open");
}

TEST(TokenizerErrors, AMissingModelIsAnIOError) {
  expect_error<IOError>([] { Tokenizer::from_json(R"({"normalizer": null})", "no_model.json"); },
                        "no_model.json", "'model'");
  expect_error<IOError>([] { Tokenizer::from_json("[]", "array.json"); }, "array.json",
                        "expected a tokenizer.json object");
}

TEST(TokenizerErrors, AnUnknownModelTypeIsNamed) {
  json file = bert_file();
  file["model"]["type"] = "Unigram";
  expect_error_with<ValueError>([&] { load(file, "unigram.json"); },
                                {"unigram.json", "model", "'Unigram'", "not supported"});
  file["model"].erase("type");
  expect_error<IOError>([&] { load(file, "untyped.json"); }, "untyped.json", "'type'");
}

TEST(TokenizerErrors, UnknownComponentTypesAreNamed) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"normalizer", "Precompiled"},
      {"pre_tokenizer", "Metaspace"},
      {"post_processor", "Bogus"},
      {"decoder", "CTC"},
  };
  for (const auto& [field, type] : cases) {
    json file = bert_file();
    file[field] = {{"type", type}};
    expect_error_with<ValueError>([&] { load(file, "custom.json"); },
                                  {"custom.json", field, "'" + type + "'", "not supported"});
  }
  json nested = bert_file();
  nested["normalizer"] = {{"type", "Sequence"},
                          {"normalizers", {{{"type", "NFC"}}, {{"type", "Nmt"}}}}};
  expect_error_with<ValueError>([&] { load(nested, "nested.json"); },
                                {"nested.json", "normalizer.normalizers[1]", "'Nmt'"});
}

TEST(TokenizerErrors, AMergeOfAnUnknownTokenIsNamed) {
  json file = gpt2_file();
  file["model"]["merges"].push_back({"zzqx", "t"});
  const size_t last = file["model"]["merges"].size() - 1;
  expect_error_with<IOError>(
      [&] { load(file, "merges.json"); },
      {"merges.json", "model.merges[" + std::to_string(last) + "]", "'zzqx'", "vocabulary"});
  // Both tokens known, but not what merging them makes.
  file["model"]["merges"].back() = {"e", "e"};
  file["model"]["vocab"].erase("ee");
  expect_error<IOError>([&] { load(file, "merged.json"); }, "merged.json", "'ee'");
}

TEST(TokenizerErrors, MalformedMergesAndVocabulariesAreIOErrors) {
  json file = gpt2_file();
  file["model"]["merges"] = {"a b c"};
  expect_error<IOError>([&] { load(file, "m.json"); }, "model.merges[0]", "'a b c'");
  file["model"]["merges"] = {json::array({"a"})};
  expect_error<IOError>([&] { load(file, "m.json"); }, "model.merges[0]", "1 items");
  file = gpt2_file();
  file["model"]["vocab"] = json::array();
  expect_error<IOError>([&] { load(file, "v.json"); }, "model.vocab", "expected an object");
  file = gpt2_file();
  file["model"]["vocab"]["hello"] = -3;
  expect_error<IOError>([&] { load(file, "v.json"); }, "model.vocab[\"hello\"]", "-3");
  file = gpt2_file();
  file["model"]["vocab"]["hello"] = "7";
  expect_error<IOError>([&] { load(file, "v.json"); }, "model.vocab[\"hello\"]",
                        "expected an integer, got a string");
}

TEST(TokenizerErrors, WrongTypesOfComponentFieldsAreIOErrors) {
  json file = bert_file();
  file["normalizer"]["lowercase"] = "yes";
  expect_error<IOError>([&] { load(file, "t.json"); }, "normalizer.lowercase",
                        "expected true or false");
  file = bert_file();
  file["post_processor"]["single"][0] = {{"SpecialToken", {{"id", "[NOPE]"}, {"type_id", 0}}}};
  expect_error<IOError>([&] { load(file, "t.json"); }, "post_processor.single[0]", "'[NOPE]'");
  file = bert_file();
  file["pre_tokenizer"] = {
      {"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
  expect_error<ValueError>([&] { load(file, "t.json"); }, "t.json", "'(unclosed'");
  file["pre_tokenizer"] = {
      {"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "Sideways"}};
  expect_error<IOError>([&] { load(file, "t.json"); }, "pre_tokenizer.behavior", "'Sideways'");
  file = bert_file();
  file["added_tokens"][0]["content"] = 5;
  expect_error<IOError>([&] { load(file, "t.json"); }, "added_tokens[0].content",
                        "expected a string");
}

TEST(TokenizerErrors, BpeDropoutIsRefusedNotIgnored) {
  json file = gpt2_file();
  file["model"]["dropout"] = 0.1;
  expect_error<ValueError>([&] { load(file, "dropout.json"); }, "dropout.json", "dropout");
}

TEST(TokenizerErrors, AMissingUnknownTokenIsNamedWhenAWordNeedsIt) {
  json file = bert_file();
  file["model"]["unk_token"] = "<missing>";
  const Tokenizer t = load(file, "unk.json");
  EXPECT_NO_THROW(t.encode("the"));
  expect_error<IOError>([&] { t.encode("\u2603"); }, "unk.json", "'<missing>'");
}

TEST(TokenizerErrors, InvalidUtf8InputIsAValueErrorNamingTheByte) {
  const Tokenizer t = Tokenizer::from_file(testing::tokenizer_data_path("gpt2.json"));
  expect_error<ValueError>([&] { t.encode("ab\xff"); }, "Tokenizer::encode", "byte 2 (0xff)");
  expect_error<ValueError>([&] { t.encode("ok", "\xc3"); }, "text pair", "byte 0 (0xc3)");
  expect_error<ValueError>([&] { t.encode("\xed\xa0\x80"); }, "not valid UTF-8", "byte 0");
  const std::vector<std::string> batch = {"fine", "\xc0\xaf"};
  expect_error<ValueError>([&] { t.encode_batch(batch); }, "not valid UTF-8", "byte 0 (0xc0)");
}

TEST(TokenizerErrors, PaddingAndTruncationThatCannotWorkAreValueErrors) {
  Tokenizer t = Tokenizer::from_file(testing::tokenizer_data_path("bert_uncased.json"));
  Padding p;
  p.pad_token = "<pad>";
  expect_error<ValueError>([&] { t.set_padding(p); }, "Tokenizer::set_padding", "'<pad>'");
  t.set_truncation(Truncation{.max_length = 1});
  expect_error<ValueError>([&] { t.encode("hello"); }, "truncation to 1", "2 special tokens");
  t.set_truncation(Truncation{.max_length = 4, .strategy = TruncationStrategy::kOnlySecond});
  expect_error<ValueError>([&] { t.encode("hello world again"); }, "only_second", "text pair");
  expect_error<ValueError>([&] { t.encode("hello world again", "x"); }, "second text", "1 tokens");
  const std::vector<std::string> two = {"a", "b"}, one = {"c"};
  expect_error<ValueError>([&] { t.encode_batch(two, one); }, "Tokenizer::encode_batch",
                           "2 texts but 1 text pairs");
}

TEST(TokenizerErrors, BertInputsNeedOneLength) {
  const Tokenizer t = Tokenizer::from_file(testing::tokenizer_data_path("bert_uncased.json"));
  const std::vector<std::string> texts = {"short", "a longer text"};
  const std::vector<Encoding> batch = t.encode_batch(texts);
  ASSERT_NE(batch[0].size(), batch[1].size());
  expect_error<ValueError>([&] { bert_inputs(batch); }, "bert_inputs",
                           "encoding 1 has " + std::to_string(batch[1].size()));
  expect_error<ValueError>([&] { bert_inputs(std::vector<Encoding>{}); }, "bert_inputs",
                           "no encodings");
}

}  // namespace
}  // namespace kiln::text
