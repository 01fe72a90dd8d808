// Whether a fill value fits the dtype it is written in, for the rules of the
// ops that write one (full, full_like, full_sized, fill_): as PyTorch, a value
// that would overflow the type (1000 into int8, 1e39 into float32) or has no
// integer value (NaN, inf into an integer type) is a ValueError, never a
// silently wrapped or saturated fill. A fractional value into an integer type
// truncates, as PyTorch.
#pragma once

#include <cmath>
#include <limits>
#include <string_view>

#include "kiln/dtype.h"
#include "kiln/error.h"
#include "kiln/scalar.h"

namespace kiln::ops {

inline void check_fill_value_fits(std::string_view op, const Scalar& value, DType dtype) {
  if (dtype == kBool || value.is_bool()) return;
  bool fits = true;
  visit_dtype(dtype, [&]<typename T>() {
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      constexpr auto lo = std::numeric_limits<T>::min();
      constexpr auto hi = std::numeric_limits<T>::max();
      if (value.is_integral()) {  // kiln's integer types all fit in int64
        const int64_t v = value.to_int();
        fits = v >= static_cast<int64_t>(lo) && v <= static_cast<int64_t>(hi);
      } else {
        // Truncated toward zero, in range: [lo, hi + 1) as doubles are exact
        // at the bounds (powers of two, or hi + 1 for the narrow types).
        const double v = std::trunc(value.to_double());
        fits =
            std::isfinite(v) && v >= static_cast<double>(lo) && v < static_cast<double>(hi) + 1.0;
      }
    } else if constexpr (!std::is_same_v<T, bool> && !std::is_same_v<T, double>) {
      // float32 and the 16-bit floats: a finite value must stay finite (NaN
      // and infinities are kept).
      const double v = value.to_double();
      fits = !std::isfinite(v) || std::isfinite(static_cast<float>(T(static_cast<float>(v))));
    }
  });
  if (!fits) {
    throw ValueError(detail::str_cat(op, ": value ", value, " cannot be converted to ",
                                     dtype_name(dtype), " without overflow"));
  }
}

}  // namespace kiln::ops
