// Reference kernels of the ops that backward rules need: scatter_add, the
// convolution gradients, max_pool2d_with_indices and the adjoints of the
// resampling ops. Inputs are read as row-major double vectors, gradients are
// accumulated in double by walking the forward's loops and scattering.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "backends/conv_geometry.h"
#include "backends/reference/ref_util.h"
#include "backends/reference/reference.h"
#include "backends/resample_formulas.h"

namespace kiln::backend {
namespace {

using ops::OpId;
using Index = std::vector<int64_t>;

// Writes row-major values into a contiguous output.
void write_all(const Tensor& out, const std::vector<double>& v) {
  for (size_t i = 0; i < v.size(); ++i) ref::write(out, static_cast<int64_t>(i), v[i]);
}

int64_t offset_in(const Tensor& t, const Index& index) {
  int64_t off = 0;
  for (int64_t d = 0; d < t.dim(); ++d) off += index[d] * t.strides()[d];
  return off;
}

void scatter_add_kernel(const KernelCall& c) {
  const Tensor& out = c.out();
  const Tensor& index = c.in(1);
  const Tensor& src = c.in(2);
  const int64_t dim = c.attrs.i(0);
  const int64_t size = out.dim() == 0 ? 1 : out.sizes()[dim];
  ref::for_each_index(index.sizes(), [&](const Index& i) {
    const int64_t v = ref::read<int64_t>(index, offset_in(index, i));
    if (v < 0 || v >= size) {
      throw IndexError(detail::str_cat("scatter_add: index ", v, " is out of range for dim ", dim,
                                       " of size ", size));
    }
  });
  const bool same = out.data_ptr() == c.in(0).data_ptr() && out.strides() == c.in(0).strides();
  if (!same) {
    ref::for_each_index(out.sizes(), [&](const Index& i) {
      const int64_t o = offset_in(out, i), x = offset_in(c.in(0), i);
      if (is_floating(out.dtype())) {
        ref::write(out, o, ref::read<double>(c.in(0), x));
      } else {
        ref::write(out, o, ref::read<int64_t>(c.in(0), x));
      }
    });
  }
  ref::for_each_index(index.sizes(), [&](const Index& i) {
    Index o = i;
    if (out.dim() > 0) o[dim] = ref::read<int64_t>(index, offset_in(index, i));
    const int64_t at = offset_in(out, o), from = offset_in(src, i);
    if (is_floating(out.dtype())) {
      ref::write(out, at, ref::read<double>(out, at) + ref::read<double>(src, from));
    } else {
      ref::write(out, at, ref::read<int64_t>(out, at) + ref::read<int64_t>(src, from));
    }
  });
}

// Calls f(gy index, x index, w index) for every product term of the convolution
// y[n, o, oh, ow] += x[n, c, ih, iw] * w[o, ci, kh, kw], as row-major flat indices.
template <typename F>
void for_each_conv_term(const ConvGeometry& g, F f) {
  const int64_t cg = g.c / g.groups, og = g.o / g.groups;
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t o = 0; o < g.o; ++o)
      for (int64_t oh = 0; oh < g.oh; ++oh)
        for (int64_t ow = 0; ow < g.ow; ++ow)
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t kh = 0; kh < g.kh; ++kh) {
              const int64_t ih = oh * g.sh - g.ph0 + kh * g.dh;
              if (ih < 0 || ih >= g.h) continue;
              for (int64_t kw = 0; kw < g.kw; ++kw) {
                const int64_t iw = ow * g.sw - g.pw0 + kw * g.dw;
                if (iw < 0 || iw >= g.w) continue;
                const int64_t channel = (o / og) * cg + ci;
                f(((n * g.o + o) * g.oh + oh) * g.ow + ow,
                  ((n * g.c + channel) * g.h + ih) * g.w + iw,
                  ((o * cg + ci) * g.kh + kh) * g.kw + kw);
              }
            }
}

void conv_backward_input_kernel(const KernelCall& c) {
  const Tensor &gy = c.in(0), &w = c.in(1);
  const ConvGeometry g = conv_geometry(c.out().sizes(), w.sizes(), gy.sizes(), c.attrs, 1);
  const auto gv = gy.to_vector<double>(), wv = w.to_vector<double>();
  std::vector<double> gx(static_cast<size_t>(c.out().numel()), 0.0);
  for_each_conv_term(g, [&](int64_t y, int64_t x, int64_t k) { gx[x] += gv[y] * wv[k]; });
  write_all(c.out(), gx);
}

void conv_backward_weight_kernel(const KernelCall& c) {
  const Tensor &gy = c.in(0), &x = c.in(1);
  const ConvGeometry g = conv_geometry(x.sizes(), c.out().sizes(), gy.sizes(), c.attrs, 1);
  const auto gv = gy.to_vector<double>(), xv = x.to_vector<double>();
  std::vector<double> gw(static_cast<size_t>(c.out().numel()), 0.0);
  for_each_conv_term(g, [&](int64_t y, int64_t i, int64_t k) { gw[k] += gv[y] * xv[i]; });
  write_all(c.out(), gw);
}

// The [N * C, H, W] planes of a pool's input and output.
struct Planes {
  int64_t count, h, w, oh, ow;
};

Planes planes_of(const Shape& x, const Shape& y) {
  const int64_t h = x[x.size() - 2], w = x.back();
  int64_t count = 1;
  for (size_t d = 0; d + 2 < x.size(); ++d) count *= x[d];
  return {count, h, w, y[y.size() - 2], y.back()};
}

void max_pool_with_indices_kernel(const KernelCall& c) {
  const auto& k = c.attrs.ints(0);
  const auto& s = c.attrs.ints(1);
  const auto& p = c.attrs.ints(2);
  const auto& d = c.attrs.ints(3);
  const Planes pl = planes_of(c.in(0).sizes(), c.out(0).sizes());
  const auto xv = c.in(0).to_vector<double>();
  int64_t flat = 0;
  for (int64_t plane = 0; plane < pl.count; ++plane) {
    for (int64_t oh = 0; oh < pl.oh; ++oh) {
      for (int64_t ow = 0; ow < pl.ow; ++ow, ++flat) {
        double best = -std::numeric_limits<double>::infinity();
        int64_t best_at = -1;
        for (int64_t kh = 0; kh < k[0] && !std::isnan(best); ++kh) {
          const int64_t ih = oh * s[0] - p[0] + kh * d[0];
          if (ih < 0 || ih >= pl.h) continue;
          for (int64_t kw = 0; kw < k[1]; ++kw) {
            const int64_t iw = ow * s[1] - p[1] + kw * d[1];
            if (iw < 0 || iw >= pl.w) continue;
            const double v = xv[(plane * pl.h + ih) * pl.w + iw];
            // The first maximum wins; the first NaN wins over everything.
            if (best_at < 0 || v > best || std::isnan(v)) {
              best = v;
              best_at = ih * pl.w + iw;
              if (std::isnan(v)) break;
            }
          }
        }
        ref::write(c.out(0), flat, best);
        ref::write<int64_t>(c.out(1), flat, best_at);
      }
    }
  }
}

void avg_pool_backward_kernel(const KernelCall& c) {
  const auto& k = c.attrs.ints(1);
  const auto& s = c.attrs.ints(2);
  const auto& p = c.attrs.ints(3);
  const bool count_include_pad = c.attrs.b(5);
  const Planes pl = planes_of(c.out().sizes(), c.in(0).sizes());
  const auto gv = c.in(0).to_vector<double>();
  std::vector<double> gx(static_cast<size_t>(c.out().numel()), 0.0);
  int64_t flat = 0;
  // An empty gradient spreads nothing (its other dim may be huge: no loops).
  for (int64_t plane = 0; plane < pl.count && !gv.empty(); ++plane) {
    for (int64_t oh = 0; oh < pl.oh; ++oh) {
      for (int64_t ow = 0; ow < pl.ow; ++ow, ++flat) {
        // The forward's window: clipped to the padded input for the divisor,
        // to the input for the elements it reads.
        const int64_t h0 = oh * s[0] - p[0], w0 = ow * s[1] - p[1];
        const int64_t h1 = std::min(h0 + k[0], pl.h + p[0]), w1 = std::min(w0 + k[1], pl.w + p[1]);
        const int64_t hb = std::max<int64_t>(h0, 0), he = std::min(h1, pl.h);
        const int64_t wb = std::max<int64_t>(w0, 0), we = std::min(w1, pl.w);
        const int64_t count = std::max<int64_t>(he - hb, 0) * std::max<int64_t>(we - wb, 0);
        if (count == 0) continue;
        const int64_t divisor = c.attrs.has(6)      ? c.attrs.i(6)
                                : count_include_pad ? (h1 - h0) * (w1 - w0)
                                                    : count;
        const double share = gv[flat] / static_cast<double>(divisor);
        for (int64_t ih = hb; ih < he; ++ih)
          for (int64_t iw = wb; iw < we; ++iw) gx[(plane * pl.h + ih) * pl.w + iw] += share;
      }
    }
  }
  write_all(c.out(), gx);
}

void adaptive_avg_pool_backward_kernel(const KernelCall& c) {
  const Planes pl = planes_of(c.out().sizes(), c.in(0).sizes());
  const auto gv = c.in(0).to_vector<double>();
  std::vector<double> gx(static_cast<size_t>(c.out().numel()), 0.0);
  int64_t flat = 0;
  // An empty gradient spreads nothing (its other dim may be huge: no loops).
  for (int64_t plane = 0; plane < pl.count && !gv.empty(); ++plane) {
    for (int64_t oh = 0; oh < pl.oh; ++oh) {
      const int64_t h0 = oh * pl.h / pl.oh, h1 = ((oh + 1) * pl.h + pl.oh - 1) / pl.oh;
      for (int64_t ow = 0; ow < pl.ow; ++ow, ++flat) {
        const int64_t w0 = ow * pl.w / pl.ow, w1 = ((ow + 1) * pl.w + pl.ow - 1) / pl.ow;
        const double share = gv[flat] / static_cast<double>((h1 - h0) * (w1 - w0));
        for (int64_t ih = h0; ih < h1; ++ih)
          for (int64_t iw = w0; iw < w1; ++iw) gx[(plane * pl.h + ih) * pl.w + iw] += share;
      }
    }
  }
  write_all(c.out(), gx);
}

// Row-major flat index of a multi-index in shape.
int64_t flat_index(const Shape& shape, const Index& index) {
  int64_t flat = 0;
  for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + index[d];
  return flat;
}

void interpolate_backward_kernel(const KernelCall& c) {
  const Tensor& gy = c.in(0);
  const Shape& in = c.out().sizes();
  const Shape& out = gy.sizes();
  const bool bilinear = c.attrs.str(1) == "bilinear";
  const bool align_corners = c.attrs.b(2);
  const auto gv = gy.to_vector<double>();
  std::vector<double> gx(static_cast<size_t>(c.out().numel()), 0.0);
  int64_t flat = 0;
  ref::for_each_index(out, [&](const Index& o) {
    const double g = gv[flat++];
    Index src = o;
    if (!bilinear) {
      for (size_t d = 2; d < out.size(); ++d)
        src[d] = resample::nearest_source(o[d], in[d], out[d]);
      gx[flat_index(in, src)] += g;
      return;
    }
    const double sh = resample::bilinear_source(o[2], in[2], out[2], align_corners);
    const double sw = resample::bilinear_source(o[3], in[3], out[3], align_corners);
    const int64_t h0 = static_cast<int64_t>(sh), w0 = static_cast<int64_t>(sw);
    for (int64_t dh = 0; dh < 2; ++dh) {
      for (int64_t dw = 0; dw < 2; ++dw) {
        src[2] = std::min(h0 + dh, in[2] - 1);
        src[3] = std::min(w0 + dw, in[3] - 1);
        const double weight = (dh ? sh - h0 : 1 - (sh - h0)) * (dw ? sw - w0 : 1 - (sw - w0));
        gx[flat_index(in, src)] += weight * g;
      }
    }
  });
  write_all(c.out(), gx);
}

void pad_backward_kernel(const KernelCall& c) {
  const Tensor& gy = c.in(0);
  const Shape& in = c.out().sizes();
  const auto& pads = c.attrs.ints(1);
  const std::string& mode = c.attrs.str(2);
  const int64_t nd = static_cast<int64_t>(in.size()), npad = static_cast<int64_t>(pads.size()) / 2;
  const auto gv = gy.to_vector<double>();
  std::vector<double> gx(static_cast<size_t>(c.out().numel()), 0.0);
  int64_t flat = 0;
  ref::for_each_index(gy.sizes(), [&](const Index& o) {
    const double g = gv[flat++];
    Index src = o;
    for (int64_t k = 0; k < npad; ++k) {
      const int64_t d = nd - 1 - k;
      src[d] = resample::pad_source(o[d], pads[2 * k], in[d], mode);
      if (src[d] < 0) return;  // the constant: no input element receives it
    }
    gx[flat_index(in, src)] += g;
  });
  write_all(c.out(), gx);
}

}  // namespace

void register_reference_backward_kernels(KernelTable& t) {
  t.set(OpId::scatter_add, scatter_add_kernel);
  t.set(OpId::conv_backward_input, conv_backward_input_kernel);
  t.set(OpId::conv_backward_weight, conv_backward_weight_kernel);
  t.set(OpId::max_pool2d_with_indices, max_pool_with_indices_kernel);
  t.set(OpId::avg_pool2d_backward, avg_pool_backward_kernel);
  t.set(OpId::adaptive_avg_pool2d_backward, adaptive_avg_pool_backward_kernel);
  t.set(OpId::interpolate_backward, interpolate_backward_kernel);
  t.set(OpId::pad_backward, pad_backward_kernel);
}

}  // namespace kiln::backend
