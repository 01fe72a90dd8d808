// Backward rules: one function per differentiable op of the table, written with
// kiln ops so that they run on any backend, can be traced and can themselves be
// differentiated (double backward).
//
// derivatives.def names, per op, the inputs and outputs its rule reads back;
// only those are kept alive. A rule gets the gradients of the op's outputs
// (undefined for an output that received none: treat it as zero) and returns one
// gradient per input (undefined where !ctx.needs_grad(i) or where it is zero). A
// gradient may have a shape that broadcasts to its input's shape and another
// floating dtype: the engine sums and casts it.
#pragma once

#include <span>
#include <vector>

#include "kiln/autograd.h"
#include "ops/attrs.h"
#include "ops/op_table.h"

namespace kiln::autograd {

class BackwardCtx {
 public:
  struct InputInfo {
    Shape sizes;
    DType dtype = kFloat32;
    Device device;
    bool defined = false;
  };

  BackwardCtx(const ops::OpSchema& schema, const ops::Attrs& attrs,
              std::span<const InputInfo> infos, std::span<const Tensor> inputs,
              std::span<const Tensor> results, const std::vector<bool>& needs_grad)
      : schema_(schema), attrs_(attrs), infos_(infos), inputs_(inputs), results_(results),
        needs_grad_(needs_grad) {}

  const ops::OpSchema& schema() const noexcept { return schema_; }
  const ops::Attrs& attrs() const noexcept { return attrs_; }
  size_t num_inputs() const noexcept { return infos_.size(); }
  // Shape, dtype and device of every input (kept for all inputs, saved or not).
  const InputInfo& info(size_t i) const { return infos_[i]; }
  const Shape& input_sizes(size_t i) const { return infos_[i].sizes; }
  bool needs_grad(size_t i) const { return needs_grad_[i]; }
  // An input or output that derivatives.def lists as saved (undefined otherwise).
  const Tensor& input(size_t i) const { return inputs_[i]; }
  const Tensor& result(size_t i = 0) const { return results_[i]; }
  std::span<const Tensor> inputs() const noexcept { return inputs_; }
  std::span<const Tensor> results() const noexcept { return results_; }
  const std::vector<bool>& needs_grad() const noexcept { return needs_grad_; }

 private:
  const ops::OpSchema& schema_;
  const ops::Attrs& attrs_;
  std::span<const InputInfo> infos_;
  std::span<const Tensor> inputs_;
  std::span<const Tensor> results_;
  const std::vector<bool>& needs_grad_;
};

using BackwardRule = TensorList (*)(const BackwardCtx&, const TensorList& grads);

// What an op's rule needs kept from the forward call.
struct Derivative {
  BackwardRule rule = nullptr;
  std::vector<bool> save_inputs;   // per schema input (a variadic input: one flag for all)
  std::vector<bool> save_results;  // per output
  bool save_every_result = false;  // "result*": all outputs, however many
};

// The derivative of op; rule is null for kNoGrad ops.
const Derivative& derivative(ops::OpId op);

#define KILN_GRAD(op, inputs, results) \
  TensorList grad_##op(const BackwardCtx& ctx, const TensorList& grads);
#include "autograd/derivatives.def"
#undef KILN_GRAD

}  // namespace kiln::autograd
