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
