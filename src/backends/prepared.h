// Inputs a backend prepares once, when an executable is built, instead of at
// every call: a frozen convolution's weight, folded by the compiler, kept in
// the layout its primitive reads (docs/architecture.md, "Prepared weights").
// The executable then holds the prepared form alone: the plain tensor is
// let go, and each call passes the prepared form as KernelCall::prepared
// with a tensor of the input's layout that holds no bytes in its place.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "backends/backend.h"

namespace kiln::backend {

// Rows [begin, end) of the first dim of the input to prepare, contiguous:
// asked for a block at a time, so that a weight the compiler folds is never
// held whole beside its prepared form.
using InputRows = std::function<Tensor(int64_t begin, int64_t end)>;

struct InputPreparation {
  size_t input = 0;  // the op's input it prepares
  // The prepared form of the input whose values `rows` gives, for calls of
  // call's layouts (meta tensors, call.in(input) among them); null where the
  // backend has none for such calls. `values` is the same for every call
  // over the same values (the executables of one program at several sizes),
  // as long as a prepared form made for it lives: the backend may hand them
  // one prepared form where their layouts agree.
  std::shared_ptr<const void> (*prepare)(const KernelCall& call, const InputRows& rows,
                                         const void* values) = nullptr;
};

// Backends register their preparations when they start; null where there is none.
void register_input_preparation(DeviceKind device, ops::OpId op, InputPreparation preparation);
const InputPreparation* input_preparation(DeviceKind device, ops::OpId op);

}  // namespace kiln::backend
