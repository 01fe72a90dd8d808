// CPU kernels of the adjoints of interpolate and pad, from the source-index
// formulas the forward kernels use (backends/resample_formulas.h).
// interpolate_backward adds each output gradient into its source pixels, in
// parallel over the N * C planes (planes never share pixels). pad_backward
// gathers instead: per dim, the list of padded indices that read each input
// index, so every input element sums its own gradients and rows run in parallel.
#include <algorithm>
#include <string>
#include <vector>

#include "backends/cpu/backward_ops.h"
#include "backends/cpu/loops.h"
#include "backends/cpu/nn.h"
#include "backends/resample_formulas.h"

namespace kiln::backend::cpu {
namespace {

using ops::OpId;
using IndexTable = std::vector<int64_t>;

// Spatial dims of an interpolate plane, padded in front to three (D, H, W).
struct Spatial3 {
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1};
};

Spatial3 spatial3(const Shape& in, const Shape& out) {
  Spatial3 s;
  const size_t dims = in.size() - 2;
  for (size_t d = 0; d < dims; ++d) {
    s.in[3 - dims + d] = in[2 + d];
    s.out[3 - dims + d] = out[2 + d];
  }
  return s;
}

template <typename T, typename Add>
void for_each_plane_accumulator(int64_t planes, int64_t in_plane, int64_t work, T* gx, Add add) {
  using C = compute_t<T>;
  parallel_for(planes, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(work, 1)),
               [&](int64_t begin, int64_t end) {
                 std::vector<C> acc(static_cast<size_t>(in_plane));
                 for (int64_t plane = begin; plane < end; ++plane) {
                   std::fill(acc.begin(), acc.end(), C(0));
                   add(plane, acc.data());
                   T* dst = gx + plane * in_plane;
                   for (int64_t i = 0; i < in_plane; ++i) dst[i] = static_cast<T>(acc[i]);
                 }
               });
}

template <typename T>
void nearest_backward(const Tensor& gy, const Tensor& gx) {
  using C = compute_t<T>;
  const Spatial3 s = spatial3(gx.sizes(), gy.sizes());
  IndexTable tables[3];
  for (int d = 0; d < 3; ++d) {
    tables[d].resize(s.out[d]);
    for (int64_t o = 0; o < s.out[d]; ++o)
      tables[d][o] = resample::nearest_source(o, s.in[d], s.out[d]);
  }
  const int64_t in_plane = s.in[0] * s.in[1] * s.in[2];
  const int64_t out_plane = s.out[0] * s.out[1] * s.out[2];
  const T* g = gy.data<T>();
  for_each_plane_accumulator<T>(gx.size(0) * gx.size(1), in_plane, out_plane + in_plane,
                                gx.data<T>(), [&](int64_t plane, C* acc) {
                                  const T* grad = g + plane * out_plane;
                                  for (int64_t od = 0; od < s.out[0]; ++od) {
                                    for (int64_t oh = 0; oh < s.out[1]; ++oh) {
                                      C* row =
                                          acc + (tables[0][od] * s.in[1] + tables[1][oh]) * s.in[2];
                                      const T* gr = grad + (od * s.out[1] + oh) * s.out[2];
                                      for (int64_t ow = 0; ow < s.out[2]; ++ow)
                                        row[tables[2][ow]] += C(gr[ow]);
                                    }
                                  }
                                });
}

template <typename T>
void bilinear_backward(const Tensor& gy, const Tensor& gx, bool align_corners) {
  using C = compute_t<T>;
  const int64_t in_h = gx.size(2), in_w = gx.size(3), out_h = gy.size(2), out_w = gy.size(3);
  const resample::LinearTable<C> th(in_h, out_h, align_corners), tw(in_w, out_w, align_corners);
  const T* g = gy.data<T>();
  for_each_plane_accumulator<T>(gx.size(0) * gx.size(1), in_h * in_w,
                                4 * out_h * out_w + in_h * in_w, gx.data<T>(),
                                [&](int64_t plane, C* acc) {
                                  const T* grad = g + plane * out_h * out_w;
                                  for (int64_t oh = 0; oh < out_h; ++oh) {
                                    C* top = acc + th.lo[oh] * in_w;
                                    C* bottom = acc + th.hi[oh] * in_w;
                                    const C fh = th.frac[oh];
                                    for (int64_t ow = 0; ow < out_w; ++ow) {
                                      const C v = C(grad[oh * out_w + ow]), fw = tw.frac[ow];
                                      top[tw.lo[ow]] += v * (1 - fh) * (1 - fw);
                                      top[tw.hi[ow]] += v * (1 - fh) * fw;
                                      bottom[tw.lo[ow]] += v * fh * (1 - fw);
                                      bottom[tw.hi[ow]] += v * fh * fw;
                                    }
                                  }
                                });
}

void interpolate_backward(const KernelCall& c) {
  const Tensor gy = c.in(0).contiguous();
  const Tensor& gx = c.out();
  if (gx.numel() == 0) return;
  visit_floating(gx.dtype(), [&]<typename T>() {
    if (c.attrs.str(1) == "nearest") {
      nearest_backward<T>(gy, gx);
    } else {
      bilinear_backward<T>(gy, gx, c.attrs.b(2));
    }
  });
}

// For one dim: the padded indices reading each input index, as offsets into entries.
struct InverseTable {
  IndexTable begin, entries;
};

InverseTable inverse_pad_table(int64_t in, int64_t out, int64_t before, const std::string& mode) {
  std::vector<IndexTable> lists(in);
  for (int64_t o = 0; o < out; ++o) {
    const int64_t i = resample::pad_source(o, before, in, mode);
    if (i >= 0) lists[i].push_back(o);
  }
  InverseTable t;
  t.begin.push_back(0);
  for (const auto& l : lists) {
    t.entries.insert(t.entries.end(), l.begin(), l.end());
    t.begin.push_back(static_cast<int64_t>(t.entries.size()));
  }
  return t;
}

// The row offsets (in the contiguous padded gradient) of every padded row that
// reads input row r, i.e. the cartesian product of the leading dims' lists.
void padded_rows(int64_t r, const std::vector<InverseTable>& tables, const Shape& in,
                 const Shape& out, IndexTable& rows) {
  const int64_t nd = static_cast<int64_t>(in.size());
  rows.assign(1, 0);
  IndexTable next;
  int64_t stride = out.back();
  for (int64_t d = nd - 2; d >= 0; --d) {
    const int64_t i = r % in[d];
    r /= in[d];
    const InverseTable& t = tables[d];
    next.clear();
    for (int64_t e = t.begin[i]; e < t.begin[i + 1]; ++e)
      for (int64_t base : rows) next.push_back(base + t.entries[e] * stride);
    rows.swap(next);
    stride *= out[d];
  }
}

template <typename T>
void pad_backward(const Tensor& gy, const Tensor& gx, const KernelCall& c) {
  using C = compute_t<T>;
  const Shape &in = gx.sizes(), &out = gy.sizes();
  const T* g = gy.data<T>();
  T* dst = gx.data<T>();
  const int64_t nd = gx.dim();
  if (nd == 0) {
    dst[0] = g[0];
    return;
  }
  const auto& pads = c.attrs.ints(1);
  const int64_t npad = static_cast<int64_t>(pads.size()) / 2;
  std::vector<InverseTable> tables(nd);
  for (int64_t d = 0; d < nd; ++d) {
    const int64_t k = nd - 1 - d;  // the pads of dim d sit at 2k, 2k + 1
    tables[d] = inverse_pad_table(in[d], out[d], k < npad ? pads[2 * k] : 0, c.attrs.str(2));
  }
  const InverseTable& last = tables.back();
  const int64_t width = in.back(), rows = gx.numel() / width;
  const int64_t work = std::max<int64_t>(1, gy.numel() / std::max<int64_t>(rows, 1));
  parallel_for(rows, std::max<int64_t>(1, kParallelGrain / work), [&](int64_t r0, int64_t r1) {
    IndexTable sources;
    std::vector<C> acc(static_cast<size_t>(width));
    for (int64_t r = r0; r < r1; ++r) {
      padded_rows(r, tables, in, out, sources);
      std::fill(acc.begin(), acc.end(), C(0));
      for (int64_t base : sources) {
        const T* gr = g + base;
        for (int64_t i = 0; i < width; ++i)
          for (int64_t e = last.begin[i]; e < last.begin[i + 1]; ++e)
            acc[i] += C(gr[last.entries[e]]);
      }
      for (int64_t i = 0; i < width; ++i) dst[r * width + i] = static_cast<T>(acc[i]);
    }
  });
}

void pad_backward_kernel(const KernelCall& c) {
  const Tensor gy = c.in(0).contiguous();
  const Tensor& gx = c.out();
  if (gx.numel() == 0) return;
  visit_floating(gx.dtype(), [&]<typename T>() { pad_backward<T>(gy, gx, c); });
}

}  // namespace

void register_cpu_resample_backward_kernels(KernelTable& t) {
  t.set(OpId::interpolate_backward, interpolate_backward);
  t.set(OpId::pad_backward, pad_backward_kernel);
}

}  // namespace kiln::backend::cpu
