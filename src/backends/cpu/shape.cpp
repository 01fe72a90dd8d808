#include "backends/cpu/cpu_backend.h"

namespace kiln::backend {

void register_cpu_shape_kernels(KernelTable&) {}

}  // namespace kiln::backend
