// WordPiece as BERT uses it: the longest vocabulary entry at the start of the
// word, then the longest "##"-prefixed entry at each later position; a word
// with a position no entry matches, or longer than max_input_chars_per_word
// characters, is one unknown token.
#include <string>

#include "kiln/error.h"
#include "text/models.h"

namespace kiln::text {
namespace {

class WordPiece : public Model {
 public:
  explicit WordPiece(const JsonValue& json)
      : Model(Vocab(json.at("vocab"))),
        file_(json.file()),
        unk_token_(json.string_or("unk_token", "[UNK]")),
        prefix_(json.string_or("continuing_subword_prefix", "##")),
        max_chars_(json.integer_or("max_input_chars_per_word", 100)) {
    if (max_chars_ < 0)
      json.at("max_input_chars_per_word")
          .fail("must not be negative, got " + std::to_string(max_chars_));
  }

  std::vector<Token> tokenize(std::string_view word) const override {
    if (unicode::count_chars(word) > static_cast<size_t>(max_chars_)) return unknown(word);
    std::vector<Token> tokens;
    std::string candidate;
    for (size_t start = 0; start < word.size();) {
      size_t end = word.size();
      std::optional<uint32_t> id;
      while (start < end) {
        candidate.assign(start > 0 ? prefix_ : "");
        candidate.append(word.substr(start, end - start));
        if ((id = vocab_.id(candidate))) break;
        end = unicode::previous_char_start(word, end);
      }
      if (!id) return unknown(word);
      tokens.push_back({*id, candidate, start, end});
      start = end;
    }
    return tokens;
  }

 private:
  std::vector<Token> unknown(std::string_view word) const {
    const auto id = vocab_.id(unk_token_);
    if (!id)
      throw IOError(file_ + ": model.unk_token: the unknown token '" + unk_token_ +
                    "' is not in the vocabulary, and the word '" + std::string(word) +
                    "' needs it");
    return {{*id, unk_token_, 0, word.size()}};
  }

  std::string file_, unk_token_, prefix_;
  int64_t max_chars_;
};

}  // namespace

std::unique_ptr<Model> make_wordpiece(const JsonValue& json) {
  return std::make_unique<WordPiece>(json);
}

}  // namespace kiln::text
