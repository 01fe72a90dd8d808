// A number that is an operand or attribute of an op: a bool, an integer or a
// floating value, kept at full precision until an op gives it a dtype.
//
//   kiln::Tensor y = x * 0.5;           // 0.5 becomes a Scalar, then a wrapped number
//   kiln::Scalar s = 3; s.to<float>();  // 3.0f
#pragma once

#include <cstdint>
#include <ostream>
#include <type_traits>

#include "kiln/dtype.h"

namespace kiln {

class Scalar {
 public:
  enum class Kind : uint8_t { Bool, Int, Float };

  Scalar() : kind_(Kind::Int), i_(0) {}
  Scalar(bool v) : kind_(Kind::Bool), i_(v) {}  // NOLINT: implicit numbers are the point
  template <typename T>
    requires(std::is_integral_v<T> && !std::is_same_v<T, bool>)
  Scalar(T v) : kind_(Kind::Int), i_(static_cast<int64_t>(v)) {}  // NOLINT
  template <typename T>
    requires std::is_floating_point_v<T>
  Scalar(T v) : kind_(Kind::Float), d_(static_cast<double>(v)) {}  // NOLINT
  Scalar(Half v) : kind_(Kind::Float), d_(static_cast<float>(v)) {}      // NOLINT
  Scalar(BFloat16 v) : kind_(Kind::Float), d_(static_cast<float>(v)) {}  // NOLINT

  Kind kind() const noexcept { return kind_; }
  bool is_bool() const noexcept { return kind_ == Kind::Bool; }
  bool is_integral() const noexcept { return kind_ == Kind::Int; }
  bool is_floating() const noexcept { return kind_ == Kind::Float; }

  double to_double() const noexcept { return kind_ == Kind::Float ? d_ : static_cast<double>(i_); }
  int64_t to_int() const noexcept { return kind_ == Kind::Float ? static_cast<int64_t>(d_) : i_; }
  template <typename T>
  T to() const noexcept {
    if constexpr (std::is_same_v<T, bool>) {
      return kind_ == Kind::Float ? d_ != 0.0 : i_ != 0;
    } else if constexpr (std::is_integral_v<T>) {
      return static_cast<T>(to_int());
    } else {
      return static_cast<T>(static_cast<float>(to_double()));
    }
  }

  // The dtype a wrapped number of this kind gets: bool, int64 or float32 (PyTorch's default).
  DType default_dtype() const noexcept {
    return kind_ == Kind::Bool ? kBool : kind_ == Kind::Int ? kInt64 : kFloat32;
  }

  bool operator==(const Scalar& o) const noexcept {
    return kind_ == o.kind_ && (kind_ == Kind::Float ? d_ == o.d_ : i_ == o.i_);
  }

 private:
  Kind kind_;
  union {
    int64_t i_;
    double d_;
  };
};

std::ostream& operator<<(std::ostream& os, const Scalar& s);

template <>
inline double Scalar::to<double>() const noexcept {
  return to_double();
}

}  // namespace kiln
