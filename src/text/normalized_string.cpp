#include "text/normalized_string.h"

#include <algorithm>
#include <utility>

namespace kiln::text {

NormalizedString::NormalizedString(std::string_view input, size_t offset)
    : text_(input), origin_(offset) {
  alignments_.reserve(input.size());
  for (size_t i = 0; i < input.size();) {
    const size_t n = unicode::utf8_length_of_lead(static_cast<unsigned char>(input[i]));
    alignments_.insert(alignments_.end(), n, Offsets{offset + i, offset + i + n});
    i += n;
  }
}

Offsets NormalizedString::input_range(size_t begin, size_t end) const noexcept {
  if (begin >= end || end > alignments_.size()) {
    const size_t at = begin < alignments_.size() ? alignments_[begin].begin : origin_;
    return {at, at};
  }
  return {alignments_[begin].begin, alignments_[end - 1].end};
}

void NormalizedString::transform_range(size_t begin, size_t end,
                                       std::span<const unicode::CharChange> changes,
                                       size_t removed_first) {
  std::string out;
  std::vector<Offsets> aligned;
  out.reserve(end - begin);
  aligned.reserve(end - begin);
  size_t pos = begin;  // the next old character not yet replaced or removed
  const auto drop_char = [&] {
    if (pos < end) pos += unicode::utf8_length_of_lead(static_cast<unsigned char>(text_[pos]));
  };
  for (size_t k = 0; k < removed_first; ++k) drop_char();
  for (const unicode::CharChange& change : changes) {
    Offsets from;
    if (change.change > 0 || pos >= end) {
      from = pos == 0 ? Offsets{origin_, origin_} : alignments_[pos - 1];
    } else {
      from = alignments_[pos];
      drop_char();
      for (int k = 0; k < -change.change; ++k) drop_char();
    }
    const size_t before = out.size();
    unicode::append_utf8(out, change.c);
    aligned.insert(aligned.end(), out.size() - before, from);
  }
  text_.replace(begin, end - begin, out);
  alignments_.erase(alignments_.begin() + static_cast<ptrdiff_t>(begin),
                    alignments_.begin() + static_cast<ptrdiff_t>(end));
  alignments_.insert(alignments_.begin() + static_cast<ptrdiff_t>(begin), aligned.begin(),
                     aligned.end());
}

// A removed character is folded into the kept one before it (or, before the
// first kept one, counted in removed_first), so kept characters keep their
// own input ranges.
void NormalizedString::filter(const std::function<bool(char32_t)>& keep) {
  std::vector<unicode::CharChange> changes;
  changes.reserve(text_.size());
  size_t removed_first = 0;
  int removed = 0;
  std::optional<char32_t> last;
  for (size_t i = 0; i < text_.size();) {
    const char32_t c = unicode::next_char(text_, i);
    if (!keep(c)) {
      ++removed;
      continue;
    }
    if (last) {
      changes.push_back({*last, -removed});
    } else {
      removed_first = static_cast<size_t>(removed);
    }
    last = c;
    removed = 0;
  }
  if (last) changes.push_back({*last, -removed});
  if (changes.empty()) removed_first = 0;
  transform(changes, removed_first);
}

void NormalizedString::map(const std::function<char32_t(char32_t)>& f) {
  std::vector<unicode::CharChange> changes;
  changes.reserve(text_.size());
  for (size_t i = 0; i < text_.size();) changes.push_back({f(unicode::next_char(text_, i)), 0});
  transform(changes);
}

void NormalizedString::lowercase() {
  const bool unchanged = std::all_of(text_.begin(), text_.end(), [](char b) {
    return static_cast<unsigned char>(b) < 0x80 && !(b >= 'A' && b <= 'Z');
  });
  if (unchanged) return;
  std::vector<unicode::CharChange> changes;
  changes.reserve(text_.size());
  std::vector<char32_t> lower;
  for (size_t i = 0; i < text_.size();) {
    lower.clear();
    unicode::append_lowercase(unicode::next_char(text_, i), lower);
    for (size_t k = 0; k < lower.size(); ++k) changes.push_back({lower[k], k == 0 ? 0 : 1});
  }
  transform(changes);
}

void NormalizedString::normalize(unicode::NormalForm form) {
  if (const auto changes = unicode::normalize(text_, form)) transform(*changes);
}

void NormalizedString::strip(bool left, bool right) {
  std::vector<char32_t> chars;
  for (size_t i = 0; i < text_.size();) chars.push_back(unicode::next_char(text_, i));
  size_t leading = 0, trailing = 0;
  if (left)
    while (leading < chars.size() && unicode::is_whitespace(chars[leading])) ++leading;
  if (right)
    while (trailing < chars.size() - leading &&
           unicode::is_whitespace(chars[chars.size() - 1 - trailing]))
      ++trailing;
  if (leading == 0 && trailing == 0) return;
  std::vector<unicode::CharChange> changes;
  for (size_t i = leading; i + trailing < chars.size(); ++i) changes.push_back({chars[i], 0});
  if (!changes.empty()) changes.back().change = -static_cast<int>(trailing);
  transform(changes, changes.empty() ? 0 : leading);
}

void NormalizedString::prepend(std::string_view s) {
  if (text_.empty() || s.empty()) return;
  size_t first_end = 0;
  const char32_t first = unicode::next_char(text_, first_end);
  std::vector<unicode::CharChange> changes;
  for (size_t i = 0; i < s.size();)
    changes.push_back({unicode::next_char(s, i), changes.empty() ? 0 : 1});
  changes.push_back({first, 1});
  transform_range(0, first_end, changes);
}

// Every byte of the replacement takes the input range of the matched text's
// last byte.
void NormalizedString::replace(std::span<const PatternMatch> matches, std::string_view content) {
  std::string out;
  std::vector<Offsets> aligned;
  size_t copied = 0;
  for (const PatternMatch& m : matches) {
    if (!m.is_match) continue;
    out.append(text_, copied, m.begin - copied);
    aligned.insert(aligned.end(), alignments_.begin() + static_cast<ptrdiff_t>(copied),
                   alignments_.begin() + static_cast<ptrdiff_t>(m.begin));
    const Offsets from = m.end == 0 ? Offsets{origin_, origin_} : alignments_[m.end - 1];
    out.append(content);
    aligned.insert(aligned.end(), content.size(), from);
    copied = m.end;
  }
  out.append(text_, copied);
  aligned.insert(aligned.end(), alignments_.begin() + static_cast<ptrdiff_t>(copied),
                 alignments_.end());
  text_ = std::move(out);
  alignments_ = std::move(aligned);
}

NormalizedString NormalizedString::slice(size_t begin, size_t end) const {
  NormalizedString piece;
  piece.text_ = text_.substr(begin, end - begin);
  piece.alignments_.assign(alignments_.begin() + static_cast<ptrdiff_t>(begin),
                           alignments_.begin() + static_cast<ptrdiff_t>(end));
  piece.origin_ = begin < end ? alignments_[begin].begin : origin_;
  return piece;
}

std::vector<NormalizedString> NormalizedString::split(std::vector<PatternMatch> matches,
                                                      SplitBehavior behavior) const {
  // pieces: (range, keep) once the behavior has merged or dropped matches.
  std::vector<PatternMatch> pieces;
  switch (behavior) {
    case SplitBehavior::kRemoved:
      for (const PatternMatch& m : matches) pieces.push_back({m.begin, m.end, !m.is_match});
      break;
    case SplitBehavior::kIsolated:
      for (const PatternMatch& m : matches) pieces.push_back({m.begin, m.end, true});
      break;
    case SplitBehavior::kMergedWithPrevious: {
      bool previous_match = false;
      for (const PatternMatch& m : matches) {
        if (m.is_match && !previous_match && !pieces.empty()) {
          pieces.back().end = m.end;
        } else {
          pieces.push_back({m.begin, m.end, true});
        }
        previous_match = m.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool previous_match = false;  // walking backwards: the match after this piece
      for (auto m = matches.rbegin(); m != matches.rend(); ++m) {
        if (m->is_match && !previous_match && !pieces.empty()) {
          pieces.back().begin = m->begin;
        } else {
          pieces.push_back({m->begin, m->end, true});
        }
        previous_match = m->is_match;
      }
      std::reverse(pieces.begin(), pieces.end());
      break;
    }
    case SplitBehavior::kContiguous: {
      bool previous_match = false;
      for (const PatternMatch& m : matches) {
        if (m.is_match && previous_match && !pieces.empty()) {
          pieces.back().end = m.end;
        } else {
          pieces.push_back({m.begin, m.end, true});
        }
        previous_match = m.is_match;
      }
      break;
    }
  }
  std::vector<NormalizedString> out;
  for (const PatternMatch& p : pieces)
    if (p.is_match && p.begin < p.end) out.push_back(slice(p.begin, p.end));
  return out;
}

std::vector<PatternMatch> match_chars(std::string_view text,
                                      const std::function<bool(char32_t)>& is_match) {
  std::vector<PatternMatch> out;
  size_t unmatched = 0;  // start of the run of characters that did not match
  for (size_t i = 0; i < text.size();) {
    const size_t begin = i;
    if (!is_match(unicode::next_char(text, i))) continue;
    if (unmatched < begin) out.push_back({unmatched, begin, false});
    out.push_back({begin, i, true});
    unmatched = i;
  }
  if (unmatched < text.size() || text.empty()) out.push_back({unmatched, text.size(), false});
  return out;
}

std::vector<PatternMatch> match_literal(std::string_view text, std::string_view literal) {
  std::vector<PatternMatch> out;
  if (literal.empty()) return {{0, text.size(), false}};
  size_t from = 0;
  for (size_t at = text.find(literal); at != std::string_view::npos;
       at = text.find(literal, from)) {
    if (from < at) out.push_back({from, at, false});
    out.push_back({at, at + literal.size(), true});
    from = at + literal.size();
  }
  if (from < text.size() || text.empty()) out.push_back({from, text.size(), false});
  return out;
}

void invert(std::vector<PatternMatch>& matches) noexcept {
  for (PatternMatch& m : matches) m.is_match = !m.is_match;
}

void PreTokenizedString::split(
    const std::function<std::vector<NormalizedString>(NormalizedString&&)>& f) {
  std::vector<Split> out;
  out.reserve(splits.size());
  for (Split& s : splits) {
    if (s.tokens) {
      out.push_back(std::move(s));
      continue;
    }
    for (NormalizedString& piece : f(std::move(s.normalized)))
      if (!piece.empty()) out.push_back({std::move(piece), std::nullopt});
  }
  splits = std::move(out);
}

void PreTokenizedString::rewrite(const std::function<void(NormalizedString&)>& f) {
  for (Split& s : splits)
    if (!s.tokens) f(s.normalized);
}

}  // namespace kiln::text
