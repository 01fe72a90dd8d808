// The CPU kernel groups of the ops that backward rules need, collected by
// register_cpu_backward_kernels (cpu_backend.h).
#pragma once

#include "backends/backend.h"

namespace kiln::backend::cpu {

void register_cpu_scatter_add_kernels(KernelTable& table);
void register_cpu_conv_backward_kernels(KernelTable& table);  // conv_backward_input/weight
void register_cpu_pool_backward_kernels(
    KernelTable& table);  // max_pool2d_with_indices, pool adjoints
void register_cpu_resample_backward_kernels(KernelTable& table);  // interpolate and pad adjoints

}  // namespace kiln::backend::cpu
