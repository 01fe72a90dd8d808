// Kernels that only move elements (copies, gathers, scatters) see each dtype
// as an unsigned integer of its size; CPU and CUDA share this dispatch.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kiln::backend {

// Calls f.template operator()<E>() with E an unsigned integer of the given byte size.
template <typename F>
void visit_element_size(size_t bytes, F&& f) {
  switch (bytes) {
    case 1:
      f.template operator()<uint8_t>();
      return;
    case 2:
      f.template operator()<uint16_t>();
      return;
    case 4:
      f.template operator()<uint32_t>();
      return;
    default:
      f.template operator()<uint64_t>();
      return;
  }
}

}  // namespace kiln::backend
