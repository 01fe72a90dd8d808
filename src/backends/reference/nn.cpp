#include "backends/reference/reference.h"

namespace kiln::backend {

void register_reference_nn_kernels(KernelTable&) {}

}  // namespace kiln::backend
