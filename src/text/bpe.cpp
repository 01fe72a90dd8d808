// Byte-pair encoding: a word starts as its characters (each a vocabulary
// token, or its bytes as <0xXX> tokens with byte_fallback, or the unknown
// token), then the adjacent pair of lowest merge rank is merged until no pair
// of the merges list is left; ties go to the leftmost pair.
#include <mutex>
#include <queue>
#include <string>
#include <unordered_map>

#include "kiln/error.h"
#include "text/models.h"

namespace kiln::text {
namespace {

struct Merge {
  uint32_t rank, new_id;
};

uint64_t pair_key(uint32_t a, uint32_t b) noexcept { return (uint64_t{a} << 32) | b; }

// One symbol of a word being merged: a doubly linked list over a vector, so
// that merging never moves symbols; a merged-away symbol has length 0.
struct Symbol {
  uint32_t id;
  int64_t prev, next;
  size_t length;  // bytes of the word it covers
};

// A pair waiting to be merged; the queue pops the lowest rank, then the leftmost.
struct Candidate {
  uint32_t rank, new_id;
  size_t pos;
  bool operator>(const Candidate& o) const noexcept {
    return rank != o.rank ? rank > o.rank : pos > o.pos;
  }
};

class Bpe : public Model {
 public:
  explicit Bpe(const JsonValue& json)
      : Model(Vocab(json.at("vocab"))),
        file_(json.file()),
        unk_token_(json.optional_string("unk_token")),
        prefix_(json.string_or("continuing_subword_prefix", "")),
        suffix_(json.string_or("end_of_word_suffix", "")),
        fuse_unk_(json.boolean_or("fuse_unk", false)),
        byte_fallback_(json.boolean_or("byte_fallback", false)),
        ignore_merges_(json.boolean_or("ignore_merges", false)) {
    if (const auto dropout = json.find("dropout"); dropout && dropout->number() != 0.0)
      throw ValueError(file_ + ": model.dropout: BPE dropout (" + dropout->raw_text() +
                       ") samples merges at random, for training; kiln's tokenizer does not "
                       "implement it (set it to null)");
    read_merges(json.at("merges"));
  }

  std::vector<Token> tokenize(std::string_view word) const override {
    if (word.empty()) return {};
    if (ignore_merges_)
      if (const auto id = vocab_.id(word)) return {{*id, std::string(word), 0, word.size()}};
    std::string key(word);
    {
      std::lock_guard<std::mutex> lock(cache_mutex_);
      if (const auto it = cache_.find(key); it != cache_.end()) return it->second;
    }
    std::vector<Symbol> symbols = initial_symbols(word);
    merge_all(symbols);
    std::vector<Token> tokens;
    size_t pos = 0;
    for (const Symbol& s : symbols) {
      if (s.length == 0) continue;
      tokens.push_back({s.id, *vocab_.token(s.id), pos, pos + s.length});
      pos += s.length;
    }
    if (word.size() <= kCachedWordBytes) {
      std::lock_guard<std::mutex> lock(cache_mutex_);
      if (cache_.size() >= kCacheEntries) cache_.clear();
      cache_.emplace(std::move(key), tokens);
    }
    return tokens;
  }

 private:
  // Words are cached while the cache is small; longer texts (a whole line
  // without a pre-tokenizer) are rarely seen twice.
  static constexpr size_t kCacheEntries = 100000, kCachedWordBytes = 256;

  void read_merges(const JsonValue& merges) {
    uint32_t rank = 0;
    for (const JsonValue& item : merges.array()) {
      std::string a, b;
      if (item.is_string()) {
        const std::string line = item.string();
        if (line.starts_with("#version")) continue;
        const size_t space = line.find(' ');
        if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos)
          item.fail("expected two tokens separated by one space, got '" + line + "'");
        a = line.substr(0, space);
        b = line.substr(space + 1);
      } else {
        const std::vector<JsonValue> pair = item.array();
        if (pair.size() != 2)
          item.fail("expected a pair of tokens, got " + std::to_string(pair.size()) + " items");
        a = pair[0].string();
        b = pair[1].string();
      }
      const uint32_t a_id = merge_token_id(item, a), b_id = merge_token_id(item, b);
      if (!prefix_.empty() && !b.starts_with(prefix_))
        item.fail("the second token '" + b + "' does not start with continuing_subword_prefix '" +
                  prefix_ + "'");
      const uint32_t new_id = merge_token_id(item, a + b.substr(prefix_.size()));
      merges_[pair_key(a_id, b_id)] = {rank++, new_id};
    }
  }

  uint32_t merge_token_id(const JsonValue& where, const std::string& token) const {
    const auto id = vocab_.id(token);
    if (!id)
      where.fail("the merge needs the token '" + token + "', which is not in the vocabulary");
    return *id;
  }

  uint32_t unk_id() const {
    const auto id = vocab_.id(*unk_token_);
    if (!id)
      throw IOError(file_ + ": model.unk_token: the unknown token '" + *unk_token_ +
                    "' is not in the vocabulary");
    return *id;
  }

  std::vector<Symbol> initial_symbols(std::string_view word) const {
    std::vector<Symbol> symbols;
    const auto add = [&](uint32_t id, size_t length) {
      const auto n = static_cast<int64_t>(symbols.size());
      symbols.push_back({id, n - 1, n + 1, length});
    };
    // A pending unknown token: its bytes (0: none), added before the next known
    // symbol or, with fuse_unk, grown by the unknown characters that follow.
    size_t unk_length = 0;
    std::string piece;
    for (size_t i = 0; i < word.size();) {
      const size_t begin = i;
      unicode::next_char(word, i);
      const size_t length = i - begin;
      piece.assign(begin > 0 ? prefix_ : "");
      piece.append(word.substr(begin, length));
      if (i == word.size()) piece.append(suffix_);
      if (const auto id = vocab_.id(piece)) {
        if (unk_length > 0) add(unk_id(), unk_length);
        unk_length = 0;
        add(*id, length);
        continue;
      }
      if (byte_fallback_ && add_bytes(piece, add)) continue;
      if (!unk_token_) continue;  // the character is dropped, as the tokenizers library does
      if (unk_length > 0 && !fuse_unk_) add(unk_id(), unk_length);
      unk_length = (fuse_unk_ ? unk_length : 0) + length;
      unk_id();  // a missing unknown token is an error here already
    }
    if (unk_length > 0) add(unk_id(), unk_length);
    if (!symbols.empty()) symbols.back().next = -1;
    return symbols;
  }

  // Adds piece's bytes as <0xXX> tokens when the vocabulary has all of them.
  template <typename Add>
  bool add_bytes(std::string_view piece, const Add& add) const {
    std::vector<uint32_t> ids;
    for (char byte : piece) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", static_cast<unsigned char>(byte));
      const auto id = vocab_.id(name);
      if (!id) return false;
      ids.push_back(*id);
    }
    for (uint32_t id : ids) add(id, 1);
    return true;
  }

  void merge_all(std::vector<Symbol>& symbols) const {
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
    const auto push_pair = [&](size_t left) {
      const Symbol& l = symbols[left];
      if (l.next < 0) return;
      const auto it = merges_.find(pair_key(l.id, symbols[static_cast<size_t>(l.next)].id));
      if (it != merges_.end()) queue.push({it->second.rank, it->second.new_id, left});
    };
    for (size_t i = 0; i + 1 < symbols.size(); ++i) push_pair(i);
    while (!queue.empty()) {
      const Candidate top = queue.top();
      queue.pop();
      Symbol& left = symbols[top.pos];
      if (left.length == 0 || left.next < 0) continue;
      Symbol& right = symbols[static_cast<size_t>(left.next)];
      // A stale entry: one side has merged since the pair was queued.
      const auto it = merges_.find(pair_key(left.id, right.id));
      if (it == merges_.end() || it->second.new_id != top.new_id) continue;
      left.id = top.new_id;
      left.length += right.length;
      left.next = right.next;
      right.length = 0;
      if (left.next >= 0)
        symbols[static_cast<size_t>(left.next)].prev = static_cast<int64_t>(top.pos);
      if (left.prev >= 0) push_pair(static_cast<size_t>(left.prev));
      push_pair(top.pos);
    }
  }

  std::string file_;
  std::optional<std::string> unk_token_;
  std::string prefix_, suffix_;
  bool fuse_unk_, byte_fallback_, ignore_merges_;
  std::unordered_map<uint64_t, Merge> merges_;
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<Token>> cache_;
};

}  // namespace

std::unique_ptr<Model> make_bpe(const JsonValue& json) { return std::make_unique<Bpe>(json); }

}  // namespace kiln::text
