// Seeds and offsets for the random ops (kRandom rows): each op reserves its
// counter range from a Generator, so results depend only on the seed.
#pragma once

#include <cstdint>

#include "kiln/ops/factory.h"

namespace kiln::ops {

struct PhiloxDraw {
  int64_t seed;
  int64_t offset;
};

// Reserves n values of g, or of the default generator (under its lock) when g is null.
PhiloxDraw draw_philox(Generator* g, int64_t n);

}  // namespace kiln::ops
