// The added tokens of a tokenizer.json (special tokens such as [CLS] and
// <|endoftext|>, and tokens added after training): found in the text before
// the model sees it, special and non-normalized ones on the input as written,
// the others on the normalized text.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "text/normalized_string.h"

namespace kiln::text {

class Normalizer;

struct AddedToken {
  std::string content;
  uint32_t id = 0;
  bool single_word = false;  // only where no word character touches it
  bool lstrip = false;       // takes the whitespace before it
  bool rstrip = false;       // takes the whitespace after it
  bool normalized = true;    // matched on the normalized text
  bool special = false;      // skipped by decode(skip_special_tokens)
  // What id_to_token gives: the content, normalized when matched normalized
  // (as the tokenizers library does).
  std::string text;
};

class AddedVocabulary {
 public:
  AddedVocabulary() = default;
  AddedVocabulary(std::vector<AddedToken> tokens, const Normalizer* normalizer);

  // Cuts s (one split: the whole input) into added tokens and the text between
  // them, which it normalizes.
  void extract_and_normalize(const Normalizer* normalizer, PreTokenizedString& s) const;

  std::optional<uint32_t> id(std::string_view content) const;
  const AddedToken* token(uint32_t id) const;
  bool is_special(std::string_view content) const;
  const std::vector<AddedToken>& tokens() const noexcept { return tokens_; }

 private:
  // A byte trie of the tokens' texts, for leftmost-longest matching.
  struct Matcher {
    struct Node {
      std::vector<std::pair<unsigned char, uint32_t>> next;
      std::optional<size_t> token;  // index into tokens_ of the text ending here
    };
    std::vector<Node> nodes = std::vector<Node>(1);
    // The first token added with a text keeps it.
    void add(std::string_view text, size_t token);
    // The token and length of the longest text starting at text[i], if any.
    std::optional<std::pair<size_t, size_t>> longest_at(std::string_view text, size_t i) const;
  };
  struct Piece {
    std::optional<size_t> token;
    size_t begin, end;
  };

  std::vector<Piece> find_pieces(std::string_view text, const Matcher& matcher) const;
  void split_with(const Matcher& matcher, NormalizedString&& s,
                  std::vector<PreTokenizedString::Split>& out) const;

  std::vector<AddedToken> tokens_;
  std::unordered_map<uint32_t, size_t> by_id_;
  std::unordered_map<std::string, size_t> by_content_;
  Matcher raw_, normalized_;
};

}  // namespace kiln::text
