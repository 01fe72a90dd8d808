#include "core/checked_size.h"

#include <cmath>

#include "kiln/error.h"
#include "kiln/tensor.h"

namespace kiln {

int64_t size_mul(int64_t a, int64_t b, std::string_view op) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) {
    throw ShapeError(
        detail::str_cat(op, ": the size ", a, " * ", b, " does not fit a 64-bit integer"));
  }
  return r;
}

int64_t size_add(int64_t a, int64_t b, std::string_view op) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) {
    throw ShapeError(
        detail::str_cat(op, ": the size ", a, " + ", b, " does not fit a 64-bit integer"));
  }
  return r;
}

int64_t size_from_double(double v, std::string_view op, std::string_view what) {
  // 2^63 is the first double past int64_t's range; NaN fails both tests.
  if (!(v >= -9223372036854775808.0 && v < 9223372036854775808.0)) {
    throw ShapeError(detail::str_cat(op, ": ", what, " (", v, ") does not fit a 64-bit size"));
  }
  return static_cast<int64_t>(v);
}

int64_t checked_numel(std::span<const int64_t> sizes, std::string_view op) {
  int64_t product = 1;
  bool empty = false;
  for (int64_t s : sizes) {
    if (s < 0) {
      throw ShapeError(detail::str_cat(op, ": sizes must be non-negative, got ",
                                       Shape(sizes.begin(), sizes.end())));
    }
    if (s == 0) {
      empty = true;
    } else if (__builtin_mul_overflow(product, s, &product)) {
      throw ShapeError(detail::str_cat(op, ": sizes ", Shape(sizes.begin(), sizes.end()),
                                       " hold more than 2^63 - 1 elements"));
    }
  }
  return empty ? 0 : product;
}

size_t checked_nbytes(std::span<const int64_t> sizes, DType dtype, std::string_view op) {
  const int64_t numel = checked_numel(sizes, op);
  const auto item = static_cast<int64_t>(dtype_size(dtype));
  if (numel > kMaxTensorBytes / item) {
    throw ShapeError(detail::str_cat(op, ": a ", dtype, " tensor of sizes ",
                                     Shape(sizes.begin(), sizes.end()), " needs more than 2^62 ",
                                     "bytes, the most kiln allocates"));
  }
  return static_cast<size_t>(numel * item);
}

void check_allocation(size_t nbytes, std::string_view who) {
  if (nbytes > static_cast<size_t>(kMaxTensorBytes)) {
    throw ShapeError(detail::str_cat(who, ": an allocation of ", nbytes,
                                     " bytes is past 2^62 bytes, the most kiln allocates"));
  }
}

}  // namespace kiln
