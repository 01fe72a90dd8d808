// The regular expressions of tokenizer.json files (Split pre-tokenizers,
// Replace normalizers and decoders, ByteLevel's GPT-2 pattern), written for
// Oniguruma, the engine the tokenizers library uses, and run by ICU's.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <unicode/uversion.h>

#include "text/json_reader.h"
#include "text/normalized_string.h"

U_NAMESPACE_BEGIN
class RegexPattern;
U_NAMESPACE_END

namespace kiln::text {

class Regex {
 public:
  enum class Syntax { kOniguruma, kIcu };
  // ValueError naming `where` (file and field) when the pattern does not compile.
  Regex(std::string_view pattern, const std::string& where, Syntax syntax = Syntax::kOniguruma);
  ~Regex();
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;

  // The matches in text (byte offsets) and the ranges between them, in order.
  std::vector<PatternMatch> find_matches(std::string_view text) const;

 private:
  std::unique_ptr<icu::RegexPattern> pattern_;
};

// The pattern of a Split or a Replace: {"String": "..."} (literal) or
// {"Regex": "..."}.
class TextPattern {
 public:
  explicit TextPattern(const JsonValue& json);
  std::vector<PatternMatch> find_matches(std::string_view text) const;

 private:
  std::string literal_;
  std::unique_ptr<Regex> regex_;
};

// Oniguruma's classes in ICU's terms: \s is White_Space (ICU's leaves out \v
// and U+0085), \w is letters, marks, decimal digits and connectors, \h is a
// hexadecimal digit.
std::string onig_to_icu(std::string_view pattern);

// The pattern GPT-2 splits text with before its BPE (ByteLevel's use_regex).
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

}  // namespace kiln::text
