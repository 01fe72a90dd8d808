#include "backends/reference/reference.h"

namespace kiln::backend {

void register_reference_conv_pool_kernels(KernelTable&) {}

}  // namespace kiln::backend
