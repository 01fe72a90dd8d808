// Pre-tokenizers: cut the normalized text into words, which the model then
// tokenizes one by one. Supported types: docs/text.md.
#pragma once

#include <memory>

#include "text/json_reader.h"
#include "text/normalized_string.h"

namespace kiln::text {

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  virtual void pre_tokenize(PreTokenizedString& s) const = 0;
};

// The pre-tokenizer a tokenizer.json's "pre_tokenizer" object describes.
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const JsonValue& json);

// A split behavior's name in tokenizer.json ("Isolated", ...).
SplitBehavior split_behavior(const JsonValue& json);

}  // namespace kiln::text
