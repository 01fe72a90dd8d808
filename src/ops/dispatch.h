// Eager dispatch: shape rule, output allocation, input casts, kernel. Every
// public op goes through here; while a trace recorder (ops/tracing.h) is active on the
// thread, the op is recorded into its graph instead.
#pragma once

#include <initializer_list>
#include <span>

#include "kiln/tensor.h"
#include "ops/attrs.h"
#include "backends/backend.h"
#include "ops/op_table.h"

namespace kiln::ops {

// Runs op out of place and returns its outputs.
TensorList dispatch(OpId op, std::span<const Tensor> inputs, Attrs attrs = {});
Tensor dispatch1(OpId op, std::initializer_list<Tensor> inputs, Attrs attrs = {});

// Runs op with self (its first input) as the output: the result must have self's
// shape and be castable to self's dtype. Bumps self's version.
Tensor& dispatch_inplace(OpId op, Tensor& self, std::span<const Tensor> inputs, Attrs attrs = {});
Tensor& dispatch_inplace(OpId op, Tensor& self, std::initializer_list<Tensor> inputs,
                         Attrs attrs = {});

// What dispatch works out for a call before running it: the shape rule's
// outputs, the input casts, and the attributes as the rule canonicalized
// them. The compiler lowers nodes with it.
struct Inferred {
  std::vector<TensorMeta> outputs;
  std::vector<std::optional<DType>> input_casts;
  Attrs attrs;
};
Inferred infer(OpId op, std::span<const Tensor> inputs, Attrs attrs);
// The kernel dispatch runs for op on device (the reference kernel on the CPU
// under ReferenceModeGuard); kiln::Error when there is none.
const backend::KernelFn& kernel_for(OpId op, Device device);

// The device an op's kernel runs on: its first output's, or (an op without
// outputs, kSideEffect) its first input's.
Device kernel_device(std::span<const TensorMeta> outputs, std::span<const Tensor> inputs);

// While alive on a thread, CPU ops on that thread run their reference kernels.
class ReferenceModeGuard {
 public:
  ReferenceModeGuard() noexcept;
  ~ReferenceModeGuard();
  ReferenceModeGuard(const ReferenceModeGuard&) = delete;
  ReferenceModeGuard& operator=(const ReferenceModeGuard&) = delete;
  static bool enabled() noexcept;

 private:
  bool previous_;
};

// A new contiguous tensor (meta when meta is true) on device.
Tensor make_tensor(const Shape& sizes, DType dtype, Device device, bool meta = false);
// A contiguous tensor over storage (which holds at least its bytes).
Tensor make_tensor(std::shared_ptr<Storage> storage, const Shape& sizes, DType dtype);
// A tensor of this layout over storage (strides and offset in elements),
// made without the dispatcher: no autograd history, nothing traced.
Tensor make_strided(std::shared_ptr<Storage> storage, Shape sizes, Shape strides, int64_t offset,
                    DType dtype);
Shape contiguous_strides(const Shape& sizes);
// PyTorch's casting rule for in-place results: no float -> integer, no number -> bool.
bool can_cast(DType from, DType to) noexcept;

}  // namespace kiln::ops
