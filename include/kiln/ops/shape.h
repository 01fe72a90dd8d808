// Shape, view and indexing ops. Views share storage with their input.
//
//   auto v = x.view({2, -1});              // a view; ShapeError if strides forbid it
//   auto r = kiln::reshape(x.t(), {-1});   // a view when possible, else a copy
//   auto parts = kiln::chunk(x, 2, 0);     // a std::vector of views
//   auto c = kiln::cat(parts, 0);          // a new tensor
#pragma once

#include <optional>
#include <vector>

#include "kiln/tensor.h"

namespace kiln {

Tensor view(const Tensor& x, const Shape& shape);
// What a compiled program reads of x's layout (its contiguity, and its sizes
// when it is not contiguous) is noted at `where`, the caller's line.
Tensor reshape(const Tensor& x, const Shape& shape,
               const std::source_location& where = std::source_location::current());
Tensor permute(const Tensor& x, const Shape& dims);
Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1);
Tensor squeeze(const Tensor& x);
Tensor squeeze(const Tensor& x, const Shape& dims);
Tensor unsqueeze(const Tensor& x, int64_t dim);
Tensor expand(const Tensor& x, const Shape& shape);  // -1 keeps a dim
// With sizes of tensors' dims (Tensor::sym_size) among the entries: in a
// compiled program they stay those dims' sizes (docs/compile.md).
Tensor view(const Tensor& x, const SymSizes& shape);
Tensor reshape(const Tensor& x, const SymSizes& shape);
Tensor expand(const Tensor& x, const SymSizes& shape);
// Dims start_dim..end_dim merged into one: a view when their strides allow
// it, else a copy (as reshape). A compiled program keeps the other sizes
// symbolic: flatten reads none of them.
Tensor flatten(const Tensor& x, int64_t start_dim = 0, int64_t end_dim = -1,
               const std::source_location& where = std::source_location::current());
// Dim dim split into sizes (one may be -1), as torch.unflatten; always a view.
Tensor unflatten(const Tensor& x, int64_t dim, const Shape& sizes);
Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length,
              const std::source_location& where = std::source_location::current());
Tensor select(const Tensor& x, int64_t dim, int64_t index);
Tensor slice(const Tensor& x, int64_t dim, std::optional<int64_t> start,
             std::optional<int64_t> stop, int64_t step = 1);
// The shape all inputs broadcast to; ShapeError naming op when they don't.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op = "broadcast_shapes");
std::vector<Tensor> broadcast_tensors(const std::vector<Tensor>& tensors);

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
// Pieces of split_size along dim (the last may be smaller); views.
// The size of dim is read (the pieces' sizes follow it), noted at `where`.
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0,
                          const std::source_location& where = std::source_location::current());
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim = 0,
                          const std::source_location& where = std::source_location::current());
// chunks pieces of equal size (the last may be smaller), as torch.chunk; views.
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0,
                          const std::source_location& where = std::source_location::current());
// x's slices along dim, each without that dim, as torch.unbind; views.
std::vector<Tensor> unbind(const Tensor& x, int64_t dim = 0,
                           const std::source_location& where = std::source_location::current());
// x's elements shifted by shifts[i] along dims[i] (wrapping around), as
// torch.roll (a new tensor); with dims empty, over the flattened x (one
// shift), in x's shape.
Tensor roll(const Tensor& x, const std::vector<int64_t>& shifts,
            const std::vector<int64_t>& dims = {},
            const std::source_location& where = std::source_location::current());
// Each element of x repeated `repeats` times along dim, in place
// ([a, b] -> [a, a, b, b]); over the flattened x when dim is absent.
Tensor repeat_interleave(const Tensor& x, int64_t repeats, std::optional<int64_t> dim = {});
// Slice i along dim repeated repeats[i] times (an int tensor of the dim's
// size, or of one element for all); the output size is read from repeats on
// the host (docs/ops.md, "Sizes that depend on data").
Tensor repeat_interleave(const Tensor& x, const Tensor& repeats, std::optional<int64_t> dim = {},
                         std::source_location where = std::source_location::current());
// The slices of x along dim named by a 1-D int64/int32 index (negative values are errors).
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
// out[i][j] = x[index[i][j]][j] for dim 0, and so on; index is int64 with x's rank.
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
// A copy of x with src's values written at index along dim. When index names
// one element twice, the later one in row-major order of index wins.
Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
Tensor& scatter_(Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
// A copy of x with src's values added at index along dim (duplicates all add up):
// out[index[i][j]][j] += src[i][j] for dim 0. Floating and integer dtypes.
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
Tensor& scatter_add_(Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
// x with source's slices added (copied) at the 1-D index along dim:
// out.select(dim, index[i]) += alpha * source.select(dim, i). source has x's
// shape but index.numel() along dim. index_copy keeps the last of repeated indices.
Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source,
                 Scalar alpha = 1);
Tensor& index_add_(Tensor& x, int64_t dim, const Tensor& index, const Tensor& source,
                   Scalar alpha = 1);
Tensor index_copy(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source);
Tensor& index_copy_(Tensor& x, int64_t dim, const Tensor& index, const Tensor& source);

// PyTorch's advanced indexing, x[i0, i1, ...]: indices[d] indexes dim d (an
// undefined Tensor takes the whole dim, as ':'); int64/int32 indices broadcast
// together (negative ones count from the end), a bool mask stands for the
// dims it covers. The index shape replaces the indexed dims, in their place
// when they are adjacent, else first. index_put writes values (broadcast to
// x[indices]) there, or adds them with accumulate; of repeated indices the
// last write wins.
Tensor index(const Tensor& x, const std::vector<Tensor>& indices,
             std::source_location where = std::source_location::current());
Tensor index_put(const Tensor& x, const std::vector<Tensor>& indices, const Tensor& values,
                 bool accumulate = false,
                 std::source_location where = std::source_location::current());
Tensor& index_put_(Tensor& x, const std::vector<Tensor>& indices, const Tensor& values,
                   bool accumulate = false,
                   std::source_location where = std::source_location::current());

// Ops whose output size depends on x's values, read on the host (in a
// compiled function, a graph break at `where` that names the op):
// nonzero's [count, x.dim()] int64 coordinates of the nonzero elements, in
// row-major order; masked_select's 1-D elements of x where the bool mask
// (broadcast with x) is true. A bool mask in index()/index_put() is nonzero's.
Tensor nonzero(const Tensor& x, std::source_location where = std::source_location::current());
Tensor masked_select(const Tensor& x, const Tensor& mask,
                     std::source_location where = std::source_location::current());

// x tiled repeats[i] times along each dim; extra leading repeats add new dims.
Tensor repeat(const Tensor& x, const Shape& repeats);
Tensor flip(const Tensor& x, const Shape& dims);
// The lower (upper) triangle of the last two dims, the rest zero; diagonal > 0
// moves the boundary above (right of) the main diagonal.
Tensor tril(const Tensor& x, int64_t diagonal = 0);
Tensor triu(const Tensor& x, int64_t diagonal = 0);
Tensor& tril_(Tensor& x, int64_t diagonal = 0);
Tensor& triu_(Tensor& x, int64_t diagonal = 0);
// int64 class indices -> int64 one-hot rows; num_classes -1 means max + 1.
Tensor one_hot(const Tensor& indices, int64_t num_classes = -1);

}  // namespace kiln
