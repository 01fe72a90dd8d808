// lstm_step as its parts: linear for each projection, then lstm_cell. The
// CPU kernel, and the CUDA kernel where its fused kernel does not apply.
#pragma once

#include "backends/backend.h"

namespace kiln::backend {

void lstm_step_composite(const KernelCall& call);

}  // namespace kiln::backend
