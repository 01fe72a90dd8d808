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
// eager does. sum, mean, amax and amin also run so over a run of dims before
// the last (RowReduction::column_begin): the library's column reduction
// folds tiles of rows and columns that the kernel writes, in the blocks it
// folds over memory, so their results are eager's bit for bit too. Reduced
// dims with kept ones between them run as rows of the input permuted, as the
// library reads it (RowReduction::permutation).
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "compiler/codegen/generated.h"
#include "compiler/ir/graph.h"

namespace kiln::compiler::codegen {

struct RowReduction {
  ops::OpId op{};
  ops::Attrs attrs;          // the node's, as its shape rule canonicalizes them
  int64_t trailing = 1;      // how many trailing dims of its input it reduces
  // A column reduction: sum, mean, amax or amin over the run of dims
  // [column_begin, column_end) of its input, dims after them kept (a bias
  // gradient's sum over [0, 1], a mean over a sequence's tokens). The kernel
  // writes the input a tile of rows and columns at a time, and the library's
  // column reduction folds each tile in cache (backends/cpu/column_reduce.h),
  // bitwise as over memory. No epilogue. -1: a row reduction.
  int64_t column_begin = -1, column_end = -1;
  // Rows of a permutation of the input: reduced dims that are not adjacent
  // in memory (a batch norm backward's sums over [0, 2, 3] of [N, C, H, W]).
  // The library then reduces the rows of its input permuted, the kept dims
  // first and the reduced ones last, in order (gathered or copied); the kernel
  // writes its blocks of rows in that order, so results are eager's bit for
  // bit. The input's dims in the rows' order; empty: the input's own order.
  // No epilogue, no random node (their numbers follow the input's order).
  std::vector<int64_t> permutation;
  size_t kernel_inputs = 0;  // of the step's inputs, the kernel's; then the reduction's others
  int32_t node = -1;         // the reduction's node
  // An epilogue: pointwise nodes after the reduction, over its input's
  // sizes, that read its result (kept, or broadcast where it reduced with
  // keepdim) as their input `result_input`, run as a second generated kernel
  // on each block of rows while the block's results are in cache. Its
  // inputs are the step's from `epilogue_inputs` on; kernel -1: none.
  int32_t epilogue_kernel = -1;
  size_t epilogue_inputs = 0;
  size_t result_input = 0;
  // Ops on the reduction's result alone before the epilogue reads it
  // (RMSNorm's `rsqrt(mean + eps)`): a third kernel, over the result's sizes,
  // on each block's results; its inputs are the step's from `row_inputs` on,
  // the result their `row_result_input`. Kernel -1: none.
  int32_t row_kernel = -1;
  size_t row_inputs = 0;
  size_t row_result_input = 0;
};

// Whether op is one of the reductions above (its node may still not run so).
bool reduces_rows(ops::OpId op);
// Whether a device kernel can reduce op's rows itself (codegen/cuda_source.h):
// softmax, log_softmax and layer_norm, the library's row kernels it shares.
bool reduces_rows_on_device(ops::OpId op);

// Whether node n (input 0 made by a pointwise group) can run as the row
// reduction of that group's kernel; empty, with why, when it cannot.
std::optional<RowReduction> row_reduction_of(const Graph& graph, const Node& n, std::string& why);

// Whether the reduction at node n keeps its input's rank (softmax,
// log_softmax, layer_norm, or a reduction with keepdim): its result can be
// broadcast back over its input's sizes, by an epilogue.
bool keeps_rank(const Graph& graph, const Node& n);

// Runs out = reduction(kernel's result): fn makes the result, of `sizes` and
// `dtype`, from inputs[0, kernel_inputs); the reduction's other inputs follow.
// With an epilogue (`epilogue` its function, `row` the ops on the result
// before it), out is the epilogue's result, of `sizes` and contiguous; the
// inputs standing for the reduction's result and the row ops' result are
// not read. draws: the seeds and offsets of the step's random nodes, for
// each of its kernels (emit_cpp's `draws`). `stored`, when defined (of
// `sizes`, contiguous), gets the kernel's result too: each block of rows (a
// column reduction's tile) is written there instead of into a buffer, and
// reduced while in cache (a reduction without an epilogue, over rows or
// columns, whose input is read after it).
void run_row_reduction(PointwiseFn fn, const RowReduction& reduction, const Shape& sizes,
                       DType dtype, const Tensor& out, std::span<const Tensor> inputs,
                       PointwiseFn epilogue = nullptr, PointwiseFn row = nullptr,
                       const uint64_t* draws = nullptr, const Tensor& stored = Tensor());

}  // namespace kiln::compiler::codegen
