// Shape rules of the ops that backward rules need: the adjoints of conv, the
// pools, interpolate and pad, and max_pool2d_with_indices. Each adjoint runs
// its forward op's rule on a meta input of input_size, so both share every
// check and canonicalization, and grad_output must have the forward's output shape.
#include <string>
#include <vector>

#include "ops/dispatch.h"
#include "ops/op_table.h"

namespace kiln::ops {
namespace {

void check_input_size(const ShapeCtx& ctx, const std::vector<int64_t>& sizes, const char* what) {
  for (int64_t s : sizes) {
    KILN_CHECK(s >= 0, ValueError, ctx.name(), ": ", what, " must be non-negative, got ", sizes);
  }
}

// The output of forward op `op` on inputs with attributes attrs (canonicalized
// in place); its errors are rethrown prefixed with the backward op's name.
TensorMeta forward_output(const ShapeCtx& ctx, OpId op, std::vector<Tensor> inputs, Attrs& attrs) {
  const OpSchema& schema = op_schema(op);
  ShapeCtx forward{schema, inputs, attrs, {}, {}};
  const std::string prefix = detail::str_cat(ctx.name(), ": ");
  try {
    schema.shape_rule(forward);
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

void check_grad_output(const ShapeCtx& ctx, const TensorMeta& expected, const char* size_name) {
  const Tensor& grad = ctx.input(0);
  KILN_CHECK(grad.sizes() == expected.sizes, ShapeError, ctx.name(), ": grad_output has shape ",
             grad.sizes(), " but the forward op gives ", expected.sizes, " for ", size_name, " ",
             ctx.attrs.ints(0));
}

Tensor meta_like(const Shape& sizes, const Tensor& like) {
  return make_tensor(sizes, like.dtype(), like.device(), /*meta=*/true);
}

OpId conv_op(const ShapeCtx& ctx, int64_t weight_rank) {
  KILN_CHECK(weight_rank == 3 || weight_rank == 4, ShapeError, ctx.name(),
             ": expected a 3-D or 4-D weight, got ", weight_rank, " dims");
  return weight_rank == 3 ? OpId::conv1d : OpId::conv2d;
}

}  // namespace

// Attributes: input_size, then conv's stride, padding, dilation, groups.
void infer_conv_backward_input(ShapeCtx& ctx) {
  const Tensor& grad = ctx.input(0);
  const Tensor& weight = ctx.input(1);
  const Shape& input_size = ctx.attrs.ints(0);
  check_input_size(ctx, input_size, "input_size");
  Attrs forward = attrs_from(ctx.attrs, 1);
  const TensorMeta out = forward_output(ctx, conv_op(ctx, weight.dim()),
                                        {meta_like(input_size, grad), weight}, forward);
  copy_back(ctx.attrs, 1, forward);
  check_grad_output(ctx, out, "input_size");
  ctx.add_output(input_size, grad.dtype(), ctx.common_device());
}

// Attributes: weight_size, then conv's stride, padding, dilation, groups.
void infer_conv_backward_weight(ShapeCtx& ctx) {
  const Tensor& grad = ctx.input(0);
  const Tensor& input = ctx.input(1);
  const Shape& weight_size = ctx.attrs.ints(0);
  check_input_size(ctx, weight_size, "weight_size");
  KILN_CHECK(grad.dtype() == input.dtype(), DTypeError, ctx.name(), ": grad_output has dtype ",
             grad.dtype(), " but input has ", input.dtype());
  const OpId op = conv_op(ctx, static_cast<int64_t>(weight_size.size()));
  Attrs forward = attrs_from(ctx.attrs, 1);
  const TensorMeta out = forward_output(ctx, op, {input, meta_like(weight_size, grad)}, forward);
  copy_back(ctx.attrs, 1, forward);
  check_grad_output(ctx, out, "weight_size");
  ctx.add_output(weight_size, grad.dtype(), ctx.common_device());
}

// max_pool2d's rule (same attributes), plus the int64 indices of the maxima.
void infer_max_pool2d_with_indices(ShapeCtx& ctx) {
  infer_max_pool2d(ctx);
  ctx.add_output(ctx.outputs[0].sizes, kInt64, ctx.outputs[0].device);
}

// Attributes: input_size, then avg_pool2d's.
void infer_avg_pool2d_backward(ShapeCtx& ctx) {
  const Tensor& grad = ctx.input(0);
  check_input_size(ctx, ctx.attrs.ints(0), "input_size");
  Attrs forward = attrs_from(ctx.attrs, 1);
  const TensorMeta out =
      forward_output(ctx, OpId::avg_pool2d, {meta_like(ctx.attrs.ints(0), grad)}, forward);
  copy_back(ctx.attrs, 1, forward);
  check_grad_output(ctx, out, "input_size");
  ctx.add_output(ctx.attrs.ints(0), grad.dtype(), ctx.common_device());
}

void infer_adaptive_avg_pool2d_backward(ShapeCtx& ctx) {
  const Tensor& grad = ctx.input(0);
  check_input_size(ctx, ctx.attrs.ints(0), "input_size");
  KILN_CHECK(grad.dim() >= 2, ShapeError, ctx.name(),
             ": grad_output must have at least 2 dims, got ", grad.sizes());
  Attrs forward{Shape(grad.sizes().end() - 2, grad.sizes().end())};
  const TensorMeta out =
      forward_output(ctx, OpId::adaptive_avg_pool2d, {meta_like(ctx.attrs.ints(0), grad)}, forward);
  check_grad_output(ctx, out, "input_size");
  ctx.add_output(ctx.attrs.ints(0), grad.dtype(), ctx.common_device());
}

// Attributes: input_size, mode, align_corners. The output size is grad_output's.
void infer_interpolate_backward(ShapeCtx& ctx) {
  const Tensor& grad = ctx.input(0);
  check_input_size(ctx, ctx.attrs.ints(0), "input_size");
  KILN_CHECK(is_floating(grad.dtype()), DTypeError, ctx.name(),
             ": grad_output must be a floating tensor, got ", grad.dtype());
  KILN_CHECK(grad.dim() >= 3, ShapeError, ctx.name(),
             ": grad_output must have at least 3 dims, got ", grad.sizes());
  Attrs forward{Shape(grad.sizes().begin() + 2, grad.sizes().end()), ctx.attrs[1], ctx.attrs[2]};
  const TensorMeta out =
      forward_output(ctx, OpId::interpolate, {meta_like(ctx.attrs.ints(0), grad)}, forward);
  check_grad_output(ctx, out, "input_size");
  ctx.add_output(ctx.attrs.ints(0), grad.dtype(), ctx.common_device());
}

// Attributes: input_size, pad, mode. Sums of gradients need a floating dtype.
void infer_pad_backward(ShapeCtx& ctx) {
  const Tensor& grad = ctx.input(0);
  check_input_size(ctx, ctx.attrs.ints(0), "input_size");
  KILN_CHECK(is_floating(grad.dtype()), DTypeError, ctx.name(),
             ": grad_output must be a floating tensor, got ", grad.dtype());
  Attrs forward{ctx.attrs[1], ctx.attrs[2], 0.0};
  const TensorMeta out =
      forward_output(ctx, OpId::pad, {meta_like(ctx.attrs.ints(0), grad)}, forward);
  check_grad_output(ctx, out, "input_size");
  ctx.add_output(ctx.attrs.ints(0), grad.dtype(), ctx.common_device());
}

}  // namespace kiln::ops
