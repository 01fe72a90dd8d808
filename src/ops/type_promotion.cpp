#include "ops/type_promotion.h"

#include <optional>

namespace kiln::ops {
namespace {

std::optional<DType> promote_opt(std::optional<DType> a, DType b) {
  return a ? promote_types(*a, b) : b;
}

// higher outranks lower unless lower is of a higher category.
std::optional<DType> combine_categories(std::optional<DType> higher, std::optional<DType> lower) {
  if (!higher) return lower;
  if (!lower) return higher;
  if (is_floating(*higher)) return higher;
  if (*higher == kBool || is_floating(*lower)) return promote_types(*higher, *lower);
  return higher;
}

template <class T>
DType result_type_of(std::span<const T> tensors) {
  std::optional<DType> dim_result, zero_dim_result, wrapped_result;
  for (const auto& t : tensors) {
    if (!t.defined()) continue;
    if (t.is_wrapped_number()) {
      wrapped_result = promote_opt(wrapped_result, is_floating(t.dtype()) ? kFloat32 : t.dtype());
    } else if (t.dim() == 0) {
      zero_dim_result = promote_opt(zero_dim_result, t.dtype());
    } else {
      dim_result = promote_opt(dim_result, t.dtype());
    }
  }
  return combine_categories(dim_result, combine_categories(zero_dim_result, wrapped_result))
      .value_or(kFloat32);
}

}  // namespace

DType result_type(std::span<const Tensor> tensors) { return result_type_of(tensors); }
DType result_type(std::span<const SymTensor> tensors) { return result_type_of(tensors); }

DType result_type(const Tensor& a, const Tensor& b) {
  const Tensor pair[2] = {a, b};
  return result_type(pair);
}

}  // namespace kiln::ops
