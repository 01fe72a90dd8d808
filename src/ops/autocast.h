// Autocast inside kiln (include/kiln/amp.h, docs/optim.md "Mixed precision"):
// the thread's state, the op lists, and the casts dispatch makes.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "kiln/tensor.h"
#include "ops/op_table.h"

namespace kiln::ops::autocast {

// Whether any device kind has autocast on, on this thread (dispatch's fast check).
bool active() noexcept;

// The inputs op is to run on under the thread's autocast, into `cast`;
// false (cast untouched) where they are to run as they are.
bool cast_inputs(OpId op, std::span<const Tensor> inputs, TensorList& cast);

// The entry of the composite ops PyTorch runs in float32 (the losses): where
// autocast is on for their device and x or y is float16 or bfloat16, both
// in float32 into x32 and y32, and true; false where nothing changes.
bool to_float32(const Tensor& x, const Tensor& y, Tensor& x32, Tensor& y32);

// The state as a guard key's entries, and as text ("cpu bfloat16", "off").
void append_key(std::vector<int64_t>& key);
std::string describe();

// Turns autocast off on this thread while alive (the backward engine: each
// op's backward runs in its forward's dtypes).
class Suspend {
 public:
  Suspend() noexcept;
  ~Suspend();
  Suspend(const Suspend&) = delete;
  Suspend& operator=(const Suspend&) = delete;

 private:
  bool enabled_[kNumDeviceKinds];
};

}  // namespace kiln::ops::autocast
