#include "text/json_reader.h"

#include <limits>

#include "kiln/error.h"

namespace kiln::text {
namespace {

std::string kind_of(const nlohmann::json& v) {
  if (v.is_number_integer()) return "an integer";
  if (v.is_number()) return "a number";
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  return "an object";
}

std::string child(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : path + "." + std::string(key);
}

}  // namespace

void JsonValue::fail(const std::string& what) const {
  throw IOError(*file_ + ": " + (path_.empty() ? std::string("the top level") : path_) + ": " +
                what);
}

void JsonValue::unsupported(std::string_view kind, std::string_view type,
                            std::string_view supported) const {
  throw ValueError(
      *file_ + ": " + path_ + ": " + std::string(kind) + " type '" + std::string(type) +
      "' is not supported by kiln (supported: " + std::string(supported) + "; see docs/text.md)");
}

JsonValue JsonValue::at(std::string_view key) const {
  if (!value_->is_object()) fail("expected an object, got " + kind_of(*value_));
  const auto it = value_->find(key);
  if (it == value_->end()) fail("has no field '" + std::string(key) + "'");
  return JsonValue(*it, child(path_, key), *file_);
}

std::optional<JsonValue> JsonValue::find(std::string_view key) const {
  if (!value_->is_object()) fail("expected an object, got " + kind_of(*value_));
  const auto it = value_->find(key);
  if (it == value_->end() || it->is_null()) return std::nullopt;
  return JsonValue(*it, child(path_, key), *file_);
}

std::string JsonValue::string() const {
  if (!value_->is_string()) fail("expected a string, got " + kind_of(*value_));
  return value_->get<std::string>();
}

bool JsonValue::boolean() const {
  if (!value_->is_boolean()) fail("expected true or false, got " + kind_of(*value_));
  return value_->get<bool>();
}

int64_t JsonValue::integer() const {
  if (!value_->is_number_integer()) fail("expected an integer, got " + kind_of(*value_));
  if (value_->is_number_unsigned() &&
      value_->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    fail("the integer " + value_->dump() + " is too large");
  return value_->get<int64_t>();
}

double JsonValue::number() const {
  if (!value_->is_number()) fail("expected a number, got " + kind_of(*value_));
  return value_->get<double>();
}

uint32_t JsonValue::id() const {
  const int64_t v = integer();
  if (v < 0 || v > std::numeric_limits<uint32_t>::max())
    fail("a token id must be in [0, 2^32), got " + std::to_string(v));
  return static_cast<uint32_t>(v);
}

std::vector<JsonValue> JsonValue::array() const {
  if (!value_->is_array()) fail("expected an array, got " + kind_of(*value_));
  std::vector<JsonValue> out;
  out.reserve(value_->size());
  for (size_t i = 0; i < value_->size(); ++i)
    out.emplace_back((*value_)[i], path_ + "[" + std::to_string(i) + "]", *file_);
  return out;
}

std::vector<std::pair<std::string, JsonValue>> JsonValue::items() const {
  if (!value_->is_object()) fail("expected an object, got " + kind_of(*value_));
  std::vector<std::pair<std::string, JsonValue>> out;
  out.reserve(value_->size());
  for (auto it = value_->begin(); it != value_->end(); ++it)
    out.emplace_back(it.key(), JsonValue(it.value(), path_ + "[\"" + it.key() + "\"]", *file_));
  return out;
}

bool JsonValue::boolean_or(std::string_view key, bool fallback) const {
  const auto v = find(key);
  return v ? v->boolean() : fallback;
}

int64_t JsonValue::integer_or(std::string_view key, int64_t fallback) const {
  const auto v = find(key);
  return v ? v->integer() : fallback;
}

std::string JsonValue::string_or(std::string_view key, std::string fallback) const {
  const auto v = find(key);
  return v ? v->string() : fallback;
}

std::optional<std::string> JsonValue::optional_string(std::string_view key) const {
  const auto v = find(key);
  if (!v) return std::nullopt;
  return v->string();
}

}  // namespace kiln::text
