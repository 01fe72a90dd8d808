// The public shape and indexing functions that build new tensors (cat, stack,
// gather, ...) and the splitting functions, which return views.
#include <algorithm>

#include "core/shape_util.h"
#include "kiln/ops/shape.h"
#include "ops/dispatch.h"

namespace kiln {

using ops::Attrs;
using ops::dispatch1;
using ops::dispatch_inplace;
using ops::OpId;

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  return ops::dispatch(OpId::cat, tensors, Attrs{dim})[0];
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  return ops::dispatch(OpId::stack, tensors, Attrs{dim})[0];
}

namespace {

// The dim a split works along; ShapeError for a 0-dim tensor, which has none.
int64_t split_dim(std::string_view op, const Tensor& x, int64_t dim) {
  if (x.dim() == 0) {
    throw ShapeError(detail::str_cat(op, ": cannot split a 0-dim tensor"));
  }
  return wrap_dim(dim, x.dim(), op);
}

// Consecutive slices of x along d with the given sizes (which sum to its size).
std::vector<Tensor> slices_of(const Tensor& x, int64_t d, const std::vector<int64_t>& sizes) {
  std::vector<Tensor> out;
  int64_t start = 0;
  for (int64_t s : sizes) {
    out.push_back(slice(x, d, start, start + s));
    start += s;
  }
  return out;
}

}  // namespace

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim,
                          const std::source_location& where) {
  const int64_t d = split_dim("split", x, dim);
  const int64_t n = x.size(d, where);
  if (split_size < 0 || (split_size == 0 && n > 0)) {
    throw ValueError(detail::str_cat("split: split_size must be positive (0 only for an empty ",
                                     "dim), got ", split_size, " for dim ", d, " of size ", n));
  }
  if (n == 0) return {x};
  std::vector<int64_t> sizes;
  for (int64_t start = 0; start < n; start += split_size)
    sizes.push_back(std::min(split_size, n - start));
  return slices_of(x, d, sizes);
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim,
                          const std::source_location& where) {
  const int64_t d = split_dim("split", x, dim);
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0) throw ValueError(detail::str_cat("split: sizes must be non-negative, got ", sizes));
    total += s;
  }
  if (!x.size_is(d, SizeCmp::kEq, total, where)) {
    throw ShapeError(detail::str_cat("split: sizes ", sizes, " sum to ", total, " but dim ", d,
                                     " has size ", x.size(d), " (shape ", x.sizes(), ")"));
  }
  return slices_of(x, d, sizes);
}

// As torch.chunk: pieces of ceil(n / chunks), so there may be fewer than
// chunks of them; an empty dim still gives chunks empty pieces.
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim,
                          const std::source_location& where) {
  if (chunks <= 0)
    throw ValueError(detail::str_cat("chunk: chunks must be positive, got ", chunks));
  const int64_t d = split_dim("chunk", x, dim);
  const int64_t n = x.size(d, where);
  if (n == 0) return slices_of(x, d, std::vector<int64_t>(static_cast<size_t>(chunks), 0));
  return split(x, (n + chunks - 1) / chunks, d, where);
}

std::vector<Tensor> Tensor::chunk(int64_t chunks, int64_t dim) const {
  return kiln::chunk(*this, chunks, dim);
}
std::vector<Tensor> Tensor::unbind(int64_t dim) const { return kiln::unbind(*this, dim); }
Tensor& Tensor::scatter_(int64_t dim, const Tensor& index, const Tensor& src) {
  return kiln::scatter_(*this, dim, index, src);
}

std::vector<Tensor> unbind(const Tensor& x, int64_t dim, const std::source_location& where) {
  const int64_t d = split_dim("unbind", x, dim);
  const int64_t n = x.size(d, where);
  std::vector<Tensor> out;
  out.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out.push_back(select(x, d, i));
  return out;
}

Tensor roll(const Tensor& x, const std::vector<int64_t>& shifts, const std::vector<int64_t>& dims,
            const std::source_location& where) {
  if (dims.empty()) {
    if (shifts.size() != 1)
      throw ValueError(detail::str_cat(
          "roll: without dims, one shift rolls the flattened tensor, got shifts ", shifts));
    return roll(x.flatten(), shifts, {0}, where).reshape(x.sizes());
  }
  if (shifts.size() != dims.size())
    throw ValueError(
        detail::str_cat("roll: shifts ", shifts, " and dims ", dims, " must have the same length"));
  Tensor out = x;
  bool rolled = false;
  for (size_t k = 0; k < dims.size(); ++k) {
    const int64_t d = split_dim("roll", x, dims[k]);
    const int64_t n = x.size(d, where);
    if (n == 0) continue;
    const int64_t s = ((shifts[k] % n) + n) % n;  // the elements that wrap to the front
    if (s == 0) continue;
    out = cat({out.narrow(d, n - s, s, where), out.narrow(d, 0, n - s, where)}, d);
    rolled = true;
  }
  return rolled ? out : x.clone();
}

Tensor repeat_interleave(const Tensor& x, int64_t repeats, std::optional<int64_t> dim) {
  if (repeats < 0)
    throw ValueError(
        detail::str_cat("repeat_interleave: repeats must be non-negative, got ", repeats));
  if (!dim) return repeat_interleave(x.flatten(), repeats, 0);
  const Tensor t = x.dim() == 0 ? x.reshape({1}) : x;
  const int64_t d = wrap_dim(*dim, t.dim(), "repeat_interleave");
  Shape sizes = t.sizes();
  sizes.insert(sizes.begin() + d + 1, repeats);
  return t.unsqueeze(d + 1).expand(sizes).flatten(d, d + 1);
}

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  return dispatch1(OpId::index_select, {x, index}, {dim});
}

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  return dispatch1(OpId::gather, {x, index}, {dim});
}

Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  return dispatch1(OpId::scatter, {x, index, src}, {dim});
}

Tensor& scatter_(Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  return dispatch_inplace(OpId::scatter, x, {x, index, src}, {dim});
}

Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  return dispatch1(OpId::scatter_add, {x, index, src}, {dim});
}

Tensor& scatter_add_(Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  return dispatch_inplace(OpId::scatter_add, x, {x, index, src}, {dim});
}

Tensor repeat(const Tensor& x, const Shape& repeats) {
  return dispatch1(OpId::repeat, {x}, {repeats});
}

Tensor flip(const Tensor& x, const Shape& dims) { return dispatch1(OpId::flip, {x}, {dims}); }

Tensor tril(const Tensor& x, int64_t diagonal) { return dispatch1(OpId::tril, {x}, {diagonal}); }
Tensor triu(const Tensor& x, int64_t diagonal) { return dispatch1(OpId::triu, {x}, {diagonal}); }
Tensor& tril_(Tensor& x, int64_t diagonal) {
  return dispatch_inplace(OpId::tril, x, {x}, {diagonal});
}
Tensor& triu_(Tensor& x, int64_t diagonal) {
  return dispatch_inplace(OpId::triu, x, {x}, {diagonal});
}

// num_classes -1 reads the data here (max + 1), so the op itself always gets a
// concrete class count and its shape rule never needs values.
Tensor one_hot(const Tensor& indices, int64_t num_classes) {
  if (num_classes == -1 && indices.dtype() == kInt64) {
    if (indices.is_meta()) {
      throw ValueError(
          "one_hot: num_classes=-1 needs the values of the indices; a meta tensor "
          "has none, pass num_classes");
    }
    if (indices.numel() == 0) {
      throw ValueError("one_hot: cannot infer num_classes from an empty tensor; pass num_classes");
    }
    const auto values = indices.to_vector<int64_t>();
    num_classes = std::max<int64_t>(*std::max_element(values.begin(), values.end()) + 1, 0);
  }
  return dispatch1(OpId::one_hot, {indices}, {num_classes});
}

}  // namespace kiln
