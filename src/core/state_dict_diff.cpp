#include "core/state_dict_diff.h"

#include <algorithm>

#include "kiln/error.h"

namespace kiln {

std::string capped_list(std::span<const std::string> items, size_t shown,
                        std::string_view separator) {
  const size_t n = std::min(items.size(), std::max<size_t>(shown, 1));
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    if (i > 0) out += separator;
    out += items[i];
  }
  if (items.size() > n) out += detail::str_cat(" and ", items.size() - n, " more");
  return out;
}

std::string summarize_keys(std::span<const std::string> keys, size_t shown) {
  std::vector<std::string> quoted;
  quoted.reserve(keys.size());
  for (const std::string& key : keys) quoted.push_back("'" + key + "'");
  return capped_list(quoted, shown);
}

std::string StateDictDiff::summary(std::string_view given, size_t shown) const {
  std::vector<std::string> parts;
  auto plural = [](size_t n, const char* one, const char* many) {
    return detail::str_cat(n, " ", n == 1 ? one : many);
  };
  if (!missing_keys.empty()) {
    parts.push_back(plural(missing_keys.size(), "missing key", "missing keys") + " (" +
                    summarize_keys(missing_keys, shown) + ")");
  }
  if (!unexpected_keys.empty()) {
    parts.push_back(plural(unexpected_keys.size(), "unexpected key", "unexpected keys") + " (" +
                    summarize_keys(unexpected_keys, shown) + ")");
  }
  if (!wrong_shapes.empty()) {
    std::vector<std::string> shapes;
    for (const ShapeMismatch& m : wrong_shapes) {
      shapes.push_back(
          detail::str_cat(m.name, ": ", m.given, " in ", given, ", ", m.expected, " expected"));
    }
    parts.push_back(
        plural(wrong_shapes.size(), "tensor of another shape", "tensors of another shape") + " (" +
        capped_list(shapes, shown, "; ") + ")");
  }
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : "; ") + p;
  return out;
}

StateDictDiff diff_state_dicts(const StateDict& given, const StateDict& expected) {
  StateDictDiff diff;
  for (const auto& [name, want] : expected) {
    const Tensor* got = given.find(name);
    if (!got) {
      diff.missing_keys.push_back(name);
    } else if (got->sizes() != want.sizes()) {
      diff.wrong_shapes.push_back({name, got->sizes(), want.sizes()});
    }
  }
  for (const auto& [name, tensor] : given)
    if (!expected.contains(name)) diff.unexpected_keys.push_back(name);
  return diff;
}

}  // namespace kiln
