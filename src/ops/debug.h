// The kernel of the debug_tensor op (include/kiln/debug.h), on every backend.
#pragma once

#include "backends/backend.h"

namespace kiln::ops {

// Prints or checks the input's values on the host (copied there from a device).
void run_debug_tensor(const backend::KernelCall& call);

}  // namespace kiln::ops
