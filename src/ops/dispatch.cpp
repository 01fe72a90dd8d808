#include "ops/dispatch.h"

#include "core/shape_util.h"

#include <cassert>
#include <optional>

#include "autograd/record.h"
#include "backends/backend.h"
#include "backends/writes_nothing.h"
#include "core/checked_size.h"
#include "core/launch_count.h"
#include "kiln/autograd.h"
#include "ops/autocast.h"
#include "ops/op_profile.h"
#include "ops/tracing.h"

namespace kiln::ops {
namespace {

// Whether reference kernels replace the CPU kernels on this thread (tests only).
thread_local bool t_reference_mode = false;

void check_arity(const OpSchema& schema, std::span<const Tensor> inputs) {
  if (schema.variadic()) {
    // A view of a list views its first tensor: there must be one.
    if (schema.has_flag(kView) && (inputs.empty() || !inputs[0].defined())) {
      throw ValueError(detail::str_cat(schema.name, ": expected the tensor to view first, got ",
                                       inputs.empty() ? "no tensors" : "an undefined tensor"));
    }
    return;
  }
  if (inputs.size() < schema.min_inputs() || inputs.size() > schema.inputs.size()) {
    throw Error(detail::str_cat(schema.name, ": expected ", schema.min_inputs(), " to ",
                                schema.inputs.size(), " tensor inputs, got ", inputs.size()));
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined() && !schema.inputs[i].optional) {
      throw Error(detail::str_cat(schema.name, ": input '", schema.inputs[i].name,
                                  "' is an undefined tensor"));
    }
  }
}

ShapeCtx run_shape_rule(const OpSchema& schema, std::span<const Tensor> inputs, Attrs& attrs) {
  check_arity(schema, inputs);
  // A custom op's own attributes follow the table's (ops/custom.h).
  assert((schema.id == OpId::custom ? attrs.size() >= schema.attrs.size()
                                    : attrs.size() == schema.attrs.size()) &&
         "attribute count differs from the op table");
  if (!schema.shape_rule) throw Error(detail::str_cat(schema.name, ": op has no shape rule"));
  ShapeCtx ctx{schema, inputs, attrs, {}, {}};
  schema.shape_rule(ctx);
  assert(schema.num_outputs < 0 || static_cast<int>(ctx.outputs.size()) == schema.num_outputs);
  // Every output's count fits, and a new tensor's bytes too (core/checked_size.h).
  for (const TensorMeta& out : ctx.outputs) {
    if (schema.has_flag(kView)) {
      checked_numel(out.sizes, schema.name);
    } else {
      checked_nbytes(out.sizes, out.dtype, schema.name);
    }
  }
  return ctx;
}

bool any_meta(std::span<const Tensor> inputs) {
  for (const auto& t : inputs)
    if (t.defined() && t.is_meta()) return true;
  return false;
}

// Meta tensors have no values: an op mixing them with tensors that have some
// would give a meta result for real data, or (in place) drop the values it
// was to write. A DeviceError naming both; a real 0-dim tensor (a number)
// mixes with meta ones, as it mixes across devices.
void check_meta_mix(const OpSchema& schema, std::span<const Tensor> inputs, const Tensor* self) {
  if (ops::TracePause::pausing_a_tracer()) return;  // proxies beside captured constants
  std::optional<size_t> meta, real;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    if (!t.defined()) continue;
    if (t.is_meta()) {
      meta = meta.value_or(i);
    } else if (t.dim() > 0) {
      real = real.value_or(i);
    }
  }
  if (self && !self->is_meta() && meta) {
    throw DeviceError(detail::str_cat(schema.name, "_: input ", *meta,
                                      " is a meta tensor (no values) written into a tensor on ",
                                      self->device(), " with values"));
  }
  if (!self && meta && real) {
    throw DeviceError(detail::str_cat(schema.name, ": input ", *meta,
                                      " is a meta tensor (no values) and input ", *real,
                                      " a tensor on ", inputs[*real].device(),
                                      " with values: an op takes one kind or the other"));
  }
}

const backend::KernelFn& find_kernel(const OpSchema& schema, Device device) {
  const backend::KernelFn& fn = t_reference_mode && device.is_cpu()
                                    ? backend::reference_kernels().get(schema.id)
                                    : backend::backend_for(device.kind()).kernels().get(schema.id);
  if (!fn) throw Error(detail::str_cat(schema.name, ": no kernel for device ", device));
  return fn;
}

// Inputs converted to the dtypes the shape rule asked for.
std::span<const Tensor> cast_inputs(const ShapeCtx& ctx, std::span<const Tensor> inputs,
                                    TensorList& storage) {
  bool any = false;
  for (const auto& c : ctx.input_casts) any = any || c.has_value();
  if (!any) return inputs;
  storage.assign(inputs.begin(), inputs.end());
  for (size_t i = 0; i < ctx.input_casts.size(); ++i)
    if (ctx.input_casts[i]) storage[i] = storage[i].to(*ctx.input_casts[i]);
  return storage;
}

// Write straight into self when the kernel can. Kernels of in-place ops accept
// an input that is exactly self; pointwise kernels also write any strides.
// Partial overlap, a dtype change or a strided self for another kernel goes
// through a temporary.
bool direct_inplace_possible(const OpSchema& schema, const Tensor& self,
                             std::span<const Tensor> inputs, DType result_dtype) {
  if (result_dtype != self.dtype() || !(schema.has_flag(kPointwise) || self.is_contiguous()))
    return false;
  for (const Tensor& t : inputs) {
    if (t.defined() && t.shares_storage(self) &&
        (t.storage_offset() != self.storage_offset() || t.strides() != self.strides() ||
         t.sizes() != self.sizes() || t.dtype() != self.dtype())) {
      return false;
    }
  }
  return true;
}

}  // namespace

ReferenceModeGuard::ReferenceModeGuard() noexcept : previous_(t_reference_mode) {
  t_reference_mode = true;
}
ReferenceModeGuard::~ReferenceModeGuard() { t_reference_mode = previous_; }
bool ReferenceModeGuard::enabled() noexcept { return t_reference_mode; }

Shape contiguous_strides(const Shape& sizes) { return kiln::contiguous_strides(sizes); }

Device kernel_device(std::span<const TensorMeta> outputs, std::span<const Tensor> inputs) {
  if (!outputs.empty()) return outputs[0].device;
  for (const Tensor& t : inputs)
    if (t.defined()) return t.device();
  return Device::cpu();
}

Tensor make_tensor(const Shape& sizes, DType dtype, Device device, bool meta) {
  const size_t nbytes = checked_nbytes(sizes, dtype, "empty");
  return make_tensor(meta ? std::make_shared<Storage>(nbytes, device)
                          : backend::backend_for(device.kind()).allocate(nbytes, device),
                     sizes, dtype);
}

Tensor make_tensor(std::shared_ptr<Storage> storage, const Shape& sizes, DType dtype) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->sizes = sizes;
  impl->strides = contiguous_strides(sizes);
  impl->dtype = dtype;
  impl->inference = InferenceModeGuard::enabled();
  return Tensor(std::move(impl));
}

Tensor make_strided(std::shared_ptr<Storage> storage, Shape sizes, Shape strides, int64_t offset,
                    DType dtype) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->sizes = std::move(sizes);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

bool can_cast(DType from, DType to) noexcept {
  if (is_floating(from) && is_integral(to, /*include_bool=*/false)) return false;
  if (from != kBool && to == kBool) return false;
  return true;
}

Inferred infer(OpId op, std::span<const Tensor> inputs, Attrs attrs) {
  const OpSchema& schema = op_schema(op);
  ShapeCtx ctx = run_shape_rule(schema, inputs, attrs);
  ctx.input_casts.resize(inputs.size());
  return Inferred{std::move(ctx.outputs), std::move(ctx.input_casts), std::move(attrs)};
}

const backend::KernelFn& kernel_for(OpId op, Device device) {
  return find_kernel(op_schema(op), device);
}

TensorList dispatch(OpId op, std::span<const Tensor> inputs, Attrs attrs) {
  // Autocast's casts first, so that a trace records them as ops.
  if (autocast::active()) {
    TensorList cast;
    if (autocast::cast_inputs(op, inputs, cast)) return dispatch(op, cast, std::move(attrs));
  }
  if (ops::TraceRecorder* tracer = ops::TraceRecorder::active())
    return tracer->record(op, inputs, std::move(attrs));
  OpProfileScope profile(op);
  const OpSchema& schema = op_schema(op);
  ShapeCtx ctx = run_shape_rule(schema, inputs, attrs);
  TensorList outputs;
  outputs.reserve(ctx.outputs.size());
  const bool record = autograd::should_record(schema, inputs);
  if (schema.has_flag(kView)) {
    for (const auto& meta : ctx.outputs) {
      outputs.push_back(make_strided(inputs[0].storage(), meta.sizes, meta.strides, meta.offset,
                                     inputs[0].dtype()));
      autograd::mark_view(inputs[0], outputs.back());
    }
  } else {
    check_meta_mix(schema, inputs, nullptr);
    const bool meta = any_meta(inputs);
    for (const auto& m : ctx.outputs)
      outputs.push_back(make_tensor(m.sizes, m.dtype, m.device, meta));
    if (!meta && !backend::writes_nothing(outputs, inputs)) {
      TensorList cast_storage;
      auto kernel_inputs = cast_inputs(ctx, inputs, cast_storage);
      const Device device = kernel_device(ctx.outputs, inputs);
      detail::count_kernel_launch();
      find_kernel(schema, device)(backend::KernelCall{schema, kernel_inputs, outputs, attrs});
    }
  }
  if (record) autograd::record_op(schema, inputs, attrs, outputs);
  return outputs;
}

Tensor dispatch1(OpId op, std::initializer_list<Tensor> inputs, Attrs attrs) {
  return std::move(
      dispatch(op, std::span<const Tensor>(inputs.begin(), inputs.size()), std::move(attrs))[0]);
}

Tensor& dispatch_inplace(OpId op, Tensor& self, std::span<const Tensor> inputs, Attrs attrs) {
  if (ops::TraceRecorder* tracer = ops::TraceRecorder::active()) {
    tracer->record_inplace(op, self, inputs, std::move(attrs));
    return self;
  }
  OpProfileScope profile(op);
  const OpSchema& schema = op_schema(op);
  assert(schema.has_flag(kInplace) && schema.num_outputs == 1);
  ShapeCtx ctx = run_shape_rule(schema, inputs, attrs);
  check_meta_mix(schema, inputs, &self);
  const TensorMeta& result = ctx.outputs[0];
  if (result.sizes != self.sizes()) {
    throw ShapeError(detail::str_cat(schema.name, "_: result shape ", result.sizes,
                                     " does not match the shape of self ", self.sizes()));
  }
  if (!can_cast(result.dtype, self.dtype())) {
    throw DTypeError(detail::str_cat(schema.name, "_: result type ", result.dtype,
                                     " can't be cast to the type of self, ", self.dtype()));
  }
  if (!direct_inplace_possible(schema, self, inputs, result.dtype)) {
    // Recorded inputs that share self's storage are copied first: the copy into
    // self would otherwise overwrite what the op saved for backward.
    TensorList copies;
    if (autograd::should_record(schema, inputs)) {
      copies.assign(inputs.begin(), inputs.end());
      for (Tensor& t : copies)
        if (t.defined() && t.shares_storage(self)) t = t.clone();
      inputs = copies;
    }
    Tensor tmp = dispatch(op, inputs, attrs)[0];
    return dispatch_inplace(OpId::copy, self, {tmp}, Attrs{self.dtype()});
  }
  autograd::InplaceRecord record(schema, self, inputs, attrs);
  const Tensor self_only[1] = {self};
  if (!self.is_meta() && !any_meta(inputs) && !backend::writes_nothing(self_only, inputs)) {
    TensorList cast_storage;
    auto kernel_inputs = cast_inputs(ctx, inputs, cast_storage);
    Tensor outputs[1] = {self};
    detail::count_kernel_launch();
    find_kernel(schema, self.device())(backend::KernelCall{schema, kernel_inputs, outputs, attrs});
  }
  self.bump_version();
  record.finish(self);
  return self;
}

Tensor& dispatch_inplace(OpId op, Tensor& self, std::initializer_list<Tensor> inputs, Attrs attrs) {
  return dispatch_inplace(op, self, std::span<const Tensor>(inputs.begin(), inputs.size()),
                          std::move(attrs));
}

}  // namespace kiln::ops
