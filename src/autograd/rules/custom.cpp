// The backward of custom ops: the one each op was defined with (ops/custom.h).
#include "ops/custom.h"
#include "autograd/rules.h"

namespace kiln::autograd {

TensorList grad_custom(const BackwardCtx& ctx, const TensorList& grads) {
  return ops::custom_backward(ctx.attrs(), ctx.inputs(), ctx.results(), ctx.needs_grad(), grads);
}

}  // namespace kiln::autograd
