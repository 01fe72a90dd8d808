#include "text/unicode.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/uniset.h>
#include <unicode/ustring.h>
#include <unicode/utf16.h>
#include <unicode/utf8.h>

#include <algorithm>
#include <limits>
#include <memory>
#include <string>

#include "kiln/error.h"

namespace kiln::text::unicode {
namespace {

// Whether c was assigned in Unicode major.0 or earlier (unassigned code points
// have age 0.0, and no category the callers ask about).
bool assigned_by(char32_t c, uint8_t major) noexcept {
  UVersionInfo age;
  u_charAge(static_cast<UChar32>(c), age);
  return age[0] < major || (age[0] == major && age[1] == 0);
}

bool in_categories(char32_t c, uint32_t mask) noexcept {
  return (U_GET_GC_MASK(static_cast<UChar32>(c)) & mask) != 0;
}

// The code points whose general category has changed since Unicode 8.0 among
// those the BERT and StripAccents classes below ask about, with their
// categories in 8.0 and 9.0: found by running every code point through the
// tokenizers library (docs/text.md, "Unicode").
struct EarlierCategory {
  char32_t c;
  UCharCategory in_8, in_9;
};
constexpr EarlierCategory kEarlierCategories[] = {
    {0x166d, U_OTHER_PUNCTUATION, U_OTHER_PUNCTUATION},  // Canadian syllabics chi sign: So
    {0x1734, U_NON_SPACING_MARK, U_NON_SPACING_MARK},    // Hanunoo sign pamudpod: Mc
    {0x1885, U_OTHER_LETTER, U_NON_SPACING_MARK},        // Mongolian baluda: Mn since 9.0
    {0x1886, U_OTHER_LETTER, U_NON_SPACING_MARK},        // Mongolian three baluda: the same
    {0x1cf2, U_COMBINING_SPACING_MARK, U_COMBINING_SPACING_MARK},  // Vedic ardhavisarga: Lo
    {0x1cf3, U_COMBINING_SPACING_MARK, U_COMBINING_SPACING_MARK},  // its rotated form: Lo
    {0xa9bd, U_COMBINING_SPACING_MARK, U_COMBINING_SPACING_MARK},  // Javanese keret: Mn
    {0x111c9, U_OTHER_PUNCTUATION, U_OTHER_PUNCTUATION},           // Sharada sandhi mark: Mn
};

// Whether c was in one of the categories of mask in Unicode major.0 (8 or 9).
bool in_categories_of_version(char32_t c, uint32_t mask, uint8_t major) noexcept {
  for (const EarlierCategory& e : kEarlierCategories)
    if (e.c == c) return (U_MASK(major == 8 ? e.in_8 : e.in_9) & mask) != 0;
  return assigned_by(c, major) && in_categories(c, mask);
}

// ICU's normalization restricted to the characters of Unicode 9.0, the
// version of the tokenizers library's normalization tables: a later character
// is left as it is and blocks reordering and composition across it, as an
// unassigned one does there (docs/text.md, "Unicode").
class Unicode9Normalizers {
 public:
  Unicode9Normalizers() {
    UErrorCode status = U_ZERO_ERROR;
    unicode9_ = std::make_unique<icu::UnicodeSet>(icu::UnicodeString(u"[:age=9.0:]"), status);
    const icu::Normalizer2* forms[] = {
        icu::Normalizer2::getNFCInstance(status), icu::Normalizer2::getNFDInstance(status),
        icu::Normalizer2::getNFKCInstance(status), icu::Normalizer2::getNFKDInstance(status)};
    if (U_FAILURE(status)) {
      error_ = u_errorName(status);
      return;
    }
    unicode9_->freeze();
    for (const icu::Normalizer2* form : forms)
      filtered_.push_back(std::make_unique<icu::FilteredNormalizer2>(*form, *unicode9_));
  }

  const icu::Normalizer2& get(NormalForm form) const {
    if (filtered_.empty())
      throw Error("tokenizer: ICU cannot load its normalization data: " + error_);
    return *filtered_[static_cast<size_t>(form)];
  }

 private:
  std::unique_ptr<icu::UnicodeSet> unicode9_;
  std::vector<std::unique_ptr<icu::FilteredNormalizer2>> filtered_;
  std::string error_;
};

const icu::Normalizer2& normalizer(NormalForm form) {
  static const Unicode9Normalizers normalizers;
  return normalizers.get(form);
}

}  // namespace

std::optional<size_t> first_invalid_utf8(std::string_view s) noexcept {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const auto n = static_cast<int64_t>(s.size());
  int64_t i = 0;
  while (i < n) {
    const int64_t start = i;
    UChar32 c;
    U8_NEXT(p, i, n, c);
    if (c < 0) return static_cast<size_t>(start);
  }
  return std::nullopt;
}

char32_t next_char(std::string_view s, size_t& i) noexcept {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  UChar32 c;
  U8_NEXT_UNSAFE(p, i, c);
  return static_cast<char32_t>(c);
}

size_t utf8_length(char32_t c) noexcept {
  return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xc0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3f)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xe0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3f)));
  } else {
    out.push_back(static_cast<char>(0xf0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3f)));
  }
}

size_t count_chars(std::string_view s) noexcept {
  size_t n = 0;
  for (char b : s) n += (static_cast<unsigned char>(b) & 0xc0) != 0x80;
  return n;
}

std::string decode_utf8_lossy(std::string_view bytes) {
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  const auto n = static_cast<int64_t>(bytes.size());
  std::string out;
  out.reserve(bytes.size());
  for (int64_t i = 0; i < n;) {
    UChar32 c;
    U8_NEXT_OR_FFFD(p, i, n, c);
    append_utf8(out, static_cast<char32_t>(c));
  }
  return out;
}

bool is_whitespace(char32_t c) noexcept {
  if (c < 0x80) return c == ' ' || (c >= '\t' && c <= '\r');
  return u_isUWhiteSpace(static_cast<UChar32>(c));
}

bool is_numeric(char32_t c) noexcept {
  if (c < 0x80) return c >= '0' && c <= '9';
  return in_categories(c, U_GC_N_MASK);
}

bool is_alphanumeric(char32_t c) noexcept {
  if (c < 0x80) return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z');
  return u_isUAlphabetic(static_cast<UChar32>(c)) || is_numeric(c);
}

bool is_word_char(char32_t c) noexcept {
  if (c < 0x80) return is_alphanumeric(c) || c == '_';
  return u_isUAlphabetic(static_cast<UChar32>(c)) ||
         in_categories(c, U_GC_M_MASK | U_GC_ND_MASK | U_GC_PC_MASK) ||
         u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_JOIN_CONTROL);
}

bool is_bert_control(char32_t c) noexcept {
  if (c == '\t' || c == '\n' || c == '\r') return false;
  return in_categories_of_version(c, U_GC_CC_MASK | U_GC_CF_MASK | U_GC_CO_MASK, 8);
}

bool is_bert_punctuation(char32_t c) noexcept {
  if (c < 0x80)
    return (c >= '!' && c <= '/') || (c >= ':' && c <= '@') || (c >= '[' && c <= '`') ||
           (c >= '{' && c <= '~');
  return in_categories_of_version(c, U_GC_P_MASK, 8);
}

bool is_bert_nonspacing_mark(char32_t c) noexcept {
  return c >= 0x300 && in_categories_of_version(c, U_GC_MN_MASK, 8);
}

bool is_combining_mark(char32_t c) noexcept {
  return c >= 0x300 && in_categories_of_version(c, U_GC_M_MASK, 9);
}

bool is_cjk_ideograph(char32_t c) noexcept {
  return (c >= 0x4e00 && c <= 0x9fff) || (c >= 0x3400 && c <= 0x4dbf) ||
         (c >= 0x20000 && c <= 0x2a6df) || (c >= 0x2a700 && c <= 0x2b81f) ||
         (c >= 0x2b920 && c <= 0x2ceaf) || (c >= 0xf900 && c <= 0xfaff) ||
         (c >= 0x2f800 && c <= 0x2fa1f);
}

void append_lowercase(char32_t c, std::vector<char32_t>& out) {
  if (c < 0x80) {
    out.push_back(c >= 'A' && c <= 'Z' ? c + 32 : c);
    return;
  }
  UChar in[2], lower[8];
  int32_t in_length = 0;
  U16_APPEND_UNSAFE(in, in_length, static_cast<UChar32>(c));
  UErrorCode status = U_ZERO_ERROR;
  const int32_t n = u_strToLower(lower, 8, in, in_length, "", &status);
  if (U_FAILURE(status)) {
    out.push_back(c);
    return;
  }
  for (int32_t i = 0; i < n;) {
    UChar32 d;
    U16_NEXT(lower, i, n, d);
    out.push_back(static_cast<char32_t>(d));
  }
}

namespace {

// Each character's decomposition, the first character replacing it and the
// others inserted after it, then each run of combining marks in canonical
// order (a stable sort by combining class, the changes moving with their
// characters).
std::vector<CharChange> decompose(std::string_view text, const icu::Normalizer2& decomposer) {
  std::vector<CharChange> out;
  out.reserve(text.size());
  icu::UnicodeString mapping;
  for (size_t i = 0; i < text.size();) {
    const char32_t c = next_char(text, i);
    if (!decomposer.getDecomposition(static_cast<UChar32>(c), mapping)) {
      out.push_back({c, 0});
      continue;
    }
    for (int32_t k = 0; k < mapping.length();) {
      const UChar32 d = mapping.char32At(k);
      out.push_back({static_cast<char32_t>(d), k == 0 ? 0 : 1});
      k += U16_LENGTH(d);
    }
  }
  const auto ccc = [&](const CharChange& c) {
    return decomposer.getCombiningClass(static_cast<UChar32>(c.c));
  };
  for (size_t begin = 0; begin < out.size();) {
    size_t end = begin;
    while (end < out.size() && ccc(out[end]) != 0) ++end;
    if (end - begin > 1)
      std::stable_sort(out.begin() + static_cast<ptrdiff_t>(begin),
                       out.begin() + static_cast<ptrdiff_t>(end),
                       [&](const CharChange& a, const CharChange& b) { return ccc(a) < ccc(b); });
    begin = end + 1;
  }
  return out;
}

// Canonical composition of decomposed text. A mark composed into its starter
// is removed and counted in the starter's change, so the composite keeps the
// starter's input offsets and the characters after it keep theirs.
std::vector<CharChange> compose(std::vector<CharChange> decomposed,
                                const icu::Normalizer2& composer) {
  std::vector<CharChange> out;
  out.reserve(decomposed.size());
  std::optional<size_t> starter;
  int last_ccc = -1;  // of the last character kept after the starter; -1: none
  for (const CharChange& c : decomposed) {
    const int ccc = composer.getCombiningClass(static_cast<UChar32>(c.c));
    if (starter && (last_ccc < 0 || (last_ccc != 0 && last_ccc < ccc))) {
      CharChange& s = out[*starter];
      const UChar32 composite =
          composer.composePair(static_cast<UChar32>(s.c), static_cast<UChar32>(c.c));
      if (composite >= 0) {
        s.c = static_cast<char32_t>(composite);
        s.change += c.change - 1;
        continue;
      }
    }
    if (ccc == 0) {
      starter = out.size();
      last_ccc = -1;
    } else {
      last_ccc = ccc;
    }
    out.push_back(c);
  }
  return out;
}

}  // namespace

std::optional<std::vector<CharChange>> normalize(std::string_view text, NormalForm form) {
  // The quick check takes 32-bit lengths; longer texts take the long way.
  UErrorCode status = U_ZERO_ERROR;
  if (text.size() <= static_cast<size_t>(std::numeric_limits<int32_t>::max()) &&
      normalizer(form).isNormalizedUTF8(
          icu::StringPiece(text.data(), static_cast<int32_t>(text.size())), status) &&
      U_SUCCESS(status))
    return std::nullopt;
  const bool compatibility = form == NormalForm::kNFKC || form == NormalForm::kNFKD;
  std::vector<CharChange> out =
      decompose(text, normalizer(compatibility ? NormalForm::kNFKD : NormalForm::kNFD));
  if (form == NormalForm::kNFC || form == NormalForm::kNFKC)
    out = compose(std::move(out), normalizer(NormalForm::kNFC));
  return out;
}

}  // namespace kiln::text::unicode
