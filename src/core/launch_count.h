// The counter behind kiln::kernel_launches(): the places that run a kernel
// from the host (dispatch, a compiled step, a CUDA-graph launch) add one.
#pragma once

#include <atomic>
#include <cstdint>

namespace kiln::detail {

inline std::atomic<int64_t> g_kernel_launches{0};

inline void count_kernel_launch() noexcept {
  g_kernel_launches.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace kiln::detail
