#include "kiln/runtime.h"

#include <omp.h>

#include <atomic>

#include "backends/backend.h"
#include "core/launch_count.h"
#include "kiln/error.h"

#ifndef KILN_VERSION
#define KILN_VERSION "0.0.0"
#endif
#ifndef KILN_GIT_COMMIT
#define KILN_GIT_COMMIT "unknown"
#endif

namespace kiln {

void set_num_threads(int n) {
  if (n < 1) throw ValueError(detail::str_cat("set_num_threads: n must be >= 1, got ", n));
  omp_set_num_threads(n);
}

int get_num_threads() { return omp_get_max_threads(); }

MemoryStats memory_stats(Device device) {
  auto s = backend::backend_for(device.kind()).memory_stats(device);
  return {s.allocated_bytes, s.peak_allocated_bytes, s.num_allocations, s.reserved_bytes};
}

void empty_cache(Device device) { backend::backend_for(device.kind()).empty_cache(device); }

void reset_peak_memory_stats(Device device) {
  backend::backend_for(device.kind()).reset_peak_memory_stats(device);
}

namespace {
std::atomic<bool> g_tf32_matmul{false};
std::atomic<bool> g_tf32_conv{true};
}  // namespace

void set_allow_tf32(Tf32Policy policy) {
  g_tf32_matmul.store(policy.matmul);
  g_tf32_conv.store(policy.conv);
}

Tf32Policy allow_tf32() { return {g_tf32_matmul.load(), g_tf32_conv.load()}; }

int64_t kernel_launches() { return detail::g_kernel_launches.load(std::memory_order_relaxed); }

std::string version_string() {
  return std::string("kiln ") + KILN_VERSION + " (commit " + KILN_GIT_COMMIT + ")";
}

}  // namespace kiln
