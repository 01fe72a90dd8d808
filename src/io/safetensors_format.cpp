#include "io/safetensors_format.h"

#include <algorithm>
#include <array>
#include <cassert>
#include <limits>
#include <numeric>
#include <unordered_set>
#include <utility>

#include <nlohmann/json.hpp>

#include "kiln/error.h"

namespace kiln::io {
namespace {

struct DTypeName {
  DType dtype;
  std::string_view name;
};
constexpr std::array<DTypeName, kNumDTypes> kDTypeNames = {{
    {kBool, "BOOL"},
    {kUInt8, "U8"},
    {kInt8, "I8"},
    {kInt16, "I16"},
    {kInt32, "I32"},
    {kInt64, "I64"},
    {kFloat16, "F16"},
    {kBFloat16, "BF16"},
    {kFloat32, "F32"},
    {kFloat64, "F64"},
}};
// Dtypes the format defines that kiln has no dtype for: named as such in errors.
constexpr std::array<std::string_view, 10> kUnsupportedDTypes = {
    "U16", "U32", "U64", "F8_E4M3", "F8_E5M2", "F8_E8M0", "F6_E2M3", "F6_E3M2", "F4", "C64"};

// Index of the first byte that is not part of well-formed UTF-8 (RFC 3629: no
// overlong forms, no surrogates, nothing past U+10FFFF), nullopt when all are.
std::optional<size_t> first_invalid_utf8(std::string_view s) noexcept {
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len = 0;
    unsigned char lo = 0x80, hi = 0xbf;  // allowed range of the second byte
    if (c >= 0xc2 && c <= 0xdf) {
      len = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
      len = 3;
      if (c == 0xe0) lo = 0xa0;
      if (c == 0xed) hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
      len = 4;
      if (c == 0xf0) lo = 0x90;
      if (c == 0xf4) hi = 0x8f;
    } else {
      return i;
    }
    if (n - i < len) return i;
    const auto second = static_cast<unsigned char>(s[i + 1]);
    if (second < lo || second > hi) return i;
    for (size_t k = 2; k < len; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if (b < 0x80 || b > 0xbf) return i;
    }
    i += len;
  }
  return std::nullopt;
}

uint64_t read_le64(std::string_view bytes) noexcept {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(bytes[i]);
  return v;
}

// A SAX handler for nlohmann's parser that validates the header while it is
// read and keeps only the entries: no JSON DOM is built, and unknown keys of
// an entry (which the format allows) are skipped without being stored.
class HeaderReader {
 public:
  using json = nlohmann::json;

  HeaderReader(std::string_view file_name, SafetensorsHeader& out)
      : file_name_(file_name), out_(out) {}

  bool null() { return on_value({Kind::Other, "null"}); }
  bool boolean(bool) { return on_value({Kind::Other, "a boolean"}); }
  bool number_integer(int64_t v) {
    if (v >= 0) return number_unsigned(static_cast<uint64_t>(v));
    return on_value({Kind::Negative, "the negative number " + std::to_string(v)});
  }
  bool number_unsigned(uint64_t v) {
    return on_value({Kind::Unsigned, "the number " + std::to_string(v), v});
  }
  bool number_float(double, const std::string& text) {
    return on_value({Kind::Other, "the non-integer number " + text});
  }
  bool string(std::string& s) { return on_value({Kind::String, "a string", 0, std::move(s)}); }
  bool binary(json::binary_t&) { return on_value({Kind::Other, "binary data"}); }
  bool start_object(size_t) {
    enter();
    return on_value({Kind::Object, "an object"});
  }
  bool start_array(size_t) {
    enter();
    return on_value({Kind::Array, "an array"});
  }
  bool key(std::string& k);
  bool end_object();
  bool end_array();
  bool parse_error(size_t, const std::string&, const nlohmann::detail::exception& e) {
    fail(detail::str_cat("the header is not valid JSON: ", e.what()));
  }

  bool finished() const noexcept { return where_ == Where::Done; }

 private:
  enum class Where { BeforeRoot, Root, Metadata, Entry, Shape, Offsets, Skip, Done };
  enum class Field { DType, Shape, Offsets, Unknown };
  enum class Kind { Object, Array, String, Unsigned, Negative, Other };
  struct Value {
    Kind kind;
    std::string description;  // for errors: "an array", "the number 3", ...
    uint64_t number = 0;
    std::string text = {};
  };

  [[noreturn]] void fail(const std::string& what) const {
    throw IOError(detail::str_cat("safetensors file '", file_name_, "': ", what));
  }
  [[noreturn]] void fail_tensor(const std::string& what) const {
    fail(detail::str_cat("tensor '", key_, "': ", what));
  }
  void enter() {
    if (++nesting_ > kSafetensorsMaxNesting) {
      fail(
          detail::str_cat("the header nests JSON deeper than ", kSafetensorsMaxNesting, " levels"));
    }
  }

  bool on_value(Value v);
  void on_entry_field(Value v);
  void on_array_item(const Value& v);
  void finish_entry();

  std::string_view file_name_;
  SafetensorsHeader& out_;
  Where where_ = Where::BeforeRoot;
  int nesting_ = 0;
  int skip_depth_ = 0;  // open containers inside an unknown key's value
  std::string key_;     // current key of the root object: a tensor name or "__metadata__"
  std::string metadata_key_;
  std::unordered_set<std::string> root_keys_;
  // The entry being read.
  Field field_ = Field::Unknown;
  bool has_dtype_ = false, has_shape_ = false, has_offsets_ = false;
  SafetensorsEntry entry_;
  std::vector<uint64_t> offsets_;
};

bool HeaderReader::on_value(Value v) {
  switch (where_) {
    case Where::BeforeRoot:
      if (v.kind != Kind::Object) fail("the header is " + v.description + ", not a JSON object");
      where_ = Where::Root;
      break;
    case Where::Root:
      if (key_ == "__metadata__") {
        if (v.kind != Kind::Object)
          fail("__metadata__ is " + v.description + ", expected an object");
        where_ = Where::Metadata;
      } else {
        if (v.kind != Kind::Object)
          fail_tensor("the entry is " + v.description + ", expected an object");
        where_ = Where::Entry;
        entry_ = SafetensorsEntry{};
        entry_.name = key_;
        has_dtype_ = has_shape_ = has_offsets_ = false;
        offsets_.clear();
      }
      break;
    case Where::Metadata:
      if (v.kind != Kind::String) {
        fail(detail::str_cat("__metadata__ value of key '", metadata_key_, "' is ", v.description,
                             ", expected a string"));
      }
      out_.metadata.emplace(metadata_key_, std::move(v.text));
      break;
    case Where::Entry:
      on_entry_field(std::move(v));
      break;
    case Where::Shape:
    case Where::Offsets:
      on_array_item(v);
      break;
    case Where::Skip:
      if (v.kind == Kind::Object || v.kind == Kind::Array) ++skip_depth_;
      break;
    case Where::Done:
      fail("the header has data after its JSON object");
  }
  return true;
}

void HeaderReader::on_entry_field(Value v) {
  switch (field_) {
    case Field::DType: {
      if (v.kind != Kind::String) fail_tensor("dtype is " + v.description + ", expected a string");
      const auto dtype = safetensors_dtype_from_name(v.text);
      if (!dtype) {
        const bool known = std::find(kUnsupportedDTypes.begin(), kUnsupportedDTypes.end(),
                                     v.text) != kUnsupportedDTypes.end();
        fail_tensor(
            detail::str_cat("dtype '", v.text, "' is ", known ? "not supported by kiln" : "unknown",
                            " (kiln reads BOOL, U8, I8, I16, I32, I64, F16, BF16, F32, F64)"));
      }
      entry_.dtype = *dtype;
      break;
    }
    case Field::Shape:
      if (v.kind != Kind::Array) fail_tensor("shape is " + v.description + ", expected an array");
      where_ = Where::Shape;
      break;
    case Field::Offsets:
      if (v.kind != Kind::Array) {
        fail_tensor("data_offsets is " + v.description + ", expected [begin, end]");
      }
      where_ = Where::Offsets;
      break;
    case Field::Unknown:
      if (v.kind == Kind::Object || v.kind == Kind::Array) {
        where_ = Where::Skip;
        skip_depth_ = 1;
      }
      break;
  }
}

void HeaderReader::on_array_item(const Value& v) {
  const bool shape = where_ == Where::Shape;
  const char* what = shape ? "shape" : "data_offsets";
  if (v.kind != Kind::Unsigned) {
    fail_tensor(
        detail::str_cat(what, " holds ", v.description, ", expected non-negative integers"));
  }
  if (shape) {
    if (v.number > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      fail_tensor(detail::str_cat("shape dim ", v.number, " is too large"));
    }
    if (entry_.shape.size() == kSafetensorsMaxRank) {
      fail_tensor(detail::str_cat("shape has more than ", kSafetensorsMaxRank, " dims"));
    }
    entry_.shape.push_back(static_cast<int64_t>(v.number));
  } else {
    if (offsets_.size() == 2)
      fail_tensor("data_offsets has more than 2 values, expected [begin, end]");
    offsets_.push_back(v.number);
  }
}

bool HeaderReader::key(std::string& k) {
  switch (where_) {
    case Where::Root:
      if (!root_keys_.insert(k).second) {
        fail(k == "__metadata__" ? std::string("__metadata__ appears twice")
                                 : detail::str_cat("tensor '", k, "' appears twice"));
      }
      key_ = std::move(k);
      break;
    case Where::Metadata:
      if (out_.metadata.count(k)) fail(detail::str_cat("__metadata__ has key '", k, "' twice"));
      metadata_key_ = std::move(k);
      break;
    case Where::Entry: {
      bool* seen = nullptr;
      if (k == "dtype")
        field_ = Field::DType, seen = &has_dtype_;
      else if (k == "shape")
        field_ = Field::Shape, seen = &has_shape_;
      else if (k == "data_offsets")
        field_ = Field::Offsets, seen = &has_offsets_;
      else
        field_ = Field::Unknown;
      if (seen && *seen) fail_tensor(detail::str_cat("key '", k, "' appears twice"));
      if (seen) *seen = true;
      break;
    }
    default:  // keys inside a skipped value
      break;
  }
  return true;
}

bool HeaderReader::end_object() {
  --nesting_;
  switch (where_) {
    case Where::Skip:
      if (--skip_depth_ == 0) where_ = Where::Entry;
      break;
    case Where::Entry:
      finish_entry();
      where_ = Where::Root;
      break;
    case Where::Metadata:
      where_ = Where::Root;
      break;
    default:  // the root object
      where_ = Where::Done;
      break;
  }
  return true;
}

bool HeaderReader::end_array() {
  --nesting_;
  if (where_ == Where::Skip) {
    if (--skip_depth_ == 0) where_ = Where::Entry;
  } else if (where_ == Where::Offsets) {
    if (offsets_.size() != 2) {
      fail_tensor(detail::str_cat("data_offsets has ", offsets_.size(),
                                  offsets_.size() == 1 ? " value" : " values",
                                  ", expected [begin, end]"));
    }
    where_ = Where::Entry;
  } else {  // the shape
    where_ = Where::Entry;
  }
  return true;
}

void HeaderReader::finish_entry() {
  if (!has_dtype_) fail_tensor("'dtype' is missing");
  if (!has_shape_) fail_tensor("'shape' is missing");
  if (!has_offsets_) fail_tensor("'data_offsets' is missing");
  const uint64_t begin = offsets_[0], end = offsets_[1];
  if (begin > end) {
    fail_tensor(detail::str_cat("data_offsets [", begin, ", ", end, "] end before they begin"));
  }
  if (end > out_.data_size) {
    fail_tensor(detail::str_cat("data_offsets [", begin, ", ", end,
                                "] run past the data buffer of ", out_.data_size, " bytes"));
  }
  const auto nbytes = safetensors_nbytes(entry_.shape, entry_.dtype);
  if (!nbytes) {
    fail_tensor(detail::str_cat("shape ", entry_.shape, " has more elements than fit in memory"));
  }
  if (*nbytes != end - begin) {
    fail_tensor(detail::str_cat("data_offsets [", begin, ", ", end, "] hold ", end - begin,
                                " bytes, but shape ", entry_.shape, " of ",
                                safetensors_dtype_name(entry_.dtype), " needs ", *nbytes));
  }
  entry_.begin = begin;
  entry_.end = end;
  out_.entries.push_back(std::move(entry_));
}

// Empty ranges overlap nothing; the others, sorted by begin, must not reach
// into the next.
void check_no_overlap(const SafetensorsHeader& h, std::string_view file_name) {
  std::vector<size_t> order;
  for (size_t i = 0; i < h.entries.size(); ++i) {
    if (h.entries[i].begin < h.entries[i].end) order.push_back(i);
  }
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return h.entries[a].begin < h.entries[b].begin; });
  for (size_t k = 1; k < order.size(); ++k) {
    const auto& prev = h.entries[order[k - 1]];
    const auto& cur = h.entries[order[k]];
    if (cur.begin < prev.end) {
      throw IOError(detail::str_cat("safetensors file '", file_name, "': tensors '", prev.name,
                                    "' [", prev.begin, ", ", prev.end, "] and '", cur.name, "' [",
                                    cur.begin, ", ", cur.end, "] overlap in the data buffer"));
    }
  }
}

}  // namespace

SafetensorsHeader parse_safetensors(std::string_view file, std::string_view file_name) {
  return parse_safetensors(file, file.size(), file_name);
}

SafetensorsHeader parse_safetensors(std::string_view prefix, uint64_t file_size,
                                    std::string_view file_name) {
  auto fail = [&](const std::string& what) {
    throw IOError(detail::str_cat("safetensors file '", file_name, "': ", what));
  };
  if (file_size < 8) {
    fail(detail::str_cat("the file is ", file_size,
                         " bytes long, shorter than the 8-byte header length"));
  }
  assert(prefix.size() >= 8 && "the prefix holds the header length");
  const uint64_t header_len = read_le64(prefix);
  if (header_len > kSafetensorsMaxHeaderBytes) {
    fail(detail::str_cat("the header length ", header_len, " exceeds the limit of ",
                         kSafetensorsMaxHeaderBytes, " bytes"));
  }
  if (header_len > file_size - 8) {
    fail(detail::str_cat("the header length ", header_len, " runs past the end of the file (",
                         file_size, " bytes)"));
  }
  assert(prefix.size() >= 8 + header_len && "the prefix holds the header");
  const std::string_view text = prefix.substr(8, header_len);
  if (const auto bad = first_invalid_utf8(text)) {
    fail(detail::str_cat("the header is not valid UTF-8 (byte ", *bad, " of the JSON)"));
  }

  SafetensorsHeader out;
  out.data_start = 8 + header_len;
  out.data_size = file_size - out.data_start;
  HeaderReader reader(file_name, out);
  const bool ok = nlohmann::json::sax_parse(text.begin(), text.end(), &reader);
  // parse_error throws, so a false return or an unfinished object is a bug.
  if (!ok || !reader.finished()) fail("the header is not a complete JSON object");
  check_no_overlap(out, file_name);
  return out;
}

std::string_view safetensors_dtype_name(DType dtype) noexcept {
  for (const auto& d : kDTypeNames) {
    if (d.dtype == dtype) return d.name;
  }
  return "?";
}

std::optional<DType> safetensors_dtype_from_name(std::string_view name) noexcept {
  for (const auto& d : kDTypeNames) {
    if (d.name == name) return d.dtype;
  }
  return std::nullopt;
}

std::optional<uint64_t> safetensors_nbytes(std::span<const int64_t> shape, DType dtype) noexcept {
  if (std::any_of(shape.begin(), shape.end(), [](int64_t d) { return d < 0; })) return std::nullopt;
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;
  // Bounded by int64 so that the count also fits numel() and byte offsets.
  constexpr uint64_t kLimit = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  uint64_t bytes = dtype_size(dtype);
  for (const int64_t d : shape) {
    if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes) || bytes > kLimit) {
      return std::nullopt;
    }
  }
  return bytes;
}

uint64_t lay_out_safetensors(std::span<SafetensorsEntry> entries) {
  std::vector<size_t> order(entries.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const size_t sa = dtype_size(entries[a].dtype), sb = dtype_size(entries[b].dtype);
    return sa != sb ? sa > sb : entries[a].name < entries[b].name;
  });
  uint64_t offset = 0;
  for (const size_t i : order) {
    const auto nbytes = safetensors_nbytes(entries[i].shape, entries[i].dtype);
    if (!nbytes) {
      throw ValueError(detail::str_cat("safetensors: tensor '", entries[i].name, "' has shape ",
                                       entries[i].shape, ", whose byte count overflows"));
    }
    entries[i].begin = offset;
    entries[i].end = offset + *nbytes;
    offset = entries[i].end;
  }
  return offset;
}

std::string encode_safetensors_header(std::span<const SafetensorsEntry> entries,
                                      const std::map<std::string, std::string>& metadata,
                                      std::string_view file_name) {
  auto check_utf8 = [&](std::string_view s, std::string_view what) {
    if (const auto bad = first_invalid_utf8(s)) {
      throw ValueError(detail::str_cat("safetensors file '", file_name, "': ", what, " '", s,
                                       "' is not valid UTF-8 (byte ", *bad, ")"));
    }
  };
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    auto& meta = header["__metadata__"] = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) {
      check_utf8(k, "metadata key");
      check_utf8(v, "metadata value");
      meta[k] = v;
    }
  }
  for (const auto& e : entries) {
    check_utf8(e.name, "tensor name");
    if (e.name == "__metadata__") {
      throw ValueError(detail::str_cat("safetensors file '", file_name,
                                       "': a tensor cannot be named '__metadata__'"));
    }
    header[e.name] = {{"dtype", safetensors_dtype_name(e.dtype)},
                      {"shape", e.shape},
                      {"data_offsets", {e.begin, e.end}}};
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');  // 8 + size is then a multiple of 8
  std::string out(8, '\0');
  uint64_t n = json.size();
  for (int i = 0; i < 8; ++i, n >>= 8) out[i] = static_cast<char>(n & 0xff);
  return out + json;
}

}  // namespace kiln::io
