#include "text/post_processors.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include "kiln/error.h"
#include "text/unicode.h"

namespace kiln::text {
namespace {

// A run of special tokens with one type id: [CLS], or <s> twice.
Encoding special_piece(const std::vector<int64_t>& ids, const std::vector<std::string>& tokens,
                       int64_t type_id) {
  Encoding e;
  e.ids = ids;
  e.tokens = tokens;
  e.type_ids.assign(ids.size(), type_id);
  e.attention_mask.assign(ids.size(), 1);
  e.special_tokens_mask.assign(ids.size(), 1);
  e.offsets.assign(ids.size(), Offsets{});
  e.sequence_ids.assign(ids.size(), -1);
  return e;
}

void set_type_ids(Encoding& e, int64_t type_id) { e.type_ids.assign(e.size(), type_id); }

// The position n characters after (or before) pos in text, not past limit.
size_t chars_forward(std::string_view text, size_t pos, size_t n, size_t limit) {
  for (; n > 0 && pos < limit; --n) pos += unicode::utf8_length_of_lead(text[pos]);
  return std::min(pos, limit);
}
size_t chars_back(std::string_view text, size_t pos, size_t n, size_t limit) {
  for (; n > 0 && pos > limit; --n) pos = std::max(unicode::previous_char_start(text, pos), limit);
  return pos;
}

// Moves each byte-level token's offsets past the spaces ("Ġ") it starts or
// ends with; a first token keeps the one space add_prefix_space put there.
// The tokenizers library moves them by characters of the input, not bytes,
// which differs where an inserted space shares a multi-byte character's
// offsets.
void trim_offsets(Encoding& e, std::span<const std::string_view> texts, bool add_prefix_space) {
  const auto is_space = [](char32_t c) { return c == 0x120 || unicode::is_whitespace(c); };
  for (size_t i = 0; i < e.size(); ++i) {
    if (e.sequence_ids[i] < 0 || static_cast<size_t>(e.sequence_ids[i]) >= texts.size()) continue;
    const std::string_view text = texts[static_cast<size_t>(e.sequence_ids[i])];
    std::vector<char32_t> chars;
    for (size_t k = 0; k < e.tokens[i].size();) chars.push_back(unicode::next_char(e.tokens[i], k));
    size_t leading = 0, trailing = 0;
    while (leading < chars.size() && is_space(chars[leading])) ++leading;
    while (trailing < chars.size() && is_space(chars[chars.size() - 1 - trailing])) ++trailing;
    Offsets& o = e.offsets[i];
    if (leading > 0 && !((i == 0 || o.begin == 0) && add_prefix_space && leading == 1))
      o.begin = chars_forward(text, o.begin, leading, o.end);
    // Only where the token ends at least `trailing` characters into the text.
    if (trailing > 0 && chars_back(text, o.end, trailing - 1, 0) > 0)
      o.end = chars_back(text, o.end, trailing, o.begin);
  }
}

// A "[token, id]" pair of BertProcessing and RobertaProcessing.
std::pair<std::string, int64_t> token_and_id(const JsonValue& json) {
  const std::vector<JsonValue> pair = json.array();
  if (pair.size() != 2) json.fail("expected [token, id]");
  return {pair[0].string(), pair[1].id()};
}

class BertProcessing : public PostProcessor {
 public:
  explicit BertProcessing(const JsonValue& json)
      : cls_(token_and_id(json.at("cls"))), sep_(token_and_id(json.at("sep"))) {}

  size_t added_tokens(bool pair) const override { return pair ? 3 : 2; }

  void process(std::vector<Encoding>& encodings, std::span<const std::string_view>,
               bool add_special_tokens) const override {
    if (!add_special_tokens) return;
    std::vector<Encoding> out;
    for (size_t i = 0; i < encodings.size(); ++i) {
      const int64_t type_id = i == 0 ? 0 : 1;
      if (i == 0) out.push_back(special_piece({cls_.second}, {cls_.first}, 0));
      set_type_ids(encodings[i], type_id);
      out.push_back(std::move(encodings[i]));
      out.push_back(special_piece({sep_.second}, {sep_.first}, type_id));
    }
    encodings = std::move(out);
  }

 private:
  std::pair<std::string, int64_t> cls_, sep_;
};

// <s> A </s> and <s> A </s></s> B </s>, every type id 0.
class RobertaProcessing : public PostProcessor {
 public:
  explicit RobertaProcessing(const JsonValue& json)
      : cls_(token_and_id(json.at("cls"))),
        sep_(token_and_id(json.at("sep"))),
        trim_offsets_(json.boolean_or("trim_offsets", true)),
        add_prefix_space_(json.boolean_or("add_prefix_space", true)) {}

  size_t added_tokens(bool pair) const override { return pair ? 4 : 2; }

  void process(std::vector<Encoding>& encodings, std::span<const std::string_view> texts,
               bool add_special_tokens) const override {
    for (Encoding& e : encodings) {
      if (trim_offsets_) trim_offsets(e, texts, add_prefix_space_);
      set_type_ids(e, 0);
    }
    if (!add_special_tokens) return;
    std::vector<Encoding> out;
    for (size_t i = 0; i < encodings.size(); ++i) {
      out.push_back(i == 0 ? special_piece({cls_.second}, {cls_.first}, 0)
                           : special_piece({sep_.second}, {sep_.first}, 0));
      out.push_back(std::move(encodings[i]));
      out.push_back(special_piece({sep_.second}, {sep_.first}, 0));
    }
    encodings = std::move(out);
  }

 private:
  std::pair<std::string, int64_t> cls_, sep_;
  bool trim_offsets_, add_prefix_space_;
};

class ByteLevel : public PostProcessor {
 public:
  explicit ByteLevel(const JsonValue& json)
      : trim_offsets_(json.boolean_or("trim_offsets", true)),
        add_prefix_space_(json.boolean_or("add_prefix_space", true)) {}

  size_t added_tokens(bool) const override { return 0; }

  void process(std::vector<Encoding>& encodings, std::span<const std::string_view> texts,
               bool) const override {
    if (trim_offsets_)
      for (Encoding& e : encodings) trim_offsets(e, texts, add_prefix_space_);
  }

 private:
  bool trim_offsets_, add_prefix_space_;
};

// Pieces such as "[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1": each a text or a special
// token, with the type id it gets.
class TemplateProcessing : public PostProcessor {
 public:
  explicit TemplateProcessing(const JsonValue& json) {
    for (const auto& [name, value] : json.at("special_tokens").items()) {
      Special s;
      for (const JsonValue& id : value.at("ids").array()) s.ids.push_back(id.id());
      for (const JsonValue& token : value.at("tokens").array()) s.tokens.push_back(token.string());
      if (s.ids.size() != s.tokens.size())
        value.fail("has " + std::to_string(s.ids.size()) + " ids for " +
                   std::to_string(s.tokens.size()) + " tokens");
      specials_.emplace(name, std::move(s));
    }
    single_ = read_template(json.at("single"), false);
    pair_ = read_template(json.at("pair"), true);
  }

  size_t added_tokens(bool pair) const override {
    size_t n = 0;
    for (const Piece& p : pair ? pair_ : single_)
      if (!p.special.empty()) n += specials_.at(p.special).ids.size();
    return n;
  }

  void process(std::vector<Encoding>& encodings, std::span<const std::string_view>,
               bool add_special_tokens) const override {
    std::vector<Encoding> out;
    for (const Piece& p : encodings.size() == 2 ? pair_ : single_) {
      if (p.special.empty()) {
        Encoding e = encodings[p.sequence];
        set_type_ids(e, p.type_id);
        out.push_back(std::move(e));
      } else if (add_special_tokens) {
        const Special& s = specials_.at(p.special);
        out.push_back(special_piece(s.ids, s.tokens, p.type_id));
      }
    }
    encodings = std::move(out);
  }

 private:
  struct Special {
    std::vector<int64_t> ids;
    std::vector<std::string> tokens;
  };
  struct Piece {
    std::string special;  // empty for a text
    size_t sequence = 0;  // 0 for $A, 1 for $B
    int64_t type_id = 0;
  };

  std::vector<Piece> read_template(const JsonValue& json, bool pair) const {
    std::vector<Piece> pieces;
    for (const JsonValue& item : json.array()) {
      Piece p;
      if (const auto sequence = item.find("Sequence")) {
        const std::string id = sequence->at("id").string();
        if (id != "A" && id != "B") sequence->at("id").fail("expected A or B, got '" + id + "'");
        if (id == "B" && !pair) sequence->at("id").fail("a single text has no B");
        p.sequence = id == "B" ? 1 : 0;
        p.type_id = sequence->at("type_id").id();
      } else if (const auto special = item.find("SpecialToken")) {
        p.special = special->at("id").string();
        if (!specials_.contains(p.special))
          special->at("id").fail("the special token '" + p.special + "' is not in special_tokens");
        p.type_id = special->at("type_id").id();
      } else {
        item.fail("expected {\"Sequence\": ...} or {\"SpecialToken\": ...}");
      }
      pieces.push_back(std::move(p));
    }
    return pieces;
  }

  std::map<std::string, Special> specials_;
  std::vector<Piece> single_, pair_;
};

class Sequence : public PostProcessor {
 public:
  explicit Sequence(const JsonValue& json) {
    for (const JsonValue& item : json.at("processors").array())
      processors_.push_back(make_post_processor(item));
  }
  size_t added_tokens(bool pair) const override {
    size_t n = 0;
    for (const auto& p : processors_) n += p->added_tokens(pair);
    return n;
  }
  void process(std::vector<Encoding>& encodings, std::span<const std::string_view> texts,
               bool add_special_tokens) const override {
    for (const auto& p : processors_) p->process(encodings, texts, add_special_tokens);
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> processors_;
};

void keep(Encoding& e, size_t n, Side side) {
  if (n >= e.size()) return;
  const size_t drop = e.size() - n;
  const auto cut = [&](auto& v) {
    if (side == Side::kRight) {
      v.resize(n);
    } else {
      v.erase(v.begin(), v.begin() + static_cast<ptrdiff_t>(drop));
    }
  };
  cut(e.ids), cut(e.tokens), cut(e.type_ids), cut(e.attention_mask);
  cut(e.special_tokens_mask), cut(e.offsets), cut(e.sequence_ids);
}

}  // namespace

std::unique_ptr<PostProcessor> make_post_processor(const JsonValue& json) {
  const std::string type = json.type();
  if (type == "BertProcessing") return std::make_unique<BertProcessing>(json);
  if (type == "RobertaProcessing") return std::make_unique<RobertaProcessing>(json);
  if (type == "ByteLevel") return std::make_unique<ByteLevel>(json);
  if (type == "TemplateProcessing") return std::make_unique<TemplateProcessing>(json);
  if (type == "Sequence") return std::make_unique<Sequence>(json);
  json.unsupported("post_processor", type,
                   "BertProcessing, RobertaProcessing, ByteLevel, TemplateProcessing, Sequence");
}

Encoding concatenate(std::vector<Encoding>&& parts) {
  if (parts.size() == 1) return std::move(parts[0]);
  Encoding out;
  const auto append = [](auto& to, const auto& from) {
    to.insert(to.end(), from.begin(), from.end());
  };
  for (const Encoding& e : parts) {
    append(out.ids, e.ids), append(out.tokens, e.tokens), append(out.type_ids, e.type_ids);
    append(out.attention_mask, e.attention_mask);
    append(out.special_tokens_mask, e.special_tokens_mask);
    append(out.offsets, e.offsets), append(out.sequence_ids, e.sequence_ids);
  }
  return out;
}

void truncate(Encoding& text, Encoding* pair, size_t max_length, const Truncation& truncation) {
  const size_t n1 = text.size(), n2 = pair ? pair->size() : 0;
  if (n1 + n2 <= max_length) return;
  const size_t excess = n1 + n2 - max_length;
  switch (truncation.strategy) {
    case TruncationStrategy::kLongestFirst: {
      if (!pair) {
        keep(text, max_length, truncation.direction);
        return;
      }
      size_t shorter = std::min(n1, n2);
      if (2 * shorter > max_length) shorter = max_length / 2;
      const size_t longer = max_length - shorter;
      const bool text_longer = n1 > n2;
      keep(text, text_longer ? longer : shorter, truncation.direction);
      keep(*pair, text_longer ? shorter : longer, truncation.direction);
      return;
    }
    case TruncationStrategy::kOnlyFirst:
    case TruncationStrategy::kOnlySecond: {
      const bool first = truncation.strategy == TruncationStrategy::kOnlyFirst;
      if (!first && !pair)
        throw ValueError("Tokenizer: truncation strategy only_second needs a text pair");
      Encoding& target = first ? text : *pair;
      if (target.size() <= excess)
        throw ValueError("Tokenizer: cannot truncate to " + std::to_string(max_length) +
                         " tokens by cutting only the " + (first ? "first" : "second") +
                         " text: it has " + std::to_string(target.size()) + " tokens, " +
                         std::to_string(excess) + " would have to go");
      keep(target, target.size() - excess, truncation.direction);
      return;
    }
  }
}

void pad(Encoding& e, size_t length, const Padding& padding, int64_t pad_id) {
  if (e.size() >= length) return;
  const size_t n = length - e.size();
  const auto grow = [&](auto& v, const auto& value) {
    v.insert(padding.direction == Side::kRight ? v.end() : v.begin(), n, value);
  };
  grow(e.ids, pad_id), grow(e.tokens, padding.pad_token), grow(e.type_ids, padding.pad_type_id);
  grow(e.attention_mask, int64_t{0}), grow(e.special_tokens_mask, int64_t{1});
  grow(e.offsets, Offsets{}), grow(e.sequence_ids, int64_t{-1});
}

}  // namespace kiln::text
