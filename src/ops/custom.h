// Custom ops (include/kiln/library.h) inside kiln: one row of the op table,
// `custom`, whose first attribute names the registered op and whose further
// attributes are that op's. Its shape rule, kernel (on every backend) and
// backward rule look the op up and run what the user gave
// (docs/custom_ops.md).
#pragma once

#include <span>
#include <string_view>
#include <vector>

#include "backends/backend.h"
#include "kiln/library.h"
#include "ops/attrs.h"

namespace kiln::library {

// A registered op: its definition and what calls look up in it.
struct OpEntry {
  OpDef def;
  // The attribute's position in a call's ops::Attrs (after the name); -1: none.
  int attr_index(std::string_view name) const noexcept;
};

}  // namespace kiln::library

namespace kiln::ops {

// The op a `custom` node's attributes name; kiln::Error where none is defined.
const library::OpEntry& custom_op(const Attrs& attrs);
// Its name, for printing ("custom" where the attributes name none).
std::string_view custom_op_name(const Attrs& attrs) noexcept;
// The name of a call's attribute i (past the op's name), "?" where none.
std::string_view custom_attr_name(const Attrs& attrs, size_t i) noexcept;
// The kernel of every backend for OpId::custom.
void run_custom_kernel(const backend::KernelCall& call);
// The backward rule of OpId::custom: the op's backward from the saved
// inputs and results.
TensorList custom_backward(const Attrs& attrs, std::span<const Tensor> inputs,
                           std::span<const Tensor> results, const std::vector<bool>& needs_grad,
                           const TensorList& grads);

}  // namespace kiln::ops
