// Normalizers: rewrite the text (keeping each byte's input offsets) before it
// is split into words. Supported types: docs/text.md.
#pragma once

#include <memory>

#include "text/json_reader.h"
#include "text/normalized_string.h"

namespace kiln::text {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(NormalizedString& s) const = 0;
};

// The normalizer a tokenizer.json's "normalizer" object describes.
std::unique_ptr<Normalizer> make_normalizer(const JsonValue& json);

}  // namespace kiln::text
