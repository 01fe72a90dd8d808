// PyTorch's result_type: tensors with dims outrank 0-dim tensors, which outrank
// wrapped numbers; a lower rank only matters when it is of a higher category
// (bool < integer < floating). A wrapped float counts as float32.
#pragma once

#include <span>

#include "kiln/tensor.h"
#include "ops/sym_tensor.h"

namespace kiln::ops {

DType result_type(std::span<const Tensor> tensors);
DType result_type(const Tensor& a, const Tensor& b);
// The same in symbolic shape rules.
DType result_type(std::span<const SymTensor> tensors);

}  // namespace kiln::ops
