// A tensor as a shape rule sees it in symbolic mode: sizes, strides and
// offset as SymInts, dtype and device, no storage. It answers the calls the
// shape rules make on a Tensor (sizes(), size(d), dim(), strides(), ...), so
// one rule, a template over the tensor type, serves eager mode (Tensor) and
// the compiler's symbolic shapes (SymTensor).
#pragma once

#include <utility>

#include "core/shape_util.h"
#include "core/symbolic.h"
#include "kiln/tensor.h"

namespace kiln::ops {

class SymTensor {
 public:
  SymTensor() = default;  // undefined, as an absent optional input
  SymTensor(SymShape sizes, SymShape strides, SymInt offset, DType dtype, Device device,
            bool wrapped_number = false)
      : sizes_(std::move(sizes)),
        strides_(std::move(strides)),
        offset_(std::move(offset)),
        dtype_(dtype),
        device_(device),
        defined_(true),
        wrapped_number_(wrapped_number) {}
  // A new row-major tensor of these sizes.
  static SymTensor contiguous(SymShape sizes, DType dtype, Device device) {
    SymShape strides = contiguous_strides(sizes);
    return SymTensor(std::move(sizes), std::move(strides), SymInt(0), dtype, device);
  }

  bool defined() const noexcept { return defined_; }
  int64_t dim() const noexcept { return static_cast<int64_t>(sizes_.size()); }
  const SymShape& sizes() const noexcept { return sizes_; }
  const SymShape& shape() const noexcept { return sizes_; }
  SymInt size(int64_t d) const { return sizes_[static_cast<size_t>(wrap_dim(d, dim(), "size"))]; }
  const SymShape& strides() const noexcept { return strides_; }
  SymInt stride(int64_t d) const {
    return strides_[static_cast<size_t>(wrap_dim(d, dim(), "stride"))];
  }
  const SymInt& storage_offset() const noexcept { return offset_; }
  SymInt numel() const { return shape_numel(sizes_); }
  DType dtype() const noexcept { return dtype_; }
  Device device() const noexcept { return device_; }
  bool is_wrapped_number() const noexcept { return wrapped_number_; }
  bool is_meta() const noexcept { return true; }
  bool is_contiguous() const { return contiguous_layout(sizes_, strides_); }

 private:
  SymShape sizes_, strides_;
  SymInt offset_;
  DType dtype_ = kFloat32;
  Device device_;
  bool defined_ = false;
  bool wrapped_number_ = false;
};

}  // namespace kiln::ops
