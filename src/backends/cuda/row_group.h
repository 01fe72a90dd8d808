// The lanes that reduce one row of the row kernels of softmax, log_softmax
// and layer_norm (backends/cuda/row_reduce.cuh), the library's and the
// generated ones alike, so that both reduce in one order: a power of two up
// to a warp for rows up to 1024 elements, the whole block for longer ones.
#pragma once

#include <cstdint>

namespace kiln::backend::cuda {

constexpr int kRowThreads = 256;  // threads per block

inline int row_group(int64_t n) {
  int group = 1;
  while (group < 32 && group < n) group *= 2;
  return n > 1024 ? kRowThreads : group;
}

}  // namespace kiln::backend::cuda
