// CUDA kernels of the 2-D pools and their adjoints: max_pool2d (and with
// indices), avg_pool2d, adaptive_avg_pool2d, avg_pool2d_backward and
// adaptive_avg_pool2d_backward. Inputs are [N, C, H, W] or [C, H, W], seen as
// planes of H x W. Forward kernels run a thread per output element; the
// adjoints a thread per input element, gathering the shares of the windows
// that cover it (no atomics, the same sums as the CPU's up to order).
#include <cmath>

#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/pointwise.cuh"

namespace kiln::backend::cuda {
namespace {

using ops::OpId;

constexpr int kThreads = 256;

struct Window {
  int kh, kw, sh, sw, ph, pw, dh, dw;
};

struct PlaneShape {
  int64_t planes, h, w, oh, ow;
};

PlaneShape plane_shape(const Tensor& x, const Tensor& y) {
  const int64_t h = x.size(-2), w = x.size(-1);
  return {h * w == 0 ? 0 : x.numel() / (h * w), h, w, y.size(-2), y.size(-1)};
}

Window window_of(const ops::Attrs& a, size_t first, bool dilated) {
  const auto& k = a.ints(first);
  const auto& s = a.ints(first + 1);
  const auto& p = a.ints(first + 2);
  Window w{static_cast<int>(k[0]),
           static_cast<int>(k[1]),
           static_cast<int>(s[0]),
           static_cast<int>(s[1]),
           static_cast<int>(p[0]),
           static_cast<int>(p[1]),
           1,
           1};
  if (dilated) {
    const auto& d = a.ints(first + 3);
    w.dh = static_cast<int>(d[0]);
    w.dw = static_cast<int>(d[1]);
  }
  return w;
}

unsigned grid_for(int64_t n) {
  return static_cast<unsigned>(
      std::max<int64_t>(1, std::min<int64_t>((n + kThreads - 1) / kThreads, 1 << 20)));
}

// The first maximum wins; the first NaN ends the window (its index is kept).
template <typename T>
__global__ void max_pool_kernel(const T* x, T* y, int64_t* indices, PlaneShape s, Window k) {
  using C = dcompute_t<T>;
  const int64_t total = s.planes * s.oh * s.ow;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < total;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t ow = e % s.ow, oh = (e / s.ow) % s.oh, plane = e / (s.ow * s.oh);
    const T* src = x + plane * s.h * s.w;
    C best = -INFINITY;
    int64_t best_at = -1;
    bool nan = false;
    for (int i = 0; i < k.kh && !nan; ++i) {
      const int64_t ih = oh * k.sh - k.ph + i * k.dh;
      if (ih < 0 || ih >= s.h) continue;
      for (int j = 0; j < k.kw; ++j) {
        const int64_t iw = ow * k.sw - k.pw + j * k.dw;
        if (iw < 0 || iw >= s.w) continue;
        const C v = to_compute(src[ih * s.w + iw]);
        if (best_at < 0 || v > best || v != v) {
          best = v;
          best_at = ih * s.w + iw;
          if (v != v) {
            nan = true;
            break;
          }
        }
      }
    }
    y[e] = cvt<T>(best);
    if (indices) indices[e] = best_at;
  }
}

template <typename T>
__global__ void avg_pool_kernel(const T* x, T* y, PlaneShape s, Window k, bool count_include_pad,
                                int64_t divisor) {
  using C = dcompute_t<T>;
  const int64_t total = s.planes * s.oh * s.ow;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < total;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t ow = e % s.ow, oh = (e / s.ow) % s.oh, plane = e / (s.ow * s.oh);
    const T* src = x + plane * s.h * s.w;
    const int64_t h0 = oh * k.sh - k.ph, w0 = ow * k.sw - k.pw;
    const int64_t h1 = min(h0 + k.kh, s.h + k.ph), w1 = min(w0 + k.kw, s.w + k.pw);
    const int64_t hb = max(h0, int64_t{0}), he = min(h1, s.h), wb = max(w0, int64_t{0}),
                  we = min(w1, s.w);
    C sum = 0;
    for (int64_t ih = hb; ih < he; ++ih)
      for (int64_t iw = wb; iw < we; ++iw) sum += to_compute(src[ih * s.w + iw]);
    const int64_t count = max(he - hb, int64_t{0}) * max(we - wb, int64_t{0});
    const int64_t div = divisor > 0 ? divisor : count_include_pad ? (h1 - h0) * (w1 - w0) : count;
    y[e] = count == 0 ? cvt<T>(C(0)) : cvt<T>(sum / static_cast<C>(div));
  }
}

__device__ inline int64_t adaptive_begin(int64_t o, int64_t in, int64_t out) {
  return o * in / out;
}
__device__ inline int64_t adaptive_end(int64_t o, int64_t in, int64_t out) {
  return ((o + 1) * in + out - 1) / out;
}

template <typename T>
__global__ void adaptive_avg_pool_kernel(const T* x, T* y, PlaneShape s) {
  using C = dcompute_t<T>;
  const int64_t total = s.planes * s.oh * s.ow;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < total;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t ow = e % s.ow, oh = (e / s.ow) % s.oh, plane = e / (s.ow * s.oh);
    const T* src = x + plane * s.h * s.w;
    const int64_t h0 = adaptive_begin(oh, s.h, s.oh), h1 = adaptive_end(oh, s.h, s.oh);
    const int64_t w0 = adaptive_begin(ow, s.w, s.ow), w1 = adaptive_end(ow, s.w, s.ow);
    C sum = 0;
    for (int64_t ih = h0; ih < h1; ++ih)
      for (int64_t iw = w0; iw < w1; ++iw) sum += to_compute(src[ih * s.w + iw]);
    y[e] = cvt<T>(sum / static_cast<C>((h1 - h0) * (w1 - w0)));
  }
}

// Adjoint of avg_pool2d: input element (ih, iw) gathers grad / divisor from
// each output whose window holds it.
template <typename T>
__global__ void avg_pool_backward_kernel(const T* gy, T* gx, PlaneShape s, Window k,
                                         bool count_include_pad, int64_t divisor) {
  using C = dcompute_t<T>;
  const int64_t total = s.planes * s.h * s.w;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < total;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t iw = e % s.w, ih = (e / s.w) % s.h, plane = e / (s.w * s.h);
    const T* g = gy + plane * s.oh * s.ow;
    // Outputs with oh * sh - ph <= ih < oh * sh - ph + kh.
    const int64_t oh_lo = max(int64_t{0}, (ih + k.ph - k.kh + k.sh) / k.sh);
    const int64_t oh_hi = min(s.oh - 1, (ih + k.ph) / k.sh);
    const int64_t ow_lo = max(int64_t{0}, (iw + k.pw - k.kw + k.sw) / k.sw);
    const int64_t ow_hi = min(s.ow - 1, (iw + k.pw) / k.sw);
    C sum = 0;
    for (int64_t oh = oh_lo; oh <= oh_hi; ++oh) {
      const int64_t h0 = oh * k.sh - k.ph, h1 = min(h0 + k.kh, s.h + k.ph);
      if (ih < h0 || ih >= h1) continue;
      const int64_t hb = max(h0, int64_t{0}), he = min(h1, s.h);
      for (int64_t ow = ow_lo; ow <= ow_hi; ++ow) {
        const int64_t w0 = ow * k.sw - k.pw, w1 = min(w0 + k.kw, s.w + k.pw);
        if (iw < w0 || iw >= w1) continue;
        const int64_t wb = max(w0, int64_t{0}), we = min(w1, s.w);
        const int64_t count = (he - hb) * (we - wb);
        const int64_t div = divisor > 0         ? divisor
                            : count_include_pad ? (h1 - h0) * (w1 - w0)
                                                : count;
        sum += to_compute(g[oh * s.ow + ow]) / static_cast<C>(div);
      }
    }
    gx[e] = cvt<T>(sum);
  }
}

// Adjoint of adaptive_avg_pool2d: outputs oh with begin(oh) <= ih < end(oh)
// lie in [ih * OH / H, ceil((ih + 1) * OH / H) - 1].
template <typename T>
__global__ void adaptive_avg_pool_backward_kernel(const T* gy, T* gx, PlaneShape s) {
  using C = dcompute_t<T>;
  const int64_t total = s.planes * s.h * s.w;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < total;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t iw = e % s.w, ih = (e / s.w) % s.h, plane = e / (s.w * s.h);
    const T* g = gy + plane * s.oh * s.ow;
    const int64_t oh_lo = ih * s.oh / s.h,
                  oh_hi = min(s.oh - 1, ((ih + 1) * s.oh + s.h - 1) / s.h - 1);
    const int64_t ow_lo = iw * s.ow / s.w,
                  ow_hi = min(s.ow - 1, ((iw + 1) * s.ow + s.w - 1) / s.w - 1);
    C sum = 0;
    for (int64_t oh = oh_lo; oh <= oh_hi; ++oh) {
      const int64_t h0 = adaptive_begin(oh, s.h, s.oh), h1 = adaptive_end(oh, s.h, s.oh);
      if (ih < h0 || ih >= h1) continue;
      for (int64_t ow = ow_lo; ow <= ow_hi; ++ow) {
        const int64_t w0 = adaptive_begin(ow, s.w, s.ow), w1 = adaptive_end(ow, s.w, s.ow);
        if (iw < w0 || iw >= w1) continue;
        sum += to_compute(g[oh * s.ow + ow]) / static_cast<C>((h1 - h0) * (w1 - w0));
      }
    }
    gx[e] = cvt<T>(sum);
  }
}

// Runs launch.template operator()<T>(stream) for the floating dtype of t.
template <typename F>
void on_float(const KernelCall& c, const Tensor& t, const char* what, F&& launch) {
  DeviceGuard guard(t.device().index());
  visit_device_dtype(t.dtype(), [&]<typename T>() {
    if constexpr (kIsFloatT<T>)
      launch.template operator()<T>(stream_for(t));
    else
      unsupported_dtype(c, t.dtype());
  });
  check_launch(what);
}

template <bool kWithIndices>
void max_pool_op(const KernelCall& c) {
  const Tensor x = c.in(0).contiguous();
  const Tensor& y = c.out(0);
  const PlaneShape s = plane_shape(x, y);
  if (y.numel() == 0) return;
  const Window k = window_of(c.attrs, 0, true);
  on_float(c, x, "max_pool2d kernel", [&]<typename T>(cudaStream_t stream) {
    max_pool_kernel<T><<<grid_for(y.numel()), kThreads, 0, stream>>>(
        static_cast<const T*>(x.data_ptr()), static_cast<T*>(y.data_ptr()),
        kWithIndices ? static_cast<int64_t*>(c.out(1).data_ptr()) : nullptr, s, k);
  });
}

void avg_pool_op(const KernelCall& c) {
  const Tensor x = c.in(0).contiguous();
  const Tensor& y = c.out();
  const PlaneShape s = plane_shape(x, y);
  if (y.numel() == 0) return;
  const Window k = window_of(c.attrs, 0, false);
  const int64_t divisor = c.attrs.has(5) ? c.attrs.i(5) : 0;
  on_float(c, x, "avg_pool2d kernel", [&]<typename T>(cudaStream_t stream) {
    avg_pool_kernel<T><<<grid_for(y.numel()), kThreads, 0, stream>>>(
        static_cast<const T*>(x.data_ptr()), static_cast<T*>(y.data_ptr()), s, k, c.attrs.b(4),
        divisor);
  });
}

void adaptive_avg_pool_op(const KernelCall& c) {
  const Tensor x = c.in(0).contiguous();
  const Tensor& y = c.out();
  const PlaneShape s = plane_shape(x, y);
  if (y.numel() == 0) return;
  on_float(c, x, "adaptive_avg_pool2d kernel", [&]<typename T>(cudaStream_t stream) {
    adaptive_avg_pool_kernel<T><<<grid_for(y.numel()), kThreads, 0, stream>>>(
        static_cast<const T*>(x.data_ptr()), static_cast<T*>(y.data_ptr()), s);
  });
}

void avg_pool_backward_op(const KernelCall& c) {
  const Tensor gy = c.in(0).contiguous();
  const Tensor& gx = c.out();
  const PlaneShape s = plane_shape(gx, gy);
  if (gx.numel() == 0) return;
  const Window k = window_of(c.attrs, 1, false);
  const int64_t divisor = c.attrs.has(6) ? c.attrs.i(6) : 0;
  on_float(c, gy, "avg_pool2d_backward kernel", [&]<typename T>(cudaStream_t stream) {
    avg_pool_backward_kernel<T><<<grid_for(gx.numel()), kThreads, 0, stream>>>(
        static_cast<const T*>(gy.data_ptr()), static_cast<T*>(gx.data_ptr()), s, k, c.attrs.b(5),
        divisor);
  });
}

void adaptive_avg_pool_backward_op(const KernelCall& c) {
  const Tensor gy = c.in(0).contiguous();
  const Tensor& gx = c.out();
  const PlaneShape s = plane_shape(gx, gy);
  if (gx.numel() == 0) return;
  if (gy.numel() == 0) {  // nothing to spread: its windows' loops would walk an empty dim's twin
    fill_bits(gx, 0);
    return;
  }
  on_float(c, gy, "adaptive_avg_pool2d_backward kernel", [&]<typename T>(cudaStream_t stream) {
    adaptive_avg_pool_backward_kernel<T><<<grid_for(gx.numel()), kThreads, 0, stream>>>(
        static_cast<const T*>(gy.data_ptr()), static_cast<T*>(gx.data_ptr()), s);
  });
}

}  // namespace

void register_cuda_pool_kernels(KernelTable& t) {
  t.set(OpId::max_pool2d, max_pool_op<false>);
  t.set(OpId::max_pool2d_with_indices, max_pool_op<true>);
  t.set(OpId::avg_pool2d, avg_pool_op);
  t.set(OpId::adaptive_avg_pool2d, adaptive_avg_pool_op);
  t.set(OpId::avg_pool2d_backward, avg_pool_backward_op);
  t.set(OpId::adaptive_avg_pool2d_backward, adaptive_avg_pool_backward_op);
}

}  // namespace kiln::backend::cuda
