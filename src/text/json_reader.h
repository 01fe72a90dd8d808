// Typed reads of a tokenizer.json's fields. A missing field or a value of the
// wrong type is an IOError naming the file and the field ("model.vocab");
// a component kiln does not implement is a ValueError naming its type.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace kiln::text {

class JsonValue {
 public:
  JsonValue(const nlohmann::json& value, std::string path, const std::string& file)
      : value_(&value), path_(std::move(path)), file_(&file) {}

  const std::string& path() const noexcept { return path_; }
  const std::string& file() const noexcept { return *file_; }
  bool is_null() const noexcept { return value_->is_null(); }
  bool is_string() const noexcept { return value_->is_string(); }
  bool is_object() const noexcept { return value_->is_object(); }
  bool is_array() const noexcept { return value_->is_array(); }

  // The field `key` of this object: IOError when it is missing.
  JsonValue at(std::string_view key) const;
  // The field `key`, nullopt when it is missing or null.
  std::optional<JsonValue> find(std::string_view key) const;

  std::string string() const;
  bool boolean() const;
  int64_t integer() const;
  double number() const;
  // The value as JSON text, for messages.
  std::string raw_text() const { return value_->dump(); }
  // A non-negative integer that fits a token id.
  uint32_t id() const;
  std::vector<JsonValue> array() const;
  std::vector<std::pair<std::string, JsonValue>> items() const;  // of an object

  // The field, or fallback when it is missing or null.
  bool boolean_or(std::string_view key, bool fallback) const;
  int64_t integer_or(std::string_view key, int64_t fallback) const;
  std::string string_or(std::string_view key, std::string fallback) const;
  std::optional<std::string> optional_string(std::string_view key) const;

  // The "type" field of a component object.
  std::string type() const { return at("type").string(); }

  // IOError: "<file>: <path>: <what>".
  [[noreturn]] void fail(const std::string& what) const;
  // ValueError: "<file>: <path>: <kind> type '<type>' is not supported by kiln (supported: ...)".
  [[noreturn]] void unsupported(std::string_view kind, std::string_view type,
                                std::string_view supported) const;

 private:
  const nlohmann::json* value_;
  std::string path_;
  const std::string* file_;
};

}  // namespace kiln::text
