// Helpers of the reference kernels: element access by multi-index through any
// strides, read and written as double or int64. Slow on purpose: obvious code.
#pragma once

#include <cstdint>
#include <vector>

#include "core/convert.h"
#include "kiln/tensor.h"

namespace kiln::backend::ref {

// Element offset of index (aligned to the right, broadcast dims read index 0).
inline int64_t offset_of(const Tensor& t, const std::vector<int64_t>& index) {
  int64_t off = 0;
  const int64_t skip = static_cast<int64_t>(index.size()) - t.dim();
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.sizes()[d] != 1) off += index[skip + d] * t.strides()[d];
  }
  return off;
}

template <typename C>
C read(const Tensor& t, int64_t offset) {
  return visit_dtype(t.dtype(), [&]<typename T>() -> C {
    return convert<C>(static_cast<const T*>(t.data_ptr())[offset]);
  });
}

template <typename C>
void write(const Tensor& t, int64_t offset, C value) {
  visit_dtype(t.dtype(), [&]<typename T>() {
    static_cast<T*>(t.data_ptr())[offset] = convert<T>(value);
  });
}

// Calls f(index) for every multi-index of shape, last dim fastest.
template <typename F>
void for_each_index(const Shape& shape, F f) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<int64_t> index(shape.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    f(index);
    for (size_t d = shape.size(); d-- > 0;) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
}

// out[i] = f(inputs[k][i]...) with broadcasting; C is double for floating
// outputs (and for bool/integer ops on floats) and int64 for integer ones.
template <typename C, typename F>
void map(const Tensor& out, const std::vector<Tensor>& inputs, F f) {
  std::vector<C> args(inputs.size());
  for_each_index(out.sizes(), [&](const std::vector<int64_t>& index) {
    for (size_t k = 0; k < inputs.size(); ++k) args[k] = read<C>(inputs[k], offset_of(inputs[k], index));
    write(out, offset_of(out, index), f(args));
  });
}

}  // namespace kiln::backend::ref
