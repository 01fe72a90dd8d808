// Text to token ids and back, read from Hugging Face tokenizer.json files:
// BERT's WordPiece and the byte-level BPE of GPT-2, RoBERTa and Llama 3.
// Library kiln::text (CMake target kiln::text, linked beside kiln::kiln).
//
//   auto tok = kiln::text::Tokenizer::from_file("bert-base-uncased/tokenizer.json");
//   kiln::text::Encoding e = tok.encode("Hello, world!");  // [CLS] hello , world ! [SEP]
//   e.ids;                  // {101, 7592, 1010, 2088, 999, 102}
//   e.offsets[1];           // {0, 5}: the bytes of "Hello" in the input
//   tok.decode(e.ids);      // "hello, world!"
//
//   tok.set_padding(kiln::text::Padding{});      // pad each batch to its longest text
//   std::vector<std::string> texts = {"a question", "a longer second question"};
//   auto in = kiln::text::bert_inputs(tok.encode_batch(texts));  // int64 [2, S] tensors
//   auto out = bert(in.input_ids, in.attention_mask, in.token_type_ids);
//
// What each component does, what is not supported, and how the results were
// checked against Hugging Face's own libraries: docs/text.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/tensor.h"

namespace kiln::text {

// A range of bytes of the input text: [begin, end).
struct Offsets {
  size_t begin = 0, end = 0;
  bool operator==(const Offsets&) const = default;
};

// One encoded text (or pair of texts); every vector has one entry per token.
struct Encoding {
  std::vector<int64_t> ids;
  std::vector<std::string> tokens;
  std::vector<int64_t> type_ids;        // BERT's segment: 0 for the first text, 1 for the second
  std::vector<int64_t> attention_mask;  // 1 for tokens, 0 for padding
  std::vector<int64_t> special_tokens_mask;  // 1 for tokens the post-processor or padding added
  std::vector<Offsets> offsets;  // bytes of the text the token came from; {0, 0} when added
  // The text the token came from: 0 (text) or 1 (text_pair); -1 where added.
  std::vector<int64_t> sequence_ids;

  size_t size() const noexcept { return ids.size(); }
};

enum class Side { kRight, kLeft };

// Padding of encode_batch's encodings (and encode's, to a fixed length).
struct Padding {
  std::optional<size_t> length;   // pad to this many tokens; nullopt: to the batch's longest
  size_t pad_to_multiple_of = 0;  // then round the length up to a multiple (0: no rounding)
  Side direction = Side::kRight;
  std::string pad_token = "[PAD]";
  std::optional<int64_t> pad_id;  // nullopt: pad_token's id
  int64_t pad_type_id = 0;
};

enum class TruncationStrategy {
  kLongestFirst,  // of a pair, cut the longer text first
  kOnlyFirst,
  kOnlySecond,
};

// Truncation of every encoding; max_length counts the special tokens the
// post-processor adds.
struct Truncation {
  size_t max_length = 512;
  Side direction = Side::kRight;  // kRight keeps the start of the text
  TruncationStrategy strategy = TruncationStrategy::kLongestFirst;
};

class Tokenizer {
 public:
  // IOError naming the file when it cannot be read or is malformed (not JSON,
  // a missing field or a wrong type, a merge of unknown tokens); ValueError
  // naming the file and the type for a component kiln does not implement.
  static Tokenizer from_file(const std::string& path);
  // The same from the file's text; `name` stands for the file in messages.
  static Tokenizer from_json(std::string_view json, const std::string& name = "tokenizer.json");

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // text must be UTF-8 (ValueError naming the first bad byte otherwise). With
  // add_special_tokens, the post-processor adds its tokens ([CLS] ... [SEP]).
  // The truncation and padding set (from the file, or by set_*) apply.
  Encoding encode(std::string_view text, bool add_special_tokens = true) const;
  Encoding encode(std::string_view text, std::string_view text_pair,
                  bool add_special_tokens = true) const;
  // encode("a", "b") means a pair: without this overload the literal "b"
  // would convert to bool rather than to std::string_view.
  Encoding encode(std::string_view text, const char* text_pair,
                  bool add_special_tokens = true) const {
    return encode(text, std::string_view(text_pair), add_special_tokens);
  }
  // Each text (or text and pair), truncated, then padded together.
  std::vector<Encoding> encode_batch(std::span<const std::string> texts,
                                     bool add_special_tokens = true) const;
  std::vector<Encoding> encode_batch(std::span<const std::string> texts,
                                     std::span<const std::string> text_pairs,
                                     bool add_special_tokens = true) const;

  // The text of ids (ids without a token are skipped, as in Hugging Face's
  // library); invalid UTF-8 from byte-level tokens becomes U+FFFD.
  std::string decode(std::span<const int64_t> ids, bool skip_special_tokens = true) const;

  std::optional<int64_t> token_to_id(std::string_view token) const;
  std::optional<std::string> id_to_token(int64_t id) const;
  // Distinct tokens, the added ones included.
  int64_t vocab_size() const noexcept;

  // From the file's "padding" and "truncation" sections; nullopt: none.
  const std::optional<Padding>& padding() const noexcept;
  const std::optional<Truncation>& truncation() const noexcept;
  // ValueError when padding's pad_token is not in the vocabulary (and no
  // pad_id is given). A truncation shorter than the special tokens the
  // post-processor adds makes encode throw a ValueError.
  void set_padding(std::optional<Padding> padding);
  void set_truncation(std::optional<Truncation> truncation);

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// What models::BertModel's forward takes: int64 tensors of shape [batch, length].
struct BertInputs {
  Tensor input_ids, attention_mask, token_type_ids;
};
// ValueError when the batch is empty or its encodings differ in length (pad them).
BertInputs bert_inputs(std::span<const Encoding> batch);
inline BertInputs bert_inputs(const Encoding& encoding) { return bert_inputs({&encoding, 1}); }

}  // namespace kiln::text
