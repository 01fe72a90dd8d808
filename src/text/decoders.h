// Decoders: turn a sequence of token strings back into text (undoing "##",
// the byte-level alphabet, "▁" for spaces ...). Supported types: docs/text.md.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "text/json_reader.h"

namespace kiln::text {

class Decoder {
 public:
  virtual ~Decoder() = default;
  // The tokens rewritten; the text is their concatenation.
  virtual std::vector<std::string> decode_chain(std::vector<std::string> tokens) const = 0;
};

// The decoder a tokenizer.json's "decoder" object describes.
std::unique_ptr<Decoder> make_decoder(const JsonValue& json);

}  // namespace kiln::text
