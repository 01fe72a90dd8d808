// Shape and dtype rules of the matrix products (PyTorch's semantics).
#include <algorithm>

#include "core/shape_util.h"
#include "ops/op_table.h"

namespace kiln::ops {
namespace {

// Both operands share one floating dtype, as PyTorch requires (no promotion).
template <class Ctx>
DType matrix_dtype(const Ctx& ctx, size_t a, size_t b) {
  const DType ta = ctx.input(a).dtype(), tb = ctx.input(b).dtype();
  if (ta != tb) {
    throw DTypeError(detail::str_cat(ctx.name(), ": expected both operands to have the same dtype, got ",
                                     ta, " and ", tb));
  }
  if (!is_floating(ta)) {
    throw DTypeError(detail::str_cat(ctx.name(), ": only floating dtypes are supported, got ", ta));
  }
  return ta;
}

template <class Ctx>
void check_inner(const Ctx& ctx, const typename Ctx::Int& k_a, const typename Ctx::Int& k_b,
                 const typename Ctx::Sizes& a, const typename Ctx::Sizes& b) {
  if (k_a != k_b) {
    throw ShapeError(detail::str_cat(ctx.name(), ": inner dimensions differ: ", a, " @ ", b));
  }
}

template <class Ctx>
void check_dims(const Ctx& ctx, const typename Ctx::TensorType& t, int64_t dims, const char* what) {
  if (t.dim() != dims) {
    throw ShapeError(detail::str_cat(ctx.name(), ": ", what, " must be ", dims, "-D, got shape ",
                                     t.sizes()));
  }
}

}  // namespace

template <class Ctx>
void infer_matmul(Ctx& ctx) {
  using Int = typename Ctx::Int;
  using Sizes = typename Ctx::Sizes;
  const Sizes& a = ctx.input(0).sizes();
  const Sizes& b = ctx.input(1).sizes();
  if (a.empty() || b.empty()) {
    throw ShapeError(detail::str_cat("matmul: both arguments must be at least 1-D, got ", a,
                                     " and ", b));
  }
  const DType t = matrix_dtype(ctx, 0, 1);
  const Int k_a = a.back();
  const Int k_b = b.size() == 1 ? b[0] : b[b.size() - 2];
  check_inner(ctx, k_a, k_b, a, b);
  // Batch dims (all but the matrix dims) broadcast; 1-D operands have none.
  const Sizes batch_a(a.begin(), a.end() - std::min<size_t>(a.size(), 2));
  const Sizes batch_b(b.begin(), b.end() - std::min<size_t>(b.size(), 2));
  Sizes out = broadcast_pair(batch_a, batch_b, "matmul");
  if (a.size() >= 2) out.push_back(a[a.size() - 2]);
  if (b.size() >= 2) out.push_back(b.back());
  ctx.add_output(std::move(out), t, ctx.common_device());
}

template <class Ctx>
void infer_bmm(Ctx& ctx) {
  check_dims(ctx, ctx.input(0), 3, "self");
  check_dims(ctx, ctx.input(1), 3, "other");
  const typename Ctx::Sizes& a = ctx.input(0).sizes();
  const typename Ctx::Sizes& b = ctx.input(1).sizes();
  const DType t = matrix_dtype(ctx, 0, 1);
  if (a[0] != b[0]) {
    throw ShapeError(detail::str_cat("bmm: batch sizes differ: ", a, " and ", b));
  }
  check_inner(ctx, a[2], b[1], a, b);
  ctx.add_output({a[0], a[1], b[2]}, t, ctx.common_device());
}

template <class Ctx>
void infer_addmm(Ctx& ctx) {
  using Sizes = typename Ctx::Sizes;
  check_dims(ctx, ctx.input(1), 2, "mat1");
  check_dims(ctx, ctx.input(2), 2, "mat2");
  const Sizes& a = ctx.input(1).sizes();
  const Sizes& b = ctx.input(2).sizes();
  const DType t = matrix_dtype(ctx, 1, 2);
  if (ctx.input(0).dtype() != t) {
    throw DTypeError(detail::str_cat("addmm: self has dtype ", ctx.input(0).dtype(),
                                     " but mat1 and mat2 have ", t));
  }
  check_inner(ctx, a[1], b[0], a, b);
  const Sizes out = {a[0], b[1]};
  const Sizes& self = ctx.input(0).sizes();
  if (self.size() > 2 || broadcast_pair(self, out, "addmm") != out) {
    throw ShapeError(detail::str_cat("addmm: self of shape ", self,
                                     " does not broadcast to the product's shape ", out));
  }
  ctx.add_output(out, t, ctx.common_device());
}

template <class Ctx>
void infer_linear(Ctx& ctx) {
  using Sizes = typename Ctx::Sizes;
  const auto& input = ctx.input(0);
  const auto& weight = ctx.input(1);
  if (input.dim() < 1) {
    throw ShapeError(detail::str_cat("linear: input must be at least 1-D, got shape ", input.sizes()));
  }
  check_dims(ctx, weight, 2, "weight");
  const DType t = matrix_dtype(ctx, 0, 1);
  if (input.sizes().back() != weight.size(1)) {
    throw ShapeError(detail::str_cat("linear: input features differ from the weight's: input ",
                                     input.sizes(), ", weight ", weight.sizes()));
  }
  if (ctx.has_input(2)) {
    const auto& bias = ctx.input(2);
    if (bias.dtype() != t) {
      throw DTypeError(detail::str_cat("linear: bias has dtype ", bias.dtype(), " but input has ", t));
    }
    if (bias.sizes() != Sizes{weight.size(0)}) {
      throw ShapeError(detail::str_cat("linear: bias must have shape [", weight.size(0),
                                       "], got ", bias.sizes()));
    }
  }
  Sizes out(input.sizes().begin(), input.sizes().end() - 1);
  out.push_back(weight.size(0));
  ctx.add_output(std::move(out), t, ctx.common_device());
}

KILN_SHAPE_RULE_INSTANCES(infer_matmul)
KILN_SHAPE_RULE_INSTANCES(infer_bmm)
KILN_SHAPE_RULE_INSTANCES(infer_addmm)
KILN_SHAPE_RULE_INSTANCES(infer_linear)

}  // namespace kiln::ops
