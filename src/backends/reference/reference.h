// Reference kernels: the oracle of the op-consistency test. Plain loops over any
// strides, double precision, no cleverness. Never a production path.
#pragma once

#include "backends/backend.h"

namespace kiln::backend {

void register_reference_pointwise_kernels(KernelTable& table);
void register_reference_factory_kernels(KernelTable& table);
void register_reference_shape_kernels(KernelTable& table);
void register_reference_reduce_kernels(KernelTable& table);
void register_reference_linalg_kernels(KernelTable& table);
void register_reference_conv_pool_kernels(KernelTable& table);
void register_reference_nn_kernels(KernelTable& table);
void register_reference_rnn_kernels(KernelTable& table);  // called by the nn group
void register_reference_backward_kernels(KernelTable& table);  // ops of backward rules

}  // namespace kiln::backend
