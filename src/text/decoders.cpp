#include "text/decoders.h"

#include <string_view>
#include <utility>

#include "text/byte_level.h"
#include "text/regex.h"
#include "text/unicode.h"

namespace kiln::text {
namespace {

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
}

// "##" joins a piece to the one before; other tokens start a word (a space).
// cleanup undoes BERT's spaces before punctuation and in contractions, within
// each token.
class WordPiece : public Decoder {
 public:
  explicit WordPiece(const JsonValue& json)
      : prefix_(json.string_or("prefix", "##")), cleanup_(json.boolean_or("cleanup", true)) {}

  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string& t = tokens[i];
      if (i > 0) {
        if (t.starts_with(prefix_)) {
          t.erase(0, prefix_.size());
        } else {
          t.insert(0, " ");
        }
      }
      if (cleanup_) clean_up(t);
    }
    return tokens;
  }

 private:
  static void clean_up(std::string& t) {
    static constexpr std::pair<std::string_view, std::string_view> kRules[] = {
        {" .", "."},   {" ?", "?"},     {" !", "!"},    {" ,", ","},
        {" ' ", "'"},  {" n't", "n't"}, {" 'm", "'m"},  {" do not", " don't"},
        {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
    for (const auto& [from, to] : kRules) replace_all(t, from, to);
  }

  std::string prefix_;
  bool cleanup_;
};

// Byte-level characters back to bytes, then the bytes as UTF-8 (U+FFFD for
// what is not). A token with a character outside the alphabet (an added token
// written as plain text, say) is taken as its own bytes.
class ByteLevel : public Decoder {
 public:
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    std::string bytes;
    for (const std::string& t : tokens) {
      const size_t before = bytes.size();
      bool mapped = true;
      for (size_t i = 0; i < t.size() && mapped;) {
        const auto b = char_to_byte(unicode::next_char(t, i));
        if (b) bytes.push_back(static_cast<char>(*b));
        mapped = b.has_value();
      }
      if (!mapped) bytes.replace(before, std::string::npos, t);
    }
    return {unicode::decode_utf8_lossy(bytes)};
  }
};

// The end-of-word suffix becomes a space (nothing after the last token).
class BpeDecoder : public Decoder {
 public:
  explicit BpeDecoder(const JsonValue& json) : suffix_(json.string_or("suffix", "</w>")) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (size_t i = 0; i < tokens.size() && !suffix_.empty(); ++i)
      replace_all(tokens[i], suffix_, i + 1 == tokens.size() ? "" : " ");
    return tokens;
  }

 private:
  std::string suffix_;
};

// Runs of <0xXX> tokens become the text of their bytes, or one U+FFFD per
// byte when the bytes are not UTF-8.
class ByteFallback : public Decoder {
 public:
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    std::vector<std::string> out;
    std::string pending;
    size_t pending_tokens = 0;
    const auto flush = [&] {
      if (pending_tokens == 0) return;
      if (unicode::first_invalid_utf8(pending)) {
        for (size_t i = 0; i < pending_tokens; ++i) out.emplace_back("\xef\xbf\xbd");
      } else {
        out.push_back(pending);
      }
      pending.clear();
      pending_tokens = 0;
    };
    for (std::string& t : tokens) {
      if (const auto byte = byte_of(t)) {
        pending.push_back(static_cast<char>(*byte));
        ++pending_tokens;
        continue;
      }
      flush();
      out.push_back(std::move(t));
    }
    flush();
    return out;
  }

 private:
  static std::optional<uint8_t> byte_of(std::string_view t) {
    if (t.size() != 6 || !t.starts_with("<0x") || t[5] != '>') return std::nullopt;
    int value = 0;
    for (char c : t.substr(3, 2)) {
      const int digit = c >= '0' && c <= '9'   ? c - '0'
                        : c >= 'a' && c <= 'f' ? c - 'a' + 10
                        : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                               : -1;
      if (digit < 0) return std::nullopt;
      value = value * 16 + digit;
    }
    return static_cast<uint8_t>(value);
  }
};

class Fuse : public Decoder {
 public:
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    std::string all;
    for (const std::string& t : tokens) all += t;
    return {all};
  }
};

// Removes up to `start` copies of a character from the front of each token
// and up to `stop` from the back.
class Strip : public Decoder {
 public:
  explicit Strip(const JsonValue& json) : start_(count(json, "start")), stop_(count(json, "stop")) {
    const JsonValue content = json.at("content");
    const std::string c = content.string();
    size_t i = 0;
    if (c.empty() || unicode::first_invalid_utf8(c) || (unicode::next_char(c, i), i != c.size()))
      content.fail("expected one character, got '" + c + "'");
    content_ = c;
  }

  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (std::string& t : tokens) {
      size_t front = 0, back = t.size();
      for (size_t k = 0; k < start_ && t.compare(front, content_.size(), content_) == 0; ++k)
        front += content_.size();
      for (size_t k = 0; k < stop_ && back >= front + content_.size() &&
                         t.compare(back - content_.size(), content_.size(), content_) == 0;
           ++k)
        back -= content_.size();
      t = t.substr(front, back - front);
    }
    return tokens;
  }

 private:
  static size_t count(const JsonValue& json, std::string_view key) {
    const int64_t n = json.integer_or(key, 0);
    if (n < 0) json.at(key).fail("must not be negative, got " + std::to_string(n));
    return static_cast<size_t>(n);
  }

  std::string content_;
  size_t start_, stop_;
};

class Replace : public Decoder {
 public:
  explicit Replace(const JsonValue& json)
      : pattern_(json.at("pattern")), content_(json.at("content").string()) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (std::string& t : tokens) {
      std::string out;
      for (const PatternMatch& m : pattern_.find_matches(t))
        out += m.is_match ? std::string_view(content_)
                          : std::string_view(t).substr(m.begin, m.end - m.begin);
      t = std::move(out);
    }
    return tokens;
  }

 private:
  TextPattern pattern_;
  std::string content_;
};

class Sequence : public Decoder {
 public:
  explicit Sequence(const JsonValue& json) {
    for (const JsonValue& item : json.at("decoders").array())
      decoders_.push_back(make_decoder(item));
  }
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (const auto& d : decoders_) tokens = d->decode_chain(std::move(tokens));
    return tokens;
  }

 private:
  std::vector<std::unique_ptr<Decoder>> decoders_;
};

}  // namespace

std::unique_ptr<Decoder> make_decoder(const JsonValue& json) {
  const std::string type = json.type();
  if (type == "WordPiece") return std::make_unique<WordPiece>(json);
  if (type == "ByteLevel") return std::make_unique<ByteLevel>();
  if (type == "BPEDecoder") return std::make_unique<BpeDecoder>(json);
  if (type == "ByteFallback") return std::make_unique<ByteFallback>();
  if (type == "Fuse") return std::make_unique<Fuse>();
  if (type == "Strip") return std::make_unique<Strip>(json);
  if (type == "Replace") return std::make_unique<Replace>(json);
  if (type == "Sequence") return std::make_unique<Sequence>(json);
  json.unsupported("decoder", type,
                   "WordPiece, ByteLevel, BPEDecoder, ByteFallback, Fuse, Strip, Replace, "
                   "Sequence");
}

}  // namespace kiln::text
