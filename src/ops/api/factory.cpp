// The public factories and the default generator.
#include "kiln/ops/factory.h"

#include <cstring>
#include <mutex>

#include "core/checked_size.h"
#include "ops/dispatch.h"
#include "ops/random.h"
#include "ops/tracing.h"

namespace kiln {

using ops::dispatch1;
using ops::OpId;

namespace {

std::mutex g_generator_mutex;  // guards default_generator()'s state

DType float_dtype(const TensorOptions& o) { return o.dtype.value_or(kFloat32); }

// The element count of a random factory's sizes, checked (as the op's rule
// will) before the generator moves.
int64_t count(const Shape& sizes, DType dtype, std::string_view op) {
  checked_nbytes(sizes, dtype, op);
  return checked_numel(sizes, op);
}

void check_floating(const char* op, DType t) {
  if (!is_floating(t)) {
    throw DTypeError(detail::str_cat(op, ": dtype must be a floating type, got ", t));
  }
}

}  // namespace

namespace ops {
PhiloxDraw draw_philox(Generator* g, int64_t n) {
  // A trace draws nothing: the replay draws for each call (compiler/capture/capture.h).
  if (ops::TraceRecorder* tracer = ops::TraceRecorder::active())
    return tracer->note_random_draw(g, n);
  if (g) return {static_cast<int64_t>(g->seed()), static_cast<int64_t>(g->advance(n))};
  std::lock_guard lock(g_generator_mutex);
  Generator& d = default_generator();
  return {static_cast<int64_t>(d.seed()), static_cast<int64_t>(d.advance(n))};
}
}  // namespace ops

namespace ops {
namespace {
thread_local const uint64_t* t_recorded_philox = nullptr;
}  // namespace

const uint64_t* recorded_philox() noexcept { return t_recorded_philox; }
RecordedPhiloxScope::RecordedPhiloxScope(const uint64_t* words) noexcept
    : previous_(t_recorded_philox) {
  t_recorded_philox = words;
}
RecordedPhiloxScope::~RecordedPhiloxScope() { t_recorded_philox = previous_; }
}  // namespace ops

uint64_t Generator::advance(uint64_t n) noexcept {
  // Keep offsets even so that Box-Muller pairs never straddle two ops.
  const uint64_t start = offset_;
  offset_ += (n + 1) & ~uint64_t{1};
  return start;
}

Generator& default_generator() {
  static Generator g;
  return g;
}

void manual_seed(uint64_t seed) {
  std::lock_guard lock(g_generator_mutex);
  default_generator().manual_seed(seed);
}

Tensor empty(const Shape& sizes, TensorOptions o) {
  return dispatch1(OpId::empty, {}, {sizes, float_dtype(o), o.device});
}
Tensor full(const Shape& sizes, Scalar value, TensorOptions o) {
  return dispatch1(OpId::full, {},
                   {sizes, value, o.dtype.value_or(value.default_dtype()), o.device});
}
Tensor zeros(const Shape& sizes, TensorOptions o) {
  return full(sizes, 0, {float_dtype(o), o.device});
}
Tensor ones(const Shape& sizes, TensorOptions o) {
  return full(sizes, 1, {float_dtype(o), o.device});
}
Tensor empty_like(const Tensor& t) { return empty(t.sizes(), {t.dtype(), t.device()}); }
// The *_like factories pass the tensor itself, not its sizes: a traced program
// does not read them (compiler/capture/capture.h, LayoutRead).
Tensor zeros_like(const Tensor& t) { return full_like(t, 0); }
Tensor ones_like(const Tensor& t) { return full_like(t, 1); }
Tensor full_like(const Tensor& t, Scalar v) {
  return dispatch1(OpId::full_like, {t}, {v, t.dtype()});
}

Tensor arange(Scalar end, TensorOptions o) { return arange(0, end, 1, o); }
Tensor arange(Scalar start, Scalar end, Scalar step, TensorOptions o) {
  const bool all_int = !start.is_floating() && !end.is_floating() && !step.is_floating();
  const DType t = o.dtype.value_or(all_int ? kInt64 : kFloat32);
  return dispatch1(OpId::arange, {}, {start, end, step, t, o.device});
}
Tensor linspace(double start, double end, int64_t steps, TensorOptions o) {
  return dispatch1(OpId::linspace, {}, {start, end, steps, float_dtype(o), o.device});
}
Tensor eye(int64_t n, std::optional<int64_t> m, TensorOptions o) {
  return dispatch1(OpId::eye, {}, {n, m.value_or(n), float_dtype(o), o.device});
}

Tensor rand(const Shape& sizes, TensorOptions o, Generator* g) {
  check_floating("rand", float_dtype(o));
  auto [seed, offset] = ops::draw_philox(g, count(sizes, float_dtype(o), "rand"));
  return dispatch1(OpId::rand, {}, {sizes, float_dtype(o), o.device, seed, offset});
}
Tensor randn(const Shape& sizes, TensorOptions o, Generator* g) {
  check_floating("randn", float_dtype(o));
  auto [seed, offset] = ops::draw_philox(g, count(sizes, float_dtype(o), "randn"));
  return dispatch1(OpId::randn, {}, {sizes, float_dtype(o), o.device, seed, offset});
}
Tensor randint(int64_t low, int64_t high, const Shape& sizes, TensorOptions o, Generator* g) {
  auto [seed, offset] = ops::draw_philox(g, count(sizes, o.dtype.value_or(kInt64), "randint"));
  return dispatch1(OpId::randint, {},
                   {sizes, o.dtype.value_or(kInt64), o.device, seed, offset, low, high});
}
Tensor rand_like(const Tensor& t, Generator* g) {
  return rand(t.sizes(), {t.dtype(), t.device()}, g);
}
Tensor randn_like(const Tensor& t, Generator* g) {
  return randn(t.sizes(), {t.dtype(), t.device()}, g);
}

template <typename T>
Tensor from_vector(const std::vector<T>& values, std::optional<Shape> sizes) {
  Shape shape = sizes.value_or(Shape{static_cast<int64_t>(values.size())});
  if (checked_numel(shape, "from_vector") != static_cast<int64_t>(values.size())) {
    throw ShapeError(
        detail::str_cat("from_vector: ", values.size(), " values do not fill shape ", shape));
  }
  Tensor t = ops::make_tensor(shape, dtype_of<T>(), Device::cpu());
  T* p = static_cast<T*>(t.data_ptr());
  for (size_t i = 0; i < values.size(); ++i) p[i] = values[i];
  return t;
}
template Tensor from_vector(const std::vector<bool>&, std::optional<Shape>);
template Tensor from_vector(const std::vector<uint8_t>&, std::optional<Shape>);
template Tensor from_vector(const std::vector<int8_t>&, std::optional<Shape>);
template Tensor from_vector(const std::vector<int16_t>&, std::optional<Shape>);
template Tensor from_vector(const std::vector<int32_t>&, std::optional<Shape>);
template Tensor from_vector(const std::vector<int64_t>&, std::optional<Shape>);
template Tensor from_vector(const std::vector<Half>&, std::optional<Shape>);
template Tensor from_vector(const std::vector<BFloat16>&, std::optional<Shape>);
template Tensor from_vector(const std::vector<float>&, std::optional<Shape>);
template Tensor from_vector(const std::vector<double>&, std::optional<Shape>);

Tensor from_blob(void* data, const Shape& sizes, DType dtype, std::function<void(void*)> deleter,
                 std::optional<Shape> strides) {
  const int64_t numel = checked_numel(sizes, "from_blob");  // before strides are made of them
  if (!data && numel > 0) throw ValueError("from_blob: data is null");
  Shape st = strides.value_or(ops::contiguous_strides(sizes));
  if (st.size() != sizes.size()) {
    throw ShapeError(detail::str_cat("from_blob: strides ", st, " do not match sizes ", sizes));
  }
  int64_t extent = 1;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] < 0 || st[i] < 0) {
      throw ShapeError(detail::str_cat("from_blob: negative size or stride in ", sizes, " / ", st));
    }
    if (sizes[i] == 0) extent = 0;
    if (extent) extent = size_add(extent, size_mul(sizes[i] - 1, st[i], "from_blob"), "from_blob");
  }
  size_mul(extent, static_cast<int64_t>(dtype_size(dtype)), "from_blob");
  // A no-op deleter still marks the storage as real (not meta).
  auto del = deleter ? std::move(deleter) : [](void*) {};
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(data, static_cast<size_t>(extent) * dtype_size(dtype),
                                            Device::cpu(), std::move(del));
  impl->sizes = sizes;
  impl->strides = std::move(st);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor scalar_tensor(Scalar value, TensorOptions o) { return full({}, value, o); }

}  // namespace kiln
