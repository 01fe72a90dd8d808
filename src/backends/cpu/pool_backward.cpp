// CPU kernels of max_pool2d_with_indices and of the adjoints of avg_pool2d and
// adaptive_avg_pool2d. All run over the N * C planes in parallel: an output
// plane's gradient only reaches its own input plane, so planes never race.
// The adjoints walk the forward's windows and add each share into a plane
// accumulator of the compute type (float for the 16-bit floats).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backends/cpu/backward_ops.h"
#include "backends/cpu/loops.h"
#include "backends/cpu/nn.h"

namespace kiln::backend::cpu {
namespace {

using ops::OpId;

struct Planes {
  int64_t count, h, w, oh, ow;
};

// x: the pool's input shape, y: its output shape.
Planes planes_of(const Shape& x, const Shape& y) {
  const int64_t h = x[x.size() - 2], w = x.back();
  int64_t count = 1;
  for (size_t d = 0; d + 2 < x.size(); ++d) count *= x[d];
  return {count, h, w, y[y.size() - 2], y.back()};
}

// Runs f(begin, end) over ranges of planes, in parallel when the work is large.
template <typename F>
void for_planes(const Planes& p, int64_t work_per_output, F f) {
  const int64_t per_plane = std::max<int64_t>(1, p.oh * p.ow * work_per_output + p.h * p.w);
  parallel_for(p.count, std::max<int64_t>(1, kParallelGrain / per_plane), f);
}

template <typename T>
void max_pool_with_indices(const KernelCall& call) {
  using C = compute_t<T>;
  const Tensor x = call.in(0).contiguous();
  const Planes p = planes_of(x.sizes(), call.out(0).sizes());
  const auto& k = call.attrs.ints(0);
  const auto& s = call.attrs.ints(1);
  const auto& pad = call.attrs.ints(2);
  const auto& d = call.attrs.ints(3);
  const T* in = x.data<T>();
  T* values = call.out(0).data<T>();
  int64_t* indices = call.out(1).data<int64_t>();
  for_planes(p, k[0] * k[1], [&](int64_t begin, int64_t end) {
    for (int64_t plane = begin; plane < end; ++plane) {
      const T* src = in + plane * p.h * p.w;
      const int64_t base = plane * p.oh * p.ow;
      for (int64_t oh = 0; oh < p.oh; ++oh) {
        for (int64_t ow = 0; ow < p.ow; ++ow) {
          C best = -std::numeric_limits<C>::infinity();
          int64_t best_at = -1;
          for (int64_t kh = 0; kh < k[0] && !std::isnan(best); ++kh) {
            const int64_t ih = oh * s[0] - pad[0] + kh * d[0];
            if (ih < 0 || ih >= p.h) continue;
            for (int64_t kw = 0; kw < k[1]; ++kw) {
              const int64_t iw = ow * s[1] - pad[1] + kw * d[1];
              if (iw < 0 || iw >= p.w) continue;
              const C v = C(src[ih * p.w + iw]);
              // The first maximum wins; the first NaN ends the window.
              if (best_at < 0 || v > best || std::isnan(v)) {
                best = v;
                best_at = ih * p.w + iw;
                if (std::isnan(v)) break;
              }
            }
          }
          values[base + oh * p.ow + ow] = T(best);
          indices[base + oh * p.ow + ow] = best_at;
        }
      }
    }
  });
}

// Calls add(plane, accumulator) for ranges of planes with a zeroed [H, W] accumulator
// per plane, then stores it into the gradient.
template <typename T, typename Add>
void accumulate_planes(const Planes& p, int64_t work_per_output, T* gx, Add add) {
  using C = compute_t<T>;
  for_planes(p, work_per_output, [&](int64_t begin, int64_t end) {
    std::vector<C> acc(static_cast<size_t>(p.h * p.w));
    for (int64_t plane = begin; plane < end; ++plane) {
      std::fill(acc.begin(), acc.end(), C(0));
      add(plane, acc.data());
      T* dst = gx + plane * p.h * p.w;
      for (int64_t i = 0; i < p.h * p.w; ++i) dst[i] = static_cast<T>(acc[i]);
    }
  });
}

template <typename T>
void avg_pool_backward(const KernelCall& call) {
  using C = compute_t<T>;
  const Tensor gy = call.in(0).contiguous();
  const Planes p = planes_of(call.out().sizes(), gy.sizes());
  const auto& k = call.attrs.ints(1);
  const auto& s = call.attrs.ints(2);
  const auto& pad = call.attrs.ints(3);
  const bool count_include_pad = call.attrs.b(5);
  const bool has_divisor = call.attrs.has(6);
  const int64_t divisor = has_divisor ? call.attrs.i(6) : 1;
  const T* g = gy.data<T>();
  accumulate_planes<T>(p, k[0] * k[1], call.out().data<T>(), [&](int64_t plane, C* acc) {
    const T* grad = g + plane * p.oh * p.ow;
    for (int64_t oh = 0; oh < p.oh; ++oh) {
      const int64_t h0 = oh * s[0] - pad[0], h1 = std::min(h0 + k[0], p.h + pad[0]);
      const int64_t hb = std::max<int64_t>(h0, 0), he = std::min(h1, p.h);
      for (int64_t ow = 0; ow < p.ow; ++ow) {
        const int64_t w0 = ow * s[1] - pad[1], w1 = std::min(w0 + k[1], p.w + pad[1]);
        const int64_t wb = std::max<int64_t>(w0, 0), we = std::min(w1, p.w);
        const int64_t count = std::max<int64_t>(he - hb, 0) * std::max<int64_t>(we - wb, 0);
        if (count == 0) continue;
        const int64_t div = has_divisor         ? divisor
                            : count_include_pad ? (h1 - h0) * (w1 - w0)
                                                : count;
        const C share = C(grad[oh * p.ow + ow]) / C(div);
        for (int64_t ih = hb; ih < he; ++ih)
          for (int64_t iw = wb; iw < we; ++iw) acc[ih * p.w + iw] += share;
      }
    }
  });
}

template <typename T>
void adaptive_avg_pool_backward(const KernelCall& call) {
  using C = compute_t<T>;
  const Tensor gy = call.in(0).contiguous();
  const Planes p = planes_of(call.out().sizes(), gy.sizes());
  if (call.out().numel() == 0) return;
  if (gy.numel() == 0) {  // nothing to spread: the windows' loops would walk an empty dim's twin
    std::fill_n(call.out().data<T>(), call.out().numel(), T(0));
    return;
  }
  const T* g = gy.data<T>();
  const int64_t window =
      p.oh * p.ow == 0 ? 0 : ((p.h + p.oh - 1) / p.oh + 1) * ((p.w + p.ow - 1) / p.ow + 1);
  accumulate_planes<T>(p, window, call.out().data<T>(), [&](int64_t plane, C* acc) {
    const T* grad = g + plane * p.oh * p.ow;
    for (int64_t oh = 0; oh < p.oh; ++oh) {
      const int64_t h0 = oh * p.h / p.oh, h1 = ((oh + 1) * p.h + p.oh - 1) / p.oh;
      for (int64_t ow = 0; ow < p.ow; ++ow) {
        const int64_t w0 = ow * p.w / p.ow, w1 = ((ow + 1) * p.w + p.ow - 1) / p.ow;
        const C share = C(grad[oh * p.ow + ow]) / C((h1 - h0) * (w1 - w0));
        for (int64_t ih = h0; ih < h1; ++ih)
          for (int64_t iw = w0; iw < w1; ++iw) acc[ih * p.w + iw] += share;
      }
    }
  });
}

}  // namespace

void register_cpu_pool_backward_kernels(KernelTable& t) {
  t.set(OpId::max_pool2d_with_indices, [](const KernelCall& c) {
    visit_floating(c.out(0).dtype(), [&]<typename T>() { max_pool_with_indices<T>(c); });
  });
  t.set(OpId::avg_pool2d_backward, [](const KernelCall& c) {
    visit_floating(c.out().dtype(), [&]<typename T>() { avg_pool_backward<T>(c); });
  });
  t.set(OpId::adaptive_avg_pool2d_backward, [](const KernelCall& c) {
    visit_floating(c.out().dtype(), [&]<typename T>() { adaptive_avg_pool_backward<T>(c); });
  });
}

}  // namespace kiln::backend::cpu
