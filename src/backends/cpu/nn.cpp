#include "backends/cpu/cpu_backend.h"

namespace kiln::backend {

void register_cpu_nn_kernels(KernelTable&) {}

}  // namespace kiln::backend
