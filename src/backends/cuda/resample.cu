// CUDA kernels of pad, interpolate, their adjoints, and nll_loss. The source
// indices come from the formulas the CPU kernels use
// (backends/resample_formulas.h), so forward and backward pick the same
// elements on every backend. The adjoints add each output gradient into its
// sources with atomics.
#include <cmath>

#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/device_errors.h"
#include "backends/cuda/pointwise.cuh"
#include "backends/resample_formulas.h"
#include "kiln/kiln.h"
#include "ops/dispatch.h"

namespace kiln::backend::cuda {
namespace {

using ops::OpId;
using resample::PadMode;

constexpr int kThreads = 256;
constexpr int kMaxPadDims = 16;

unsigned grid_for(int64_t n) {
  return static_cast<unsigned>(
      std::max<int64_t>(1, std::min<int64_t>((n + kThreads - 1) / kThreads, 1 << 20)));
}

template <typename T>
__device__ inline void atomic_accumulate(T* address, T value) {
  atomicAdd(address, value);  // float, double, __half and __nv_bfloat16 all have it on sm_80+
}

// --- pad -----------------------------------------------------------------------

struct PadGeometry {
  int ndim = 0;
  int64_t out_sizes[kMaxPadDims] = {};
  int64_t in_sizes[kMaxPadDims] = {};
  int64_t before[kMaxPadDims] = {};  // per dim; padded dims only
  bool padded[kMaxPadDims] = {};
  PadMode mode = PadMode::Constant;

  // The input's flat (contiguous) index of output element e, or -1.
  __device__ int64_t source(int64_t e) const {
    int64_t src = 0, step = 1;
    for (int d = ndim - 1; d >= 0; --d) {
      const int64_t o = e % out_sizes[d];
      e /= out_sizes[d];
      const int64_t i = padded[d] ? resample::pad_source(o, before[d], in_sizes[d], mode) : o;
      if (i < 0) return -1;
      src += i * step;
      step *= in_sizes[d];
    }
    return src;
  }
};

PadGeometry pad_geometry(const Shape& in, const Shape& out, const std::vector<int64_t>& pads,
                         const std::string& mode) {
  if (in.size() > kMaxPadDims)
    throw Error(detail::str_cat("cuda pad: ", in.size(), " dims, at most ", kMaxPadDims));
  PadGeometry g;
  g.ndim = static_cast<int>(in.size());
  g.mode = resample::pad_mode(mode);
  for (int d = 0; d < g.ndim; ++d) {
    g.in_sizes[d] = in[d];
    g.out_sizes[d] = out[d];
  }
  const int64_t npad = static_cast<int64_t>(pads.size()) / 2;
  for (int64_t k = 0; k < npad; ++k) {
    const int64_t d = g.ndim - 1 - k;
    g.padded[d] = true;
    g.before[d] = pads[2 * k];
  }
  return g;
}

template <typename E>
__global__ void pad_kernel(const E* x, E* y, int64_t n, PadGeometry g, E value) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t s = g.source(e);
    y[e] = s < 0 ? value : x[s];
  }
}

template <typename T, typename Acc>
__global__ void pad_backward_kernel(const T* gy, Acc* gx, int64_t n, PadGeometry g) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t s = g.source(e);
    if (s >= 0) atomic_accumulate(gx + s, static_cast<Acc>(to_compute(gy[e])));
  }
}

void pad_op(const KernelCall& c) {
  const Tensor x = c.in(0).contiguous();
  const Tensor& y = c.out();
  if (y.numel() == 0) return;
  const PadGeometry g = pad_geometry(x.sizes(), y.sizes(), c.attrs.ints(0), c.attrs.str(1));
  DeviceGuard guard(x.device().index());
  visit_device_dtype(x.dtype(), [&]<typename T>() {
    const T value = scalar_as<T>(Scalar(c.attrs.f(2)));
    pad_kernel<T><<<grid_for(y.numel()), kThreads, 0, stream_for(y)>>>(
        static_cast<const T*>(x.data_ptr()), static_cast<T*>(y.data_ptr()), y.numel(), g, value);
  });
  check_launch("pad kernel");
}

template <typename F>
void on_float(const KernelCall& c, const Tensor& t, F&& f) {
  DeviceGuard guard(t.device().index());
  visit_device_dtype(t.dtype(), [&]<typename T>() {
    if constexpr (kIsFloatT<T>)
      f.template operator()<T>(stream_for(t));
    else
      unsupported_dtype(c, t.dtype());
  });
}

// The adjoints add into an accumulator of the compute type (float for the
// 16-bit floats, whose atomic adds would round at every step), then cast.
template <typename F>
void accumulate_adjoint(const KernelCall& c, const Tensor& gy, const Tensor& gx, F&& launch) {
  on_float(c, gy, [&]<typename T>(cudaStream_t stream) {
    using Acc = dcompute_t<T>;
    const bool narrow = !std::is_same_v<Acc, T>;
    const Tensor acc = narrow ? ops::make_tensor(gx.sizes(), kFloat32, gx.device(), false) : gx;
    fill_bits(acc, 0);
    launch.template operator()<T, Acc>(stream, static_cast<const T*>(gy.data_ptr()),
                                       static_cast<Acc*>(acc.data_ptr()));
    if (narrow) copy_same_dtype(gx, acc.to(gx.dtype()));
  });
}

void pad_backward_op(const KernelCall& c) {
  const Tensor gy = c.in(0).contiguous();
  const Tensor& gx = c.out();
  if (gx.numel() == 0) return;
  if (gy.numel() == 0) {
    fill_bits(gx, 0);
    return;
  }
  const PadGeometry g = pad_geometry(gx.sizes(), gy.sizes(), c.attrs.ints(1), c.attrs.str(2));
  accumulate_adjoint(c, gy, gx, [&]<typename T, typename Acc>(cudaStream_t stream, const T* in, Acc* out) {
    pad_backward_kernel<T, Acc><<<grid_for(gy.numel()), kThreads, 0, stream>>>(in, out, gy.numel(), g);
    check_launch("pad_backward kernel");
  });
}

// --- interpolate -------------------------------------------------------------------

// Spatial dims padded in front to (D, H, W); planes = N * C.
struct Resample {
  int64_t planes;
  int64_t in[3], out[3];
  bool align_corners;
};

Resample resample_of(const Shape& in, const Shape& out, bool align_corners) {
  Resample r{1, {1, 1, 1}, {1, 1, 1}, align_corners};
  const size_t dims = in.size() - 2;
  r.planes = in[0] * in[1];
  for (size_t d = 0; d < dims; ++d) {
    r.in[3 - dims + d] = in[2 + d];
    r.out[3 - dims + d] = out[2 + d];
  }
  return r;
}

struct Coords {
  int64_t plane, o[3];
};

__device__ inline Coords output_coords(const Resample& r, int64_t e) {
  Coords c;
  c.o[2] = e % r.out[2];
  e /= r.out[2];
  c.o[1] = e % r.out[1];
  e /= r.out[1];
  c.o[0] = e % r.out[0];
  c.plane = e / r.out[0];
  return c;
}

__device__ inline int64_t nearest_input(const Resample& r, const Coords& c) {
  int64_t i = c.plane;
  for (int d = 0; d < 3; ++d) i = i * r.in[d] + resample::nearest_source(c.o[d], r.in[d], r.out[d]);
  return i;
}

struct Taps {
  int64_t at[4];
  double weight[4];
};

// The four source pixels of a bilinear output (H and W are dims 1 and 2).
__device__ inline Taps bilinear_taps(const Resample& r, const Coords& c) {
  const double sh = resample::bilinear_source(c.o[1], r.in[1], r.out[1], r.align_corners);
  const double sw = resample::bilinear_source(c.o[2], r.in[2], r.out[2], r.align_corners);
  const int64_t h0 = static_cast<int64_t>(sh), w0 = static_cast<int64_t>(sw);
  const int64_t h1 = h0 + 1 < r.in[1] ? h0 + 1 : r.in[1] - 1,
                w1 = w0 + 1 < r.in[2] ? w0 + 1 : r.in[2] - 1;
  const double fh = sh - static_cast<double>(h0), fw = sw - static_cast<double>(w0);
  const int64_t base = c.plane * r.in[1] * r.in[2];
  return {{base + h0 * r.in[2] + w0, base + h0 * r.in[2] + w1, base + h1 * r.in[2] + w0,
           base + h1 * r.in[2] + w1},
          {(1 - fh) * (1 - fw), (1 - fh) * fw, fh * (1 - fw), fh * fw}};
}

template <typename E>
__global__ void nearest_kernel(const E* x, E* y, int64_t n, Resample r) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n;
       e += int64_t{gridDim.x} * blockDim.x) {
    y[e] = x[nearest_input(r, output_coords(r, e))];
  }
}

template <typename T>
__global__ void bilinear_kernel(const T* x, T* y, int64_t n, Resample r) {
  using C = dcompute_t<T>;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n;
       e += int64_t{gridDim.x} * blockDim.x) {
    const Taps t = bilinear_taps(r, output_coords(r, e));
    C sum = 0;
    for (int k = 0; k < 4; ++k) sum += static_cast<C>(t.weight[k]) * to_compute(x[t.at[k]]);
    y[e] = cvt<T>(sum);
  }
}

template <typename T, typename Acc>
__global__ void nearest_backward_kernel(const T* gy, Acc* gx, int64_t n, Resample r) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n;
       e += int64_t{gridDim.x} * blockDim.x) {
    atomic_accumulate(gx + nearest_input(r, output_coords(r, e)), static_cast<Acc>(to_compute(gy[e])));
  }
}

template <typename T, typename Acc>
__global__ void bilinear_backward_kernel(const T* gy, Acc* gx, int64_t n, Resample r) {
  using C = dcompute_t<T>;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n;
       e += int64_t{gridDim.x} * blockDim.x) {
    const Taps t = bilinear_taps(r, output_coords(r, e));
    const C g = to_compute(gy[e]);
    for (int k = 0; k < 4; ++k)
      atomic_accumulate(gx + t.at[k], static_cast<Acc>(static_cast<C>(t.weight[k]) * g));
  }
}

void interpolate_op(const KernelCall& c) {
  const Tensor x = c.in(0).contiguous();
  const Tensor& y = c.out();
  if (y.numel() == 0) return;
  const Resample r = resample_of(x.sizes(), y.sizes(), c.attrs.b(2));
  if (c.attrs.str(1) == "bilinear") {
    on_float(c, x, [&]<typename T>(cudaStream_t stream) {
      bilinear_kernel<T><<<grid_for(y.numel()), kThreads, 0, stream>>>(
          static_cast<const T*>(x.data_ptr()), static_cast<T*>(y.data_ptr()), y.numel(), r);
    });
  } else {
    DeviceGuard guard(x.device().index());
    visit_device_dtype(x.dtype(), [&]<typename T>() {
      nearest_kernel<T><<<grid_for(y.numel()), kThreads, 0, stream_for(y)>>>(
          static_cast<const T*>(x.data_ptr()), static_cast<T*>(y.data_ptr()), y.numel(), r);
    });
  }
  check_launch("interpolate kernel");
}

void interpolate_backward_op(const KernelCall& c) {
  const Tensor gy = c.in(0).contiguous();
  const Tensor& gx = c.out();
  if (gx.numel() == 0) return;
  if (gy.numel() == 0) {
    fill_bits(gx, 0);
    return;
  }
  const Resample r = resample_of(gx.sizes(), gy.sizes(), c.attrs.b(2));
  const bool bilinear = c.attrs.str(1) == "bilinear";
  accumulate_adjoint(c, gy, gx, [&]<typename T, typename Acc>(cudaStream_t stream, const T* in, Acc* out) {
    if (bilinear) {
      bilinear_backward_kernel<T, Acc><<<grid_for(gy.numel()), kThreads, 0, stream>>>(in, out, gy.numel(), r);
    } else {
      nearest_backward_kernel<T, Acc><<<grid_for(gy.numel()), kThreads, 0, stream>>>(in, out, gy.numel(), r);
    }
    check_launch("interpolate_backward kernel");
  });
}

// --- nll_loss --------------------------------------------------------------------------

// Per target element: the loss -w[t] * x[n, t, s] and the weight w[t] (0 for
// ignored targets); a target out of range is reported (device_errors.h) and
// counts as ignored.
template <typename T>
__global__ void nll_terms_kernel(const T* x, const int64_t* target, const dcompute_t<T>* w,
                                 int64_t n, int64_t classes, int64_t inner, int64_t ignore, T* loss,
                                 dcompute_t<T>* weights, DeviceErrorRecord* errors) {
  using C = dcompute_t<T>;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = target[i];
    C l = 0, wt = 0;
    if (t != ignore) {
      if (t < 0 || t >= classes) {
        report_device_error(errors, DeviceErrorOp::kNllLoss, t, classes);
      } else {
        const int64_t s = i % inner, b = i / inner;
        wt = w ? w[t] : C(1);
        l = -wt * to_compute(x[(b * classes + t) * inner + s]);
      }
    }
    loss[i] = cvt<T>(l);
    weights[i] = wt;
  }
}

void nll_loss_op(const KernelCall& c) {
  const Tensor x = c.in(0).contiguous();
  const Tensor target = c.in(1).contiguous();
  const int64_t classes = x.size(x.dim() == 1 ? 0 : 1);
  const int64_t inner = x.dim() <= 2 ? 1 : x.numel() / std::max<int64_t>(x.size(0) * classes, 1);
  const Tensor w = c.inputs.size() > 2 && c.in(2).defined() ? c.in(2).contiguous() : Tensor();
  const std::string& reduction = c.attrs.str(1);
  const int64_t n = target.numel();
  const Device device = x.device();
  const DType acc = x.dtype() == kFloat64 ? kFloat64 : kFloat32;
  Tensor loss = ops::make_tensor(target.sizes(), x.dtype(), device, false);
  Tensor weights = ops::make_tensor(target.sizes(), acc, device, false);
  if (n > 0) {
    on_float(c, x, [&]<typename T>(cudaStream_t stream) {
      using C = dcompute_t<T>;
      nll_terms_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(
          static_cast<const T*>(x.data_ptr()), static_cast<const int64_t*>(target.data_ptr()),
          w.defined() ? static_cast<const C*>(w.data_ptr()) : nullptr, n, classes, inner,
          c.attrs.i(0), static_cast<T*>(loss.data_ptr()), static_cast<C*>(weights.data_ptr()),
          device_error_record());
    });
    check_launch("nll_loss kernel");
  }
  if (reduction == "none") {
    copy_same_dtype(c.out(), loss);
    return;
  }
  NoGradGuard no_grad;
  const Tensor total = sum(loss.to(acc));
  const Tensor result =
      reduction == "sum" ? total : total / sum(weights);  // 0 / 0 = NaN: all ignored
  copy_same_dtype(c.out(), result.to(x.dtype()));
}

}  // namespace

void register_cuda_resample_kernels(KernelTable& t) {
  t.set(OpId::pad, pad_op);
  t.set(OpId::pad_backward, pad_backward_op);
  t.set(OpId::interpolate, interpolate_op);
  t.set(OpId::interpolate_backward, interpolate_backward_op);
  t.set(OpId::nll_loss, nll_loss_op);
}

}  // namespace kiln::backend::cuda
