// The to_device op's kernel, the same on every backend: the input gathered
// contiguous on its own device, then one blocking copy of its bytes into the
// result on the other device.
#pragma once

#include "backends/backend.h"
#include "kiln/tensor.h"

namespace kiln::backend {

inline void copy_between_devices(const KernelCall& c) {
  const Tensor src = c.in(0).contiguous();
  Tensor& out = c.out();
  const size_t nbytes = static_cast<size_t>(out.numel()) * out.element_size();
  if (nbytes == 0) return;
  const Device on = out.device().is_cpu() ? src.device() : out.device();
  backend_for(on.kind()).copy_bytes(out.data_ptr(), out.device(), src.data_ptr(), src.device(), nbytes,
                                    /*non_blocking=*/false);
}

}  // namespace kiln::backend
