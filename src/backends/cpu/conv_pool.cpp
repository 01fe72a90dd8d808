#include "backends/cpu/cpu_backend.h"

namespace kiln::backend {

void register_cpu_conv_pool_kernels(KernelTable&) {}

}  // namespace kiln::backend
