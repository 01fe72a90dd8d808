// The Unicode facts the tokenizer needs, from ICU: UTF-8, character classes,
// case mapping and normalization forms. Where the tokenizers library's
// components read older Unicode tables than ICU's, the classes here say which
// version they follow (docs/text.md, "Unicode").
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::text::unicode {

// --- UTF-8 -----------------------------------------------------------------------

// Byte index of the first ill-formed UTF-8 sequence of s; nullopt when s is well formed.
std::optional<size_t> first_invalid_utf8(std::string_view s) noexcept;

// The code point starting at s[i] (s well formed); i moves past it.
char32_t next_char(std::string_view s, size_t& i) noexcept;

// The length of the UTF-8 sequence whose first byte is `lead`.
inline size_t utf8_length_of_lead(unsigned char lead) noexcept {
  return lead < 0x80 ? 1 : lead < 0xe0 ? 2 : lead < 0xf0 ? 3 : 4;
}
// Where the character ending at byte pos (pos > 0) of well-formed s starts.
inline size_t previous_char_start(std::string_view s, size_t pos) noexcept {
  do --pos;
  while (pos > 0 && (static_cast<unsigned char>(s[pos]) & 0xc0) == 0x80);
  return pos;
}
size_t utf8_length(char32_t c) noexcept;
void append_utf8(std::string& out, char32_t c);
size_t count_chars(std::string_view s) noexcept;

// bytes as text, with each ill-formed sequence (its maximal subpart, as Unicode
// recommends) replaced by U+FFFD.
std::string decode_utf8_lossy(std::string_view bytes);

// --- character classes -------------------------------------------------------------

bool is_whitespace(char32_t c) noexcept;    // the White_Space property
bool is_numeric(char32_t c) noexcept;       // general category N (Nd, Nl, No)
bool is_alphanumeric(char32_t c) noexcept;  // Alphabetic or N
// A word character of regular expressions (\w): Alphabetic, M, Nd, Pc, Join_Control.
bool is_word_char(char32_t c) noexcept;

// BERT's components (BertNormalizer, BertPreTokenizer, Punctuation) follow
// Unicode 8.0's general categories; StripAccents follows Unicode 9.0's marks.
bool is_bert_control(char32_t c) noexcept;          // Cc, Cf or Co, but not \t \n \r
bool is_bert_punctuation(char32_t c) noexcept;      // ASCII punctuation or P*
bool is_bert_nonspacing_mark(char32_t c) noexcept;  // Mn
bool is_combining_mark(char32_t c) noexcept;        // Mn, Mc or Me
// The CJK ideograph blocks BERT surrounds with spaces.
bool is_cjk_ideograph(char32_t c) noexcept;

// --- rewriting ----------------------------------------------------------------------

// One character of a rewritten text and how it relates to the old one: 0 replaces
// the next old character, +1 is inserted, -n replaces the next old character and
// removes the n after it (NormalizedString::transform).
struct CharChange {
  char32_t c;
  int change;
};

// c's full lowercase mapping (one to three characters), without context: a
// lone capital sigma becomes σ.
void append_lowercase(char32_t c, std::vector<char32_t>& out);

enum class NormalForm { kNFC, kNFD, kNFKC, kNFKD };  // in this order

// The changes that take text (well formed) to its normal form, by Unicode
// 9.0's decompositions; nullopt when it is already normalized.
std::optional<std::vector<CharChange>> normalize(std::string_view text, NormalForm form);

}  // namespace kiln::text::unicode
