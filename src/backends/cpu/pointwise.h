// The CPU pointwise kernel groups, registered by register_cpu_pointwise_kernels.
#pragma once

#include "backends/backend.h"

namespace kiln::backend::cpu {

void register_cpu_unary_kernels(KernelTable& table);
void register_cpu_binary_kernels(KernelTable& table);
void register_cpu_misc_pointwise_kernels(KernelTable& table);

}  // namespace kiln::backend::cpu
