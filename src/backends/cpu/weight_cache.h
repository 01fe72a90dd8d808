// Copies derived from weights (a linear or convolution weight in the layout
// oneDNN's primitive wants, an LSTM weight packed for the step loop or the
// primitive, a transposed linear weight), kept across calls for inference.
//
// An entry lives while the weight's storage lives and its version is unchanged
// (any in-place write, as load_state_dict or an optimizer step, makes a new
// copy). The total is bounded (KILN_WEIGHT_CACHE_MB, default 1024; 0 turns the
// cache off), least recently used entries going first, and entries of freed
// weights are dropped on the next insert.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

#include "kiln/tensor.h"

namespace kiln::backend::cpu {

// What a copy is derived as: kinds of one weight are separate entries.
enum class DerivedWeight { transposed, lstm_layout, lstm_step_layout, conv_layout, matmul_layout };

// The copy of weight of this kind: the cached one when it is still valid and
// accept (when given) takes it, else a new one from make(), of `bytes` bytes,
// which is cached. Null when the cache is off or the copy would not fit in it:
// the caller then derives an uncached copy itself.
std::shared_ptr<const void> derived_weight(const Tensor& weight, DerivedWeight kind, size_t bytes,
                                           const std::function<std::shared_ptr<const void>()>& make,
                                           const std::function<bool(const void*)>& accept = {});

// linear(x, W) multiplies by W^T, which oneDNN's GEMMs read slowly in place
// (a [128, 768] @ [768, 768]^T product: 817 us against 128 us with W^T
// contiguous, 16-core Xeon; [8, 768] @ [768, 768]^T: 469 us against 219 us,
// 2-core AVX2). weight: float32 [N, K], contiguous.
// Returns W^T as a contiguous [K, N] tensor, or an undefined tensor when the
// cache cannot hold it.
Tensor cached_transposed_weight(const Tensor& weight);

// Bytes held by the cache, and emptying it (tests, memory pressure).
size_t weight_cache_bytes();
void clear_weight_cache();

}  // namespace kiln::backend::cpu
