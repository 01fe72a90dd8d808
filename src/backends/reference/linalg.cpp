#include "backends/reference/reference.h"

namespace kiln::backend {

void register_reference_linalg_kernels(KernelTable&) {}

}  // namespace kiln::backend
