#include "backends/cpu/backward_ops.h"

#include "backends/cpu/cpu_backend.h"

namespace kiln::backend {

void register_cpu_backward_kernels(KernelTable& t) {
  cpu::register_cpu_scatter_add_kernels(t);
  cpu::register_cpu_conv_backward_kernels(t);
  cpu::register_cpu_pool_backward_kernels(t);
  cpu::register_cpu_resample_backward_kernels(t);
}

}  // namespace kiln::backend
