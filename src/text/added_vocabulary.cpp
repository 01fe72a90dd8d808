#include "text/added_vocabulary.h"

#include <algorithm>
#include <utility>

#include "text/normalizers.h"

namespace kiln::text {
namespace {

bool ends_with_word(std::string_view s) {
  if (s.empty()) return false;
  size_t i = unicode::previous_char_start(s, s.size());
  return unicode::is_word_char(unicode::next_char(s, i));
}

bool starts_with_word(std::string_view s) {
  size_t i = 0;
  return !s.empty() && unicode::is_word_char(unicode::next_char(s, i));
}

// Where the whitespace at the end of s starts (walking back from the end).
size_t trailing_space_start(std::string_view s) {
  size_t start = s.size();
  while (start > 0) {
    const size_t begin = unicode::previous_char_start(s, start);
    size_t i = begin;
    if (!unicode::is_whitespace(unicode::next_char(s, i))) break;
    start = begin;
  }
  return start;
}

size_t leading_space_length(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    size_t next = i;
    if (!unicode::is_whitespace(unicode::next_char(s, next))) break;
    i = next;
  }
  return i;
}

}  // namespace

void AddedVocabulary::Matcher::add(std::string_view text, size_t token) {
  if (text.empty()) return;
  uint32_t node = 0;
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    auto& next = nodes[node].next;
    const auto it =
        std::find_if(next.begin(), next.end(), [&](auto& n) { return n.first == byte; });
    if (it != next.end()) {
      node = it->second;
    } else {
      next.emplace_back(byte, static_cast<uint32_t>(nodes.size()));
      node = static_cast<uint32_t>(nodes.size());
      nodes.emplace_back();
    }
  }
  if (!nodes[node].token) nodes[node].token = token;
}

std::optional<std::pair<size_t, size_t>> AddedVocabulary::Matcher::longest_at(std::string_view text,
                                                                              size_t i) const {
  std::optional<std::pair<size_t, size_t>> found;
  uint32_t node = 0;
  for (size_t k = i; k < text.size(); ++k) {
    const auto byte = static_cast<unsigned char>(text[k]);
    const auto& next = nodes[node].next;
    const auto it =
        std::find_if(next.begin(), next.end(), [&](auto& n) { return n.first == byte; });
    if (it == next.end()) break;
    node = it->second;
    if (nodes[node].token) found = std::pair{*nodes[node].token, k + 1 - i};
  }
  return found;
}

AddedVocabulary::AddedVocabulary(std::vector<AddedToken> tokens, const Normalizer* normalizer)
    : tokens_(std::move(tokens)) {
  for (size_t i = 0; i < tokens_.size(); ++i) {
    AddedToken& t = tokens_[i];
    by_id_.emplace(t.id, i);
    by_content_.emplace(t.content, i);
    t.text = t.content;
    if (!t.normalized) {
      raw_.add(t.content, i);
      continue;
    }
    NormalizedString content(t.content);
    if (normalizer) normalizer->normalize(content);
    t.text = content.text();
    normalized_.add(t.text, i);
  }
}

std::optional<uint32_t> AddedVocabulary::id(std::string_view content) const {
  const auto it = by_content_.find(std::string(content));
  if (it == by_content_.end()) return std::nullopt;
  return tokens_[it->second].id;
}

const AddedToken* AddedVocabulary::token(uint32_t id) const {
  const auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

bool AddedVocabulary::is_special(std::string_view content) const {
  const auto it = by_content_.find(std::string(content));
  return it != by_content_.end() && tokens_[it->second].special;
}

// single_word, lstrip and rstrip act on each match of the leftmost-longest
// scan; a rejected match still hides what it covered from later matches, as
// in the tokenizers library.
std::vector<AddedVocabulary::Piece> AddedVocabulary::find_pieces(std::string_view text,
                                                                 const Matcher& matcher) const {
  if (text.empty()) return {{std::nullopt, 0, 0}};
  std::vector<Piece> out;
  size_t done = 0;  // end of the last accepted token
  for (size_t i = 0; i < text.size();) {
    const auto hit = matcher.longest_at(text, i);
    if (!hit) {
      ++i;
      continue;
    }
    const auto [token, length] = *hit;
    size_t begin = i, end = i + length;
    i = end;
    const AddedToken& t = tokens_[token];
    if (t.single_word &&
        (ends_with_word(text.substr(0, begin)) || starts_with_word(text.substr(end))))
      continue;
    if (t.lstrip) begin = std::max(trailing_space_start(text.substr(0, begin)), done);
    if (t.rstrip) end += leading_space_length(text.substr(end));
    if (done < begin) out.push_back({std::nullopt, done, begin});
    out.push_back({token, begin, end});
    done = end;
  }
  if (done != text.size()) out.push_back({std::nullopt, done, text.size()});
  return out;
}

void AddedVocabulary::split_with(const Matcher& matcher, NormalizedString&& s,
                                 std::vector<PreTokenizedString::Split>& out) const {
  for (const Piece& piece : find_pieces(s.text(), matcher)) {
    NormalizedString part = s.slice(piece.begin, piece.end);
    if (part.empty()) continue;
    std::optional<std::vector<Token>> tokens;
    if (piece.token) tokens = {{tokens_[*piece.token].id, part.text(), 0, part.text().size()}};
    out.push_back({std::move(part), std::move(tokens)});
  }
}

void AddedVocabulary::extract_and_normalize(const Normalizer* normalizer,
                                            PreTokenizedString& s) const {
  std::vector<PreTokenizedString::Split> raw_pieces;
  for (auto& split : s.splits) split_with(raw_, std::move(split.normalized), raw_pieces);
  std::vector<PreTokenizedString::Split> out;
  for (auto& split : raw_pieces) {
    if (split.tokens) {
      out.push_back(std::move(split));
      continue;
    }
    if (normalizer) normalizer->normalize(split.normalized);
    split_with(normalized_, std::move(split.normalized), out);
  }
  s.splits = std::move(out);
}

}  // namespace kiln::text
