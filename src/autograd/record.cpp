#include "autograd/record.h"

#include "autograd/meta.h"
#include "autograd/nodes.h"
#include "kiln/autograd.h"

namespace kiln::autograd {

bool should_record(const ops::OpSchema& schema, std::span<const Tensor> inputs) {
  if (!is_grad_enabled() || schema.has_flag(ops::kNoGrad)) return false;
  for (const Tensor& t : inputs)
    if (requires_grad(t)) return true;
  return false;
}

void record_op(const ops::OpSchema& schema, std::span<const Tensor> inputs,
               const ops::Attrs& attrs, std::span<Tensor> outputs) {
  auto node = std::make_shared<OpNode>(schema, attrs);
  node->add_inputs(inputs);
  node->save_results(outputs);
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (is_floating(outputs[i].dtype())) set_history(outputs[i], node, static_cast<uint32_t>(i));
  }
}

void record_device_copy(const Tensor& input, const Tensor& result) {
  if (!is_floating(result.dtype())) return;
  set_history(result, std::make_shared<DeviceCopyBackward>(input, result), 0);
}

void mark_view(const Tensor& input, const Tensor& view) {
  TensorImpl& v = view.impl();
  const TensorImpl& in = input.impl();
  v.view_base = in.view_base ? in.view_base : input.impl_ptr();
  v.view_version = input.version();
  v.inference = in.inference;
}

namespace {

bool aliases(const Tensor& a, const Tensor& b) { return a.defined() && a.shares_storage(b); }

void check_inplace_target(const ops::OpSchema& schema, const Tensor& self) {
  const AutogradMeta* m = meta_of(self);
  if (m && m->requires_grad && !m->grad_fn) {
    throw Error(detail::str_cat(schema.name, "_: a leaf tensor that requires grad (shape ",
                                self.sizes(), ") can't be modified in place; update parameters ",
                                "under a NoGradGuard"));
  }
  const auto& base = self.impl().view_base;
  if (!base) return;
  const AutogradMeta* bm = base->autograd.get();
  if (bm && bm->requires_grad && !bm->grad_fn) {
    throw Error(detail::str_cat(schema.name, "_: a view of a leaf tensor that requires grad ",
                                "can't be modified in place; update it under a NoGradGuard"));
  }
  for (int64_t d = 0; d < self.dim(); ++d) {
    if (self.stride(d) == 0 && self.size(d) > 1) {
      throw Error(detail::str_cat(schema.name, "_: the view written in place (shape ",
                                  self.sizes(), ", strides ", self.strides(),
                                  ") has several elements in one memory location"));
    }
  }
}

}  // namespace

InplaceRecord::InplaceRecord(const ops::OpSchema& schema, const Tensor& self,
                             std::span<const Tensor> inputs, const ops::Attrs& attrs) {
  if (!is_grad_enabled() || schema.has_flag(ops::kNoGrad)) return;
  if (!should_record(schema, inputs) && !requires_grad(self)) return;
  check_inplace_target(schema, self);
  // Inputs that alias self and are saved would be overwritten: the rule gets copies.
  const Derivative& d = derivative(schema.id);
  TensorList recorded(inputs.begin(), inputs.end());
  for (size_t i = 0; i < recorded.size(); ++i) {
    if (aliases(recorded[i], self) && d.save_inputs[i]) recorded[i] = recorded[i].clone();
  }
  view_is_input_ = !inputs.empty() && inputs[0].defined() &&
                   inputs[0].impl_ptr() == self.impl_ptr();
  node_ = std::make_shared<OpNode>(schema, attrs);
  node_->add_inputs(recorded);
}

InplaceRecord::~InplaceRecord() = default;

void InplaceRecord::finish(const Tensor& self) {
  if (!node_) return;
  Tensor outputs[1] = {self};
  node_->save_results(outputs);
  const auto& base_impl = self.impl().view_base;
  if (!base_impl) {
    set_history(self, node_, 0);
    return;
  }
  Tensor base(base_impl);
  auto copy_slices = std::make_shared<CopySlices>(base, self, node_, view_is_input_);
  set_history(base, copy_slices, 0);
  set_history(self, std::make_shared<ViewOfBase>(base, self), 0);
  self.impl().view_version = self.version();
}

}  // namespace kiln::autograd
