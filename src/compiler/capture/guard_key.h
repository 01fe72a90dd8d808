// kiln::compile's guard keys: what a call's arguments, grad mode and TF32
// policy make of the key that picks its graphs (docs/compile.md, "Arguments,
// results, guards"), the guards named for recompile logs, and the marks of
// mark_dynamic.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kiln/compile.h"

namespace kiln::compiler {

struct KeyHash {
  size_t operator()(const std::vector<int64_t>& key) const noexcept;
};

// A call's key. `dynamic`: by tensor argument, its dims left out (absent:
// none); a tensor with a dynamic dim keeps only its layout's class.
std::vector<int64_t> build_key(const internal::FlatArgs& args,
                               const std::vector<uint64_t>& dynamic = {});

// Each tensor argument's name: "argument 2", or "argument 2[0]" in a list.
std::vector<std::string> tensor_names(const internal::FlatArgs& args);

// Every guard of a call, named, in a fixed order: what recompile logs compare.
std::vector<std::pair<std::string, std::string>> describe(const internal::FlatArgs& args);

// The first guard in which `now` differs from `before`.
std::string first_difference(const std::vector<std::pair<std::string, std::string>>& before,
                             const std::vector<std::pair<std::string, std::string>>& now);

// A shape, printed.
std::string str(const Shape& s);

}  // namespace kiln::compiler
