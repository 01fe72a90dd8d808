// CPU kernels of pad and interpolate. Both walk the output row by row (OpenMP
// over rows) with per-dim source-index tables computed once; pad and nearest
// only move elements, so they are instantiated per element width, not dtype.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cpu/loops.h"
#include "backends/cpu/nn.h"
#include "backends/resample_formulas.h"
#include "core/convert.h"

namespace kiln::backend::cpu {
namespace {

using ops::OpId;
using IndexTable = std::vector<int64_t>;
using resample::nearest_source;
using resample::pad_source;

// For each dim, the source index of every output index (-1: outside the input).
std::vector<IndexTable> pad_tables(const Tensor& x, const Tensor& out, const KernelCall& c) {
  const auto& pads = c.attrs.ints(0);
  const int64_t nd = x.dim(), npad = static_cast<int64_t>(pads.size()) / 2;
  std::vector<IndexTable> tables(nd);
  for (int64_t d = 0; d < nd; ++d) {
    const int64_t k = nd - 1 - d;  // pads of dim d sit at 2k, 2k + 1
    tables[d].resize(out.size(d));
    for (int64_t o = 0; o < out.size(d); ++o) {
      tables[d][o] = k < npad ? pad_source(o, pads[2 * k], x.size(d), c.attrs.str(1)) : o;
    }
  }
  return tables;
}

// Element offset of the input row feeding output row r (all dims but the last),
// or -1 when a dim of the row lies in the constant padding.
int64_t source_row(int64_t r, const std::vector<IndexTable>& tables, const Shape& strides) {
  int64_t offset = 0;
  for (int64_t d = static_cast<int64_t>(tables.size()) - 2; d >= 0; --d) {
    const int64_t n = static_cast<int64_t>(tables[d].size());
    const int64_t src = tables[d][r % n];
    r /= n;
    if (src < 0) return -1;
    offset += src * strides[d];
  }
  return offset;
}

template <typename E>
void pad_rows(const Tensor& x, Tensor& out, const KernelCall& c, E fill) {
  const E* px = static_cast<const E*>(x.data_ptr());
  E* py = static_cast<E*>(out.data_ptr());
  if (x.dim() == 0) {
    py[0] = px[0];
    return;
  }
  const auto tables = pad_tables(x, out, c);
  const IndexTable& last = tables.back();
  const int64_t width = out.size(-1);
  // The run of the row copied straight from the input: source o - before.
  const int64_t before = c.attrs.ints(0).empty() ? 0 : c.attrs.ints(0)[0];
  const int64_t copy_begin = std::clamp<int64_t>(before, 0, width);
  const int64_t copy_end = std::clamp<int64_t>(before + x.size(-1), copy_begin, width);
  const int64_t rows = width == 0 ? 0 : out.numel() / width;
  parallel_for(rows, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(width, 1)),
               [&](int64_t r0, int64_t r1) {
                 for (int64_t r = r0; r < r1; ++r) {
                   E* yr = py + r * width;
                   const int64_t src = source_row(r, tables, x.strides());
                   if (src < 0) {
                     std::fill(yr, yr + width, fill);
                     continue;
                   }
                   const E* xr = px + src;
                   for (int64_t o = 0; o < copy_begin; ++o)
                     yr[o] = last[o] < 0 ? fill : xr[last[o]];
                   if (copy_end > copy_begin) {
                     std::memcpy(yr + copy_begin, xr + (copy_begin - before),
                                 (copy_end - copy_begin) * sizeof(E));
                   }
                   for (int64_t o = copy_end; o < width; ++o)
                     yr[o] = last[o] < 0 ? fill : xr[last[o]];
                 }
               });
}

void pad(const KernelCall& c) {
  const Tensor x = c.in(0).contiguous();
  Tensor& out = c.out();
  if (out.numel() == 0) return;
  // The fill value converted as a cast to the dtype would, then moved as raw bits.
  unsigned char fill_bytes[sizeof(uint64_t)] = {};
  visit_dtype(x.dtype(), [&]<typename T>() {
    const T value = convert<T>(c.attrs.f(2));
    std::memcpy(fill_bytes, &value, sizeof(T));
  });
  visit_element_width(x.dtype(), [&]<typename E>() {
    E fill;
    std::memcpy(&fill, fill_bytes, sizeof(E));
    pad_rows<E>(x, out, c, fill);
  });
}

IndexTable nearest_table(int64_t in, int64_t out) {
  IndexTable t(out);
  for (int64_t o = 0; o < out; ++o) t[o] = nearest_source(o, in, out);
  return t;
}

template <typename E>
void nearest(const Tensor& x, Tensor& out) {
  const int64_t nd = x.dim();
  std::vector<IndexTable> tables;
  for (int64_t d = 2; d < nd; ++d) tables.push_back(nearest_table(x.size(d), out.size(d)));
  const IndexTable& last = tables.back();
  const int64_t width = out.size(-1), rows = out.numel() / width;
  const int64_t plane_in = x.numel() / std::max<int64_t>(x.size(0) * x.size(1), 1);
  const int64_t plane_rows = rows / std::max<int64_t>(out.size(0) * out.size(1), 1);
  const Shape &out_sizes = out.sizes(), &in_strides = x.strides();
  const E* px = static_cast<const E*>(x.data_ptr());
  E* py = static_cast<E*>(out.data_ptr());
  parallel_for(rows, std::max<int64_t>(1, kParallelGrain / width), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      int64_t rest = r % plane_rows, offset = (r / plane_rows) * plane_in;
      for (int64_t d = nd - 2; d >= 2; --d) {
        const int64_t n = out_sizes[d];
        offset += tables[d - 2][rest % n] * in_strides[d];
        rest /= n;
      }
      const E* xr = px + offset;
      E* yr = py + r * width;
      for (int64_t o = 0; o < width; ++o) yr[o] = xr[last[o]];
    }
  });
}

template <typename T>
void bilinear(const Tensor& x, Tensor& out, bool align_corners) {
  using C = compute_t<T>;
  const int64_t in_h = x.size(2), in_w = x.size(3), out_h = out.size(2), out_w = out.size(3);
  const resample::LinearTable<C> th(in_h, out_h, align_corners), tw(in_w, out_w, align_corners);
  const T* px = x.data<T>();
  T* py = out.data<T>();
  const int64_t rows = out.numel() / out_w;
  parallel_for(rows, std::max<int64_t>(1, kParallelGrain / out_w), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t plane = r / out_h, oh = r % out_h;
      const T* top = px + (plane * in_h + th.lo[oh]) * in_w;
      const T* bottom = px + (plane * in_h + th.hi[oh]) * in_w;
      const C fh = th.frac[oh];
      T* yr = py + r * out_w;
      for (int64_t o = 0; o < out_w; ++o) {
        const C fw = tw.frac[o];
        const C t = static_cast<C>(top[tw.lo[o]]) * (1 - fw) + static_cast<C>(top[tw.hi[o]]) * fw;
        const C b =
            static_cast<C>(bottom[tw.lo[o]]) * (1 - fw) + static_cast<C>(bottom[tw.hi[o]]) * fw;
        yr[o] = static_cast<T>(t * (1 - fh) + b * fh);
      }
    }
  });
}

void interpolate(const KernelCall& c) {
  const Tensor x = c.in(0).contiguous();
  Tensor& out = c.out();
  if (out.numel() == 0) return;
  if (c.attrs.str(1) == "nearest") {
    visit_element_width(x.dtype(), [&]<typename E>() { nearest<E>(x, out); });
  } else {
    visit_floating(x.dtype(), [&]<typename T>() { bilinear<T>(x, out, c.attrs.b(2)); });
  }
}

}  // namespace

void register_cpu_resample_kernels(KernelTable& t) {
  t.set(OpId::pad, pad);
  t.set(OpId::interpolate, interpolate);
}

}  // namespace kiln::backend::cpu
