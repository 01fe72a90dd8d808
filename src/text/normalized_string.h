// A piece of the input as the pipeline rewrites it, remembering for each byte
// of the rewritten text which bytes of the input it came from: how every token
// gets its offsets into the input (docs/text.md, "API" and "Unicode").
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/text/tokenizer.h"
#include "text/unicode.h"

namespace kiln::text {

// A range of the text being split and whether the pattern matched it.
struct PatternMatch {
  size_t begin, end;
  bool is_match;
};

// What a split does with the pieces its pattern matched.
enum class SplitBehavior {
  kRemoved,             // dropped
  kIsolated,            // pieces of their own
  kMergedWithPrevious,  // appended to the piece before
  kMergedWithNext,      // prepended to the piece after
  kContiguous,          // consecutive matches form one piece
};

class NormalizedString {
 public:
  // input, not yet rewritten; offsets count from `offset`.
  explicit NormalizedString(std::string_view input, size_t offset = 0);

  const std::string& text() const noexcept { return text_; }
  bool empty() const noexcept { return text_.empty(); }

  // The input bytes that the rewritten bytes [begin, end) came from.
  Offsets input_range(size_t begin, size_t end) const noexcept;

  // Rewrites the characters of text()[begin, end): `removed_first` of them are
  // dropped, then each change either replaces the next old character (0),
  // replaces it and drops the n after it (-n), or is inserted (+1, taking the
  // input range of the byte before it).
  void transform_range(size_t begin, size_t end, std::span<const unicode::CharChange> changes,
                       size_t removed_first = 0);
  void transform(std::span<const unicode::CharChange> changes, size_t removed_first = 0) {
    transform_range(0, text_.size(), changes, removed_first);
  }

  // Keeps the characters for which keep(c) holds.
  void filter(const std::function<bool(char32_t)>& keep);
  // Replaces each character by f(c).
  void map(const std::function<char32_t(char32_t)>& f);
  void lowercase();
  void normalize(unicode::NormalForm form);
  // Removes whitespace at either end.
  void strip(bool left, bool right);
  // Inserts s before the first character (nothing when empty).
  void prepend(std::string_view s);
  // Replaces each matched range by `content`.
  void replace(std::span<const PatternMatch> matches, std::string_view content);

  // The pieces of this string after splitting at `matches` (which cover the
  // text in order), without empty ones.
  std::vector<NormalizedString> split(std::vector<PatternMatch> matches,
                                      SplitBehavior behavior) const;
  // The piece text()[begin, end), with its input offsets.
  NormalizedString slice(size_t begin, size_t end) const;

 private:
  NormalizedString() = default;

  std::string text_;
  std::vector<Offsets> alignments_;  // per byte of text_: the input bytes it came from
  size_t origin_ = 0;                // where this piece starts in the input
};

// Matches of a character class: each matching character on its own.
std::vector<PatternMatch> match_chars(std::string_view text,
                                      const std::function<bool(char32_t)>& is_match);
// Non-overlapping occurrences of `literal`, left to right.
std::vector<PatternMatch> match_literal(std::string_view text, std::string_view literal);
// Flips is_match of every range.
void invert(std::vector<PatternMatch>& matches) noexcept;

// A token the model or the added vocabulary produced, offsets in bytes of the
// split's rewritten text.
struct Token {
  uint32_t id;
  std::string value;
  size_t begin, end;
};

// The input cut into splits; a split gets tokens from the added vocabulary
// (then nothing rewrites or splits it again) or later from the model.
struct PreTokenizedString {
  struct Split {
    NormalizedString normalized;
    std::optional<std::vector<Token>> tokens;
  };
  std::vector<Split> splits;

  // Replaces each split without tokens by the non-empty pieces f returns for it.
  void split(const std::function<std::vector<NormalizedString>(NormalizedString&&)>& f);
  // Rewrites each split without tokens in place.
  void rewrite(const std::function<void(NormalizedString&)>& f);
};

}  // namespace kiln::text
