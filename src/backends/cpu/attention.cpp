// CPU kernel of scaled_dot_product_attention. float32 works on blocks of query
// rows of one (batch, head) entry: scores S = Q K^T * scale by sgemm, the
// masked, max-subtracted row softmax in place, and O = P V by sgemm, in
// parallel over the blocks. Other dtypes go one query row at a time in the
// compute type: scores against every key, the softmax, the weighted sum.
#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <mutex>
#include <vector>

#include "backends/cpu/loops.h"
#include "backends/cpu/nn.h"
#include "backends/cpu/onednn_gemm.h"
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

// The larger of a running maximum and x, where a NaN sticks: a NaN score (a
// NaN query, key or scale) must reach the row's output as NaN, not make the
// row look fully masked (std::max never lets a NaN in after -inf).
template <typename C>
C nan_max(C top, C x) {
  return x > top || x != x ? x : top;
}

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
  for (int64_t j = 0; j < keys; ++j) top = nan_max(top, p[j]);
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

// q, k, v in the compute type with contiguous rows, the offsets of each batch
// entry, and the mask expanded to [batch..., L, S]. Pointers and strides are
// taken here: nothing in the parallel region may throw.
template <typename C>
struct AttentionInputs {
  AttentionShape sh;
  Tensor q, k, v, m;  // own the data the pointers below read
  std::vector<int64_t> qo, ko, vo, mo;
  const C *pq = nullptr, *pk = nullptr, *pv = nullptr;
  MaskRow<C> mask;  // at batch 0, query 0
  int64_t mask_row = 0;
  bool causal = false;
  C scale = 1;

  // The mask row of query i of batch entry b.
  MaskRow<C> mask_of(int64_t b, int64_t i) const {
    const int64_t offset = mo[b] + i * mask_row;
    return {mask.keep ? mask.keep + offset : nullptr, mask.add ? mask.add + offset : nullptr,
            mask.stride};
  }
};

template <typename C>
AttentionInputs<C> prepare(const KernelCall& c, const Shape& batch, const AttentionShape& sh) {
  AttentionInputs<C> a;
  a.sh = sh;
  a.q = rows_of<C>(c.in(0));
  a.k = rows_of<C>(c.in(1));
  a.v = rows_of<C>(c.in(2));
  a.qo = batch_offsets(a.q, batch);
  a.ko = batch_offsets(a.k, batch);
  a.vo = batch_offsets(a.v, batch);
  a.pq = a.q.template data<C>();
  a.pk = a.k.template data<C>();
  a.pv = a.v.template data<C>();
  a.mo.assign(sh.batches, 0);
  if (c.inputs.size() > 3 && c.in(3).defined()) {
    Shape full = batch;
    full.push_back(sh.l);
    full.push_back(sh.s);
    a.m = c.in(3).expand(full);
    a.mo = batch_offsets(a.m, batch);
    a.mask_row = a.m.stride(-2);
    a.mask.stride = a.m.stride(-1);
    if (a.m.dtype() == kBool)
      a.mask.keep = a.m.template data<bool>();
    else
      a.mask.add = a.m.template data<C>();
  }
  a.causal = c.attrs.b(0);
  a.scale = static_cast<C>(c.attrs.f(1));
  return a;
}

template <typename T>
void sdpa_rows(const AttentionInputs<compute_t<T>>& a, T* py) {
  using C = compute_t<T>;
  const AttentionShape& sh = a.sh;
  const int64_t work = sh.s * (sh.e + sh.ev);
  parallel_for(sh.batches * sh.l, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(work, 1)),
               [&](int64_t r0, int64_t r1) {
                 std::vector<C> p(sh.s), acc(sh.ev);
                 for (int64_t r = r0; r < r1; ++r) {
                   const int64_t b = r / sh.l, i = r % sh.l;
                   // A causal query i sees keys 0..i only: the rest are never computed.
                   const int64_t keys = a.causal ? std::min(i + 1, sh.s) : sh.s;
                   attend_row(a.pq + a.qo[b] + i * sh.e, a.pk + a.ko[b], a.pv + a.vo[b], keys, sh,
                              a.scale, a.mask_of(b, i), p.data(), acc.data());
                   T* yi = py + r * sh.ev;
                   for (int64_t j = 0; j < sh.ev; ++j) yi[j] = static_cast<T>(acc[j]);
                 }
               });
}

// One row of scaled scores p[0, width) becomes softmax weights over keys
// [0, keys) (masked ones 0) and zeros beyond; all zeros when every key is masked.
void softmax_row_f32(float* p, int64_t keys, int64_t width, const MaskRow<float>& mask) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  if (mask.keep) {
    for (int64_t j = 0; j < keys; ++j) p[j] = mask.keep[j * mask.stride] ? p[j] : kNegInf;
  } else if (mask.add) {
    for (int64_t j = 0; j < keys; ++j) p[j] += mask.add[j * mask.stride];
  }
  std::fill(p + keys, p + width, 0.0f);
  float top = kNegInf;
  for (int64_t j = 0; j < keys; ++j) top = nan_max(top, p[j]);
  if (top == kNegInf) {  // attends to nothing: zeros, as PyTorch 2.11's CPU kernel
    std::fill(p, p + keys, 0.0f);
    return;
  }
  float total = 0;
#pragma omp simd reduction(+ : total)
  for (int64_t j = 0; j < keys; ++j) {
    p[j] = exp_f32(p[j] - top);
    total += p[j];
  }
  const float inv = 1.0f / total;
#pragma omp simd
  for (int64_t j = 0; j < keys; ++j) p[j] *= inv;
}

// Query rows [i0, i1) of batch entry b into y (the output's first row). A
// causal block only needs the keys before its last row; scores holds
// (i1 - i0) x S floats.
void attend_block_f32(const AttentionInputs<float>& a, int64_t b, int64_t i0, int64_t i1,
                      float* scores, float* y) {
  const AttentionShape& sh = a.sh;
  const int64_t rows = i1 - i0, width = a.causal ? std::min(sh.s, i1) : sh.s;
  gemm_f32({a.pq + a.qo[b] + i0 * sh.e, rows, sh.e, sh.e, 1},
           {a.pk + a.ko[b], sh.e, width, 1, sh.e}, scores, width, a.scale, 0.0f);
  for (int64_t i = i0; i < i1; ++i) {
    const int64_t keys = a.causal ? std::min(i + 1, sh.s) : sh.s;
    softmax_row_f32(scores + (i - i0) * width, keys, width, a.mask_of(b, i));
  }
  gemm_f32({scores, rows, width, width, 1}, {a.pv + a.vo[b], width, sh.ev, sh.ev, 1},
           y + (b * sh.l + i0) * sh.ev, sh.ev, 1.0f, 0.0f);
}

// Query rows per block: 64 keeps the GEMMs efficient; smaller blocks when
// there would be fewer than about four per thread.
int64_t query_block(const AttentionShape& sh) {
  const int64_t want = 4 * static_cast<int64_t>(omp_get_max_threads());
  int64_t block = 64;
  while (block > 16 && sh.batches * ((sh.l + block - 1) / block) < want) block /= 2;
  return std::min(block, std::max<int64_t>(sh.l, 1));
}

void sdpa_blocks_f32(const AttentionInputs<float>& a, float* py) {
  const AttentionShape& sh = a.sh;
  const int64_t block = query_block(sh), per_batch = (sh.l + block - 1) / block;
  // sgemm reports failures as exceptions: the first one is rethrown after the
  // parallel region, which no exception may leave.
  std::exception_ptr failure;
  std::mutex failure_mutex;
  parallel_for(sh.batches * per_batch, 1, [&](int64_t t0, int64_t t1) {
    try {
      std::vector<float> scores(static_cast<size_t>(block * sh.s));
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t b = t / per_batch, i0 = (t % per_batch) * block;
        attend_block_f32(a, b, i0, std::min(sh.l, i0 + block), scores.data(), py);
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(failure_mutex);
      if (!failure) failure = std::current_exception();
    }
  });
  if (failure) std::rethrow_exception(failure);
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
  const AttentionInputs<C> a = prepare<C>(c, batch, sh);
  if constexpr (std::is_same_v<T, float>)
    sdpa_blocks_f32(a, py);
  else
    sdpa_rows<T>(a, py);
}

}  // namespace

void register_cpu_attention_kernels(KernelTable& t) {
  t.set(ops::OpId::scaled_dot_product_attention, [](const KernelCall& c) {
    visit_floating(c.out().dtype(), [&]<typename T>() { sdpa<T>(c); });
  });
}

}  // namespace kiln::backend::cpu
