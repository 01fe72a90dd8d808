// Reference kernels of convolution and pooling: direct loops over every output
// element and its window, in double, reading through any strides.
#include <algorithm>
#include <cmath>
#include <limits>

#include "backends/reference/ref_util.h"
#include "backends/reference/reference.h"

namespace kiln::backend {
namespace {

using ops::OpId;

// Element (a, b, c, d) of a 4-D tensor through its strides.
double at4(const Tensor& t, int64_t a, int64_t b, int64_t c, int64_t d) {
  const auto& s = t.strides();
  return ref::read<double>(t, a * s[0] + b * s[1] + c * s[2] + d * s[3]);
}

// Views as [N, C, H, W]: unbatched inputs gain N = 1, conv1d gains H = 1.
Tensor as_nchw(const Tensor& t, int64_t spatial_dims, bool batched) {
  Tensor v = batched ? t : t.unsqueeze(0);
  return spatial_dims == 1 ? v.unsqueeze(2) : v;
}

void conv_kernel(const KernelCall& c) {
  const int64_t dims = c.schema.id == OpId::conv1d ? 1 : 2;
  const bool batched = c.in(0).dim() == dims + 2;
  const Tensor x = as_nchw(c.in(0), dims, batched);
  const Tensor w = dims == 1 ? c.in(1).unsqueeze(2) : c.in(1);
  const Tensor y = as_nchw(c.out(), dims, batched);
  const bool has_bias = c.inputs.size() > 2 && c.in(2).defined();
  // Attributes per spatial dim, with H = (stride 1, no pad, dilation 1) for conv1d.
  auto attr = [&](size_t k, int64_t d, int64_t h_default) {
    const auto& v = c.attrs.ints(k);
    return dims == 1 ? (d == 0 ? h_default : v[0]) : v[d];
  };
  const auto& pads = c.attrs.ints(1);
  const int64_t sh = attr(0, 0, 1), sw = attr(0, 1, 1);
  const int64_t dh = attr(2, 0, 1), dw = attr(2, 1, 1);
  const int64_t ph = dims == 1 ? 0 : pads[0], pw = dims == 1 ? pads[0] : pads[1];
  const int64_t groups = c.attrs.i(3);
  const int64_t cg = w.size(1), og = w.size(0) / groups;
  const int64_t H = x.size(2), W = x.size(3);
  ref::for_each_index(y.sizes(), [&](const std::vector<int64_t>& i) {
    const int64_t n = i[0], o = i[1], oh = i[2], ow = i[3];
    const int64_t g = o / og;
    double sum = has_bias ? ref::read<double>(c.in(2), o * c.in(2).stride(0)) : 0.0;
    for (int64_t ci = 0; ci < cg; ++ci) {
      for (int64_t kh = 0; kh < w.size(2); ++kh) {
        const int64_t ih = oh * sh - ph + kh * dh;
        if (ih < 0 || ih >= H) continue;
        for (int64_t kw = 0; kw < w.size(3); ++kw) {
          const int64_t iw = ow * sw - pw + kw * dw;
          if (iw < 0 || iw >= W) continue;
          sum += at4(x, n, g * cg + ci, ih, iw) * at4(w, o, ci, kh, kw);
        }
      }
    }
    ref::write(y, n * y.stride(0) + o * y.stride(1) + oh * y.stride(2) + ow * y.stride(3), sum);
  });
}

// Calls f(x, y, n, c, oh, ow) for every output element of a pool, 3-D inputs as N = 1.
template <typename F>
void for_each_pool_output(const KernelCall& c, F f) {
  const bool batched = c.in(0).dim() == 4;
  const Tensor x = batched ? c.in(0) : c.in(0).unsqueeze(0);
  const Tensor y = batched ? c.out() : c.out().unsqueeze(0);
  ref::for_each_index(y.sizes(), [&](const std::vector<int64_t>& i) {
    const double v = f(x, i[0], i[1], i[2], i[3]);
    ref::write(y, i[0] * y.stride(0) + i[1] * y.stride(1) + i[2] * y.stride(2) + i[3] * y.stride(3), v);
  });
}

void max_pool_kernel(const KernelCall& c) {
  const auto& k = c.attrs.ints(0);
  const auto& s = c.attrs.ints(1);
  const auto& p = c.attrs.ints(2);
  const auto& d = c.attrs.ints(3);
  for_each_pool_output(c, [&](const Tensor& x, int64_t n, int64_t ch, int64_t oh, int64_t ow) {
    double best = -std::numeric_limits<double>::infinity();
    for (int64_t kh = 0; kh < k[0]; ++kh) {
      const int64_t ih = oh * s[0] - p[0] + kh * d[0];
      if (ih < 0 || ih >= x.size(2)) continue;
      for (int64_t kw = 0; kw < k[1]; ++kw) {
        const int64_t iw = ow * s[1] - p[1] + kw * d[1];
        if (iw < 0 || iw >= x.size(3)) continue;
        const double v = at4(x, n, ch, ih, iw);
        if (std::isnan(v)) return v;
        best = std::max(best, v);
      }
    }
    return best;
  });
}

void avg_pool_kernel(const KernelCall& c) {
  const auto& k = c.attrs.ints(0);
  const auto& s = c.attrs.ints(1);
  const auto& p = c.attrs.ints(2);
  const bool count_include_pad = c.attrs.b(4);
  for_each_pool_output(c, [&](const Tensor& x, int64_t n, int64_t ch, int64_t oh, int64_t ow) {
    const int64_t H = x.size(2), W = x.size(3);
    // The window clipped to the padded input counts for count_include_pad,
    // clipped to the input itself for the sum.
    const int64_t h0 = oh * s[0] - p[0], w0 = ow * s[1] - p[1];
    const int64_t h1 = std::min(h0 + k[0], H + p[0]), w1 = std::min(w0 + k[1], W + p[1]);
    const int64_t padded_count = (h1 - h0) * (w1 - w0);
    double sum = 0;
    int64_t count = 0;
    for (int64_t ih = std::max<int64_t>(h0, 0); ih < std::min(h1, H); ++ih) {
      for (int64_t iw = std::max<int64_t>(w0, 0); iw < std::min(w1, W); ++iw) {
        sum += at4(x, n, ch, ih, iw);
        ++count;
      }
    }
    if (count == 0) return 0.0;
    if (c.attrs.has(5)) return sum / static_cast<double>(c.attrs.i(5));
    return sum / static_cast<double>(count_include_pad ? padded_count : count);
  });
}

void adaptive_avg_pool_kernel(const KernelCall& c) {
  const auto& o = c.attrs.ints(0);
  for_each_pool_output(c, [&](const Tensor& x, int64_t n, int64_t ch, int64_t oh, int64_t ow) {
    const int64_t H = x.size(2), W = x.size(3);
    const int64_t h0 = oh * H / o[0], h1 = ((oh + 1) * H + o[0] - 1) / o[0];
    const int64_t w0 = ow * W / o[1], w1 = ((ow + 1) * W + o[1] - 1) / o[1];
    double sum = 0;
    for (int64_t ih = h0; ih < h1; ++ih)
      for (int64_t iw = w0; iw < w1; ++iw) sum += at4(x, n, ch, ih, iw);
    return sum / static_cast<double>((h1 - h0) * (w1 - w0));
  });
}

}  // namespace

void register_reference_conv_pool_kernels(KernelTable& t) {
  t.set(OpId::conv1d, conv_kernel);
  t.set(OpId::conv2d, conv_kernel);
  t.set(OpId::max_pool2d, max_pool_kernel);
  t.set(OpId::avg_pool2d, avg_pool_kernel);
  t.set(OpId::adaptive_avg_pool2d, adaptive_avg_pool_kernel);
}

}  // namespace kiln::backend
