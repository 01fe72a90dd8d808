// Small shape helpers shared by shape rules and kernels.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string_view>

#include "kiln/error.h"
#include "kiln/tensor.h"

namespace kiln {

// dim in [-ndim, ndim) -> [0, ndim); IndexError naming op otherwise. A 0-dim
// tensor accepts dims -1 and 0, as in PyTorch.
int64_t wrap_dim(int64_t dim, int64_t ndim, std::string_view op);

// The helpers below are templates over the size type: int64_t for eager
// mode, SymInt for the compiler's symbolic shapes (core/symbolic.h), so that
// shape rules are written once for both.

template <class I>
I shape_numel(const std::vector<I>& sizes) {
  I n = 1;
  for (const I& s : sizes) n *= s;
  return n;
}

// Tensor::is_contiguous of a layout: row-major, size-1 dims' strides aside.
template <class I>
bool contiguous_layout(const std::vector<I>& sizes, const std::vector<I>& strides) {
  I expected = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    if (sizes[i] == 0) return true;
    if (sizes[i] != 1 && strides[i] != expected) return false;
    expected *= sizes[i];
  }
  return true;
}

// The strides of a 4-D [N, C, H, W] tensor laid out channels last: [N, H, W, C]
// in memory (an empty dim counts as 1).
template <class I>
std::vector<I> channels_last_strides(const std::vector<I>& sizes) {
  const auto at_least_1 = [&](size_t d) { return sizes[d] < I(1) ? I(1) : sizes[d]; };
  const I c = at_least_1(1), w = at_least_1(3), h = at_least_1(2);
  return {h * w * c, I(1), w * c, c};
}

// Whether a 4-D layout with elements is channels last (size-1 dims' strides
// aside) and not also row-major: where both hold, the memory order is one.
template <class I>
bool channels_last_layout(const std::vector<I>& sizes, const std::vector<I>& strides) {
  if (sizes.size() != 4 || strides.size() != 4 || shape_numel(sizes) == I(0) ||
      contiguous_layout(sizes, strides))
    return false;
  const std::vector<I> expected = channels_last_strides(sizes);
  for (size_t d = 0; d < 4; ++d)
    if (sizes[d] != I(1) && strides[d] != expected[d]) return false;
  return true;
}

// A size compared with a bound (Tensor::size_is), on numbers of either kind:
// plain, or SymInt, where the comparison is a guard.
template <class I, class B>
bool compare_size(const I& size, SizeCmp cmp, const B& bound) {
  switch (cmp) {
    case SizeCmp::kEq:
      return size == bound;
    case SizeCmp::kNe:
      return size != bound;
    case SizeCmp::kLt:
      return size < bound;
    case SizeCmp::kLe:
      return size <= bound;
    case SizeCmp::kGt:
      return size > bound;
    case SizeCmp::kGe:
      return size >= bound;
  }
  return false;
}

// Row-major strides of sizes (an empty dim counts as 1).
template <class I>
std::vector<I> contiguous_strides(const std::vector<I>& sizes) {
  std::vector<I> strides(sizes.size());
  I s = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    strides[i] = s;
    s *= sizes[i] < 1 ? I(1) : sizes[i];
  }
  return strides;
}

// Broadcast of two shapes; ShapeError naming op when they don't broadcast.
template <class I>
std::vector<I> broadcast_pair(const std::vector<I>& a, const std::vector<I>& b,
                              std::string_view op) {
  const size_t n = std::max(a.size(), b.size());
  std::vector<I> out(n);
  for (size_t i = 0; i < n; ++i) {
    const I sa = i < n - a.size() ? I(1) : a[i - (n - a.size())];
    const I sb = i < n - b.size() ? I(1) : b[i - (n - b.size())];
    // Equal sizes first: on symbols, equal expressions compare without a guard.
    if (sa == sb) {
      out[i] = sa;
      continue;
    }
    if (sa != 1 && sb != 1) {
      throw ShapeError(detail::str_cat(op, ": shapes ", a, " and ", b, " do not broadcast (dim ", i,
                                       ": ", sa, " vs ", sb, ")"));
    }
    out[i] = sa == 1 ? sb : sa;
  }
  return out;
}
// Dims list -> sorted unique wrapped dims; empty means all dims.
std::vector<int64_t> wrap_dims(const std::vector<int64_t>& dims, int64_t ndim,
                               std::string_view op);

}  // namespace kiln
