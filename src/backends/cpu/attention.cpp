// CPU kernel of scaled_dot_product_attention: one query row at a time (OpenMP
// over batch x heads x L): scores against every key, a max-subtracted softmax,
// and the weighted sum of the value rows, all in the compute type.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backends/cpu/loops.h"
#include "backends/cpu/nn.h"
#include "backends/cpu/vec_math.h"
#include "core/shape_util.h"

namespace kiln::backend::cpu {
namespace {

// Element offsets (from data_ptr) of each batch entry of t broadcast to
// batch + t's last two dims, in row-major order of the batch.
std::vector<int64_t> batch_offsets(const Tensor& t, const Shape& batch) {
  Shape full = batch;
  full.push_back(t.size(-2));
  full.push_back(t.size(-1));
  const Tensor e = t.expand(full);
  const int64_t nb = shape_numel(batch), nd = static_cast<int64_t>(batch.size());
  std::vector<int64_t> offsets(nb), index(nd, 0);
  for (int64_t b = 0; b < nb; ++b) {
    int64_t off = 0;
    for (int64_t d = 0; d < nd; ++d) off += index[d] * e.stride(d);
    offsets[b] = off;
    for (int64_t d = nd - 1; d >= 0 && ++index[d] == batch[d]; --d) index[d] = 0;
  }
  return offsets;
}

// q, k, v in the compute type C with contiguous rows.
template <typename C>
Tensor rows_of(const Tensor& t) {
  return t.to(dtype_of<C>()).contiguous();
}

template <typename C>
C dot(const C* a, const C* b, int64_t n) {
  C s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

struct AttentionShape {
  int64_t batches, l, s, e, ev;
};

// The mask row of one query: bool (false = masked) or added to the scores.
template <typename C>
struct MaskRow {
  const bool* keep = nullptr;
  const C* add = nullptr;
  int64_t stride = 0;
};

// One output row: scores of query qi against the first `keys` keys, a
// max-subtracted softmax, and the weighted sum of the value rows. p and acc
// are scratch of s and ev elements.
template <typename C>
void attend_row(const C* qi, const C* kb, const C* vb, int64_t keys, const AttentionShape& sh,
                C scale, const MaskRow<C>& mask, C* p, C* acc) {
  constexpr C kNegInf = -std::numeric_limits<C>::infinity();
  for (int64_t j = 0; j < keys; ++j) p[j] = dot(qi, kb + j * sh.e, sh.e) * scale;
  if (mask.keep) {
    for (int64_t j = 0; j < keys; ++j) p[j] = mask.keep[j * mask.stride] ? p[j] : kNegInf;
  } else if (mask.add) {
    for (int64_t j = 0; j < keys; ++j) p[j] += mask.add[j * mask.stride];
  }
  C top = kNegInf;
  for (int64_t j = 0; j < keys; ++j) top = std::max(top, p[j]);
  std::fill(acc, acc + sh.ev, C(0));
  // A row with every key masked attends to nothing: zeros, as PyTorch 2.11's CPU kernel.
  if (top == kNegInf) return;
  C total = 0;
#pragma omp simd reduction(+ : total)
  for (int64_t j = 0; j < keys; ++j) {
    p[j] = exp_f32(p[j] - top);
    total += p[j];
  }
  for (int64_t j = 0; j < keys; ++j) {
    const C pj = p[j];
    const C* vj = vb + j * sh.ev;
#pragma omp simd
    for (int64_t a = 0; a < sh.ev; ++a) acc[a] += pj * vj[a];
  }
  const C inv = C(1) / total;
#pragma omp simd
  for (int64_t a = 0; a < sh.ev; ++a) acc[a] *= inv;
}

template <typename T>
void sdpa(const KernelCall& c) {
  using C = compute_t<T>;
  Tensor& out = c.out();
  const Shape batch(out.sizes().begin(), out.sizes().end() - 2);
  const AttentionShape sh{shape_numel(batch), out.size(-2), c.in(1).size(-2), c.in(0).size(-1),
                          out.size(-1)};
  T* py = out.data<T>();
  if (sh.s == 0) {  // softmax over no keys: an empty weighted sum
    std::fill(py, py + out.numel(), static_cast<T>(0));
    return;
  }
  const Tensor q = rows_of<C>(c.in(0)), k = rows_of<C>(c.in(1)), v = rows_of<C>(c.in(2));
  const auto qo = batch_offsets(q, batch), ko = batch_offsets(k, batch),
             vo = batch_offsets(v, batch);
  // Pointers and strides are taken here: nothing in the parallel region may throw.
  const C *pq = q.data<C>(), *pk = k.data<C>(), *pv = v.data<C>();
  MaskRow<C> mask;  // at batch 0, query 0 of the mask expanded to [batch..., L, S]
  std::vector<int64_t> mo(sh.batches, 0);
  int64_t mask_row = 0;
  if (c.inputs.size() > 3 && c.in(3).defined()) {
    Shape full = batch;
    full.push_back(sh.l);
    full.push_back(sh.s);
    const Tensor m = c.in(3).expand(full);
    mo = batch_offsets(m, batch);
    mask_row = m.stride(-2);
    mask.stride = m.stride(-1);
    if (m.dtype() == kBool)
      mask.keep = m.data<bool>();
    else
      mask.add = m.data<C>();
  }
  const bool causal = c.attrs.b(0);
  const C scale = static_cast<C>(c.attrs.f(1));
  const int64_t work = sh.s * (sh.e + sh.ev);
  parallel_for(sh.batches * sh.l, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(work, 1)),
               [&](int64_t r0, int64_t r1) {
                 std::vector<C> p(sh.s), acc(sh.ev);
                 for (int64_t r = r0; r < r1; ++r) {
                   const int64_t b = r / sh.l, i = r % sh.l;
                   const int64_t offset = mo[b] + i * mask_row;
                   const MaskRow<C> m{mask.keep ? mask.keep + offset : nullptr,
                                      mask.add ? mask.add + offset : nullptr, mask.stride};
                   // A causal query i sees keys 0..i only: the rest are never computed.
                   const int64_t keys = causal ? std::min(i + 1, sh.s) : sh.s;
                   attend_row(pq + qo[b] + i * sh.e, pk + ko[b], pv + vo[b], keys, sh, scale, m,
                              p.data(), acc.data());
                   T* yi = py + r * sh.ev;
                   for (int64_t a = 0; a < sh.ev; ++a) yi[a] = static_cast<T>(acc[a]);
                 }
               });
}

}  // namespace

void register_cpu_attention_kernels(KernelTable& t) {
  t.set(ops::OpId::scaled_dot_product_attention, [](const KernelCall& c) {
    visit_floating(c.out().dtype(), [&]<typename T>() { sdpa<T>(c); });
  });
}

}  // namespace kiln::backend::cpu
