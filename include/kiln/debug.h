// Debugging helpers that survive kiln::compile (docs/debugging.md):
// each call is a node of the compiled graph that runs at every replay, so
// prints and checks inside a compiled function fire as they do eagerly,
// without a graph break.
//
//   Tensor h = layer(x);
//   kiln::debug::print(h, "after layer");         // "after layer: tensor([...])"
//   kiln::debug::check_finite(h, "after layer");  // ValueError naming the label on NaN or inf
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "kiln/tensor.h"

namespace kiln::debug {

// Prints "label: " and the tensor as operator<< does, through the print
// handler (standard error unless set), at every call, eager or compiled.
void print(const Tensor& t, std::string_view label);

// Throws kiln::ValueError naming the label, the count of NaNs and
// infinities and the first one's index where t has any (floating dtypes;
// others are always finite), at every call, eager or compiled.
void check_finite(const Tensor& t, std::string_view label);

// What print writes to: each call's text, ending in a newline. Returns the
// handler it replaces; an empty one restores standard error. Process-wide.
using PrintHandler = std::function<void(const std::string& text)>;
PrintHandler set_print_handler(PrintHandler handler);

}  // namespace kiln::debug
