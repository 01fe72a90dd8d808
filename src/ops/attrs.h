// Typed op attributes, stored positionally in the order of the op table's schema.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "kiln/device.h"
#include "kiln/dtype.h"
#include "kiln/scalar.h"

namespace kiln::ops {

// std::monostate is an absent optional attribute (no dtype given, no clamp bound, ...).
using AttrValue = std::variant<std::monostate, int64_t, double, bool, std::vector<int64_t>, DType,
                               Device, Scalar, std::string>;

class Attrs {
 public:
  Attrs() = default;
  // Attrs{dims, keepdim, ...}: one value per schema attribute, in order. Values are
  // emplaced one by one rather than copied out of an initializer_list, which GCC 12
  // misreports as maybe-uninitialized when a value's alternative is chosen at run time.
  template <typename... Values>
    requires(sizeof...(Values) > 0 && (!std::is_same_v<std::remove_cvref_t<Values>, Attrs> && ...))
  Attrs(Values&&... values) {  // NOLINT: implicit, so that {a, b} converts
    values_.reserve(sizeof...(Values));
    (values_.emplace_back(std::forward<Values>(values)), ...);
  }

  size_t size() const noexcept { return values_.size(); }
  AttrValue& operator[](size_t i) { return values_[i]; }
  const AttrValue& operator[](size_t i) const { return values_[i]; }
  void push_back(AttrValue v) { values_.push_back(std::move(v)); }

  int64_t i(size_t k) const { return std::get<int64_t>(values_[k]); }
  double f(size_t k) const { return std::get<double>(values_[k]); }
  bool b(size_t k) const { return std::get<bool>(values_[k]); }
  const std::vector<int64_t>& ints(size_t k) const { return std::get<std::vector<int64_t>>(values_[k]); }
  std::vector<int64_t>& ints(size_t k) { return std::get<std::vector<int64_t>>(values_[k]); }
  DType dtype(size_t k) const { return std::get<DType>(values_[k]); }
  Device device(size_t k) const { return std::get<Device>(values_[k]); }
  const Scalar& scalar(size_t k) const { return std::get<Scalar>(values_[k]); }
  const std::string& str(size_t k) const { return std::get<std::string>(values_[k]); }
  bool has(size_t k) const { return !std::holds_alternative<std::monostate>(values_[k]); }

  bool operator==(const Attrs&) const = default;

 private:
  std::vector<AttrValue> values_;
};

}  // namespace kiln::ops
