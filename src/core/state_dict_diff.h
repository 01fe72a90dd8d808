// How a state dict differs from the one a module expects, for error messages
// that stay short: every list is capped ("'a', 'b', 'c' and 190 more"), so
// a checkpoint of another model gives a line, not every key it holds.
//
//   const StateDictDiff diff = diff_state_dicts(load_safetensors(path), net.state_dict());
//   if (!diff.empty()) throw ValueError(path + ": " + diff.summary());
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/state_dict.h"

namespace kiln {

// "a, b, c and 190 more": the first `shown` items, then how many were left out.
std::string capped_list(std::span<const std::string> items, size_t shown = 3,
                        std::string_view separator = ", ");
// The same with each key quoted: "'a', 'b', 'c' and 190 more".
std::string summarize_keys(std::span<const std::string> keys, size_t shown = 3);

struct ShapeMismatch {
  std::string name;
  Shape given, expected;
};

struct StateDictDiff {
  std::vector<std::string> missing_keys;     // expected, absent from the dict
  std::vector<std::string> unexpected_keys;  // in the dict, not expected
  std::vector<ShapeMismatch> wrong_shapes;   // in both, of another shape

  bool empty() const noexcept {
    return missing_keys.empty() && unexpected_keys.empty() && wrong_shapes.empty();
  }
  // "1 missing key ('fc.bias'); 2 unexpected keys ('a', 'b'); 3 tensors of another shape
  // (w: [384] in the dict, [768] expected; ...)"; `given` names the dict ("the file").
  std::string summary(std::string_view given = "the dict", size_t shown = 3) const;
};

// given against expected, in expected's order (missing, wrong shapes) and
// given's (unexpected).
StateDictDiff diff_state_dicts(const StateDict& given, const StateDict& expected);

}  // namespace kiln
