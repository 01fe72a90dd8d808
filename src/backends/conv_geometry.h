// The geometry of a conv1d/conv2d call as one batched 2-D convolution (conv1d
// has H = kH = 1, an unbatched input N = 1), shared by the kernels of the
// convolution gradients, whose shapes come from different inputs and attributes.
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/tensor.h"
#include "ops/attrs.h"

namespace kiln::backend {

struct ConvGeometry {
  int64_t n, c, h, w, o, kh, kw, oh, ow;
  int64_t sh, sw, dh, dw, ph0, pw0, ph1, pw1, groups;

  std::vector<int64_t> key() const {
    return {n, c, h, w, o, kh, kw, oh, ow, sh, sw, dh, dw, ph0, pw0, ph1, pw1, groups};
  }
};

// x, w, y: the shapes of conv's input, weight and output. attrs[first..first + 3]
// hold conv's canonical stride, padding (begins then ends), dilation and groups.
inline ConvGeometry conv_geometry(const Shape& x, const Shape& w, const Shape& y,
                                  const ops::Attrs& attrs, size_t first) {
  const bool is_1d = w.size() == 3;
  const bool batched = x.size() == w.size();
  const auto& s = attrs.ints(first);
  const auto& p = attrs.ints(first + 1);
  const auto& d = attrs.ints(first + 2);
  ConvGeometry g{};
  g.n = batched ? x[0] : 1;
  g.c = x[batched ? 1 : 0];
  g.h = is_1d ? 1 : x[x.size() - 2];
  g.w = x.back();
  g.o = w[0];
  g.kh = is_1d ? 1 : w[2];
  g.kw = w.back();
  g.oh = is_1d ? 1 : y[y.size() - 2];
  g.ow = y.back();
  g.sh = is_1d ? 1 : s[0];
  g.sw = s.back();
  g.dh = is_1d ? 1 : d[0];
  g.dw = d.back();
  g.ph0 = is_1d ? 0 : p[0];
  g.pw0 = is_1d ? p[0] : p[1];
  g.ph1 = is_1d ? 0 : p[2];
  g.pw1 = is_1d ? p[1] : p[3];
  g.groups = attrs.i(first + 3);
  return g;
}

}  // namespace kiln::backend
