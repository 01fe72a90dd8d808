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

// While a device graph records a random op's kernel on this thread: the
// device memory the kernel reads its seed (words[0]) and base offset
// (words[1]) from at each replay; the op's offset attribute is then added to
// that base. Null otherwise (the attributes hold the draw).
const uint64_t* recorded_philox() noexcept;
class RecordedPhiloxScope {
 public:
  explicit RecordedPhiloxScope(const uint64_t* words) noexcept;
  ~RecordedPhiloxScope();
  RecordedPhiloxScope(const RecordedPhiloxScope&) = delete;
  RecordedPhiloxScope& operator=(const RecordedPhiloxScope&) = delete;

 private:
  const uint64_t* previous_;
};

}  // namespace kiln::ops
