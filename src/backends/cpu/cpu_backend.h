// The CPU backend: the caching allocator of cpu_allocator.h and the kernel
// groups of src/backends/cpu/.
#pragma once

#include "backends/backend.h"

namespace kiln::backend {

class CpuBackend final : public Backend {
 public:
  CpuBackend();
  std::string_view name() const noexcept override { return "cpu"; }
  std::shared_ptr<Storage> allocate(size_t nbytes, Device device) override;
  void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes,
                  bool non_blocking) override;
  void synchronize(Device) override {}
  MemoryStats memory_stats(Device device) const override;
  void reset_peak_memory_stats(Device device) override;
  void empty_cache(Device device) override;
};

// Kernel groups, one per file of src/backends/cpu/.
void register_cpu_pointwise_kernels(KernelTable& table);
void register_cpu_factory_kernels(KernelTable& table);
void register_cpu_shape_kernels(KernelTable& table);
void register_cpu_reduce_kernels(KernelTable& table);
void register_cpu_linalg_kernels(KernelTable& table);
void register_cpu_conv_pool_kernels(KernelTable& table);
void register_cpu_nn_kernels(KernelTable& table);
void register_cpu_backward_kernels(KernelTable& table);  // ops of backward rules

// Test support: surround every CPU allocation with guard bytes and count the
// allocations whose guards were overwritten when they are freed.
void cpu_set_guard_bytes(bool enabled) noexcept;
size_t cpu_guard_violations() noexcept;

}  // namespace kiln::backend
