// The CPU network-op kernel groups, registered by register_cpu_nn_kernels, and
// the dtype visitors they share.
#pragma once

#include <cstdint>

#include "backends/backend.h"

namespace kiln::backend::cpu {

void register_cpu_norm_kernels(KernelTable& table);       // batch, layer and group norm
void register_cpu_attention_kernels(KernelTable& table);  // scaled_dot_product_attention
void register_cpu_resample_kernels(KernelTable& table);   // pad, interpolate
void register_cpu_rnn_kernels(KernelTable& table);        // lstm_sequence (oneDNN)
void register_cpu_lstm_cell_kernel(KernelTable& table);   // lstm_cell

// visit_dtype restricted to the floating dtypes, so that float-only kernels are
// not instantiated for integers (the shape rules reject those).
template <typename F>
decltype(auto) visit_floating(DType t, F&& f) {
  switch (t) {
    case kFloat64:
      return f.template operator()<double>();
    case kFloat16:
      return f.template operator()<Half>();
    case kBFloat16:
      return f.template operator()<BFloat16>();
    default:
      return f.template operator()<float>();
  }
}

// Calls f with an unsigned integer type of the dtype's width: kernels that only
// move elements (padding, nearest resampling) are instantiated once per width.
template <typename F>
decltype(auto) visit_element_width(DType t, F&& f) {
  switch (dtype_size(t)) {
    case 1:
      return f.template operator()<uint8_t>();
    case 2:
      return f.template operator()<uint16_t>();
    case 4:
      return f.template operator()<uint32_t>();
    default:
      return f.template operator()<uint64_t>();
  }
}

}  // namespace kiln::backend::cpu
