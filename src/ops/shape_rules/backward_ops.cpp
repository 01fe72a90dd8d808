// Shape rules of the ops that backward rules need: the adjoints of conv, the
// pools, interpolate and pad, and max_pool2d_with_indices. Each adjoint runs
// its forward op's rule on a meta input of input_size, so both share every
// check and canonicalization, and grad_output must have the forward's output shape.
// In symbolic mode the forward's rule runs on a SymTensor of input_size (an
// attribute, so its sizes are constants) in a nested SymShapeCtx.
#include <string>
#include <type_traits>
#include <vector>

#include "ops/dispatch.h"
#include "ops/op_table.h"

namespace kiln::ops {
namespace {

template <class Ctx>
void check_input_size(const Ctx& ctx, const std::vector<int64_t>& sizes, const char* what) {
  for (int64_t s : sizes) {
    KILN_CHECK(s >= 0, ValueError, ctx.name(), ": ", what, " must be non-negative, got ", sizes);
  }
}

// The output of forward op `op` on inputs with attributes attrs (canonicalized
// in place); its errors are rethrown prefixed with the backward op's name.
template <class Ctx>
typename Ctx::Meta forward_output(const Ctx& ctx, OpId op,
                                  std::vector<typename Ctx::TensorType> inputs, Attrs& attrs) {
  const OpSchema& schema = op_schema(op);
  Ctx forward{schema, inputs, attrs, {}, {}};
  const std::string prefix = detail::str_cat(ctx.name(), ": ");
  try {
    shape_rule_of<Ctx>(schema)(forward);
  } catch (const ShapeError& e) {
    throw ShapeError(prefix + e.what());
  } catch (const ValueError& e) {
    throw ValueError(prefix + e.what());
  } catch (const DTypeError& e) {
    throw DTypeError(prefix + e.what());
  } catch (const IndexError& e) {
    throw IndexError(prefix + e.what());
  } catch (const DeviceError& e) {
    throw DeviceError(prefix + e.what());
  }
  return forward.outputs[0];
}

// The forward's attributes: the backward's from index `first` on.
Attrs attrs_from(const Attrs& attrs, size_t first) {
  Attrs out;
  for (size_t k = first; k < attrs.size(); ++k) out.push_back(attrs[k]);
  return out;
}

// Stores the forward's canonicalized attributes back, from index `first` on.
void copy_back(Attrs& attrs, size_t first, const Attrs& forward) {
  for (size_t k = 0; k < forward.size(); ++k) attrs[first + k] = forward[k];
}

template <class Ctx>
void check_grad_output(const Ctx& ctx, const typename Ctx::Meta& expected, const char* size_name) {
  const auto& grad = ctx.input(0);
  KILN_CHECK(grad.sizes() == expected.sizes, ShapeError, ctx.name(), ": grad_output has shape ",
             grad.sizes(), " but the forward op gives ", expected.sizes, " for ", size_name, " ",
             ctx.attrs.ints(0));
}

// An attribute's sizes as the context's Sizes (constants in symbolic mode).
template <class Ctx>
typename Ctx::Sizes sizes_of(const Shape& sizes) {
  return typename Ctx::Sizes(sizes.begin(), sizes.end());
}

// A forward input of sizes (an attribute) with like's dtype and device: a meta
// Tensor in eager mode, a contiguous SymTensor in symbolic mode.
template <class Ctx>
typename Ctx::TensorType meta_like(const Shape& sizes, const typename Ctx::TensorType& like) {
  if constexpr (std::is_same_v<Ctx, ShapeCtx>) {
    return make_tensor(sizes, like.dtype(), like.device(), /*meta=*/true);
  } else {
    return SymTensor::contiguous(sizes_of<Ctx>(sizes), like.dtype(), like.device());
  }
}

// Sizes [first, last) of a tensor as an ints attribute of the forward op. The
// forward's rule reads attributes as plain numbers, so in symbolic mode each
// size is specialized to its traced value (sym::as_int guards it).
template <class It>
Shape plain_sizes(It first, It last) {
  Shape out;
  for (; first != last; ++first) out.push_back(sym::as_int(*first));
  return out;
}

template <class Ctx>
OpId conv_op(const Ctx& ctx, int64_t weight_rank) {
  KILN_CHECK(weight_rank == 3 || weight_rank == 4, ShapeError, ctx.name(),
             ": expected a 3-D or 4-D weight, got ", weight_rank, " dims");
  return weight_rank == 3 ? OpId::conv1d : OpId::conv2d;
}

}  // namespace

// Attributes: input_size, then conv's stride, padding, dilation, groups.
template <class Ctx>
void infer_conv_backward_input(Ctx& ctx) {
  const auto& grad = ctx.input(0);
  const auto& weight = ctx.input(1);
  const Shape& input_size = ctx.attrs.ints(0);
  check_input_size(ctx, input_size, "input_size");
  Attrs forward = attrs_from(ctx.attrs, 1);
  const auto out = forward_output(ctx, conv_op(ctx, weight.dim()),
                                  {meta_like<Ctx>(input_size, grad), weight}, forward);
  copy_back(ctx.attrs, 1, forward);
  check_grad_output(ctx, out, "input_size");
  ctx.add_output(sizes_of<Ctx>(input_size), grad.dtype(), ctx.common_device());
}

// Attributes: weight_size, then conv's stride, padding, dilation, groups.
template <class Ctx>
void infer_conv_backward_weight(Ctx& ctx) {
  const auto& grad = ctx.input(0);
  const auto& input = ctx.input(1);
  const Shape& weight_size = ctx.attrs.ints(0);
  check_input_size(ctx, weight_size, "weight_size");
  KILN_CHECK(grad.dtype() == input.dtype(), DTypeError, ctx.name(), ": grad_output has dtype ",
             grad.dtype(), " but input has ", input.dtype());
  const OpId op = conv_op(ctx, static_cast<int64_t>(weight_size.size()));
  Attrs forward = attrs_from(ctx.attrs, 1);
  const auto out = forward_output(ctx, op, {input, meta_like<Ctx>(weight_size, grad)}, forward);
  copy_back(ctx.attrs, 1, forward);
  check_grad_output(ctx, out, "weight_size");
  ctx.add_output(sizes_of<Ctx>(weight_size), grad.dtype(), ctx.common_device());
}

// max_pool2d's rule (same attributes), plus the int64 indices of the maxima.
template <class Ctx>
void infer_max_pool2d_with_indices(Ctx& ctx) {
  infer_max_pool2d(ctx);
  ctx.add_output(ctx.outputs[0].sizes, kInt64, ctx.outputs[0].device);
}

// Attributes: input_size, then avg_pool2d's.
template <class Ctx>
void infer_avg_pool2d_backward(Ctx& ctx) {
  const auto& grad = ctx.input(0);
  check_input_size(ctx, ctx.attrs.ints(0), "input_size");
  Attrs forward = attrs_from(ctx.attrs, 1);
  const auto out =
      forward_output(ctx, OpId::avg_pool2d, {meta_like<Ctx>(ctx.attrs.ints(0), grad)}, forward);
  copy_back(ctx.attrs, 1, forward);
  check_grad_output(ctx, out, "input_size");
  ctx.add_output(sizes_of<Ctx>(ctx.attrs.ints(0)), grad.dtype(), ctx.common_device());
}

template <class Ctx>
void infer_adaptive_avg_pool2d_backward(Ctx& ctx) {
  const auto& grad = ctx.input(0);
  check_input_size(ctx, ctx.attrs.ints(0), "input_size");
  KILN_CHECK(grad.dim() >= 2, ShapeError, ctx.name(),
             ": grad_output must have at least 2 dims, got ", grad.sizes());
  Attrs forward{plain_sizes(grad.sizes().end() - 2, grad.sizes().end())};
  const auto out = forward_output(ctx, OpId::adaptive_avg_pool2d,
                                  {meta_like<Ctx>(ctx.attrs.ints(0), grad)}, forward);
  check_grad_output(ctx, out, "input_size");
  ctx.add_output(sizes_of<Ctx>(ctx.attrs.ints(0)), grad.dtype(), ctx.common_device());
}

// Attributes: input_size, mode, align_corners. The output size is grad_output's.
template <class Ctx>
void infer_interpolate_backward(Ctx& ctx) {
  const auto& grad = ctx.input(0);
  check_input_size(ctx, ctx.attrs.ints(0), "input_size");
  KILN_CHECK(is_floating(grad.dtype()), DTypeError, ctx.name(),
             ": grad_output must be a floating tensor, got ", grad.dtype());
  KILN_CHECK(grad.dim() >= 3, ShapeError, ctx.name(),
             ": grad_output must have at least 3 dims, got ", grad.sizes());
  Attrs forward{plain_sizes(grad.sizes().begin() + 2, grad.sizes().end()), ctx.attrs[1],
                ctx.attrs[2], std::monostate{}};
  const auto out =
      forward_output(ctx, OpId::interpolate, {meta_like<Ctx>(ctx.attrs.ints(0), grad)}, forward);
  check_grad_output(ctx, out, "input_size");
  ctx.add_output(sizes_of<Ctx>(ctx.attrs.ints(0)), grad.dtype(), ctx.common_device());
}

// Attributes: input_size, pad, mode. Sums of gradients need a floating dtype.
template <class Ctx>
void infer_pad_backward(Ctx& ctx) {
  const auto& grad = ctx.input(0);
  check_input_size(ctx, ctx.attrs.ints(0), "input_size");
  KILN_CHECK(is_floating(grad.dtype()), DTypeError, ctx.name(),
             ": grad_output must be a floating tensor, got ", grad.dtype());
  Attrs forward{ctx.attrs[1], ctx.attrs[2], 0.0};
  const auto out =
      forward_output(ctx, OpId::pad, {meta_like<Ctx>(ctx.attrs.ints(0), grad)}, forward);
  check_grad_output(ctx, out, "input_size");
  ctx.add_output(sizes_of<Ctx>(ctx.attrs.ints(0)), grad.dtype(), ctx.common_device());
}

KILN_SHAPE_RULE_INSTANCES(infer_conv_backward_input)
KILN_SHAPE_RULE_INSTANCES(infer_conv_backward_weight)
KILN_SHAPE_RULE_INSTANCES(infer_max_pool2d_with_indices)
KILN_SHAPE_RULE_INSTANCES(infer_avg_pool2d_backward)
KILN_SHAPE_RULE_INSTANCES(infer_adaptive_avg_pool2d_backward)
KILN_SHAPE_RULE_INSTANCES(infer_interpolate_backward)
KILN_SHAPE_RULE_INSTANCES(infer_pad_backward)

}  // namespace kiln::ops
