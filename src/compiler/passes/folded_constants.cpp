#include "compiler/passes/folded_constants.h"

namespace kiln::compiler {

FoldedConstants::Key FoldedConstants::key(int32_t kind, const Graph& graph,
                                          std::span<const ValueId> sources,
                                          std::vector<double> numbers) {
  Key k{kind, {}, std::move(numbers)};
  for (ValueId id : sources) {
    const void* identity = id == kNoValue
                               ? nullptr
                               : graph.constant_identity(static_cast<size_t>(graph.value(id).slot));
    k.sources.push_back(reinterpret_cast<uintptr_t>(identity));
  }
  return k;
}

std::optional<std::vector<ValueId>> FoldedConstants::find(const Key& key, Graph& into) {
  std::lock_guard lock(mutex_);
  const auto it = made_.find(key);
  if (it == made_.end()) return std::nullopt;
  std::vector<ValueId> ids;
  for (size_t slot : it->second) ids.push_back(into.copy_constant(store_, slot));
  return ids;
}

void FoldedConstants::add(const Key& key, const Graph& graph, std::span<const ValueId> sources,
                          const Graph& made_in, std::span<const ValueId> made) {
  std::lock_guard lock(mutex_);
  if (made_.contains(key)) return;
  for (ValueId id : sources)
    if (id != kNoValue) store_.copy_constant(graph, static_cast<size_t>(graph.value(id).slot));
  std::vector<size_t> slots;
  for (ValueId id : made) {
    store_.copy_constant(made_in, static_cast<size_t>(made_in.value(id).slot));
    slots.push_back(store_.constants().size() - 1);
  }
  made_.emplace(key, std::move(slots));
}

}  // namespace kiln::compiler
