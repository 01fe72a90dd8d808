// Tensor's autograd methods and the per-tensor state behind them.
#include "autograd/meta.h"

#include <atomic>

#include "autograd/nodes.h"
#include "ops/dispatch.h"
#include "ops/tracing.h"

namespace kiln::autograd {

AutogradMeta* meta_of(const Tensor& t) noexcept {
  return t.defined() ? t.impl_ptr()->autograd.get() : nullptr;
}

AutogradMeta& ensure_meta(const Tensor& t) {
  auto& slot = t.impl().autograd;
  if (!slot) slot = std::make_shared<AutogradMeta>();
  return *slot;
}

int64_t next_hook_handle() noexcept {
  static std::atomic<int64_t> counter{0};
  return ++counter;
}

namespace {

bool own_requires_grad(const TensorImpl& impl) {
  const AutogradMeta* m = impl.autograd.get();
  return m && (m->requires_grad || m->grad_fn);
}

// A view whose base was written in place after the view was made, while the base
// has a history: the view's own history is stale.
bool view_history_stale(const Tensor& t) {
  const TensorImpl& impl = t.impl();
  return impl.view_base && impl.view_version != impl.storage->version() &&
         own_requires_grad(*impl.view_base);
}

}  // namespace

void refresh_view_history(const Tensor& t) {
  if (!view_history_stale(t)) return;
  Tensor base(t.impl().view_base);
  set_history(t, std::make_shared<ViewOfBase>(base, t), 0);
  t.impl().view_version = t.version();
}

bool requires_grad(const Tensor& t) {
  if (!t.defined()) return false;
  return own_requires_grad(t.impl()) || view_history_stale(t);
}

std::shared_ptr<Node> grad_accumulator(const Tensor& leaf) {
  AutogradMeta& m = ensure_meta(leaf);
  std::lock_guard lock(m.leaf_mutex);
  if (auto existing = m.grad_accumulator.lock()) return existing;
  auto acc = std::make_shared<AccumulateGrad>(leaf);
  m.grad_accumulator = acc;
  return acc;
}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined()) return {};
  refresh_view_history(t);
  AutogradMeta* m = meta_of(t);
  if (!m) return {};
  if (m->grad_fn) return {m->grad_fn, m->output_nr};
  if (m->requires_grad) return {grad_accumulator(t), 0};
  return {};
}

void set_history(const Tensor& t, std::shared_ptr<Node> fn, uint32_t output_nr) {
  AutogradMeta& m = ensure_meta(t);
  m.grad_fn = std::move(fn);
  m.output_nr = output_nr;
  m.requires_grad = false;
}

Tensor alias_without_history(const Tensor& t) {
  auto impl = std::make_shared<TensorImpl>();
  const TensorImpl& src = t.impl();
  impl->storage = src.storage;
  impl->sizes = src.sizes;
  impl->strides = src.strides;
  impl->offset = src.offset;
  impl->dtype = src.dtype;
  impl->inference = src.inference;
  impl->watched = src.watched;  // a traced program's handle on a proxy's data
  return Tensor(std::move(impl));
}

Tensor raw_view(const Tensor& base, const Shape& sizes, const Shape& strides, int64_t offset) {
  Tensor v = alias_without_history(base);
  v.impl().sizes = sizes;
  v.impl().strides = strides;
  v.impl().offset = offset;
  return v;
}

}  // namespace kiln::autograd

namespace kiln {

using autograd::AutogradMeta;
using autograd::meta_of;

bool Tensor::requires_grad() const { return autograd::requires_grad(*this); }

const Tensor& Tensor::requires_grad_(bool requires_grad) const {
  AutogradMeta* m = meta_of(*this);
  if (m && m->grad_fn) {
    if (!requires_grad) {
      throw Error(detail::str_cat("requires_grad_: can't turn off requires_grad of a tensor ",
                                  "computed by '", m->grad_fn->name(),
                                  "' (not a leaf); use detach() instead"));
    }
    return *this;
  }
  if (requires_grad && !is_floating(dtype())) {
    throw DTypeError(detail::str_cat("requires_grad_: only floating-point tensors can require ",
                                     "gradients, got ", dtype()));
  }
  // As PyTorch: inside the guard (building a model for serving) the flag may be
  // set, since nothing records there; outside, the tensor can never join a graph.
  if (requires_grad && impl().inference && !InferenceModeGuard::enabled()) {
    throw Error("requires_grad_: a tensor made under InferenceModeGuard can't require grad "
                "outside it");
  }
  if (!m && !requires_grad) return *this;
  autograd::ensure_meta(*this).requires_grad = requires_grad;
  return *this;
}

Tensor Tensor::grad() const {
  const AutogradMeta* m = meta_of(*this);
  return m ? m->grad : Tensor();
}

void Tensor::set_grad(const Tensor& grad) const {
  if (grad.defined()) {
    if (grad.sizes() != sizes() || grad.device() != device()) {
      throw ShapeError(detail::str_cat("set_grad: the gradient's shape ", grad.sizes(), " on ",
                                       grad.device(), " differs from the tensor's ", sizes(),
                                       " on ", device()));
    }
    if (grad.dtype() != dtype()) {
      throw DTypeError(detail::str_cat("set_grad: the gradient's dtype ", grad.dtype(),
                                       " differs from the tensor's ", dtype()));
    }
  }
  if (!is_meta()) {
    if (ops::TraceRecorder* tracer = ops::TraceRecorder::active()) tracer->note_grad_owner(*this);
  }
  AutogradMeta* m = meta_of(*this);
  if (!m && !grad.defined()) return;
  autograd::ensure_meta(*this).grad = grad;
}

bool Tensor::is_leaf() const {
  const AutogradMeta* m = meta_of(*this);
  return !m || !m->grad_fn;
}

std::shared_ptr<autograd::Node> Tensor::grad_fn() const {
  autograd::refresh_view_history(*this);
  const AutogradMeta* m = meta_of(*this);
  return m ? m->grad_fn : nullptr;
}

Tensor Tensor::detach() const {
  Tensor out = autograd::alias_without_history(*this);
  if (is_meta()) {
    // A traced program's detach() is the same value to the trace.
    if (ops::TraceRecorder* tracer = ops::TraceRecorder::active()) tracer->alias(*this, out);
  }
  return out;
}

void Tensor::retain_grad() const {
  AutogradMeta* m = meta_of(*this);
  if (!requires_grad()) {
    throw Error("retain_grad: the tensor does not require grad");
  }
  if (is_leaf() || m->retains_grad) return;  // leaves keep their grad anyway
  m->retains_grad = true;
  std::weak_ptr<TensorImpl> weak = impl_ptr();
  // Stores the gradient after the user's hooks ran, even those registered later.
  m->grad_fn->add_hook(m->output_nr, [weak](const Tensor& g) {
    if (auto impl = weak.lock()) {
      Tensor self(impl);
      AutogradMeta& meta = autograd::ensure_meta(self);
      if (!meta.grad.defined()) {
        meta.grad = is_grad_enabled() ? g : g.detach().clone();
      } else {
        meta.grad = is_grad_enabled() ? meta.grad + g : (meta.grad + g).detach();
      }
    }
    return Tensor();
  }, /*run_last=*/true);
}

bool Tensor::retains_grad() const {
  const AutogradMeta* m = meta_of(*this);
  return m && m->retains_grad;
}

int64_t Tensor::register_hook(std::function<Tensor(const Tensor&)> hook) const {
  if (!requires_grad()) {
    throw Error("register_hook: can't register a hook on a tensor that doesn't require grad");
  }
  autograd::refresh_view_history(*this);
  AutogradMeta& m = autograd::ensure_meta(*this);
  if (!m.grad_fn) {
    const int64_t handle = autograd::next_hook_handle();
    m.leaf_hooks.emplace_back(handle, std::move(hook));
    return handle;
  }
  return m.grad_fn->add_hook(m.output_nr, std::move(hook));
}

void Tensor::remove_hook(int64_t handle) const {
  AutogradMeta* m = meta_of(*this);
  if (m) {
    for (auto it = m->leaf_hooks.begin(); it != m->leaf_hooks.end(); ++it) {
      if (it->first == handle) {
        m->leaf_hooks.erase(it);
        return;
      }
    }
    if (m->grad_fn && m->grad_fn->remove_hook(handle)) return;
  }
  throw ValueError(detail::str_cat("remove_hook: no hook with handle ", handle, " on this tensor"));
}

void Tensor::backward(const Tensor& gradient, std::optional<bool> retain_graph, bool create_graph,
                      const TensorList& inputs) const {
  autograd::backward({*this}, gradient.defined() ? TensorList{gradient} : TensorList{},
                     retain_graph, create_graph, inputs);
}

}  // namespace kiln
