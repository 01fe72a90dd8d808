// Shape and dtype rules of the elementwise ops.
#include <algorithm>

#include "core/shape_util.h"
#include "ops/op_table.h"
#include "ops/shape_rules/scalar_fit.h"
#include "ops/type_promotion.h"

namespace kiln::ops {
namespace {

template <class Ctx>
typename Ctx::Sizes broadcast_inputs(const Ctx& ctx) {
  // From the first input's sizes: a unary op compares no sizes (on symbols,
  // a comparison may be a guard).
  typename Ctx::Sizes out = ctx.inputs.empty() ? typename Ctx::Sizes{} : ctx.inputs[0].sizes();
  for (size_t i = 1; i < ctx.inputs.size(); ++i)
    out = broadcast_pair(out, ctx.inputs[i].sizes(), ctx.name());
  return out;
}

// Broadcast output of dtype `out`, with every input cast to `compute`.
template <class Ctx>
void elementwise(Ctx& ctx, DType compute, DType out) {
  for (size_t i = 0; i < ctx.inputs.size(); ++i) ctx.cast_input(i, compute);
  ctx.add_output(broadcast_inputs(ctx), out, ctx.common_device());
}

template <class Ctx>
void reject_bool(const Ctx& ctx, DType t) {
  if (t == kBool) {
    throw DTypeError(detail::str_cat(ctx.name(), ": not supported for bool tensors"));
  }
}

DType float_of(DType t) { return is_floating(t) ? t : kFloat32; }

}  // namespace

template <class Ctx>
void infer_unary_same(Ctx& ctx) {
  const DType t = ctx.input(0).dtype();
  const auto op = ctx.schema.id;
  if (op == OpId::neg || op == OpId::abs || op == OpId::square || op == OpId::relu) {
    reject_bool(ctx, t);
  }
  elementwise(ctx, t, t);
}

template <class Ctx>
void infer_unary_float(Ctx& ctx) {
  if (ctx.schema.id == OpId::gelu) {
    const auto& mode = ctx.attrs.str(0);
    if (mode != "none" && mode != "tanh") {
      throw ValueError(
          detail::str_cat("gelu: approximate must be 'none' or 'tanh', got '", mode, "'"));
    }
  }
  if (ctx.schema.id == OpId::hardtanh && !(ctx.attrs.f(0) <= ctx.attrs.f(1))) {
    throw ValueError(detail::str_cat("hardtanh: min_val ", ctx.attrs.f(0),
                                     " must be at most max_val ", ctx.attrs.f(1)));
  }
  const DType t = float_of(ctx.input(0).dtype());
  elementwise(ctx, t, t);
}

template <class Ctx>
void infer_unary_bool(Ctx& ctx) {
  ctx.add_output(ctx.input(0).sizes(), kBool, ctx.common_device());
}

template <class Ctx>
void infer_binary_arith(Ctx& ctx) {
  const DType t = result_type(ctx.inputs);
  const auto op = ctx.schema.id;
  if (t == kBool && op == OpId::sub) {
    throw DTypeError("sub: subtracting bool tensors is not supported; use logical_xor");
  }
  if (t == kBool && (op == OpId::pow || op == OpId::remainder)) reject_bool(ctx, t);
  if ((op == OpId::add || op == OpId::sub) && !is_floating(t) &&
      ctx.attrs.scalar(0).is_floating()) {
    throw DTypeError(detail::str_cat(ctx.name(), ": alpha ", ctx.attrs.scalar(0),
                                     " is a floating value but the inputs are ", t));
  }
  elementwise(ctx, t, t);
}

template <class Ctx>
void infer_binary_float(Ctx& ctx) {
  const DType t = float_of(result_type(ctx.inputs));
  elementwise(ctx, t, t);
}

template <class Ctx>
void infer_binary_compare(Ctx& ctx) {
  elementwise(ctx, result_type(ctx.inputs), kBool);
}

template <class Ctx>
void infer_binary_logical(Ctx& ctx) {
  // Both inputs in their common dtype, as comparisons and PyTorch: the
  // kernels read them as one type.
  elementwise(ctx, result_type(ctx.inputs), kBool);
}

template <class Ctx>
void infer_where(Ctx& ctx) {
  if (ctx.input(0).dtype() != kBool) {
    throw DTypeError(
        detail::str_cat("where: condition must be a bool tensor, got ", ctx.input(0).dtype()));
  }
  const DType t = result_type(ctx.inputs.subspan(1));
  ctx.cast_input(1, t);
  ctx.cast_input(2, t);
  ctx.add_output(broadcast_inputs(ctx), t, ctx.common_device());
}

template <class Ctx>
void infer_clamp(Ctx& ctx) {
  if (!ctx.attrs.has(0) && !ctx.attrs.has(1)) {
    throw ValueError("clamp: at least one of min and max must be given");
  }
  DType t = ctx.input(0).dtype();
  reject_bool(ctx, t);
  for (size_t k = 0; k < 2; ++k) {
    if (ctx.attrs.has(k) && ctx.attrs.scalar(k).is_floating() && !is_floating(t)) t = kFloat32;
  }
  elementwise(ctx, t, t);
}

template <class Ctx>
void infer_masked_fill(Ctx& ctx) {
  if (ctx.input(1).dtype() != kBool) {
    throw DTypeError(
        detail::str_cat("masked_fill: mask must be a bool tensor, got ", ctx.input(1).dtype()));
  }
  const DType t = ctx.input(0).dtype();
  ctx.add_output(broadcast_inputs(ctx), t, ctx.common_device());
}

template <class Ctx>
void infer_copy(Ctx& ctx) {
  ctx.add_output(ctx.input(0).sizes(), ctx.attrs.dtype(0), ctx.common_device());
}

template <class Ctx>
void infer_to_device(Ctx& ctx) {
  ctx.add_output(ctx.input(0).sizes(), ctx.input(0).dtype(), ctx.attrs.device(0));
}

template <class Ctx>
void infer_fill(Ctx& ctx) {
  check_fill_value_fits(ctx.name(), ctx.attrs.scalar(0), ctx.input(0).dtype());
  ctx.add_output(ctx.input(0).sizes(), ctx.input(0).dtype(), ctx.common_device());
}

KILN_SHAPE_RULE_INSTANCES(infer_unary_same)
KILN_SHAPE_RULE_INSTANCES(infer_unary_float)
KILN_SHAPE_RULE_INSTANCES(infer_unary_bool)
KILN_SHAPE_RULE_INSTANCES(infer_binary_arith)
KILN_SHAPE_RULE_INSTANCES(infer_binary_float)
KILN_SHAPE_RULE_INSTANCES(infer_binary_compare)
KILN_SHAPE_RULE_INSTANCES(infer_binary_logical)
KILN_SHAPE_RULE_INSTANCES(infer_where)
KILN_SHAPE_RULE_INSTANCES(infer_clamp)
KILN_SHAPE_RULE_INSTANCES(infer_masked_fill)
KILN_SHAPE_RULE_INSTANCES(infer_copy)
KILN_SHAPE_RULE_INSTANCES(infer_to_device)
KILN_SHAPE_RULE_INSTANCES(infer_fill)

}  // namespace kiln::ops
