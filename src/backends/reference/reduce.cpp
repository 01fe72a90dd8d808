// Reference kernels of the reductions, cumsum and softmax: every output element
// gathers its input values into a vector (row-major over the reduced dims) and
// folds it in double (floats) or int64 (integers and bools).
#include <cmath>
#include <limits>

#include "backends/reference/ref_util.h"
#include "backends/reference/reference.h"

namespace kiln::backend {
namespace {

using ops::OpId;

// The reduced dims of a call whose attribute `k` is a (canonical) dims list.
std::vector<int64_t> dims_attr(const KernelCall& c, size_t k) {
  return c.in(0).dim() == 0 ? std::vector<int64_t>{} : c.attrs.ints(k);
}

// The reduced dims of a call whose attribute 0 is a single dim (absent: all dims).
std::vector<int64_t> dim_attr(const KernelCall& c) {
  const Tensor& x = c.in(0);
  if (x.dim() == 0) return {};
  if (c.attrs.has(0)) return {c.attrs.i(0)};
  std::vector<int64_t> all;
  for (int64_t d = 0; d < x.dim(); ++d) all.push_back(d);
  return all;
}

// Calls f(k, values) for output element k (row-major over the kept dims) with the
// values it reduces, read as C.
template <typename C, typename F>
void for_each_group(const Tensor& x, const std::vector<int64_t>& dims, F f) {
  Shape kept, reduced;
  std::vector<bool> is_reduced(x.dim(), false);
  for (int64_t d : dims) is_reduced[d] = true;
  for (int64_t d = 0; d < x.dim(); ++d) (is_reduced[d] ? reduced : kept).push_back(x.sizes()[d]);
  std::vector<int64_t> full(x.dim());
  std::vector<C> values;
  int64_t k = 0;
  ref::for_each_index(kept, [&](const std::vector<int64_t>& kept_index) {
    values.clear();
    ref::for_each_index(reduced, [&](const std::vector<int64_t>& reduced_index) {
      size_t a = 0, b = 0;
      for (int64_t d = 0; d < x.dim(); ++d) full[d] = is_reduced[d] ? reduced_index[b++] : kept_index[a++];
      values.push_back(ref::read<C>(x, ref::offset_of(x, full)));
    });
    f(k++, values);
  });
}

// out[k] = f(values) in double for floating inputs, in int64 otherwise.
template <typename FD, typename FI>
void reduce_typed(const KernelCall& c, const std::vector<int64_t>& dims, FD fd, FI fi) {
  const Tensor& x = c.in(0);
  if (is_floating(x.dtype())) {
    for_each_group<double>(x, dims, [&](int64_t k, const std::vector<double>& v) {
      ref::write(c.out(), k, fd(v));
    });
  } else {
    for_each_group<int64_t>(x, dims, [&](int64_t k, const std::vector<int64_t>& v) {
      ref::write(c.out(), k, fi(v));
    });
  }
}

// out[k] = f(values) for the float-only ops.
template <typename F>
void reduce_float(const KernelCall& c, const std::vector<int64_t>& dims, F f) {
  for_each_group<double>(c.in(0), dims, [&](int64_t k, const std::vector<double>& v) {
    ref::write(c.out(), k, f(v));
  });
}

double sum_of(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s;
}

// Integer sums and products wrap around like the int64 arithmetic of PyTorch.
int64_t isum_of(const std::vector<int64_t>& v) {
  uint64_t s = 0;
  for (int64_t x : v) s += static_cast<uint64_t>(x);
  return static_cast<int64_t>(s);
}

int64_t iprod_of(const std::vector<int64_t>& v) {
  uint64_t p = 1;
  for (int64_t x : v) p *= static_cast<uint64_t>(x);
  return static_cast<int64_t>(p);
}

// The position of the maximum (greater = true) or minimum; the first NaN wins,
// ties keep the first position.
template <typename C>
size_t extreme_index(const std::vector<C>& v, bool greater) {
  size_t best = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] != v[i]) return i;
    if (greater ? v[i] > v[best] : v[i] < v[best]) best = i;
  }
  return best;
}

template <typename C>
C extreme_value(const std::vector<C>& v, bool greater) {
  return v[extreme_index(v, greater)];
}

double variance_of(const std::vector<double>& v, double correction) {
  const double n = static_cast<double>(v.size());
  const double mean = sum_of(v) / n;
  double m2 = 0;
  for (double x : v) m2 += (x - mean) * (x - mean);
  return m2 / std::max(0.0, n - correction);
}

double norm_of(const std::vector<double>& v, double p) {
  if (std::isinf(p)) {  // the shape rule rejects empty groups here
    double best = std::fabs(v[0]);
    for (double x : v) {
      const double a = std::fabs(x);
      if (a != a) return a;
      if (p > 0 ? a > best : a < best) best = a;
    }
    return best;
  }
  double acc = 0;
  for (double x : v) {
    if (p == 0) acc += x != 0;
    else if (p == 1) acc += std::fabs(x);
    else if (p == 2) acc += x * x;
    else acc += std::pow(std::fabs(x), p);
  }
  if (p == 0 || p == 1) return acc;
  return p == 2 ? std::sqrt(acc) : std::pow(acc, 1 / p);
}

// A max of -inf or +inf is not subtracted (it would give NaN); an all -inf
// group then gives log(0) = -inf.
double logsumexp_of(const std::vector<double>& v) {
  double m = -std::numeric_limits<double>::infinity();
  for (double x : v) {
    if (x != x) return x;
    if (x > m) m = x;
  }
  const double shift = std::isinf(m) ? 0.0 : m;
  double s = 0;
  for (double x : v) s += std::exp(x - shift);
  return std::log(s) + shift;
}

void register_sums(KernelTable& t) {
  t.set(OpId::sum, [](const KernelCall& c) { reduce_typed(c, dims_attr(c, 0), sum_of, isum_of); });
  t.set(OpId::prod, [](const KernelCall& c) {
    reduce_typed(c, dims_attr(c, 0),
                 [](const std::vector<double>& v) {
                   double p = 1;
                   for (double x : v) p *= x;
                   return p;
                 },
                 iprod_of);
  });
  t.set(OpId::mean, [](const KernelCall& c) {
    reduce_float(c, dims_attr(c, 0), [](const std::vector<double>& v) { return sum_of(v) / v.size(); });
  });
  auto var = [](bool take_sqrt) {
    return [take_sqrt](const KernelCall& c) {
      const double correction = c.attrs.f(1);
      reduce_float(c, dims_attr(c, 0), [&](const std::vector<double>& v) {
        const double var = variance_of(v, correction);
        return take_sqrt ? std::sqrt(var) : var;
      });
    };
  };
  t.set(OpId::var, var(false));
  t.set(OpId::std, var(true));
  t.set(OpId::norm, [](const KernelCall& c) {
    const double p = c.attrs.f(0);
    reduce_float(c, dims_attr(c, 1), [p](const std::vector<double>& v) { return norm_of(v, p); });
  });
  t.set(OpId::logsumexp, [](const KernelCall& c) {
    reduce_float(c, dims_attr(c, 0), logsumexp_of);
  });
}

void register_extremes(KernelTable& t) {
  auto extreme = [](bool greater) {
    return [greater](const KernelCall& c) {
      reduce_typed(c, dims_attr(c, 0), [&](const auto& v) { return extreme_value(v, greater); },
                   [&](const auto& v) { return extreme_value(v, greater); });
    };
  };
  t.set(OpId::amax, extreme(true));
  t.set(OpId::amin, extreme(false));
  auto with_indices = [](bool greater) {
    return [greater](const KernelCall& c) {
      auto fold = [&](int64_t k, const auto& v) {
        const size_t i = extreme_index(v, greater);
        ref::write(c.out(0), k, v[i]);
        ref::write(c.out(1), k, static_cast<int64_t>(i));
      };
      if (is_floating(c.in(0).dtype())) for_each_group<double>(c.in(0), dim_attr(c), fold);
      else for_each_group<int64_t>(c.in(0), dim_attr(c), fold);
    };
  };
  t.set(OpId::max_dim, with_indices(true));
  t.set(OpId::min_dim, with_indices(false));
  auto arg = [](bool greater) {
    return [greater](const KernelCall& c) {
      auto index = [&](const auto& v) { return static_cast<int64_t>(extreme_index(v, greater)); };
      reduce_typed(c, dim_attr(c), index, index);
    };
  };
  t.set(OpId::argmax, arg(true));
  t.set(OpId::argmin, arg(false));
  auto logical = [](bool any) {
    return [any](const KernelCall& c) {
      auto fold = [&](const auto& v) -> int64_t {
        for (auto x : v)
          if ((x != 0) == any) return any;
        return !any;
      };
      reduce_typed(c, dims_attr(c, 0), fold, fold);
    };
  };
  t.set(OpId::any, logical(true));
  t.set(OpId::all, logical(false));
}

// Calls f(x_offsets, out_offsets) for every line along dim of x and of out (of
// x's shape); a 0-dim tensor is one line of one element.
template <typename F>
void for_each_line(const Tensor& x, const Tensor& out, int64_t dim, F f) {
  Shape outer = x.sizes();
  if (x.dim() > 0) outer[dim] = 1;
  std::vector<int64_t> x_offsets, out_offsets;
  ref::for_each_index(outer, [&](std::vector<int64_t> index) {
    x_offsets.clear();
    out_offsets.clear();
    const int64_t n = x.dim() > 0 ? x.sizes()[dim] : 1;
    for (int64_t i = 0; i < n; ++i) {
      if (x.dim() > 0) index[dim] = i;
      x_offsets.push_back(ref::offset_of(x, index));
      out_offsets.push_back(ref::offset_of(out, index));
    }
    f(x_offsets, out_offsets);
  });
}

void cumsum(const KernelCall& c) {
  const Tensor& x = c.in(0);
  const bool floating = is_floating(x.dtype());
  for_each_line(x, c.out(), c.attrs.i(0), [&](const auto& xo, const auto& oo) {
    double s = 0;
    uint64_t is = 0;  // integers wrap like int64 arithmetic
    for (size_t i = 0; i < xo.size(); ++i) {
      if (floating) {
        s += ref::read<double>(x, xo[i]);
        ref::write(c.out(), oo[i], s);
      } else {
        is += static_cast<uint64_t>(ref::read<int64_t>(x, xo[i]));
        ref::write(c.out(), oo[i], static_cast<int64_t>(is));
      }
    }
  });
}

// exp(x - max) / sum, or x - max - log(sum) for log_softmax. A row of -inf has
// max -inf and gives NaN (-inf - -inf), as PyTorch.
void softmax(const KernelCall& c, bool log) {
  const Tensor& x = c.in(0);
  for_each_line(x, c.out(), c.attrs.i(0), [&](const auto& xo, const auto& oo) {
    std::vector<double> v;
    for (int64_t off : xo) v.push_back(ref::read<double>(x, off));
    if (v.empty()) return;
    const double m = extreme_value(v, true);
    double s = 0;
    for (double e : v) s += std::exp(e - m);
    for (size_t i = 0; i < v.size(); ++i) {
      ref::write(c.out(), oo[i], log ? v[i] - m - std::log(s) : std::exp(v[i] - m) / s);
    }
  });
}

// Where each element of a line lands in its order: the number of elements
// that come before it (by value, NaN above every number, or equal and at a
// lower index). Counting, not sorting: it shares no code with the kernels.
template <typename V>
std::vector<int64_t> order_ranks(const std::vector<V>& v, bool descending) {
  auto before = [&](size_t a, size_t b) {
    if constexpr (std::is_floating_point_v<V>) {
      const bool na = std::isnan(v[a]), nb = std::isnan(v[b]);
      if (descending) return na ? !nb : (!nb && v[a] > v[b]);
      return !na && (nb || v[a] < v[b]);
    } else {
      return descending ? v[a] > v[b] : v[a] < v[b];
    }
  };
  std::vector<int64_t> rank(v.size(), 0);
  for (size_t i = 0; i < v.size(); ++i) {
    for (size_t j = 0; j < v.size(); ++j) {
      if (j != i && (before(j, i) || (!before(i, j) && j < i))) ++rank[i];
    }
  }
  return rank;
}

// sort (k = the line's length) and topk: the first k of each line's order,
// values and indices, along dim of the outputs.
template <typename V>
void ordered(const KernelCall& c, int64_t dim, int64_t k, bool descending) {
  const Tensor& x = c.in(0);
  Shape outer = x.sizes();
  if (x.dim() > 0) outer[dim] = 1;
  const int64_t n = x.dim() > 0 ? x.sizes()[dim] : 1;
  ref::for_each_index(outer, [&](std::vector<int64_t> index) {
    std::vector<V> v;
    for (int64_t i = 0; i < n; ++i) {
      if (x.dim() > 0) index[dim] = i;
      v.push_back(ref::read<V>(x, ref::offset_of(x, index)));
    }
    const std::vector<int64_t> rank = order_ranks(v, descending);
    for (int64_t i = 0; i < n; ++i) {
      if (rank[i] >= k) continue;
      if (x.dim() > 0) index[dim] = rank[i];
      ref::write(c.out(0), ref::offset_of(c.out(0), index), v[i]);
      ref::write(c.out(1), ref::offset_of(c.out(1), index), i);
    }
  });
}

void sort(const KernelCall& c) {
  const Tensor& x = c.in(0);
  const int64_t dim = c.attrs.i(0), n = x.dim() > 0 ? x.sizes()[dim] : 1;
  if (is_floating(x.dtype()))
    ordered<double>(c, dim, n, c.attrs.b(1));
  else
    ordered<int64_t>(c, dim, n, c.attrs.b(1));
}

// A 0-dim input is its own top value, for k 0 as for 1 (as PyTorch).
void topk(const KernelCall& c) {
  const Tensor& x = c.in(0);
  const int64_t k = x.dim() == 0 ? 1 : c.attrs.i(0);
  if (is_floating(x.dtype()))
    ordered<double>(c, c.attrs.i(1), k, c.attrs.b(2));
  else
    ordered<int64_t>(c, c.attrs.i(1), k, c.attrs.b(2));
}

void register_scans(KernelTable& t) {
  t.set(OpId::sort, sort);
  t.set(OpId::topk, topk);
  t.set(OpId::cumsum, cumsum);
  t.set(OpId::softmax, [](const KernelCall& c) { softmax(c, false); });
  t.set(OpId::log_softmax, [](const KernelCall& c) { softmax(c, true); });
}

}  // namespace

void register_reference_reduce_kernels(KernelTable& t) {
  register_sums(t);
  register_extremes(t);
  register_scans(t);
}

}  // namespace kiln::backend
