// Models: the vocabulary, and how a word becomes tokens of it (WordPiece,
// BPE). Supported types and options: docs/text.md.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "text/json_reader.h"
#include "text/normalized_string.h"

namespace kiln::text {

// Token strings and ids, both ways.
class Vocab {
 public:
  Vocab() = default;
  // A "vocab" object of token -> id.
  explicit Vocab(const JsonValue& json);
  Vocab(Vocab&&) = default;
  Vocab& operator=(Vocab&&) = default;

  std::optional<uint32_t> id(std::string_view token) const;
  // nullptr when no token has this id.
  const std::string* token(uint32_t id) const;
  size_t size() const noexcept { return ids_.size(); }
  template <typename F>
  void for_each(F&& f) const {
    for (const auto& [token, id] : ids_) f(token, id);
  }

 private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const noexcept {
      return std::hash<std::string_view>{}(s);
    }
  };
  std::unordered_map<std::string, uint32_t, Hash, std::equal_to<>> ids_;
  std::unordered_map<uint32_t, const std::string*> tokens_;  // keys of ids_ (nodes are stable)
};

class Model {
 public:
  virtual ~Model() = default;
  // The tokens of one word (a split's text), offsets in bytes of the word.
  virtual std::vector<Token> tokenize(std::string_view word) const = 0;
  const Vocab& vocab() const noexcept { return vocab_; }

 protected:
  explicit Model(Vocab vocab) : vocab_(std::move(vocab)) {}
  Vocab vocab_;
};

// The model a tokenizer.json's "model" object describes.
std::unique_ptr<Model> make_model(const JsonValue& json);

std::unique_ptr<Model> make_wordpiece(const JsonValue& json);
std::unique_ptr<Model> make_bpe(const JsonValue& json);

}  // namespace kiln::text
