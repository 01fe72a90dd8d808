#include "text/regex.h"

#include <unicode/regex.h>
#include <unicode/unistr.h>
#include <unicode/utext.h>

#include "kiln/error.h"

namespace kiln::text {
namespace {

constexpr std::string_view kWord = R"([\p{L}\p{M}\p{Nd}\p{Pc}])";
constexpr std::string_view kNotWord = R"([^\p{L}\p{M}\p{Nd}\p{Pc}])";

// Closes a UText on every path out of find_matches.
struct UTextCloser {
  void operator()(UText* t) const noexcept { utext_close(t); }
};

}  // namespace

std::string onig_to_icu(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size());
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '\\' || i + 1 == pattern.size()) {
      out.push_back(pattern[i]);
      continue;
    }
    const char next = pattern[++i];
    switch (next) {
      case 's':
        out += R"([\p{White_Space}])";
        break;
      case 'S':
        out += R"([^\p{White_Space}])";
        break;
      case 'w':
        out += kWord;
        break;
      case 'W':
        out += kNotWord;
        break;
      case 'h':
        out += "[0-9a-fA-F]";
        break;
      case 'H':
        out += "[^0-9a-fA-F]";
        break;
      default:
        out.push_back('\\');
        out.push_back(next);
    }
  }
  return out;
}

Regex::Regex(std::string_view pattern, const std::string& where, Syntax syntax) {
  const std::string translated =
      syntax == Syntax::kOniguruma ? onig_to_icu(pattern) : std::string(pattern);
  UParseError parse_error{};
  UErrorCode status = U_ZERO_ERROR;
  pattern_.reset(
      icu::RegexPattern::compile(icu::UnicodeString::fromUTF8(icu::StringPiece(
                                     translated.data(), static_cast<int32_t>(translated.size()))),
                                 0, parse_error, status));
  if (U_FAILURE(status) || !pattern_)
    throw ValueError(where + ": the regular expression '" + std::string(pattern) +
                     "' does not compile: " + u_errorName(status) + " at offset " +
                     std::to_string(parse_error.offset));
}

Regex::~Regex() = default;
Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;

std::vector<PatternMatch> Regex::find_matches(std::string_view text) const {
  if (text.empty()) return {{0, 0, false}};
  UErrorCode status = U_ZERO_ERROR;
  std::unique_ptr<UText, UTextCloser> input(
      utext_openUTF8(nullptr, text.data(), static_cast<int64_t>(text.size()), &status));
  std::unique_ptr<icu::RegexMatcher> matcher(pattern_->matcher(status));
  if (U_FAILURE(status) || !matcher)
    throw Error(std::string("tokenizer: ICU cannot run a regular expression: ") +
                u_errorName(status));
  matcher->reset(input.get());
  // Patterns such as \s+(?!\S) backtrack over long runs of one class: ICU's
  // default stack (8 MB) would make long inputs fail.
  matcher->setStackLimit(0, status);
  std::vector<PatternMatch> out;
  size_t previous = 0;
  while (matcher->find(status) && U_SUCCESS(status)) {
    const auto begin = static_cast<size_t>(matcher->start64(status));
    const auto end = static_cast<size_t>(matcher->end64(status));
    if (previous != begin) out.push_back({previous, begin, false});
    out.push_back({begin, end, true});
    previous = end;
  }
  if (U_FAILURE(status))
    throw Error(std::string("tokenizer: ICU regular expression failed: ") + u_errorName(status));
  if (previous != text.size()) out.push_back({previous, text.size(), false});
  return out;
}

TextPattern::TextPattern(const JsonValue& json) {
  if (const auto literal = json.find("String")) {
    literal_ = literal->string();
  } else if (const auto regex = json.find("Regex")) {
    regex_ = std::make_unique<Regex>(regex->string(), json.file() + ": " + regex->path());
  } else {
    json.fail("expected {\"String\": ...} or {\"Regex\": ...}");
  }
}

std::vector<PatternMatch> TextPattern::find_matches(std::string_view text) const {
  return regex_ ? regex_->find_matches(text) : match_literal(text, literal_);
}

}  // namespace kiln::text
