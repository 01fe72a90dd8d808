// CUDA kernels of the factories: the same values as the CPU's, element by
// element (backends/factory_formulas.h; random ops from the counter-based
// Philox generator).
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/pointwise.cuh"
#include "backends/factory_formulas.h"
#include "ops/random.h"

namespace kiln::backend::cuda {
namespace {

using ops::OpId;

template <typename T, typename F>
__global__ void __launch_bounds__(kBlockThreads) generate_kernel(T* out, int64_t n, F f) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = cvt<T>(f(i));
  }
}

// out[i] = f(i) over a contiguous output; f returns a double or an int64.
template <typename F>
void generate(const Tensor& out, F f) {
  const int64_t n = out.numel();
  if (n == 0) return;
  DeviceGuard guard(out.device().index());
  const unsigned grid =
      static_cast<unsigned>(std::min<int64_t>((n + kBlockThreads - 1) / kBlockThreads, 65536));
  visit_device_dtype(out.dtype(), [&]<typename T>() {
    generate_kernel<<<grid, kBlockThreads, 0, stream_for(out)>>>(static_cast<T*>(out.data_ptr()), n,
                                                                 f);
  });
  check_launch("factory kernel");
}

struct ArangeF {
  double start, step;
  __device__ double operator()(int64_t i) const { return start + static_cast<double>(i) * step; }
};
struct ArangeI {
  int64_t start, step;
  __device__ int64_t operator()(int64_t i) const { return start + i * step; }
};
struct LinspaceF {
  double a, b;
  int64_t steps;
  __device__ double operator()(int64_t i) const { return factory::linspace_at(a, b, steps, i); }
};
struct LinspaceI {
  double a, b;
  int64_t steps;
  __device__ int64_t operator()(int64_t i) const {
    return static_cast<int64_t>(factory::linspace_at(a, b, steps, i));
  }
};
struct EyeF {
  int64_t m;
  __device__ int64_t operator()(int64_t i) const { return int64_t(i / m == i % m); }
};
// A random op's seed and offset: its attributes', or, in a recorded device
// graph, the seed and base offset in device memory (ops::recorded_philox)
// with the attribute's offset added.
struct PhiloxAt {
  uint64_t seed, offset;
  const uint64_t* words;
  __device__ uint64_t s() const { return words ? words[0] : seed; }
  __device__ uint64_t o() const { return words ? words[1] + offset : offset; }
};
PhiloxAt philox_at(const KernelCall& c, size_t seed_attr) {
  return {static_cast<uint64_t>(c.attrs.i(seed_attr)), static_cast<uint64_t>(c.attrs.i(seed_attr + 1)),
          ops::recorded_philox()};
}
struct RandF {
  bool dbl;
  PhiloxAt p;
  __device__ double operator()(int64_t i) const { return factory::rand_at(dbl, p.s(), p.o() + i); }
};
struct RandnF {
  PhiloxAt p;
  __device__ double operator()(int64_t i) const { return philox::normal(p.s(), p.o() + i); }
};
struct RandintF {
  int64_t low, high;
  PhiloxAt p;
  __device__ int64_t operator()(int64_t i) const { return factory::randint_at(low, high, p.s(), p.o() + i); }
};

void fill(const Tensor& out, const Scalar& value) {
  visit_device_dtype(out.dtype(), [&]<typename T>() {
    const T v = scalar_as<T>(value);
    uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof(T));
    fill_bits(out, bits);
  });
}

}  // namespace

void register_cuda_factory_kernels(KernelTable& t) {
  t.set(OpId::empty, [](const KernelCall&) {});
  t.set(OpId::full, [](const KernelCall& c) { fill(c.out(), c.attrs.scalar(1)); });
  t.set(OpId::full_sized, [](const KernelCall& c) { fill(c.out(), c.attrs.scalar(1)); });
  t.set(OpId::full_like, [](const KernelCall& c) { fill(c.out(), c.attrs.scalar(0)); });
  t.set(OpId::arange, [](const KernelCall& c) {
    const Scalar start = c.attrs.scalar(0), step = c.attrs.scalar(2);
    if (is_floating(c.out().dtype()))
      generate(c.out(), ArangeF{start.to_double(), step.to_double()});
    else
      generate(c.out(), ArangeI{start.to_int(), step.to_int()});
  });
  t.set(OpId::linspace, [](const KernelCall& c) {
    const double a = c.attrs.f(0), b = c.attrs.f(1);
    const int64_t steps = c.attrs.i(2);
    if (is_floating(c.out().dtype()))
      generate(c.out(), LinspaceF{a, b, steps});
    else
      generate(c.out(), LinspaceI{a, b, steps});
  });
  t.set(OpId::eye, [](const KernelCall& c) { generate(c.out(), EyeF{c.attrs.i(1)}); });
  t.set(OpId::rand, [](const KernelCall& c) {
    generate(c.out(), RandF{c.out().dtype() == kFloat64, philox_at(c, 3)});
  });
  t.set(OpId::randn, [](const KernelCall& c) { generate(c.out(), RandnF{philox_at(c, 3)}); });
  t.set(OpId::randint, [](const KernelCall& c) {
    generate(c.out(), RandintF{c.attrs.i(5), c.attrs.i(6), philox_at(c, 3)});
  });
}

}  // namespace kiln::backend::cuda
