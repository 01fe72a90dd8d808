// A reduction fused with the pointwise group that makes its input
// (docs/architecture.md, "Schedules and fused steps"): the group's generated
// kernel writes the reduction's input a block of rows at a time into a
// buffer that stays in cache, and the reduction's own library kernel runs on
// each block. The input never goes through memory.
//
// The reductions that can so run are those whose rows are independent: they
// reduce the trailing dims of a contiguous input (softmax and log_softmax
// along the last dim, layer_norm, and sum, mean, prod, amax, amin, var, std,
// norm and logsumexp over trailing dims). A block's rows are then computed
// by the very code and in the very order that computes them over the whole
// tensor, so the result is eager's bit for bit and strict mode fuses too.
// Where eager would split rows across threads (fewer rows than threads), the
// kernel fills the whole input first and the library kernel runs once, as
// eager does.
#pragma once

#include <optional>
#include <span>
#include <string>

#include "compiler/codegen/generated.h"
#include "compiler/ir/graph.h"

namespace kiln::compiler::codegen {

struct RowReduction {
  ops::OpId op{};
  ops::Attrs attrs;          // the node's, as its shape rule canonicalizes them
  int64_t trailing = 1;      // how many trailing dims of its input it reduces
  size_t kernel_inputs = 0;  // of the step's inputs, the kernel's; then the reduction's others
};

// Whether op is one of the reductions above (its node may still not run so).
bool reduces_rows(ops::OpId op);

// Whether node n (input 0 made by a pointwise group) can run as the row
// reduction of that group's kernel; empty, with why, when it cannot.
std::optional<RowReduction> row_reduction_of(const Graph& graph, const Node& n, std::string& why);

// Runs out = reduction(kernel's result): fn makes the result, of `sizes` and
// `dtype`, from inputs[0, kernel_inputs); the reduction's other inputs follow.
void run_row_reduction(PointwiseFn fn, const RowReduction& reduction, const Shape& sizes,
                       DType dtype, const Tensor& out, std::span<const Tensor> inputs);

}  // namespace kiln::compiler::codegen
