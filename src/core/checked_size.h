// Checked element and byte counts (docs/tensors.md, "Sizes that do not fit").
// Sizes come from users, files and requests, so every count kiln derives from
// them is computed exactly or refused: a tensor holds at most 2^63 - 1
// elements (its sizes' product, zero dims aside, fits int64_t, and so do its
// contiguous strides), and an allocation is at most kMaxTensorBytes. Shape
// rules use size_mul / size_add where a size is made from others; dispatch
// checks every rule's outputs; make_tensor and the allocators check bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "core/symbolic.h"
#include "kiln/dtype.h"

namespace kiln {

// The largest block kiln allocates: 4 EiB, beyond any machine, and small
// enough that rounding it up or adding guard bytes cannot wrap.
inline constexpr int64_t kMaxTensorBytes = int64_t{1} << 62;

// a * b and a + b of sizes, exact; a ShapeError naming op and both operands
// when the result does not fit int64_t. On symbolic sizes the plain operation:
// the eager instance of each size runs the checked one.
int64_t size_mul(int64_t a, int64_t b, std::string_view op);
int64_t size_add(int64_t a, int64_t b, std::string_view op);
inline SymInt size_mul(const SymInt& a, const SymInt& b, std::string_view) { return a * b; }
inline SymInt size_add(const SymInt& a, const SymInt& b, std::string_view) { return a + b; }

// A size computed in floating point (arange's count, a scale factor's
// output): a ShapeError naming op and what when it is not finite or does not
// fit int64_t, instead of a conversion that is undefined.
int64_t size_from_double(double v, std::string_view op, std::string_view what);

// The element count of sizes: a ShapeError naming op and the sizes when one
// is negative or the product of the nonzero ones does not fit int64_t.
int64_t checked_numel(std::span<const int64_t> sizes, std::string_view op);

// The bytes of a contiguous tensor of sizes and dtype: checked_numel's
// errors, and a ShapeError when they pass kMaxTensorBytes.
size_t checked_nbytes(std::span<const int64_t> sizes, DType dtype, std::string_view op);

// For allocators: a ShapeError naming who when nbytes passes kMaxTensorBytes.
void check_allocation(size_t nbytes, std::string_view who);

}  // namespace kiln
