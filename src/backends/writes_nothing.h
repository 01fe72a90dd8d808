// Whether a kernel call has nothing to do: every output is empty, and so is
// every integer or bool input (indices and targets, whose values a kernel
// checks even when it writes nothing: one_hot of [-2, -1] is an error).
// Dispatch and compiled executables run no kernel then, so kernels never see
// such a call: a loop over one dim of an empty output (a [2^55, 0] tensor, of
// no bytes) would otherwise run 2^55 times (docs/architecture.md, "Kernels").
#pragma once

#include <algorithm>
#include <span>

#include "kiln/tensor.h"

namespace kiln::backend {

inline bool writes_nothing(std::span<const Tensor> outputs, std::span<const Tensor> inputs) {
  const auto empty = [](const Tensor& t) { return t.numel() == 0; };
  const auto checked = [](const Tensor& t) { return t.defined() && !is_floating(t.dtype()); };
  return !outputs.empty() && std::all_of(outputs.begin(), outputs.end(), empty) &&
         std::none_of(inputs.begin(), inputs.end(),
                      [&](const Tensor& t) { return checked(t) && !empty(t); });
}

}  // namespace kiln::backend
