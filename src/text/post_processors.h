// Post-processors: add the special tokens around the encoded text(s) ([CLS]
// A [SEP] B [SEP]) and set the type ids; byte-level ones trim the spaces from
// offsets. Supported types: docs/text.md. Also the other operations on whole
// encodings: truncation, padding, concatenation.
#pragma once

#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "kiln/text/tokenizer.h"
#include "text/json_reader.h"

namespace kiln::text {

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  // How many tokens process adds to one text, or to a pair.
  virtual size_t added_tokens(bool pair) const = 0;
  // Rewrites the encodings of the text (and pair) into the pieces of the
  // result, which are then concatenated. texts: what sequence id 0 (and 1)
  // encoded.
  virtual void process(std::vector<Encoding>& encodings, std::span<const std::string_view> texts,
                       bool add_special_tokens) const = 0;
};

// The post-processor a tokenizer.json's "post_processor" object describes.
std::unique_ptr<PostProcessor> make_post_processor(const JsonValue& json);

// The encodings one after the other.
Encoding concatenate(std::vector<Encoding>&& parts);

// Keeps max_length tokens of a text and its pair, as strategy says; the
// tokenizers library's rule for kLongestFirst: the shorter text keeps its
// length when it fits in half, else each keeps half (the longer one, or the
// second on a tie, the odd token). ValueError when the strategy cannot.
void truncate(Encoding& text, Encoding* pair, size_t max_length, const Truncation& truncation);

// Pads (never truncates) to length.
void pad(Encoding& e, size_t length, const Padding& padding, int64_t pad_id);

}  // namespace kiln::text
