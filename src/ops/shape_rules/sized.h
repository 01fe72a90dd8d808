// Shapes whose entries may be sizes of an op's inputs (the ops full_sized,
// view_sized and expand_sized, which take SymSize shapes: docs/compile.md,
// "Sizes that stay symbolic"). The shape is an ints attribute: an entry
// >= 0 is a size, -1 keeps (expand) or infers (view) one, and an entry
// size_ref(i, d) <= -2 is the size of dim d of input i. So the rule reads
// the size from the input: in a compiled program it stays the input's
// symbolic size instead of the number it had when traced.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "kiln/error.h"
#include "kiln/tensor.h"

namespace kiln::ops {

inline constexpr int64_t kMaxSizedDim = 64;

constexpr int64_t size_ref(int64_t input, int64_t dim) { return -2 - (input * kMaxSizedDim + dim); }

struct SizeRef {
  int64_t input = 0;
  int64_t dim = 0;
};

inline std::optional<SizeRef> as_size_ref(int64_t entry) {
  if (entry > -2) return std::nullopt;
  const int64_t code = -2 - entry;
  return SizeRef{code / kMaxSizedDim, code % kMaxSizedDim};
}

// Entry i of a sized shape as a size of Ctx's type: a constant, or the size
// an input has (nullopt for -1). ShapeError naming the op for anything else.
template <class Ctx>
std::optional<typename Ctx::Int> sized_entry(const Ctx& ctx, int64_t entry) {
  if (entry >= 0) return typename Ctx::Int(entry);
  if (entry == -1) return std::nullopt;
  const SizeRef r = *as_size_ref(entry);
  if (r.input >= static_cast<int64_t>(ctx.inputs.size()) || !ctx.inputs[r.input].defined() ||
      r.dim >= ctx.input(r.input).dim()) {
    throw ShapeError(detail::str_cat(ctx.name(), ": a size of dim ", r.dim, " of input ", r.input,
                                     ", which it does not have"));
  }
  return ctx.input(r.input).sizes()[r.dim];
}

}  // namespace kiln::ops
