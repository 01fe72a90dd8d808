#include "autograd/rules/common.h"

#include <algorithm>
#include <cassert>

namespace kiln::autograd {

Tensor sum_to(const Tensor& g, const Shape& shape) {
  if (g.sizes() == shape) return g;
  const int64_t lead = g.dim() - static_cast<int64_t>(shape.size());
  assert(lead >= 0 && "a gradient has fewer dims than its input");
  Shape dims;
  for (int64_t d = 0; d < g.dim(); ++d) {
    if (d < lead || (shape[d - lead] == 1 && g.size(d) != 1)) dims.push_back(d);
  }
  Tensor r = dims.empty() ? g : sum(g, dims, /*keepdim=*/true);
  if (lead > 0 || r.sizes() != shape) r = r.reshape(shape);
  return r;
}

Tensor conform_grad(const Tensor& g, const Shape& sizes, DType dtype) {
  Tensor r = sum_to(g, sizes);
  if (r.dtype() != dtype) r = r.to(dtype);
  return r;
}

Tensor check_hook_result(const Tensor& replaced, const Tensor& original, std::string_view where) {
  if (replaced.sizes() != original.sizes()) {
    throw ShapeError(detail::str_cat("hook: a tensor hook returned a gradient of shape ",
                                     replaced.sizes(), " for a gradient of shape ",
                                     original.sizes(), " (at ", where, ")"));
  }
  return replaced;
}

Tensor unsqueeze_reduced(const Tensor& g, const Shape& dims, int64_t input_dim, bool keepdim) {
  if (keepdim) return g;
  Shape all = dims;
  if (all.empty())
    for (int64_t d = 0; d < input_dim; ++d) all.push_back(d);
  std::sort(all.begin(), all.end());
  Tensor r = g;
  for (int64_t d : all) r = r.unsqueeze(d);
  return r;
}

Tensor embed_along(const Tensor& g, const Shape& sizes, int64_t dim, int64_t start) {
  const int64_t after = sizes[dim] - start - g.size(dim);
  if (start == 0 && after == 0) return g;
  TensorList parts;
  Shape s = g.sizes();
  const TensorOptions options{.dtype = g.dtype(), .device = g.device()};
  if (start > 0) {
    s[dim] = start;
    parts.push_back(zeros(s, options));
  }
  parts.push_back(g);
  if (after > 0) {
    s[dim] = after;
    parts.push_back(zeros(s, options));
  }
  return cat(parts, dim);
}

Tensor pad_to(const Tensor& g, const Shape& sizes) {
  Tensor r = g;
  for (int64_t d = 0; d < r.dim(); ++d) {
    if (r.size(d) == sizes[d]) continue;
    Shape s = r.sizes();
    s[d] = sizes[d];
    r = embed_along(r, s, d, 0);
  }
  return r;
}

}  // namespace kiln::autograd
