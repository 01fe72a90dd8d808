// ConfigReader: the typed reads of a Hugging Face config.json's keys.
#include "hf_config.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>

namespace kiln::models {

using detail::str_cat;

Json read_config_json(const std::string& path, const std::string& where) {
  std::ifstream file(path);
  if (!file) throw IOError(str_cat(where, ": cannot open: ", std::strerror(errno)));
  Json json;
  try {
    json = Json::parse(file);
  } catch (const Json::exception& e) {
    throw ValueError(str_cat(where, ": not valid JSON: ", e.what()));
  }
  if (!json.is_object()) throw ValueError(str_cat(where, ": expected a JSON object"));
  return json;
}

void ConfigReader::integer(const char* key, int64_t& field) const {
  const Json* v = find(key);
  if (!v) return;
  if (!v->is_number_integer()) throw bad_value(key, *v, "an integer");
  field = v->get<int64_t>();
}

void ConfigReader::number(const char* key, double& field) const {
  const Json* v = find(key);
  if (!v) return;
  if (!v->is_number()) throw bad_value(key, *v, "a number");
  field = v->get<double>();
}

void ConfigReader::boolean(const char* key, bool& field) const {
  const Json* v = find(key);
  if (!v) return;
  if (!v->is_boolean()) throw bad_value(key, *v, "true or false");
  field = v->get<bool>();
}

void ConfigReader::string(const char* key, std::string& field) const {
  const Json* v = find(key);
  if (!v) return;
  if (!v->is_string()) throw bad_value(key, *v, "a string");
  field = v->get<std::string>();
}

void ConfigReader::optional_integer(const char* key, int64_t& field) const {
  const Json* v = find(key);
  if (v && v->is_null())
    field = -1;
  else
    integer(key, field);
}

void ConfigReader::integer_list(const char* key, std::vector<int64_t>& field) const {
  const Json* v = find(key);
  if (!v) return;
  if (v->is_null()) {
    field.clear();
    return;
  }
  if (v->is_number_integer()) {
    field = {v->get<int64_t>()};
    return;
  }
  if (!v->is_array()) throw bad_value(key, *v, "an integer or a list of integers");
  std::vector<int64_t> values;
  for (const Json& item : *v) {
    if (!item.is_number_integer()) throw bad_value(key, *v, "an integer or a list of integers");
    values.push_back(item.get<int64_t>());
  }
  field = std::move(values);
}

std::optional<ConfigReader> ConfigReader::object(const char* key) const {
  const Json* v = find(key);
  if (!v || v->is_null()) return std::nullopt;
  if (!v->is_object()) throw bad_value(key, *v, "an object");
  return ConfigReader(*v, str_cat(where_, ": ", key));
}

void ConfigReader::reject_unless(const char* key, const Json& expected,
                                 std::string_view why) const {
  const Json* v = find(key);
  if (v && *v != expected && !v->is_null()) {
    throw ValueError(str_cat(where_, ": ", key, " ", v->dump(), " is not supported (", why, ")"));
  }
}

const Json* ConfigReader::find(const char* key) const {
  const auto it = json_.find(key);
  return it == json_.end() ? nullptr : &*it;
}

ValueError ConfigReader::bad_value(const char* key, const Json& v,
                                   std::string_view expected) const {
  return ValueError(str_cat(where_, ": ", key, " must be ", expected, ", got ", v.dump()));
}

}  // namespace kiln::models
