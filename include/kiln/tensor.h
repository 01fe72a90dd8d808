// kiln::Tensor: a handle to reference-counted storage plus a strided view of it.
//
//   auto x = kiln::randn({2, 3});               // float32 on the CPU
//   auto y = (x * 2 + 1).relu().sum(1);         // ops run eagerly, line by line
//   auto row = x.index({1, kiln::Slice(0, 2)}); // a view sharing x's storage
//   row.fill_(0);                               // writes into x, bumps its version
//   std::cout << x << "\n";                     // prints like PyTorch
//
// A tensor can be *meta*: shape, dtype and device but no data. Every op accepts
// meta tensors and returns meta tensors, running only its shape rule.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <ostream>
#include <source_location>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "kiln/device.h"
#include "kiln/dtype.h"
#include "kiln/error.h"
#include "kiln/scalar.h"

namespace kiln {

using Shape = std::vector<int64_t>;

namespace autograd {
struct AutogradMeta;
class Node;
}  // namespace autograd

// A device allocation (or, for meta tensors, none) shared by every view of it.
// The version counter lives here so that every view sees in-place writes.
class Storage {
 public:
  using Deleter = std::function<void(void*)>;
  Storage(void* data, size_t nbytes, Device device, Deleter deleter) noexcept
      : data_(data), nbytes_(nbytes), device_(device), deleter_(std::move(deleter)) {}
  // A meta storage: a size but no bytes.
  Storage(size_t nbytes, Device device) noexcept : nbytes_(nbytes), device_(device) {}
  ~Storage() {
    if (deleter_ && data_) deleter_(data_);
  }
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const noexcept { return data_; }
  size_t nbytes() const noexcept { return nbytes_; }
  Device device() const noexcept { return device_; }
  bool is_meta() const noexcept { return data_ == nullptr && !deleter_; }
  uint64_t version() const noexcept { return version_.load(std::memory_order_relaxed); }
  void bump_version() noexcept { version_.fetch_add(1, std::memory_order_relaxed); }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  Deleter deleter_;
  std::atomic<uint64_t> version_{0};
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape sizes;
  Shape strides;   // in elements
  int64_t offset = 0;  // in elements
  DType dtype = kFloat32;
  // A number the user wrote (x * 2.0): it takes part in type promotion below tensors.
  bool wrapped_number = false;
  // Gradient bookkeeping (requires_grad, grad, grad_fn, hooks); null for a tensor
  // that never took part in autograd.
  std::shared_ptr<autograd::AutogradMeta> autograd;
  // For a view: the tensor whose storage it views (never itself a view). In-place
  // writes through a view update the base's gradient history.
  std::shared_ptr<TensorImpl> view_base;
  // The storage version when this view was made or its history last refreshed.
  uint64_t view_version = 0;
  // Made under InferenceModeGuard: it can never take part in autograd.
  bool inference = false;
  // A compiler tracer's proxy: reads of its layout by the traced program are
  // noted (a program that reads no size of a dynamic dim serves every size).
  bool watched = false;
};

// What a read of a tensor's layout read (Tensor::sizes(), size(d), ...).
enum class LayoutField : uint8_t { kSizes, kSize, kStrides, kStride, kNumel, kContiguous, kOffset };

// How Tensor::size_is compares a size with a number.
enum class SizeCmp : uint8_t { kEq, kNe, kLt, kLe, kGt, kGe };

namespace detail {
// Notes a traced program's read of a proxy's layout (ops/tracing.h).
void note_layout_read(const TensorImpl& impl, LayoutField field, int64_t dim,
                      const std::source_location& where);
// Notes a traced program's comparison of a proxy's size with a number (Tensor::size_is).
void note_size_compare(const TensorImpl& impl, int64_t dim, SizeCmp cmp, int64_t n, bool result,
                       const std::source_location& where);
// Notes a comparison of a proxy's size with another tensor's size (Tensor::size_is).
void note_size_relation(const TensorImpl& impl, int64_t dim, SizeCmp cmp, const TensorImpl& other,
                        int64_t other_dim, bool result, const std::source_location& where);
}  // namespace detail

// One entry of Tensor::index: an integer, a Slice, kiln::None (new axis) or kiln::Ellipsis.
struct Slice {
  std::optional<int64_t> start, stop;
  int64_t step = 1;
  Slice() = default;
  Slice(std::optional<int64_t> start_, std::optional<int64_t> stop_ = std::nullopt,
        int64_t step_ = 1)
      : start(start_), stop(stop_), step(step_) {}
};
struct NoneIndex {};
struct EllipsisIndex {};
inline constexpr NoneIndex None{};
inline constexpr EllipsisIndex Ellipsis{};
using TensorIndex = std::variant<int64_t, Slice, NoneIndex, EllipsisIndex>;

class Tensor;
using TensorList = std::vector<Tensor>;
struct ValuesIndices;  // kiln/ops/reduce.h

// A dim's size that kiln::compile keeps symbolic (as torch's SymInt does;
// docs/compile.md, "Sizes that stay symbolic"). In a shape given to zeros,
// ones, full, empty, view, reshape or expand, x.sym_size(0) ties a compiled
// program to dim 0 of x rather than to the number it had when traced, so
// new sizes of that dim are made from the trace:
//
//   Tensor agg = kiln::zeros({x.sym_size(0), 16});   // not zeros({x.size(0), 16})
//
// Plain numbers convert to it; eagerly it is just the size.
class SymSize {
 public:
  SymSize(int64_t size) noexcept : value_(size) {}  // NOLINT(google-explicit-constructor)
  // The size as a number. Inside kiln::compile this reads the dim, as
  // Tensor::size does (the program is then tied to its value).
  int64_t value(const std::source_location& where = std::source_location::current()) const;
  // The tensor whose dim it is (null for a plain number), and the dim.
  const std::shared_ptr<TensorImpl>& of() const noexcept { return of_; }
  int64_t dim() const noexcept { return dim_; }

 private:
  friend class Tensor;
  SymSize(std::shared_ptr<TensorImpl> of, int64_t dim, int64_t value) noexcept
      : value_(value), of_(std::move(of)), dim_(dim) {}
  int64_t value_ = 0;
  std::shared_ptr<TensorImpl> of_;
  int64_t dim_ = -1;
};
using SymSizes = std::vector<SymSize>;

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) noexcept : impl_(std::move(impl)) {}

  // --- metadata -------------------------------------------------------------
  bool defined() const noexcept { return impl_ != nullptr; }
  // Inside kiln::compile, reads of a traced tensor's layout are noted with
  // the caller's line (see "Dynamic dims" in docs/compile.md).
  const Shape& sizes(const std::source_location& where = std::source_location::current()) const {
    const TensorImpl& i = impl();
    if (i.watched) [[unlikely]]
      detail::note_layout_read(i, LayoutField::kSizes, -1, where);
    return i.sizes;
  }
  const Shape& shape(const std::source_location& where = std::source_location::current()) const {
    return sizes(where);
  }
  int64_t size(int64_t dim,
               const std::source_location& where = std::source_location::current()) const;
  // size(dim) compared with n, as a check: inside kiln::compile the graph
  // then depends on the comparison's outcome (a guard such as s1 <= 512),
  // not on the size itself, as it does after size(dim). For checks of
  // arguments (`if (x.size_is(1, SizeCmp::kGt, limit)) throw ...`).
  bool size_is(int64_t dim, SizeCmp cmp, int64_t n,
               const std::source_location& where = std::source_location::current()) const;
  // size(dim) compared with other.size(other_dim): the guard relates the two
  // sizes (s1 == s3), so that both may change together.
  bool size_is(int64_t dim, SizeCmp cmp, const Tensor& other, int64_t other_dim,
               const std::source_location& where = std::source_location::current()) const;
  // Whether other has this tensor's sizes, dim by dim as size_is with kEq:
  // `if (!mask.same_sizes(ids)) throw ...` keeps both dynamic when compiled.
  bool same_sizes(const Tensor& other,
                  const std::source_location& where = std::source_location::current()) const;
  // size(dim) as a size that kiln::compile keeps symbolic in the shapes of
  // factories and views (SymSize); reading it is no read of the layout.
  SymSize sym_size(int64_t dim) const;
  const Shape& strides(const std::source_location& where = std::source_location::current()) const {
    const TensorImpl& i = impl();
    if (i.watched) [[unlikely]]
      detail::note_layout_read(i, LayoutField::kStrides, -1, where);
    return i.strides;
  }
  int64_t stride(int64_t dim,
                 const std::source_location& where = std::source_location::current()) const;
  int64_t dim() const { return static_cast<int64_t>(impl().sizes.size()); }
  int64_t numel(const std::source_location& where = std::source_location::current()) const;
  DType dtype() const { return impl().dtype; }
  Device device() const { return impl().storage->device(); }
  bool is_meta() const { return impl().storage->is_meta(); }
  bool is_wrapped_number() const { return impl().wrapped_number; }
  int64_t storage_offset(
      const std::source_location& where = std::source_location::current()) const {
    const TensorImpl& i = impl();
    if (i.watched) [[unlikely]]
      detail::note_layout_read(i, LayoutField::kOffset, -1, where);
    return i.offset;
  }
  size_t element_size() const { return dtype_size(dtype()); }
  bool is_contiguous(const std::source_location& where = std::source_location::current()) const;
  // True when both tensors view the same storage.
  bool shares_storage(const Tensor& other) const;
  const std::shared_ptr<Storage>& storage() const { return impl().storage; }
  TensorImpl& impl() const;
  const std::shared_ptr<TensorImpl>& impl_ptr() const noexcept { return impl_; }

  // The version counter shared by all views; in-place ops bump it.
  uint64_t version() const { return impl().storage->version(); }
  void bump_version() const { impl().storage->bump_version(); }

  // --- autograd (see kiln/autograd.h) -----------------------------------------
  bool requires_grad() const;
  // Makes this leaf tensor record the ops it takes part in; floating dtypes only.
  const Tensor& requires_grad_(bool requires_grad = true) const;
  // The gradient accumulated by backward() (undefined until there is one).
  Tensor grad() const;
  // Replaces the accumulated gradient (undefined clears it; optimizers' zero_grad).
  void set_grad(const Tensor& grad) const;
  // True for tensors the user created and tensors that do not require grad.
  bool is_leaf() const;
  // The node that produced this tensor, null for leaves.
  std::shared_ptr<autograd::Node> grad_fn() const;
  // Computes gradients of this tensor with respect to the leaves of its graph and
  // accumulates them into their grad(). gradient defaults to 1 for one-element
  // tensors; retain_graph defaults to create_graph.
  void backward(const Tensor& gradient = {}, std::optional<bool> retain_graph = std::nullopt,
                bool create_graph = false, const TensorList& inputs = {}) const;
  // The same data, cut off from the graph (requires_grad() is false).
  Tensor detach() const;
  // Makes backward() also store this non-leaf tensor's gradient in grad().
  void retain_grad() const;
  bool retains_grad() const;
  // hook(grad) runs when this tensor's gradient is computed; a defined result
  // replaces the gradient. Returns a handle for remove_hook.
  int64_t register_hook(std::function<Tensor(const Tensor&)> hook) const;
  void remove_hook(int64_t handle) const;

  // --- data access (CPU tensors) ---------------------------------------------
  // Inside kiln::compile these reads are graph breaks; `where` (the caller's
  // line) names them in explain() and in fullgraph's error.
  void* data_ptr() const;  // first element of this view; DeviceError for meta tensors
  template <typename T>
  T* data(std::source_location where = std::source_location::current()) const;
  // The one value of a one-element tensor, converted to T.
  template <typename T>
  T item(std::source_location where = std::source_location::current()) const;
  Scalar item(std::source_location where = std::source_location::current()) const;
  // All values in row-major order, converted to T.
  template <typename T>
  std::vector<T> to_vector(std::source_location where = std::source_location::current()) const;

  // --- conversion and copies -------------------------------------------------
  // This tensor when already contiguous. Inside kiln::compile, whether it is
  // contiguous is a read of the layout at the caller's line, as the size
  // reads of reshape, flatten and narrow are.
  Tensor contiguous(const std::source_location& where = std::source_location::current()) const;
  Tensor clone() const;       // always a new contiguous copy
  Tensor to(DType dtype) const;  // this tensor when dtype already matches
  // A copy on `device` (this tensor when already there), differentiable: the
  // gradient flows back to this tensor's device. With non_blocking, a copy
  // between the host and a CUDA device is queued on the device's current
  // stream and this returns at once: a copy to the CPU lands in pinned memory
  // and must be waited for (kiln::cuda::synchronize, a stream or an event)
  // before its values are read; a copy from the CPU has read its source on
  // return (pageable sources are staged through pinned buffers).
  // Inside kiln::compile it is recorded, and runs as a blocking copy.
  Tensor to(Device device, bool non_blocking = false) const;
  // A copy in page-locked host memory (this tensor when already pinned), from
  // which copies to CUDA devices run asynchronously. DeviceError without a
  // CUDA device.
  Tensor pin_memory() const;
  bool is_pinned() const;  // CPU tensors in page-locked memory

  // --- views ------------------------------------------------------------------
  Tensor view(const Shape& shape) const;     // must be expressible as a view
  // A view when possible, else a copy.
  Tensor reshape(const Shape& shape,
                 const std::source_location& where = std::source_location::current()) const;
  // With sizes of other tensors' dims (sym_size) among the entries.
  Tensor view(const SymSizes& shape) const;
  Tensor view(std::initializer_list<SymSize> shape) const;
  Tensor reshape(const SymSizes& shape) const;
  Tensor reshape(std::initializer_list<SymSize> shape) const;
  Tensor permute(const Shape& dims) const;
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor t() const;  // transpose of a matrix (<= 2 dims)
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor expand(const Shape& shape) const;
  Tensor expand(const SymSizes& shape) const;
  Tensor expand(std::initializer_list<SymSize> shape) const;
  // Expanded to other's sizes; in a compiled program they stay other's.
  Tensor expand_as(const Tensor& other) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1,
                 const std::source_location& where = std::source_location::current()) const;
  Tensor unflatten(int64_t dim, const Shape& sizes) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length,
                const std::source_location& where = std::source_location::current()) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor slice(int64_t dim, std::optional<int64_t> start, std::optional<int64_t> stop,
               int64_t step = 1) const;
  Tensor index(std::initializer_list<TensorIndex> indices) const;
  Tensor index(const std::vector<TensorIndex>& indices) const;
  Tensor operator[](int64_t i) const { return select(0, i); }

  // --- math (see kiln/ops.h for the full list as free functions) ------------
  Tensor neg() const;
  Tensor abs() const;
  Tensor exp() const;
  Tensor log() const;
  Tensor sqrt() const;
  Tensor rsqrt() const;
  Tensor square() const;
  Tensor sin() const;
  Tensor cos() const;
  Tensor tanh() const;
  Tensor sigmoid() const;
  Tensor relu() const;
  Tensor pow(const Tensor& exponent) const;
  Tensor pow(Scalar exponent) const;
  Tensor clamp(std::optional<Scalar> min, std::optional<Scalar> max) const;
  Tensor clamp_min(Scalar min) const;
  Tensor clamp_max(Scalar max) const;
  Tensor gelu(std::string_view approximate = "none") const;
  Tensor masked_fill(const Tensor& mask, Scalar value) const;
  Tensor matmul(const Tensor& other) const;

  Tensor sum() const;
  Tensor sum(const Shape& dims, bool keepdim = false) const;
  Tensor mean() const;
  Tensor mean(const Shape& dims, bool keepdim = false) const;
  Tensor max() const;
  Tensor min() const;
  // The largest (smallest) values along dim and their indices (kiln/ops/reduce.h).
  ValuesIndices max(int64_t dim, bool keepdim = false) const;
  ValuesIndices min(int64_t dim, bool keepdim = false) const;
  // Ordered values and their indices (kiln/ops/reduce.h's sort, argsort and topk).
  ValuesIndices sort(int64_t dim = -1, bool descending = false, bool stable = false) const;
  Tensor argsort(int64_t dim = -1, bool descending = false, bool stable = false) const;
  ValuesIndices topk(int64_t k, int64_t dim = -1, bool largest = true, bool sorted = true) const;
  // Views of its pieces along dim (kiln/ops/shape.h's chunk and unbind).
  std::vector<Tensor> chunk(int64_t chunks, int64_t dim = 0) const;
  std::vector<Tensor> unbind(int64_t dim = 0) const;
  Tensor argmax(std::optional<int64_t> dim = std::nullopt, bool keepdim = false) const;
  Tensor argmin(std::optional<int64_t> dim = std::nullopt, bool keepdim = false) const;
  Tensor softmax(int64_t dim) const;
  Tensor log_softmax(int64_t dim) const;

  // --- in place: write into this tensor's storage and bump its version -------
  Tensor& add_(const Tensor& other, Scalar alpha = 1);
  Tensor& add_(Scalar other);
  Tensor& sub_(const Tensor& other, Scalar alpha = 1);
  Tensor& sub_(Scalar other);
  Tensor& mul_(const Tensor& other);
  Tensor& mul_(Scalar other);
  Tensor& div_(const Tensor& other);
  Tensor& div_(Scalar other);
  Tensor& relu_();
  Tensor& clamp_(std::optional<Scalar> min, std::optional<Scalar> max);
  // src's values written at index along dim (kiln/ops/shape.h's scatter_).
  Tensor& scatter_(int64_t dim, const Tensor& index, const Tensor& src);
  Tensor& fill_(Scalar value);
  Tensor& zero_();
  Tensor& copy_(const Tensor& src);

 private:
  std::shared_ptr<TensorImpl> impl_;
};

// Arithmetic and comparison operators, with broadcasting and PyTorch's type promotion.
Tensor operator-(const Tensor& a);
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, Scalar b);
Tensor operator-(const Tensor& a, Scalar b);
Tensor operator*(const Tensor& a, Scalar b);
Tensor operator/(const Tensor& a, Scalar b);
Tensor operator+(Scalar a, const Tensor& b);
Tensor operator-(Scalar a, const Tensor& b);
Tensor operator*(Scalar a, const Tensor& b);
Tensor operator/(Scalar a, const Tensor& b);
Tensor operator==(const Tensor& a, const Tensor& b);
Tensor operator!=(const Tensor& a, const Tensor& b);
Tensor operator<(const Tensor& a, const Tensor& b);
Tensor operator<=(const Tensor& a, const Tensor& b);
Tensor operator>(const Tensor& a, const Tensor& b);
Tensor operator>=(const Tensor& a, const Tensor& b);
Tensor operator==(const Tensor& a, Scalar b);
Tensor operator!=(const Tensor& a, Scalar b);
Tensor operator<(const Tensor& a, Scalar b);
Tensor operator<=(const Tensor& a, Scalar b);
Tensor operator>(const Tensor& a, Scalar b);
Tensor operator>=(const Tensor& a, Scalar b);
Tensor operator&&(const Tensor& a, const Tensor& b);
Tensor operator||(const Tensor& a, const Tensor& b);
Tensor operator!(const Tensor& a);
Tensor& operator+=(Tensor& a, const Tensor& b);
Tensor& operator-=(Tensor& a, const Tensor& b);
Tensor& operator*=(Tensor& a, const Tensor& b);
Tensor& operator/=(Tensor& a, const Tensor& b);
Tensor& operator+=(Tensor& a, Scalar b);
Tensor& operator-=(Tensor& a, Scalar b);
Tensor& operator*=(Tensor& a, Scalar b);
Tensor& operator/=(Tensor& a, Scalar b);

// Prints like PyTorch: tensor([[1.0000, 2.5000], ...], dtype=float64).
std::ostream& operator<<(std::ostream& os, const Tensor& t);
std::string to_string(const Tensor& t);
std::ostream& operator<<(std::ostream& os, const Shape& s);

// A 0-dim tensor holding a number written in user code (it promotes like a Python number).
Tensor wrapped_scalar(Scalar value);

}  // namespace kiln
