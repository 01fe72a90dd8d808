#include "core/shape_util.h"

#include <algorithm>

namespace kiln {

int64_t wrap_dim(int64_t dim, int64_t ndim, std::string_view op) {
  const int64_t n = std::max<int64_t>(ndim, 1);
  if (dim < -n || dim >= n) {
    throw IndexError(detail::str_cat(op, ": dim ", dim, " is out of range for a tensor with ",
                                     ndim, " dims (expected [", -n, ", ", n - 1, "])"));
  }
  return dim < 0 ? dim + n : dim;
}

std::vector<int64_t> wrap_dims(const std::vector<int64_t>& dims, int64_t ndim,
                               std::string_view op) {
  std::vector<int64_t> out;
  if (dims.empty()) {
    for (int64_t d = 0; d < ndim; ++d) out.push_back(d);
    return out;
  }
  for (int64_t d : dims) out.push_back(wrap_dim(d, ndim, op));
  std::sort(out.begin(), out.end());
  if (std::adjacent_find(out.begin(), out.end()) != out.end()) {
    throw IndexError(detail::str_cat(op, ": dim ", *std::adjacent_find(out.begin(), out.end()),
                                     " appears more than once in ", dims));
  }
  if (ndim == 0) out.clear();  // dims 0 / -1 of a 0-dim tensor name the tensor itself
  return out;
}

}  // namespace kiln
