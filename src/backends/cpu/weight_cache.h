// Transposed copies of float32 linear weights for inference.
//
// linear(x, W) multiplies by W^T, which oneDNN's GEMMs read slowly in place for
// 16 rows or more (a [128, 768] @ [768, 768]^T product: 817 us against 128 us
// with W^T contiguous, 16-core Xeon). When no gradient is being recorded, the
// CPU linear kernel multiplies by a contiguous W^T kept here instead. An entry
// lives while the weight's storage lives and its version is unchanged (any
// in-place write, as load_state_dict or an optimizer step, makes a new copy);
// the total is bounded (KILN_WEIGHT_CACHE_MB, default 1024; 0 turns the cache
// off), least recently used entries going first.
#pragma once

#include <cstddef>

#include "kiln/tensor.h"

namespace kiln::backend::cpu {

// weight: float32 [N, K], contiguous. Returns W^T as a contiguous [K, N]
// tensor, or an undefined tensor when the cache is off or the copy would not
// fit in it.
Tensor cached_transposed_weight(const Tensor& weight);

// Bytes held by the cache, and emptying it (tests, memory pressure).
size_t weight_cache_bytes();
void clear_weight_cache();

}  // namespace kiln::backend::cpu
