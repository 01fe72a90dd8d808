#include "kiln/tensor.h"

#include <cstring>
#include <optional>

#include "autograd/meta.h"
#include "autograd/record.h"
#include "backends/backend.h"
#include "core/shape_util.h"
#include "kiln/autograd.h"
#include "kiln/cuda.h"
#include "kiln/ops/factory.h"
#include "kiln/ops/pointwise.h"
#include "kiln/ops/shape.h"
#include "ops/dispatch.h"
#include "ops/tracing.h"

namespace kiln {

TensorImpl& Tensor::impl() const {
  if (!impl_) throw Error("tensor: use of an undefined tensor");
  return *impl_;
}

namespace {

// Entry d of a layout vector (sizes or strides), its read noted on a proxy.
int64_t layout_entry(const TensorImpl& i, const Shape& entries, int64_t d, LayoutField field,
                     const char* op, const std::source_location& where) {
  const int64_t k = wrap_dim(d, static_cast<int64_t>(entries.size()), op);
  if (i.watched) [[unlikely]]
    detail::note_layout_read(i, field, k, where);
  return entries[static_cast<size_t>(k)];
}

}  // namespace

int64_t Tensor::size(int64_t d, const std::source_location& where) const {
  const TensorImpl& i = impl();
  return layout_entry(i, i.sizes, d, LayoutField::kSize, "size", where);
}

bool Tensor::size_is(int64_t d, SizeCmp cmp, int64_t n, const std::source_location& where) const {
  const TensorImpl& i = impl();
  const int64_t k = wrap_dim(d, static_cast<int64_t>(i.sizes.size()), "size_is");
  const bool result = compare_size(i.sizes[static_cast<size_t>(k)], cmp, n);
  if (i.watched) [[unlikely]]
    detail::note_size_compare(i, k, cmp, n, result, where);
  return result;
}

bool Tensor::size_is(int64_t d, SizeCmp cmp, const Tensor& other, int64_t other_dim,
                     const std::source_location& where) const {
  const TensorImpl& i = impl();
  const TensorImpl& o = other.impl();
  const int64_t k = wrap_dim(d, static_cast<int64_t>(i.sizes.size()), "size_is");
  const int64_t ko = wrap_dim(other_dim, static_cast<int64_t>(o.sizes.size()), "size_is");
  const bool result =
      compare_size(i.sizes[static_cast<size_t>(k)], cmp, o.sizes[static_cast<size_t>(ko)]);
  if (i.watched || o.watched) [[unlikely]]
    detail::note_size_relation(i, k, cmp, o, ko, result, where);
  return result;
}

bool Tensor::same_sizes(const Tensor& other, const std::source_location& where) const {
  if (dim() != other.dim()) return false;  // ranks are part of every compiled program's key
  bool same = true;
  for (int64_t d = 0; d < dim() && same; ++d) same = size_is(d, SizeCmp::kEq, other, d, where);
  return same;
}

int64_t Tensor::stride(int64_t d, const std::source_location& where) const {
  const TensorImpl& i = impl();
  return layout_entry(i, i.strides, d, LayoutField::kStride, "stride", where);
}

int64_t Tensor::numel(const std::source_location& where) const {
  const TensorImpl& i = impl();
  if (i.watched) [[unlikely]]
    detail::note_layout_read(i, LayoutField::kNumel, -1, where);
  return shape_numel(i.sizes);
}

bool Tensor::is_contiguous(const std::source_location& where) const {
  const TensorImpl& i = impl();
  if (i.watched) [[unlikely]]
    detail::note_layout_read(i, LayoutField::kContiguous, -1, where);
  return contiguous_layout(i.sizes, i.strides);
}

bool Tensor::shares_storage(const Tensor& other) const {
  return defined() && other.defined() && impl_->storage == other.impl_->storage;
}

namespace {

// The real tensor behind a proxy the traced program reads on the host (a
// graph break, ops/tracing.h), or null when `t` holds data or no trace runs.
std::optional<Tensor> traced_read(const Tensor& t, std::string what, std::source_location where, bool guardable,
                                  bool known_where = true) {
  if (!t.is_meta()) return std::nullopt;
  ops::TraceRecorder* tracer = ops::TraceRecorder::active();
  if (tracer == nullptr) return std::nullopt;
  return tracer->materialize(t, {std::move(what), where, known_where, guardable});
}

}  // namespace

int64_t ops::read_data_dependent_size(const Tensor& count, const std::string& op,
                                      std::source_location where) {
  if (auto real = traced_read(count, op, where, true)) {
    ops::TracePause untraced;
    return real->item().to<int64_t>();
  }
  return count.item().to<int64_t>();
}

void* Tensor::data_ptr() const {
  const auto& st = *impl().storage;
  if (st.is_meta()) {
    if (auto real = traced_read(*this, "data_ptr()", std::source_location::current(), false, false)) {
      return real->data_ptr();  // the real tensor stays alive: later graphs read it
    }
    throw DeviceError("data_ptr: a meta tensor has no data");
  }
  return static_cast<char*>(st.data()) + impl_->offset * static_cast<int64_t>(element_size());
}

template <typename T>
T* Tensor::data(std::source_location where) const {
  if (dtype() != dtype_of<T>()) {
    throw DTypeError(detail::str_cat("data<", dtype_of<T>(), ">: the tensor's dtype is ", dtype()));
  }
  if (auto real = traced_read(*this, "data()", where, false)) return real->data<T>();
  return static_cast<T*>(data_ptr());
}

template <typename T>
T Tensor::item(std::source_location where) const {
  return item(where).to<T>();
}

Scalar Tensor::item(std::source_location where) const {
  if (numel() != 1) {
    throw ShapeError(detail::str_cat("item: a tensor with ", numel(), " elements (shape ", sizes(),
                                     ") cannot be converted to a scalar"));
  }
  if (auto real = traced_read(*this, "item()", where, true)) {
    ops::TracePause untraced;
    return real->item();
  }
  if (!device().is_cpu()) return to(Device::cpu()).item();
  const void* p = data_ptr();
  return visit_dtype(dtype(), [&]<typename T>() -> Scalar { return Scalar(*static_cast<const T*>(p)); });
}

template <typename T>
std::vector<T> Tensor::to_vector(std::source_location where) const {
  if (auto real = traced_read(*this, "to_vector()", where, true)) {
    ops::TracePause untraced;
    return real->to_vector<T>();
  }
  Tensor c = to(Device::cpu()).to(dtype_of<T>()).contiguous();
  std::vector<T> out(static_cast<size_t>(c.numel()));
  if constexpr (std::is_same_v<T, bool>) {
    const bool* p = static_cast<const bool*>(c.data_ptr());
    for (size_t i = 0; i < out.size(); ++i) out[i] = p[i];
  } else {
    if (!out.empty()) std::memcpy(out.data(), c.data_ptr(), out.size() * sizeof(T));
  }
  return out;
}

#define KILN_INSTANTIATE_ACCESSORS(T)                                  \
  template T* Tensor::data<T>(std::source_location) const;            \
  template T Tensor::item<T>(std::source_location) const;             \
  template std::vector<T> Tensor::to_vector<T>(std::source_location) const;
KILN_INSTANTIATE_ACCESSORS(bool)
KILN_INSTANTIATE_ACCESSORS(uint8_t)
KILN_INSTANTIATE_ACCESSORS(int8_t)
KILN_INSTANTIATE_ACCESSORS(int16_t)
KILN_INSTANTIATE_ACCESSORS(int32_t)
KILN_INSTANTIATE_ACCESSORS(int64_t)
KILN_INSTANTIATE_ACCESSORS(Half)
KILN_INSTANTIATE_ACCESSORS(BFloat16)
KILN_INSTANTIATE_ACCESSORS(float)
KILN_INSTANTIATE_ACCESSORS(double)
#undef KILN_INSTANTIATE_ACCESSORS

Tensor Tensor::contiguous(const std::source_location& where) const {
  return is_contiguous(where) ? *this : clone();
}

Tensor Tensor::clone() const { return ops::dispatch1(ops::OpId::copy, {*this}, {dtype()}); }

Tensor Tensor::to(DType t) const {
  if (t == dtype()) return *this;
  return ops::dispatch1(ops::OpId::copy, {*this}, {t});
}

Tensor Tensor::to(Device d, bool non_blocking) const {
  if (d == device()) return *this;
  // Inside kiln::compile the copy is a node of the graph (to_device): a
  // blocking copy when the graph runs, whatever non_blocking says.
  if (ops::TraceRecorder::active() != nullptr)
    return ops::dispatch1(ops::OpId::to_device, {*this}, {d});
  // Gathered on its own device first, then one copy of contiguous bytes.
  const Tensor src = contiguous();
  const Device on = d.is_cpu() ? device() : d;
  auto& backend = backend::backend_for(on.kind());
  Tensor out;
  if (non_blocking && d.is_cpu() && !is_meta()) {  // into pinned memory, as PyTorch
    out = ops::make_tensor(backend.allocate_pinned(static_cast<size_t>(numel()) * element_size()),
                           sizes(), dtype());
  } else {
    out = ops::make_tensor(sizes(), dtype(), d, is_meta());
  }
  if (!is_meta()) {
    backend.copy_bytes(out.data_ptr(), d, src.data_ptr(), device(),
                       static_cast<size_t>(numel()) * element_size(), non_blocking);
  }
  if (is_grad_enabled() && autograd::requires_grad(*this)) autograd::record_device_copy(*this, out);
  return out;
}

Tensor Tensor::pin_memory() const {
  if (!device().is_cpu() || is_meta()) {
    throw DeviceError(detail::str_cat("pin_memory: only CPU tensors can be pinned, got one on ",
                                      is_meta() ? "meta" : detail::str_cat(device())));
  }
  if (is_pinned()) return *this;
  const Tensor src = contiguous();
  auto& backend = backend::backend_for(DeviceKind::CUDA);
  const size_t nbytes = static_cast<size_t>(numel()) * element_size();
  Tensor out = ops::make_tensor(backend.allocate_pinned(nbytes), sizes(), dtype());
  if (nbytes > 0) std::memcpy(out.data_ptr(), src.data_ptr(), nbytes);
  if (is_grad_enabled() && autograd::requires_grad(*this)) autograd::record_device_copy(*this, out);
  return out;
}

bool Tensor::is_pinned() const {
  if (!defined() || !device().is_cpu() || is_meta() || !cuda::is_built()) return false;
  return backend::backend_for(DeviceKind::CUDA).is_pinned(impl().storage->data());
}

Tensor Tensor::view(const Shape& shape) const { return kiln::view(*this, shape); }
Tensor Tensor::reshape(const Shape& shape, const std::source_location& where) const {
  return kiln::reshape(*this, shape, where);
}
Tensor Tensor::permute(const Shape& dims) const { return kiln::permute(*this, dims); }
Tensor Tensor::transpose(int64_t d0, int64_t d1) const { return kiln::transpose(*this, d0, d1); }
Tensor Tensor::t() const {
  if (dim() > 2) {
    throw ShapeError(detail::str_cat("t: expects a tensor with <= 2 dims, got shape ", sizes()));
  }
  return dim() < 2 ? *this : transpose(0, 1);
}
Tensor Tensor::squeeze() const { return kiln::squeeze(*this); }
Tensor Tensor::squeeze(int64_t d) const { return kiln::squeeze(*this, {d}); }
Tensor Tensor::unsqueeze(int64_t d) const { return kiln::unsqueeze(*this, d); }
Tensor Tensor::expand(const Shape& shape) const { return kiln::expand(*this, shape); }

Tensor Tensor::flatten(int64_t s, int64_t e, const std::source_location& where) const {
  return kiln::flatten(*this, s, e, where);
}
Tensor Tensor::unflatten(int64_t d, const Shape& sizes) const {
  return kiln::unflatten(*this, d, sizes);
}
Tensor Tensor::narrow(int64_t d, int64_t start, int64_t len,
                      const std::source_location& where) const {
  return kiln::narrow(*this, d, start, len, where);
}
Tensor Tensor::select(int64_t d, int64_t i) const { return kiln::select(*this, d, i); }
Tensor Tensor::slice(int64_t d, std::optional<int64_t> start, std::optional<int64_t> stop,
                     int64_t step) const {
  return kiln::slice(*this, d, start, stop, step);
}

Tensor Tensor::index(std::initializer_list<TensorIndex> indices) const {
  return index(std::vector<TensorIndex>(indices));
}

Tensor Tensor::index(const std::vector<TensorIndex>& indices) const {
  int64_t consumed = 0, ellipses = 0;
  for (const auto& ix : indices) {
    if (std::holds_alternative<int64_t>(ix) || std::holds_alternative<Slice>(ix)) ++consumed;
    if (std::holds_alternative<EllipsisIndex>(ix)) ++ellipses;
  }
  if (ellipses > 1) throw IndexError("index: at most one Ellipsis is allowed");
  if (consumed > dim()) {
    throw IndexError(detail::str_cat("index: too many indices (", consumed,
                                     ") for a tensor of shape ", sizes()));
  }
  Tensor out = *this;
  int64_t d = 0;  // the dim of out the next index applies to
  for (const auto& ix : indices) {
    if (auto* i = std::get_if<int64_t>(&ix)) {
      out = out.select(d, *i);
    } else if (auto* s = std::get_if<Slice>(&ix)) {
      out = out.slice(d, s->start, s->stop, s->step);
      ++d;
    } else if (std::holds_alternative<NoneIndex>(ix)) {
      out = out.unsqueeze(d);
      ++d;
    } else {
      d += dim() - consumed;
    }
  }
  return out;
}

Tensor wrapped_scalar(Scalar value) {
  // Made eagerly even while tracing: a number the program wrote is a constant
  // of the graph, not a node.
  ops::TracePause pause;
  // Floats keep double precision; promotion still treats them as float32 (see result_type).
  Tensor t = scalar_tensor(value, {.dtype = value.is_floating() ? kFloat64 : value.default_dtype()});
  t.impl().wrapped_number = true;
  return t;
}

std::ostream& operator<<(std::ostream& os, const Shape& s) {
  os << '[';
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  return os << ']';
}

}  // namespace kiln
