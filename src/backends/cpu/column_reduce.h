// Reductions over the middle of [outer, reduced, inner] values that a fused
// group makes a tile at a time and never writes whole (a bias gradient's
// sum over the rows, a mean over a sequence's tokens): the library's column
// reduction over the tiles, bitwise its result over memory
// (reduce_engine.h, reduce_columns_produced; docs/architecture.md,
// "Schedules and fused steps").
#pragma once

#include <cstdint>
#include <functional>

#include "kiln/dtype.h"
#include "ops/op_table.h"

namespace kiln::backend::cpu {

// Writes rows [r0, r1) of outer o's columns [i0, i0 + ncols) into tile, rows
// `stride` elements apart.
using ColumnTiles = std::function<void(int64_t o, int64_t r0, int64_t r1, int64_t i0, int64_t ncols,
                                       void* tile, int64_t stride)>;

// Whether op reduces so: sum, mean, amax and amin of float32 and float64.
bool reduces_produced_columns(ops::OpId op, DType dtype);

// out[o * inner + i] = op over r of the values `produce` makes at (o, r, i),
// as op's library kernel computes it over a contiguous [outer, reduced,
// inner] input (inner > 1). With `into` (such an input's memory), produce
// writes each tile in its place there: the values are stored too.
void reduce_produced_columns(ops::OpId op, DType dtype, int64_t outer, int64_t reduced,
                             int64_t inner, void* out, const ColumnTiles& produce,
                             void* into = nullptr);

}  // namespace kiln::backend::cpu
