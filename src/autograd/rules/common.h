// Helpers shared by the backward rules and the engine.
#pragma once

#include <string_view>

#include "kiln/autograd.h"
#include "kiln/ops/conv.h"
#include "kiln/ops/factory.h"
#include "kiln/ops/linalg.h"
#include "kiln/ops/nn.h"
#include "kiln/ops/pointwise.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape.h"

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

// g placed at [start, start + g.size(dim)) along dim of a zero tensor of sizes
// (which equal g's in the other dims).
Tensor embed_along(const Tensor& g, const Shape& sizes, int64_t dim, int64_t start);
// g with zeros appended in every dim up to sizes.
Tensor pad_to(const Tensor& g, const Shape& sizes);

}  // namespace kiln::autograd
