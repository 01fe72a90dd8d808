// Reading Hugging Face config.json files for the reference models (BertConfig,
// LlamaConfig): each known key is checked for its type, and every error names
// the file and the key.
//
//   const Json json = read_config_json(path, where);
//   const ConfigReader read(json, where);
//   read.integer("hidden_size", c.hidden_size);
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/error.h"

namespace kiln::models {

using Json = nlohmann::json;

// The JSON object in the file at path; IOError when it cannot be read,
// ValueError when it is not a JSON object. where starts each message.
Json read_config_json(const std::string& path, const std::string& where);

// Reads the keys a config knows from one JSON object; an absent key leaves
// its field as it was.
class ConfigReader {
 public:
  ConfigReader(const Json& json, std::string where) : json_(json), where_(std::move(where)) {}

  void integer(const char* key, int64_t& field) const;
  void number(const char* key, double& field) const;
  void boolean(const char* key, bool& field) const;
  void string(const char* key, std::string& field) const;
  // null (none) is stored as -1.
  void optional_integer(const char* key, int64_t& field) const;
  // A number or a list of numbers; null: none.
  void integer_list(const char* key, std::vector<int64_t>& field) const;
  // A nested object, read with its key in the messages; absent or null: none.
  std::optional<ConfigReader> object(const char* key) const;
  // A feature the model does not implement must not be silently ignored:
  // ValueError when key holds something other than expected or null.
  void reject_unless(const char* key, const Json& expected, std::string_view why) const;

  const std::string& where() const noexcept { return where_; }

 private:
  const Json* find(const char* key) const;
  ValueError bad_value(const char* key, const Json& v, std::string_view expected) const;

  const Json& json_;
  std::string where_;
};

}  // namespace kiln::models
