// Helpers shared by the backward rules and the engine.
#pragma once

#include <string_view>

#include "kiln/kiln.h"

namespace kiln::autograd {

// g summed over the dims it was broadcast along, so that it has shape.
Tensor sum_to(const Tensor& g, const Shape& shape);
// A rule's gradient made to fit its input: summed to sizes, cast to dtype.
Tensor conform_grad(const Tensor& g, const Shape& sizes, DType dtype);
// A hook's replacement gradient, checked against the one it replaces.
Tensor check_hook_result(const Tensor& replaced, const Tensor& original, std::string_view where);
// g with the reduced dims put back as size 1 (for broadcasting against the input),
// given the canonical (wrapped, sorted) dims of a reduction; empty dims = all.
Tensor unsqueeze_reduced(const Tensor& g, const Shape& dims, int64_t input_dim, bool keepdim);

}  // namespace kiln::autograd
