// Source-index formulas of pad and interpolate, shared by the CPU and reference
// kernels of the ops and of their adjoints (pad_backward, interpolate_backward)
// so that a forward and its backward always pick the same input elements.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/philox.h"  // KILN_HOST_DEVICE

namespace kiln::backend::resample {

enum class PadMode { Constant, Reflect, Replicate };

// "constant", "reflect" or "replicate" (the shape rule checked the name).
inline PadMode pad_mode(const std::string& mode) {
  return mode == "constant" ? PadMode::Constant : mode == "replicate" ? PadMode::Replicate : PadMode::Reflect;
}

// Source index along one dim of pad's output index o, or -1 for the constant.
KILN_HOST_DEVICE inline int64_t pad_source(int64_t o, int64_t before, int64_t size, PadMode mode) {
  const int64_t i = o - before;
  if (i >= 0 && i < size) return i;
  if (mode == PadMode::Constant) return -1;
  if (mode == PadMode::Replicate) return i < 0 ? 0 : size - 1;
  return i < 0 ? -i : 2 * (size - 1) - i;  // reflect, without repeating the edge
}
inline int64_t pad_source(int64_t o, int64_t before, int64_t size, const std::string& mode) {
  return pad_source(o, before, size, pad_mode(mode));
}

// Legacy nearest source index: floor(o * in / out), exact in integers.
KILN_HOST_DEVICE inline int64_t nearest_source(int64_t o, int64_t in, int64_t out) {
  const int64_t i = o * in / out;
  return i < in - 1 ? i : in - 1;
}

// PyTorch's bilinear source coordinate of output index o (clamped at 0 when
// align_corners is false), in double in every kernel so that the chosen pixels agree.
KILN_HOST_DEVICE inline double bilinear_source(int64_t o, int64_t in, int64_t out, bool align_corners) {
  if (align_corners) {
    return out > 1
               ? static_cast<double>(o) * static_cast<double>(in - 1) / static_cast<double>(out - 1)
               : 0.0;
  }
  const double src =
      (static_cast<double>(o) + 0.5) * static_cast<double>(in) / static_cast<double>(out) - 0.5;
  return src > 0.0 ? src : 0.0;
}

// Bilinear weights along one dim: the two source indices of each output index
// and the weight of the second (the first has 1 - frac).
template <typename C>
struct LinearTable {
  std::vector<int64_t> lo, hi;
  std::vector<C> frac;
  LinearTable(int64_t in, int64_t out, bool align_corners) : lo(out), hi(out), frac(out) {
    for (int64_t o = 0; o < out; ++o) {
      const double src = bilinear_source(o, in, out, align_corners);
      lo[o] = static_cast<int64_t>(src);
      hi[o] = std::min(lo[o] + 1, in - 1);
      frac[o] = static_cast<C>(src - static_cast<double>(lo[o]));
    }
  }
};

}  // namespace kiln::backend::resample
