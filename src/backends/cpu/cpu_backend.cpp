#include "backends/cpu/cpu_backend.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <new>

#include "backends/reference/reference.h"

namespace kiln::backend {
namespace {

constexpr size_t kAlignment = 64;
constexpr size_t kGuardBytes = 64;  // one alignment unit on each side keeps data aligned
constexpr unsigned char kGuardPattern = 0xA5;

std::atomic<bool> g_guard_bytes{false};
std::atomic<size_t> g_guard_violations{0};
std::atomic<size_t> g_allocated{0};
std::atomic<size_t> g_peak{0};
std::atomic<size_t> g_num_allocations{0};

void note_allocated(size_t nbytes) noexcept {
  size_t now = g_allocated.fetch_add(nbytes, std::memory_order_relaxed) + nbytes;
  size_t peak = g_peak.load(std::memory_order_relaxed);
  while (now > peak && !g_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
  g_num_allocations.fetch_add(1, std::memory_order_relaxed);
}

bool guard_intact(const unsigned char* p) noexcept {
  for (size_t i = 0; i < kGuardBytes; ++i)
    if (p[i] != kGuardPattern) return false;
  return true;
}

}  // namespace

void cpu_set_guard_bytes(bool enabled) noexcept { g_guard_bytes = enabled; }
size_t cpu_guard_violations() noexcept { return g_guard_violations.load(); }

CpuBackend::CpuBackend() {
  register_cpu_pointwise_kernels(kernels_);
  register_cpu_factory_kernels(kernels_);
  register_cpu_shape_kernels(kernels_);
  register_cpu_reduce_kernels(kernels_);
  register_cpu_linalg_kernels(kernels_);
  register_cpu_conv_pool_kernels(kernels_);
  register_cpu_nn_kernels(kernels_);
}

std::shared_ptr<Storage> CpuBackend::allocate(size_t nbytes, Device device) {
  const bool guarded = g_guard_bytes.load(std::memory_order_relaxed);
  const size_t payload = (nbytes + kAlignment - 1) / kAlignment * kAlignment;
  const size_t total = payload + (guarded ? 2 * kGuardBytes : 0);
  auto* base = static_cast<unsigned char*>(std::aligned_alloc(kAlignment, total ? total : kAlignment));
  if (!base) {
    throw Error(detail::str_cat("cpu: out of memory allocating ", nbytes, " bytes (",
                                g_allocated.load(), " bytes held by tensors)"));
  }
  note_allocated(nbytes);
  if (!guarded) {
    return std::make_shared<Storage>(base, nbytes, device, [nbytes](void* p) {
      g_allocated.fetch_sub(nbytes, std::memory_order_relaxed);
      std::free(p);
    });
  }
  std::memset(base, kGuardPattern, kGuardBytes);
  std::memset(base + kGuardBytes + nbytes, kGuardPattern, total - kGuardBytes - nbytes);
  return std::make_shared<Storage>(base + kGuardBytes, nbytes, device, [nbytes, total](void* p) {
    auto* data = static_cast<unsigned char*>(p);
    unsigned char* start = data - kGuardBytes;
    if (!guard_intact(start) || !guard_intact(data + nbytes) ||
        !std::all_of(data + nbytes, start + total,
                     [](unsigned char c) { return c == kGuardPattern; })) {
      g_guard_violations.fetch_add(1);
    }
    g_allocated.fetch_sub(nbytes, std::memory_order_relaxed);
    std::free(start);
  });
}

void CpuBackend::copy_bytes(void* dst, Device, const void* src, Device, size_t nbytes) {
  if (nbytes) std::memcpy(dst, src, nbytes);
}

MemoryStats CpuBackend::memory_stats(Device) const {
  return {g_allocated.load(), g_peak.load(), g_num_allocations.load()};
}

void CpuBackend::reset_peak_memory_stats(Device) { g_peak = g_allocated.load(); }

Backend& backend_for(DeviceKind kind) {
  static CpuBackend cpu;
  if (kind == DeviceKind::CPU) return cpu;
  throw DeviceError("cuda: this build of kiln has no CUDA backend");
}

const KernelTable& reference_kernels() {
  static const KernelTable table = [] {
    KernelTable t;
    register_reference_pointwise_kernels(t);
    register_reference_factory_kernels(t);
    register_reference_shape_kernels(t);
    register_reference_reduce_kernels(t);
    register_reference_linalg_kernels(t);
    register_reference_conv_pool_kernels(t);
    register_reference_nn_kernels(t);
    return t;
  }();
  return table;
}

}  // namespace kiln::backend
