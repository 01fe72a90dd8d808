#include "autograd/nodes.h"

#include <cassert>

#include "autograd/meta.h"
#include "autograd/rules/common.h"

namespace kiln::autograd {

// --- SavedTensor -----------------------------------------------------------------

SavedTensor::SavedTensor(const Tensor& t, bool is_output) : is_output_(is_output) {
  if (!t.defined()) return;
  if (t.impl().inference) {
    throw Error("autograd: a tensor made under InferenceModeGuard can't be saved for backward; "
                "make it outside inference mode or clone() it");
  }
  data_ = is_output ? alias_without_history(t) : t;
  version_ = t.version();
}

namespace {

[[noreturn]] void throw_released(const Node& node) {
  throw Error(detail::str_cat(node.name(), ": backward through the graph a second time, ",
                              "after its saved tensors were freed; pass retain_graph=true to ",
                              "the first backward() if you need a second"));
}

}  // namespace

Tensor SavedTensor::unpack(Node& owner, uint32_t output_nr) const {
  if (released_) throw_released(owner);
  if (!data_.defined()) return {};
  if (data_.version() != version_) {
    throw Error(detail::str_cat(
        owner.name(), ": a tensor it saved for backward was modified by an in-place operation ",
        "(shape ", data_.sizes(), ", version ", version_, " when saved, now ", data_.version(),
        "); clone() it before the in-place op"));
  }
  if (!is_output_ || !is_grad_enabled()) return data_;
  // Double backward: the output needs its grad_fn back to be differentiated.
  Tensor out = alias_without_history(data_);
  set_history(out, owner.shared_from_this(), output_nr);
  return out;
}

void SavedTensor::release() noexcept {
  if (data_.defined()) released_ = true;
  data_ = Tensor();
}

// --- OpNode ----------------------------------------------------------------------

OpNode::OpNode(const ops::OpSchema& schema, ops::Attrs attrs)
    : schema_(schema), attrs_(std::move(attrs)) {
  if (!derivative(schema.id).rule) {
    throw Error(detail::str_cat(schema.name, ": the op has no backward rule"));
  }
}

void OpNode::add_inputs(std::span<const Tensor> inputs) {
  const Derivative& d = derivative(schema_.id);
  next_edges_.reserve(inputs.size());
  infos_.reserve(inputs.size());
  saved_inputs_.resize(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    BackwardCtx::InputInfo info;
    if (t.defined()) info = {t.sizes(), t.dtype(), t.device(), true};
    infos_.push_back(std::move(info));
    next_edges_.push_back(t.defined() && is_floating(t.dtype()) ? gradient_edge(t) : Edge{});
    const bool save = schema_.variadic() ? d.save_inputs[0] : d.save_inputs[i];
    if (save) saved_inputs_[i] = SavedTensor(t, false);
  }
  needed_.assign(inputs.size(), false);
  for (size_t i = 0; i < inputs.size(); ++i) needed_[i] = next_edges_[i].valid();
}

void OpNode::save_results(std::span<const Tensor> results) {
  const Derivative& d = derivative(schema_.id);
  outputs_.reserve(results.size());
  saved_results_.resize(results.size());
  for (size_t i = 0; i < results.size(); ++i) {
    outputs_.push_back({results[i].sizes(), results[i].dtype(), results[i].device()});
    if (d.save_every_result || d.save_results[i]) saved_results_[i] = SavedTensor(results[i], true);
  }
}

void OpNode::force_grad(size_t input) { needed_[input] = true; }

TensorList OpNode::apply(TensorList grads) {
  TensorList inputs(saved_inputs_.size());
  for (size_t i = 0; i < saved_inputs_.size(); ++i) inputs[i] = saved_inputs_[i].unpack(*this, 0);
  TensorList results(saved_results_.size());
  for (size_t i = 0; i < saved_results_.size(); ++i)
    results[i] = saved_results_[i].unpack(*this, static_cast<uint32_t>(i));
  if (released_) throw_released(*this);
  BackwardCtx ctx(schema_, attrs_, infos_, inputs, results, needed_);
  TensorList input_grads = derivative(schema_.id).rule(ctx, grads);
  assert(input_grads.size() == infos_.size() && "a backward rule returned the wrong count");
  for (size_t i = 0; i < input_grads.size(); ++i) {
    if (!needed_[i] || !input_grads[i].defined()) {
      input_grads[i] = Tensor();
      continue;
    }
    input_grads[i] = conform_grad(input_grads[i], infos_[i].sizes, infos_[i].dtype);
  }
  return input_grads;
}

void OpNode::release_saved() {
  for (auto* list : {&saved_inputs_, &saved_results_}) {
    for (auto& saved : *list) {
      if (saved.defined()) released_ = true;
      saved.release();
    }
  }
}

// --- DeviceCopyBackward ------------------------------------------------------------

DeviceCopyBackward::DeviceCopyBackward(const Tensor& input, const Tensor& result)
    : source_(input.device()) {
  outputs_.push_back({result.sizes(), result.dtype(), result.device()});
  next_edges_.push_back(gradient_edge(input));
}

TensorList DeviceCopyBackward::apply(TensorList grads) {
  return {grads[0].defined() ? grads[0].to(source_) : Tensor()};
}

// --- AccumulateGrad ----------------------------------------------------------------

AccumulateGrad::AccumulateGrad(Tensor leaf) : leaf_(std::move(leaf)) {
  outputs_.push_back({leaf_.sizes(), leaf_.dtype(), leaf_.device()});
}

TensorList AccumulateGrad::apply(TensorList grads) {
  Tensor g = grads[0];
  AutogradMeta& m = ensure_meta(leaf_);
  const auto hooks = m.leaf_hooks;  // a hook may remove itself
  for (const auto& [handle, hook] : hooks) {
    Tensor replaced = hook(g);
    if (replaced.defined()) g = check_hook_result(replaced, g, "AccumulateGrad");
  }
  if (!g.defined()) return {};
  std::lock_guard lock(m.leaf_mutex);  // other threads' backward passes into this leaf
  if (!m.grad.defined()) {
    // Keep the gradient only when nothing else can see or write its storage.
    const bool owned = !is_grad_enabled() && g.storage().use_count() == 1 && g.is_contiguous() &&
                       !g.impl().view_base && g.sizes() == leaf_.sizes();
    m.grad = owned ? g.detach() : (is_grad_enabled() ? g.clone() : g.detach().clone());
  } else if (is_grad_enabled()) {
    m.grad = m.grad + g;  // create_graph: the sum stays differentiable
  } else {
    m.grad.add_(g);
  }
  return {};
}

// --- CopySlices and ViewOfBase -----------------------------------------------------

namespace {

void check_plain_base(const Tensor& base, std::string_view what) {
  if (!base.is_contiguous() || base.storage_offset() != 0) {
    throw Error(detail::str_cat(what, ": an in-place write through a view of a non-contiguous ",
                                "base tensor (shape ", base.sizes(), ", strides ", base.strides(),
                                ") can't be differentiated; clone() the base first"));
  }
}

void reject_double_backward(const Node& node) {
  if (is_grad_enabled()) {
    throw Error(detail::str_cat(node.name(), ": differentiating twice through an in-place write ",
                                "into a view is not supported; write out of place instead"));
  }
}

}  // namespace

CopySlices::CopySlices(const Tensor& base, const Tensor& view, std::shared_ptr<OpNode> fn,
                       bool view_is_input)
    : view_sizes_(view.sizes()), view_strides_(view.strides()),
      view_offset_(view.storage_offset()), fn_(std::move(fn)), view_is_input_(view_is_input) {
  check_plain_base(base, fn_->name() + "_");
  outputs_.push_back({base.sizes(), base.dtype(), base.device()});
  next_edges_.push_back(gradient_edge(base));
  const auto& fn_edges = fn_->next_edges();
  for (size_t i = view_is_input_ ? 1 : 0; i < fn_edges.size(); ++i)
    next_edges_.push_back(fn_edges[i]);
  if (view_is_input_) fn_->force_grad(0);
}

TensorList CopySlices::apply(TensorList grads) {
  reject_double_backward(*this);
  TensorList out(next_edges_.size());
  if (!grads[0].defined()) return out;
  Tensor result = grads[0].contiguous().clone();
  Tensor slice = raw_view(result, view_sizes_, view_strides_, view_offset_);
  TensorList fn_grads = fn_->apply({slice.clone()});
  if (view_is_input_ && fn_grads[0].defined()) {
    slice.copy_(fn_grads[0]);
  } else {
    slice.zero_();
  }
  out[0] = result;
  const size_t skip = view_is_input_ ? 1 : 0;
  for (size_t i = skip; i < fn_grads.size(); ++i) out[i - skip + 1] = fn_grads[i];
  return out;
}

ViewOfBase::ViewOfBase(const Tensor& base, const Tensor& view)
    : view_strides_(view.strides()), view_offset_(view.storage_offset()) {
  check_plain_base(base, "view");
  base_sizes_ = base.sizes();
  outputs_.push_back({view.sizes(), view.dtype(), view.device()});
  next_edges_.push_back(gradient_edge(base));
}

TensorList ViewOfBase::apply(TensorList grads) {
  reject_double_backward(*this);
  if (!grads[0].defined()) return {Tensor()};
  Tensor result = zeros(base_sizes_, {.dtype = grads[0].dtype(), .device = grads[0].device()});
  raw_view(result, outputs_[0].sizes, view_strides_, view_offset_).copy_(grads[0]);
  return {result};
}

}  // namespace kiln::autograd
