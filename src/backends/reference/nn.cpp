// Reference kernels of the network ops: inputs read as row-major double (or
// exact element) vectors, plain loops, double accumulation.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "backends/reference/ref_util.h"
#include "backends/reference/reference.h"
#include "backends/resample_formulas.h"
#include "core/philox.h"
#include "core/shape_util.h"

namespace kiln::backend {
namespace {

using ops::OpId;
using resample::bilinear_source;
using resample::nearest_source;
using resample::pad_source;

// Row-major values of an optional tensor; `fallback` repeated n times when absent.
std::vector<double> values_or(const Tensor& t, int64_t n, double fallback) {
  return t.defined() ? t.to_vector<double>() : std::vector<double>(n, fallback);
}

// Writes values to a contiguous output.
void write_all(const Tensor& out, const std::vector<double>& values) {
  for (size_t i = 0; i < values.size(); ++i) ref::write(out, static_cast<int64_t>(i), values[i]);
}

// Copies one element of any dtype.
void copy_element(const Tensor& out, int64_t out_offset, const Tensor& in, int64_t in_offset) {
  const size_t size = in.element_size();
  std::memcpy(static_cast<char*>(out.data_ptr()) + out_offset * size,
              static_cast<const char*>(in.data_ptr()) + in_offset * size, size);
}

// Mean and biased variance of the values v[i] with group(i) == g, by two passes.
struct Moments {
  std::vector<double> mean, var;
};
template <typename Group>
Moments moments(const std::vector<double>& v, int64_t groups, Group group) {
  Moments m{std::vector<double>(groups, 0), std::vector<double>(groups, 0)};
  std::vector<double> count(groups, 0);
  for (size_t i = 0; i < v.size(); ++i) {
    m.mean[group(i)] += v[i];
    count[group(i)] += 1;
  }
  for (int64_t g = 0; g < groups; ++g) m.mean[g] /= count[g];
  for (size_t i = 0; i < v.size(); ++i) {
    const double d = v[i] - m.mean[group(i)];
    m.var[group(i)] += d * d;
  }
  for (int64_t g = 0; g < groups; ++g) m.var[g] /= count[g];
  return m;
}

// x [N, C, ...] normalized per channel with these statistics, then scaled
// by weight and shifted by bias (input 1 and 2, when given), in double.
std::vector<double> normalize_channels(const KernelCall& c, const std::vector<double>& v,
                                       const Moments& m, double eps) {
  const int64_t channels = c.in(0).size(1);
  const int64_t inner = c.in(0).numel() / std::max<int64_t>(c.in(0).size(0) * channels, 1);
  const auto w = values_or(c.in(1), channels, 1), b = values_or(c.in(2), channels, 0);
  std::vector<double> y(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const int64_t ch = static_cast<int64_t>(i / inner) % channels;
    y[i] = (v[i] - m.mean[ch]) / std::sqrt(m.var[ch] + eps) * w[ch] + b[ch];
  }
  return y;
}

void batch_norm(const KernelCall& c) {
  const Tensor& x = c.in(0);
  const int64_t channels = x.size(1);
  const int64_t inner = x.numel() / std::max<int64_t>(x.size(0) * channels, 1);
  const auto v = x.to_vector<double>();
  Moments m;
  if (c.attrs.b(0)) {
    m = moments(v, channels, [&](size_t i) { return static_cast<int64_t>(i / inner) % channels; });
  } else {
    m = {c.in(3).to_vector<double>(), c.in(4).to_vector<double>()};
  }
  write_all(c.out(0), normalize_channels(c, v, m, c.attrs.f(1)));
  write_all(c.out(1), m.mean);
  write_all(c.out(2), m.var);
}

// batch_norm_eval: the normalization, + residual, relu, in double.
void batch_norm_eval(const KernelCall& c) {
  const Moments m = {c.in(3).to_vector<double>(), c.in(4).to_vector<double>()};
  std::vector<double> y = normalize_channels(c, c.in(0).to_vector<double>(), m, c.attrs.f(0));
  const bool residual = c.inputs.size() > 5 && c.in(5).defined();
  const auto r = residual ? c.in(5).to_vector<double>() : std::vector<double>();
  for (size_t i = 0; i < y.size(); ++i) {
    if (residual) y[i] += r[i];
    if (c.attrs.b(1) && y[i] < 0) y[i] = 0;
  }
  write_all(c.out(0), y);
}

void layer_norm(const KernelCall& c) {
  const int64_t row = shape_numel(c.attrs.ints(0));
  const int64_t rows = c.in(0).numel() / row;
  const auto v = c.in(0).to_vector<double>();
  const Moments m = moments(v, rows, [&](size_t i) { return static_cast<int64_t>(i) / row; });
  const auto w = values_or(c.in(1), row, 1), b = values_or(c.in(2), row, 0);
  std::vector<double> y(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const int64_t r = static_cast<int64_t>(i) / row, k = static_cast<int64_t>(i) % row;
    y[i] = (v[i] - m.mean[r]) / std::sqrt(m.var[r] + c.attrs.f(1)) * w[k] + b[k];
  }
  write_all(c.out(), y);
}

void group_norm(const KernelCall& c) {
  const Tensor& x = c.in(0);
  const int64_t channels = x.size(1), groups = c.attrs.i(0);
  const int64_t inner = x.numel() / std::max<int64_t>(x.size(0) * channels, 1);
  const int64_t group_size = channels / groups * inner;  // consecutive in row-major order
  const auto v = x.to_vector<double>();
  const Moments m = moments(v, x.size(0) * groups,
                            [&](size_t i) { return static_cast<int64_t>(i) / group_size; });
  const auto w = values_or(c.in(1), channels, 1), b = values_or(c.in(2), channels, 0);
  std::vector<double> y(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const int64_t g = static_cast<int64_t>(i) / group_size;
    const int64_t ch = static_cast<int64_t>(i / inner) % channels;
    y[i] = (v[i] - m.mean[g]) / std::sqrt(m.var[g] + c.attrs.f(1)) * w[ch] + b[ch];
  }
  write_all(c.out(), y);
}

void embedding(const KernelCall& c) {
  const Tensor& weight = c.in(0);
  const int64_t v = weight.size(0), d = weight.size(1);
  const auto indices = c.in(1).to_vector<int64_t>();
  for (size_t i = 0; i < indices.size(); ++i) {
    const int64_t idx = indices[i];
    if (idx < 0 || idx >= v) {
      throw IndexError(
          detail::str_cat("embedding: index ", idx, " is out of range for ", v, " embeddings"));
    }
    for (int64_t k = 0; k < d; ++k) {
      copy_element(c.out(), static_cast<int64_t>(i) * d + k, weight,
                   ref::offset_of(weight, {idx, k}));
    }
  }
}

void dropout(const KernelCall& c) {
  const double p = c.attrs.f(0);
  const auto seed = static_cast<uint64_t>(c.attrs.i(1));
  const auto offset = static_cast<uint64_t>(c.attrs.i(2));
  auto v = c.in(0).to_vector<double>();
  for (size_t i = 0; i < v.size(); ++i) {
    const bool keep = static_cast<double>(philox::uniform_f32(seed, offset + i)) >= p;
    v[i] = keep ? v[i] / (1 - p) : 0.0;
  }
  write_all(c.out(), v);
}

// Every input expanded to the output's batch dims, as row-major doubles.
std::vector<double> expanded(const Tensor& t, const Shape& batch) {
  Shape full = batch;
  full.push_back(t.size(-2));
  full.push_back(t.size(-1));
  return t.expand(full).to_vector<double>();
}

void sdpa(const KernelCall& c) {
  const Tensor& out = c.out();
  const Shape batch(out.sizes().begin(), out.sizes().end() - 2);
  const int64_t nb = shape_numel(batch), l = out.size(-2), ev = out.size(-1);
  const int64_t e = c.in(0).size(-1), s = c.in(1).size(-2);
  const auto q = expanded(c.in(0), batch), k = expanded(c.in(1), batch),
             v = expanded(c.in(2), batch);
  std::vector<double> mask;
  if (c.inputs.size() > 3 && c.in(3).defined()) {
    Shape full = batch;
    full.push_back(l);
    full.push_back(s);
    mask = c.in(3).expand(full).to_vector<double>();
  }
  const bool bool_mask = !mask.empty() && c.in(3).dtype() == kBool;
  const bool causal = c.attrs.b(0);
  const double scale = c.attrs.f(1);
  std::vector<double> y(out.numel(), 0.0), p(s);
  for (int64_t bi = 0; bi < nb; ++bi) {
    for (int64_t i = 0; i < l; ++i) {
      double top = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < s; ++j) {
        double dot = 0;
        for (int64_t a = 0; a < e; ++a) dot += q[(bi * l + i) * e + a] * k[(bi * s + j) * e + a];
        double score = dot * scale;
        const size_t mi = (bi * l + i) * s + j;
        if (bool_mask)
          score = mask[mi] != 0 ? score : -std::numeric_limits<double>::infinity();
        else if (!mask.empty())
          score += mask[mi];
        if (causal && j > i) score = -std::numeric_limits<double>::infinity();
        p[j] = score;
        if (score > top || std::isnan(score)) top = score;  // a NaN sticks: NaN in, NaN out
      }
      // A row with every key masked attends to nothing: zeros, as PyTorch 2.11's CPU kernel.
      if (top == -std::numeric_limits<double>::infinity()) continue;
      double total = 0;
      for (int64_t j = 0; j < s; ++j) total += p[j] = std::exp(p[j] - top);
      for (int64_t j = 0; j < s; ++j) {
        for (int64_t a = 0; a < ev; ++a)
          y[(bi * l + i) * ev + a] += p[j] / total * v[(bi * s + j) * ev + a];
      }
    }
  }
  write_all(out, y);
}

void pad(const KernelCall& c) {
  const Tensor &x = c.in(0), &out = c.out();
  const auto& pads = c.attrs.ints(0);
  const std::string& mode = c.attrs.str(1);
  const int64_t nd = x.dim(), npad = static_cast<int64_t>(pads.size()) / 2;
  int64_t flat = 0;
  ref::for_each_index(out.sizes(), [&](const std::vector<int64_t>& index) {
    std::vector<int64_t> src = index;
    bool inside = true;
    for (int64_t k = 0; k < npad; ++k) {
      const int64_t d = nd - 1 - k;
      src[d] = pad_source(index[d], pads[2 * k], x.size(d), mode);
      inside = inside && src[d] >= 0;
    }
    if (inside)
      copy_element(out, flat, x, ref::offset_of(x, src));
    else
      ref::write(out, flat, c.attrs.f(2));
    ++flat;
  });
}

void interpolate(const KernelCall& c) {
  const Tensor &x = c.in(0), &out = c.out();
  const int64_t nd = x.dim();
  const bool bilinear = c.attrs.str(1) == "bilinear";
  int64_t flat = 0;
  ref::for_each_index(out.sizes(), [&](const std::vector<int64_t>& index) {
    if (!bilinear) {
      std::vector<int64_t> src = index;
      for (int64_t d = 2; d < nd; ++d) {
        src[d] = nearest_source(index[d], x.size(d), out.size(d));
      }
      copy_element(out, flat++, x, ref::offset_of(x, src));
      return;
    }
    double sum = 0;
    const double sh = bilinear_source(index[2], x.size(2), out.size(2), c.attrs.b(2));
    const double sw = bilinear_source(index[3], x.size(3), out.size(3), c.attrs.b(2));
    const int64_t h0 = static_cast<int64_t>(sh), w0 = static_cast<int64_t>(sw);
    for (int64_t dh = 0; dh < 2; ++dh) {
      for (int64_t dw = 0; dw < 2; ++dw) {
        const int64_t h = std::min(h0 + dh, x.size(2) - 1), w = std::min(w0 + dw, x.size(3) - 1);
        const double weight = (dh ? sh - h0 : 1 - (sh - h0)) * (dw ? sw - w0 : 1 - (sw - w0));
        sum += weight * ref::read<double>(x, ref::offset_of(x, {index[0], index[1], h, w}));
      }
    }
    ref::write(out, flat++, sum);
  });
}

void nll_loss(const KernelCall& c) {
  const Tensor& x = c.in(0);
  const int64_t classes = x.size(x.dim() == 1 ? 0 : 1);
  const int64_t inner = x.dim() <= 2 ? 1 : x.numel() / std::max<int64_t>(x.size(0) * classes, 1);
  const auto v = x.to_vector<double>();
  const auto target = c.in(1).to_vector<int64_t>();
  const auto w = values_or(c.inputs.size() > 2 ? c.in(2) : Tensor(), classes, 1);
  const int64_t ignore = c.attrs.i(0);
  std::vector<double> loss(target.size(), 0.0);
  double total = 0, weight_sum = 0;
  for (size_t i = 0; i < target.size(); ++i) {
    const int64_t t = target[i];
    if (t == ignore) continue;
    if (t < 0 || t >= classes) {
      throw IndexError(
          detail::str_cat("nll_loss: target ", t, " is out of range for ", classes, " classes"));
    }
    const int64_t n = static_cast<int64_t>(i) / inner, s = static_cast<int64_t>(i) % inner;
    loss[i] = -w[t] * v[(n * classes + t) * inner + s];
    total += loss[i];
    weight_sum += w[t];
  }
  const std::string& reduction = c.attrs.str(1);
  if (reduction == "none")
    write_all(c.out(), loss);
  else if (reduction == "sum")
    ref::write(c.out(), 0, total);
  else
    ref::write(c.out(), 0, total / weight_sum);  // 0 / 0 = NaN when every target is ignored
}

}  // namespace

void register_reference_nn_kernels(KernelTable& t) {
  t.set(OpId::batch_norm, batch_norm);
  t.set(OpId::batch_norm_eval, batch_norm_eval);
  t.set(OpId::layer_norm, layer_norm);
  t.set(OpId::group_norm, group_norm);
  t.set(OpId::embedding, embedding);
  t.set(OpId::dropout, dropout);
  t.set(OpId::scaled_dot_product_attention, sdpa);
  t.set(OpId::pad, pad);
  t.set(OpId::interpolate, interpolate);
  t.set(OpId::nll_loss, nll_loss);
  register_reference_rnn_kernels(t);
}

}  // namespace kiln::backend
