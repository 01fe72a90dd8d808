#include "text/models.h"

#include <string>

namespace kiln::text {

Vocab::Vocab(const JsonValue& json) {
  const auto items = json.items();
  ids_.reserve(items.size());
  tokens_.reserve(items.size());
  for (const auto& [token, value] : items) {
    const uint32_t id = value.id();
    const auto [it, inserted] = ids_.emplace(token, id);
    tokens_.emplace(id, &it->first);
  }
}

std::optional<uint32_t> Vocab::id(std::string_view token) const {
  const auto it = ids_.find(token);
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

const std::string* Vocab::token(uint32_t id) const {
  const auto it = tokens_.find(id);
  return it == tokens_.end() ? nullptr : it->second;
}

std::unique_ptr<Model> make_model(const JsonValue& json) {
  const auto type = json.find("type");
  if (!type) json.fail("has no field 'type' (WordPiece or BPE)");
  const std::string name = type->string();
  if (name == "WordPiece") return make_wordpiece(json);
  if (name == "BPE") return make_bpe(json);
  json.unsupported("model", name, "WordPiece, BPE");
}

}  // namespace kiln::text
