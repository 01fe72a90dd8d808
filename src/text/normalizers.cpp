#include "text/normalizers.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "text/regex.h"

namespace kiln::text {
namespace {

// BERT's: drop control characters and turn whitespace into spaces, surround
// CJK ideographs with spaces, strip accents (by default when lowercasing),
// lowercase.
class BertNormalizer : public Normalizer {
 public:
  explicit BertNormalizer(const JsonValue& json)
      : clean_text_(json.boolean_or("clean_text", true)),
        handle_chinese_chars_(json.boolean_or("handle_chinese_chars", true)),
        lowercase_(json.boolean_or("lowercase", true)),
        strip_accents_(json.find("strip_accents") ? json.at("strip_accents").boolean()
                                                  : lowercase_) {}

  void normalize(NormalizedString& s) const override {
    if (clean_text_) {
      s.filter([](char32_t c) { return c != 0 && c != 0xfffd && !unicode::is_bert_control(c); });
      s.map([](char32_t c) { return unicode::is_whitespace(c) ? U' ' : c; });
    }
    if (handle_chinese_chars_) surround_ideographs(s);
    if (strip_accents_) {
      s.normalize(unicode::NormalForm::kNFD);
      s.filter([](char32_t c) { return !unicode::is_bert_nonspacing_mark(c); });
    }
    if (lowercase_) s.lowercase();
  }

 private:
  static void surround_ideographs(NormalizedString& s) {
    std::vector<unicode::CharChange> changes;
    bool any = false;
    const std::string& text = s.text();
    for (size_t i = 0; i < text.size();) {
      const char32_t c = unicode::next_char(text, i);
      if (unicode::is_cjk_ideograph(c)) {
        changes.insert(changes.end(), {{U' ', 0}, {c, 1}, {U' ', 1}});
        any = true;
      } else {
        changes.push_back({c, 0});
      }
    }
    if (any) s.transform(changes);
  }

  bool clean_text_, handle_chinese_chars_, lowercase_, strip_accents_;
};

class UnicodeNormalizer : public Normalizer {
 public:
  explicit UnicodeNormalizer(unicode::NormalForm form) : form_(form) {}
  void normalize(NormalizedString& s) const override { s.normalize(form_); }

 private:
  unicode::NormalForm form_;
};

class Lowercase : public Normalizer {
 public:
  void normalize(NormalizedString& s) const override { s.lowercase(); }
};

class Strip : public Normalizer {
 public:
  explicit Strip(const JsonValue& json)
      : left_(json.boolean_or("strip_left", true)), right_(json.boolean_or("strip_right", true)) {}
  void normalize(NormalizedString& s) const override { s.strip(left_, right_); }

 private:
  bool left_, right_;
};

// Removes combining marks (not decomposing first: NFD before it does that).
class StripAccents : public Normalizer {
 public:
  void normalize(NormalizedString& s) const override {
    s.filter([](char32_t c) { return !unicode::is_combining_mark(c); });
  }
};

class Replace : public Normalizer {
 public:
  explicit Replace(const JsonValue& json)
      : pattern_(json.at("pattern")), content_(json.at("content").string()) {}
  void normalize(NormalizedString& s) const override {
    s.replace(pattern_.find_matches(s.text()), content_);
  }

 private:
  TextPattern pattern_;
  std::string content_;
};

class Prepend : public Normalizer {
 public:
  explicit Prepend(const JsonValue& json) : prepend_(json.at("prepend").string()) {}
  void normalize(NormalizedString& s) const override { s.prepend(prepend_); }

 private:
  std::string prepend_;
};

class Sequence : public Normalizer {
 public:
  explicit Sequence(const JsonValue& json) {
    for (const JsonValue& item : json.at("normalizers").array())
      normalizers_.push_back(make_normalizer(item));
  }
  void normalize(NormalizedString& s) const override {
    for (const auto& n : normalizers_) n->normalize(s);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> normalizers_;
};

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const JsonValue& json) {
  const std::string type = json.type();
  if (type == "BertNormalizer") return std::make_unique<BertNormalizer>(json);
  if (type == "NFC") return std::make_unique<UnicodeNormalizer>(unicode::NormalForm::kNFC);
  if (type == "NFD") return std::make_unique<UnicodeNormalizer>(unicode::NormalForm::kNFD);
  if (type == "NFKC") return std::make_unique<UnicodeNormalizer>(unicode::NormalForm::kNFKC);
  if (type == "NFKD") return std::make_unique<UnicodeNormalizer>(unicode::NormalForm::kNFKD);
  if (type == "Lowercase") return std::make_unique<Lowercase>();
  if (type == "Strip") return std::make_unique<Strip>(json);
  if (type == "StripAccents") return std::make_unique<StripAccents>();
  if (type == "Replace") return std::make_unique<Replace>(json);
  if (type == "Prepend") return std::make_unique<Prepend>(json);
  if (type == "Sequence") return std::make_unique<Sequence>(json);
  json.unsupported("normalizer", type,
                   "BertNormalizer, NFC, NFD, NFKC, NFKD, Lowercase, Strip, StripAccents, "
                   "Replace, Prepend, Sequence");
}

}  // namespace kiln::text
