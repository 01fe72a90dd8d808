#include "text/pre_tokenizers.h"

#include <string>
#include <utility>
#include <vector>

#include "text/byte_level.h"
#include "text/regex.h"

namespace kiln::text {
namespace {

using CharClass = bool (*)(char32_t) noexcept;

void split_on(PreTokenizedString& s, CharClass is_match, SplitBehavior behavior) {
  s.split([&](NormalizedString&& piece) {
    return piece.split(match_chars(piece.text(), is_match), behavior);
  });
}

// BERT's: whitespace separates words and is dropped; each punctuation
// character is a word of its own.
class BertPreTokenizer : public PreTokenizer {
 public:
  void pre_tokenize(PreTokenizedString& s) const override {
    split_on(s, unicode::is_whitespace, SplitBehavior::kRemoved);
    split_on(s, unicode::is_bert_punctuation, SplitBehavior::kIsolated);
  }
};

class WhitespaceSplit : public PreTokenizer {
 public:
  void pre_tokenize(PreTokenizedString& s) const override {
    split_on(s, unicode::is_whitespace, SplitBehavior::kRemoved);
  }
};

// Runs of word characters, and runs of what is neither word nor space.
class Whitespace : public PreTokenizer {
 public:
  Whitespace() : words_(R"(\w+|[^\w\p{White_Space}]+)", "Whitespace", Regex::Syntax::kIcu) {}
  void pre_tokenize(PreTokenizedString& s) const override {
    s.split([&](NormalizedString&& piece) {
      std::vector<PatternMatch> matches = words_.find_matches(piece.text());
      invert(matches);
      return piece.split(std::move(matches), SplitBehavior::kRemoved);
    });
  }

 private:
  Regex words_;
};

class Punctuation : public PreTokenizer {
 public:
  explicit Punctuation(const JsonValue& json)
      : behavior_(json.find("behavior") ? split_behavior(json.at("behavior"))
                                        : SplitBehavior::kIsolated) {}
  void pre_tokenize(PreTokenizedString& s) const override {
    split_on(s, unicode::is_bert_punctuation, behavior_);
  }

 private:
  SplitBehavior behavior_;
};

class Digits : public PreTokenizer {
 public:
  explicit Digits(const JsonValue& json)
      : behavior_(json.boolean_or("individual_digits", false) ? SplitBehavior::kIsolated
                                                              : SplitBehavior::kContiguous) {}
  void pre_tokenize(PreTokenizedString& s) const override {
    split_on(s, unicode::is_numeric, behavior_);
  }

 private:
  SplitBehavior behavior_;
};

class Split : public PreTokenizer {
 public:
  explicit Split(const JsonValue& json)
      : pattern_(json.at("pattern")),
        behavior_(split_behavior(json.at("behavior"))),
        invert_(json.boolean_or("invert", false)) {}
  void pre_tokenize(PreTokenizedString& s) const override {
    s.split([&](NormalizedString&& piece) {
      std::vector<PatternMatch> matches = pattern_.find_matches(piece.text());
      if (invert_) invert(matches);
      return piece.split(std::move(matches), behavior_);
    });
  }

 private:
  TextPattern pattern_;
  SplitBehavior behavior_;
  bool invert_;
};

// GPT-2's: a space before each split (optionally), GPT-2's pattern
// (optionally), then every byte as its character of the byte-level alphabet.
class ByteLevel : public PreTokenizer {
 public:
  explicit ByteLevel(const JsonValue& json)
      : add_prefix_space_(json.boolean_or("add_prefix_space", true)),
        use_regex_(json.boolean_or("use_regex", true)),
        gpt2_(kGpt2Pattern, "ByteLevel") {}

  void pre_tokenize(PreTokenizedString& s) const override {
    s.split([&](NormalizedString&& piece) {
      if (add_prefix_space_ && piece.text()[0] != ' ') piece.prepend(" ");
      if (!use_regex_) return std::vector<NormalizedString>{std::move(piece)};
      return piece.split(gpt2_.find_matches(piece.text()), SplitBehavior::kIsolated);
    });
    s.rewrite([](NormalizedString& piece) {
      const std::string& text = piece.text();
      std::vector<unicode::CharChange> changes;
      changes.reserve(text.size());
      for (size_t i = 0; i < text.size(); ++i) {
        const bool first_byte = (static_cast<unsigned char>(text[i]) & 0xc0) != 0x80;
        changes.push_back({byte_to_char(static_cast<uint8_t>(text[i])), first_byte ? 0 : 1});
      }
      piece.transform(changes);
    });
  }

 private:
  bool add_prefix_space_, use_regex_;
  Regex gpt2_;
};

class Sequence : public PreTokenizer {
 public:
  explicit Sequence(const JsonValue& json) {
    for (const JsonValue& item : json.at("pretokenizers").array())
      pre_tokenizers_.push_back(make_pre_tokenizer(item));
  }
  void pre_tokenize(PreTokenizedString& s) const override {
    for (const auto& p : pre_tokenizers_) p->pre_tokenize(s);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> pre_tokenizers_;
};

}  // namespace

SplitBehavior split_behavior(const JsonValue& json) {
  const std::string name = json.string();
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  json.fail("unknown split behavior '" + name +
            "' (expected Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous)");
}

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const JsonValue& json) {
  const std::string type = json.type();
  if (type == "BertPreTokenizer") return std::make_unique<BertPreTokenizer>();
  if (type == "Whitespace") return std::make_unique<Whitespace>();
  if (type == "WhitespaceSplit") return std::make_unique<WhitespaceSplit>();
  if (type == "Punctuation") return std::make_unique<Punctuation>(json);
  if (type == "Digits") return std::make_unique<Digits>(json);
  if (type == "Split") return std::make_unique<Split>(json);
  if (type == "ByteLevel") return std::make_unique<ByteLevel>(json);
  if (type == "Sequence") return std::make_unique<Sequence>(json);
  json.unsupported("pre_tokenizer", type,
                   "BertPreTokenizer, Whitespace, WhitespaceSplit, Punctuation, Digits, Split, "
                   "ByteLevel, Sequence");
}

}  // namespace kiln::text
