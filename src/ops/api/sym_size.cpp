// Sizes that stay symbolic (SymSize, docs/compile.md "Sizes that stay
// symbolic"): Tensor::sym_size, and the factories and views that take them.
// A shape whose entries are all numbers goes to the plain function; one that
// names dims of tensors becomes a sized op (full_sized, view_sized,
// expand_sized), whose rule reads those sizes from its inputs, so that a
// traced program keeps them symbolic.
#include <optional>

#include "core/shape_util.h"
#include "kiln/ops/factory.h"
#include "kiln/ops/shape.h"
#include "ops/dispatch.h"
#include "ops/shape_rules/sized.h"

namespace kiln {

using ops::OpId;

namespace {

struct SizedShape {
  Shape spec;          // the ints attribute of shape_rules/sized.h
  TensorList sources;  // the inputs it names, from input `first` on
};

// The sized op's attribute and inputs for `sizes`, or nullopt when every
// entry is a number.
std::optional<SizedShape> sized_shape(const SymSizes& sizes, int64_t first) {
  SizedShape out;
  bool named = false;
  for (const SymSize& s : sizes) {
    if (!s.of()) {
      out.spec.push_back(s.value());
      continue;
    }
    named = true;
    if (s.dim() >= ops::kMaxSizedDim) {
      throw ValueError(detail::str_cat("sym_size: dim ", s.dim(), ": only dims below ",
                                       ops::kMaxSizedDim, " can be sizes of a shape"));
    }
    int64_t input = -1;
    for (size_t k = 0; k < out.sources.size(); ++k)
      if (out.sources[k].impl_ptr() == s.of()) input = static_cast<int64_t>(k);
    if (input < 0) {
      input = static_cast<int64_t>(out.sources.size());
      out.sources.emplace_back(s.of());
    }
    out.spec.push_back(ops::size_ref(first + input, s.dim()));
  }
  if (!named) return std::nullopt;
  return out;
}

Shape numbers(const SymSizes& sizes) {
  Shape out;
  out.reserve(sizes.size());
  for (const SymSize& s : sizes) out.push_back(s.value());
  return out;
}

Tensor full_sized(const SymSizes& sizes, Scalar value, DType dtype, Device device) {
  std::optional<SizedShape> sized = sized_shape(sizes, 0);
  if (!sized) return full(numbers(sizes), value, {dtype, device});
  return ops::dispatch(OpId::full_sized, sized->sources, {sized->spec, value, dtype, device})[0];
}

// A view op whose input 0 is x and whose shape names the other inputs.
Tensor sized_view(OpId op, const Tensor& x, const SizedShape& sized) {
  TensorList inputs{x};
  inputs.insert(inputs.end(), sized.sources.begin(), sized.sources.end());
  return ops::dispatch(op, inputs, {sized.spec})[0];
}

}  // namespace

int64_t SymSize::value(const std::source_location& where) const {
  return of_ ? Tensor(of_).size(dim_, where) : value_;
}

SymSize Tensor::sym_size(int64_t dim) const {
  const TensorImpl& i = impl();
  const int64_t d = wrap_dim(dim, static_cast<int64_t>(i.sizes.size()), "sym_size");
  return SymSize(impl_, d, i.sizes[static_cast<size_t>(d)]);
}

Tensor empty(const SymSizes& sizes, TensorOptions o) {
  if (!sized_shape(sizes, 0)) return empty(numbers(sizes), o);
  return full_sized(sizes, 0, o.dtype.value_or(kFloat32), o.device);
}
Tensor zeros(const SymSizes& sizes, TensorOptions o) {
  return full_sized(sizes, 0, o.dtype.value_or(kFloat32), o.device);
}
Tensor ones(const SymSizes& sizes, TensorOptions o) {
  return full_sized(sizes, 1, o.dtype.value_or(kFloat32), o.device);
}
Tensor full(const SymSizes& sizes, Scalar value, TensorOptions o) {
  return full_sized(sizes, value, o.dtype.value_or(value.default_dtype()), o.device);
}
Tensor empty(std::initializer_list<SymSize> sizes, TensorOptions o) {
  return empty(SymSizes(sizes), o);
}
Tensor zeros(std::initializer_list<SymSize> sizes, TensorOptions o) {
  return zeros(SymSizes(sizes), o);
}
Tensor ones(std::initializer_list<SymSize> sizes, TensorOptions o) {
  return ones(SymSizes(sizes), o);
}
Tensor full(std::initializer_list<SymSize> sizes, Scalar value, TensorOptions o) {
  return full(SymSizes(sizes), value, o);
}

Tensor view(const Tensor& x, const SymSizes& shape) {
  std::optional<SizedShape> sized = sized_shape(shape, 1);
  return sized ? sized_view(OpId::view_sized, x, *sized) : view(x, numbers(shape));
}

Tensor reshape(const Tensor& x, const SymSizes& shape) {
  std::optional<SizedShape> sized = sized_shape(shape, 1);
  if (!sized) return reshape(x, numbers(shape));
  // As reshape: a contiguous tensor always has the view (its rule checks the
  // sizes); another is viewed when its strides allow, else copied first.
  if (x.is_contiguous()) return sized_view(OpId::view_sized, x, *sized);
  try {
    return sized_view(OpId::view_sized, x, *sized);
  } catch (const ShapeError&) {
    return sized_view(OpId::view_sized, x.contiguous(), *sized);
  }
}

Tensor expand(const Tensor& x, const SymSizes& shape) {
  std::optional<SizedShape> sized = sized_shape(shape, 1);
  return sized ? sized_view(OpId::expand_sized, x, *sized) : expand(x, numbers(shape));
}

Tensor Tensor::view(const SymSizes& shape) const { return kiln::view(*this, shape); }
Tensor Tensor::view(std::initializer_list<SymSize> shape) const {
  return kiln::view(*this, SymSizes(shape));
}
Tensor Tensor::reshape(const SymSizes& shape) const { return kiln::reshape(*this, shape); }
Tensor Tensor::reshape(std::initializer_list<SymSize> shape) const {
  return kiln::reshape(*this, SymSizes(shape));
}
Tensor Tensor::expand(const SymSizes& shape) const { return kiln::expand(*this, shape); }
Tensor Tensor::expand(std::initializer_list<SymSize> shape) const {
  return kiln::expand(*this, SymSizes(shape));
}

Tensor Tensor::expand_as(const Tensor& other) const {
  SymSizes sizes;
  for (int64_t d = 0; d < other.dim(); ++d) sizes.push_back(other.sym_size(d));
  return kiln::expand(*this, sizes);
}

}  // namespace kiln
