// Lookups in a GroupOptions list, shared by the optimizers and their state dicts.
#pragma once

#include <cassert>
#include <string>
#include <string_view>

#include "kiln/optim.h"

namespace kiln::optim {

inline const double* find_option(const GroupOptions& options, std::string_view name) {
  for (const auto& [key, value] : options)
    if (key == name) return &value;
  return nullptr;
}

// Options lists are completed from the defaults, so a missing name is a bug.
inline double option_value(const GroupOptions& options, std::string_view name) {
  const double* value = find_option(options, name);
  assert(value && "option missing from a completed group");
  return *value;
}

inline bool option_flag(const GroupOptions& options, std::string_view name) {
  return option_value(options, name) != 0;
}

// The option every scheduler records in the groups it drives (PyTorch's name).
inline constexpr std::string_view kInitialLr = "initial_lr";

}  // namespace kiln::optim
