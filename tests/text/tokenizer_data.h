// The reference data of tests/data/tokenizers (made by
// tests/parity/make_tokenizer_data.py from Hugging Face's libraries): paths,
// JSON reading, and printing test strings readably in failure messages.
#pragma once

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <unordered_map>

#include <nlohmann/json.hpp>

namespace kiln::testing {

inline std::string tokenizer_data_path(const std::string& name) {
  return std::string(KILN_TEST_DATA_DIR) + "/tokenizers/" + name;
}

inline std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

inline nlohmann::json read_json_file(const std::string& path) {
  return nlohmann::json::parse(read_text_file(path));
}

// id -> token as the file lists them (the model's vocabulary, then the added
// tokens), read here independently of kiln's parser.
inline std::unordered_map<int64_t, std::string> vocabulary_of(const nlohmann::json& file) {
  std::unordered_map<int64_t, std::string> tokens;
  for (auto it = file["model"]["vocab"].begin(); it != file["model"]["vocab"].end(); ++it)
    tokens[it.value().get<int64_t>()] = it.key();
  for (const auto& added : file["added_tokens"])
    tokens[added["id"].get<int64_t>()] = added["content"].get<std::string>();
  return tokens;
}

// s with control characters, and bytes outside ASCII, escaped: test strings
// are full of whitespace and marks that a terminal would hide.
inline std::string escaped(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
      out.push_back(static_cast<char>(c));
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    }
  }
  return out + "\"";
}

}  // namespace kiln::testing
