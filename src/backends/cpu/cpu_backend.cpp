#include "backends/cpu/cpu_backend.h"

#include <cstring>

#include "backends/cpu/cpu_allocator.h"
#include "backends/cpu/weight_cache.h"
#include "backends/reference/reference.h"
#include "ops/custom.h"
#include "ops/debug.h"
#ifdef KILN_WITH_CUDA
#include "backends/cuda/cuda_backend.h"
#endif

namespace kiln::backend {

void cpu_set_guard_bytes(bool enabled) noexcept { CpuAllocator::instance().set_guard_bytes(enabled); }
size_t cpu_guard_violations() noexcept { return CpuAllocator::instance().guard_violations(); }

CpuBackend::CpuBackend() {
  register_cpu_pointwise_kernels(kernels_);
  register_cpu_factory_kernels(kernels_);
  register_cpu_shape_kernels(kernels_);
  register_cpu_reduce_kernels(kernels_);
  register_cpu_linalg_kernels(kernels_);
  register_cpu_conv_pool_kernels(kernels_);
  register_cpu_nn_kernels(kernels_);
  register_cpu_backward_kernels(kernels_);
  kernels_.set(ops::OpId::custom, ops::run_custom_kernel);
  kernels_.set(ops::OpId::debug_tensor, ops::run_debug_tensor);
}

std::shared_ptr<Storage> CpuBackend::allocate(size_t nbytes, Device device) {
  return CpuAllocator::instance().allocate(nbytes, device);
}

void CpuBackend::copy_bytes(void* dst, Device, const void* src, Device, size_t nbytes, bool) {
  if (nbytes) std::memcpy(dst, src, nbytes);
}

MemoryStats CpuBackend::memory_stats(Device) const { return CpuAllocator::instance().stats(); }

void CpuBackend::reset_peak_memory_stats(Device) { CpuAllocator::instance().reset_peak(); }

void CpuBackend::empty_cache(Device) {
  cpu::clear_weight_cache();  // its copies are memory kept for reuse too
  CpuAllocator::instance().empty_cache();
}

Backend& backend_for(DeviceKind kind) {
  static CpuBackend cpu;
  if (kind == DeviceKind::CPU) return cpu;
#ifdef KILN_WITH_CUDA
  return cuda::cuda_backend();
#else
  throw DeviceError("cuda: this build of kiln has no CUDA backend (configure with -DKILN_CUDA=ON)");
#endif
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
    register_reference_backward_kernels(t);
    t.set(ops::OpId::custom, ops::run_custom_kernel);  // the op's own CPU kernel
    t.set(ops::OpId::debug_tensor, ops::run_debug_tensor);
    return t;
  }();
  return table;
}

}  // namespace kiln::backend
