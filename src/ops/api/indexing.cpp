// Indexing by tensors, composed of gather/scatter-family ops: index_add,
// index_copy, PyTorch's advanced indexing (index, index_put) and the ops whose
// output size depends on the data (nonzero, masked_select), which read that
// size on the host (docs/ops.md, "Sizes that depend on data").
#include <algorithm>
#include <numeric>

#include "core/shape_util.h"
#include "kiln/ops/factory.h"
#include "kiln/ops/pointwise.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape.h"
#include "ops/tracing.h"

namespace kiln {
namespace {

// A 1-D integer index along dim of x, reshaped to broadcast against a
// source of x's rank: [1, ..., n, ..., 1], then expanded to source's shape.
Tensor index_along(const char* op, const Tensor& x, int64_t dim, const Tensor& index,
                   const Tensor& source) {
  KILN_CHECK(index.dim() <= 1 && (index.dtype() == kInt64 || index.dtype() == kInt32), IndexError,
             op, ": index must be a 1-D int64 or int32 tensor, got ", index.dtype(), " of shape ",
             index.sizes());
  const int64_t d = wrap_dim(dim, x.dim(), op);
  const Shape expected = [&] {
    Shape s = x.sizes();
    if (!s.empty()) s[d] = index.numel();
    return s;
  }();
  KILN_CHECK(source.sizes() == expected, ShapeError, op, ": source must have shape ", expected,
             " (x ", x.sizes(), " with dim ", d, " of the index's length), got ", source.sizes());
  if (x.dim() == 0) return index.reshape({}).to(kInt64);
  Shape shape(x.dim(), 1);
  shape[d] = index.numel();
  return index.to(kInt64).reshape(shape).expand(source.sizes());
}

// Negative indices count from the end of a dim of `size`.
Tensor wrapped(const Tensor& index, int64_t size) { return where(index < 0, index + size, index); }

// The int64 tensors that stand for a bool mask over dims first.. of x.
std::vector<Tensor> mask_as_indices(const char* op, const Tensor& x, const Tensor& mask,
                                    int64_t first, std::source_location at) {
  KILN_CHECK(first + mask.dim() <= x.dim(), IndexError, op, ": a mask of shape ", mask.sizes(),
             " at dim ", first, " does not fit a tensor of shape ", x.sizes());
  for (int64_t d = 0; d < mask.dim(); ++d) {
    KILN_CHECK(mask.size(d) == x.size(first + d), IndexError, op, ": the mask's shape ",
               mask.sizes(), " does not match the indexed dims of ", x.sizes(), " from dim ",
               first);
  }
  return nonzero(mask, at).unbind(1);
}

// The plan of an advanced index: each indexed dim of x and its index,
// broadcast, and where the index's dims go in the result.
struct AdvancedIndex {
  std::vector<int64_t> dims;    // the indexed dims of x, ascending
  std::vector<Tensor> indices;  // int64, broadcast to one shape, negatives wrapped
  Shape index_shape;
  Shape order;           // x's dims, indexed ones first
  bool adjacent = true;  // the indexed dims are adjacent: the result keeps their place
};

AdvancedIndex plan_index(const char* op, const Tensor& x, const std::vector<Tensor>& given,
                         std::source_location at) {
  KILN_CHECK(static_cast<int64_t>(given.size()) <= x.dim(), IndexError, op, ": ", given.size(),
             " indices for a tensor of shape ", x.sizes());
  AdvancedIndex a;
  std::vector<Tensor> indices;
  int64_t d = 0;
  for (const Tensor& t : given) {
    if (!t.defined()) {
      ++d;
      continue;
    }
    if (t.dtype() == kBool || t.dtype() == kUInt8) {
      for (Tensor& i : mask_as_indices(op, x, t.to(kBool), d, at)) {
        a.dims.push_back(d++);
        indices.push_back(i);
      }
      continue;
    }
    KILN_CHECK(t.dtype() == kInt64 || t.dtype() == kInt32, IndexError, op,
               ": indices must be int64, int32 or bool tensors, got ", t.dtype());
    a.dims.push_back(d);
    indices.push_back(wrapped(t.to(kInt64), x.size(d)));
    ++d;
  }
  KILN_CHECK(!a.dims.empty(), IndexError, op, ": no index tensor given");
  for (size_t i = 1; i < a.dims.size(); ++i) a.adjacent &= a.dims[i] == a.dims[i - 1] + 1;
  a.indices = broadcast_tensors(indices);
  a.index_shape = a.indices[0].sizes();
  a.order = Shape(a.dims.begin(), a.dims.end());
  for (int64_t k = 0; k < x.dim(); ++k)
    if (std::find(a.dims.begin(), a.dims.end(), k) == a.dims.end()) a.order.push_back(k);
  return a;
}

// x with its indexed dims first and flattened into one: [P, rest...], and
// the flat position of each indexed element in that first dim.
struct Flattened {
  Tensor x;
  Tensor positions;  // [numel of the index shape]
  Shape permuted;    // x's sizes in plan order
};

Flattened flatten_indexed(const Tensor& x, const AdvancedIndex& a) {
  Flattened f;
  const Tensor moved = x.permute(a.order);
  f.permuted = moved.sizes();
  Shape flat = {1};
  Tensor position = zeros(a.index_shape, {.dtype = kInt64, .device = x.device()});
  for (size_t i = 0; i < a.dims.size(); ++i) {
    const int64_t size = x.size(a.dims[i]);
    flat[0] *= size;
    position = position * size + a.indices[i];
  }
  flat.insert(flat.end(), f.permuted.begin() + static_cast<int64_t>(a.dims.size()),
              f.permuted.end());
  f.x = moved.reshape(flat);
  f.positions = position.flatten();
  return f;
}

// The result shape's dims: the index shape where the indexed dims were
// (adjacent) or first, and x's other dims.
Shape result_sizes(const Tensor& x, const AdvancedIndex& a) {
  Shape rest;
  for (int64_t k = 0; k < x.dim(); ++k)
    if (std::find(a.dims.begin(), a.dims.end(), k) == a.dims.end()) rest.push_back(x.size(k));
  Shape out;
  const int64_t at = a.adjacent ? a.dims[0] : 0;
  out.insert(out.end(), rest.begin(), rest.begin() + at);
  out.insert(out.end(), a.index_shape.begin(), a.index_shape.end());
  out.insert(out.end(), rest.begin() + at, rest.end());
  return out;
}

// Moves the index shape's dims of a [index..., rest...] tensor to where the
// result has them (and back, with `inverse`).
Tensor place_index_dims(const Tensor& t, const AdvancedIndex& a, bool inverse) {
  const int64_t at = a.adjacent ? a.dims[0] : 0;
  const int64_t b = static_cast<int64_t>(a.index_shape.size());
  if (at == 0) return t;
  Shape order;
  if (!inverse) {
    for (int64_t k = 0; k < at; ++k) order.push_back(b + k);
    for (int64_t k = 0; k < b; ++k) order.push_back(k);
  } else {
    for (int64_t k = 0; k < b; ++k) order.push_back(at + k);
    for (int64_t k = 0; k < at; ++k) order.push_back(k);
  }
  for (int64_t k = b + at; k < t.dim(); ++k) order.push_back(k);
  return t.permute(order);
}

}  // namespace

Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source,
                 Scalar alpha) {
  const Tensor i = index_along("index_add", x, dim, index, source);
  return scatter_add(x, x.dim() == 0 ? 0 : wrap_dim(dim, x.dim(), "index_add"), i, source * alpha);
}

Tensor& index_add_(Tensor& x, int64_t dim, const Tensor& index, const Tensor& source,
                   Scalar alpha) {
  const Tensor i = index_along("index_add_", x, dim, index, source);
  return scatter_add_(x, x.dim() == 0 ? 0 : wrap_dim(dim, x.dim(), "index_add_"), i,
                      source * alpha);
}

Tensor index_copy(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source) {
  const Tensor i = index_along("index_copy", x, dim, index, source);
  return scatter(x, x.dim() == 0 ? 0 : wrap_dim(dim, x.dim(), "index_copy"), i, source);
}

Tensor& index_copy_(Tensor& x, int64_t dim, const Tensor& index, const Tensor& source) {
  const Tensor i = index_along("index_copy_", x, dim, index, source);
  return scatter_(x, x.dim() == 0 ? 0 : wrap_dim(dim, x.dim(), "index_copy_"), i, source);
}

Tensor nonzero(const Tensor& x, std::source_location at) {
  const Tensor flat = x.reshape({-1}) != 0;
  const int64_t count = ops::read_data_dependent_size(sum(flat), "nonzero()", at);
  const TensorOptions on{.dtype = kInt64, .device = x.device()};
  // Element i of the nonzeros goes to slot cumsum - 1; the zeros to a spare
  // last slot, dropped after.
  const Tensor slot = where(flat, cumsum(flat, 0) - 1, full({}, count, on));
  Tensor linear =
      scatter(zeros({count + 1}, on), 0, slot, arange(x.numel(), on)).narrow(0, 0, count);
  std::vector<Tensor> coords(static_cast<size_t>(x.dim()));
  for (int64_t d = x.dim() - 1; d >= 0; --d) {
    const Tensor coord = remainder(linear, x.size(d));
    coords[static_cast<size_t>(d)] = coord;
    // An exact quotient: float64 holds every index below 2^53.
    linear = ((linear - coord).to(kFloat64) / static_cast<double>(x.size(d))).to(kInt64);
  }
  if (coords.empty()) return zeros({count, 0}, on);
  return stack(coords, 1);
}

Tensor repeat_interleave(const Tensor& x, const Tensor& repeats, std::optional<int64_t> dim,
                         std::source_location at) {
  if (!dim) return repeat_interleave(x.flatten(), repeats, 0, at);
  const Tensor t = x.dim() == 0 ? x.reshape({1}) : x;
  const int64_t d = wrap_dim(*dim, t.dim(), "repeat_interleave");
  const int64_t n = t.size(d);
  KILN_CHECK(is_integral(repeats.dtype()) && repeats.dim() <= 1 &&
                 (repeats.numel() == n || repeats.numel() == 1),
             ValueError, "repeat_interleave: repeats must be an integer tensor of ", n,
             " (or 1) elements, got ", repeats.dtype(), " of shape ", repeats.sizes());
  const Tensor r = repeats.to(kInt64).reshape({-1}).expand({n});
  // The total, or -1 when a count is negative: one read on the host.
  const int64_t total = ops::read_data_dependent_size(
      where(any(r < 0), full({}, -1, {.dtype = kInt64, .device = r.device()}), sum(r)),
      "repeat_interleave()", at);
  KILN_CHECK(total >= 0, ValueError, "repeat_interleave: repeats must be non-negative");
  // Output slice p comes from the first slice whose running count exceeds p.
  const Tensor ends = cumsum(r, 0);
  const Tensor positions = arange(total, {.dtype = kInt64, .device = r.device()});
  return index_select(t, d, sum(positions.unsqueeze(1) >= ends.unsqueeze(0), {1}));
}

Tensor masked_select(const Tensor& x, const Tensor& mask, std::source_location at) {
  KILN_CHECK(mask.dtype() == kBool, DTypeError, "masked_select: mask must be bool, got ",
             mask.dtype());
  const std::vector<Tensor> both = broadcast_tensors({x, mask});
  const Tensor positions = nonzero(both[1].reshape({-1}), at).reshape({-1});
  return index_select(both[0].reshape({-1}), 0, positions);
}

Tensor index(const Tensor& x, const std::vector<Tensor>& indices, std::source_location at) {
  const AdvancedIndex a = plan_index("index", x, indices, at);
  const Flattened f = flatten_indexed(x, a);
  Shape gathered = a.index_shape;
  gathered.insert(gathered.end(), f.x.sizes().begin() + 1, f.x.sizes().end());
  return place_index_dims(index_select(f.x, 0, f.positions).reshape(gathered), a, false);
}

Tensor index_put(const Tensor& x, const std::vector<Tensor>& indices, const Tensor& values,
                 bool accumulate, std::source_location at) {
  const AdvancedIndex a = plan_index("index_put", x, indices, at);
  const Flattened f = flatten_indexed(x, a);
  // values broadcast to the result of x[indices], then laid out as [index..., rest...].
  const Tensor v = place_index_dims(values.to(x.dtype()).expand(result_sizes(x, a)), a, true);
  Shape rows = {f.positions.numel()};
  rows.insert(rows.end(), f.x.sizes().begin() + 1, f.x.sizes().end());
  const Tensor source = v.reshape(rows);
  const Tensor put =
      accumulate ? index_add(f.x, 0, f.positions, source) : index_copy(f.x, 0, f.positions, source);
  Shape inverse(a.order.size());
  for (size_t k = 0; k < a.order.size(); ++k) inverse[static_cast<size_t>(a.order[k])] = k;
  return put.reshape(f.permuted).permute(inverse);
}

Tensor& index_put_(Tensor& x, const std::vector<Tensor>& indices, const Tensor& values,
                   bool accumulate, std::source_location at) {
  return x.copy_(index_put(x, indices, values, accumulate, at));
}

}  // namespace kiln
