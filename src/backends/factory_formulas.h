// The value of element i of each factory, shared by the CPU and reference
// kernels so that both define the same numbers (the random ones come from the
// counter-based generator in core/philox.h).
#pragma once

#include <cstdint>

#include "core/philox.h"

namespace kiln::backend::factory {

// linspace from both ends, so the last value is exactly end.
KILN_HOST_DEVICE inline double linspace_at(double start, double end, int64_t steps, int64_t i) {
  if (steps == 1) return start;
  const double step = (end - start) / static_cast<double>(steps - 1);
  return i < steps / 2 ? start + step * static_cast<double>(i)
                       : end - step * static_cast<double>(steps - 1 - i);
}

KILN_HOST_DEVICE inline double rand_at(bool is_double, uint64_t seed, uint64_t index) {
  return is_double ? philox::uniform_f64(seed, index) : philox::uniform_f32(seed, index);
}

KILN_HOST_DEVICE inline int64_t randint_at(int64_t low, int64_t high, uint64_t seed,
                                           uint64_t index) {
  // In uint64_t: high - low and the sum overflow int64 for wide ranges
  // (low = INT64_MIN); the result lies in [low, high), so it converts back.
  const uint64_t range = static_cast<uint64_t>(high) - static_cast<uint64_t>(low);
  return static_cast<int64_t>(static_cast<uint64_t>(low) + philox::u64(seed, index) % range);
}

}  // namespace kiln::backend::factory
