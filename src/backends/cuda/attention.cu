// Fused scaled_dot_product_attention forward on CUDA: scores, mask, softmax
// and the product with the values in one kernel, the scores never written to
// memory (online softmax, as FlashAttention).
//
// A block holds 32 queries of one batch entry, four threads per query, each
// thread a quarter of the keys: it keeps its query (scaled) and its running
// maximum, sum and weighted sum of values in registers, reading tiles of keys
// and values from shared memory 16 bytes at a time. Per tile a thread scores
// its keys first, with independent partial sums, and rescales its state once.
// The four partial states merge at the end.
// Inputs of any floating dtype compute in float (double for float64); batch
// dims broadcast through strides (up to 4 of them), the last dim of q, k and
// v must be contiguous, head dims up to 128. A row whose keys are all masked
// gives zeros, as the composite path and the CPU.
#include <cmath>

#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/pointwise.cuh"
#include "kiln/kiln.h"

namespace kiln::backend::cuda {
namespace {

constexpr int kMaxBatchDims = 4;
constexpr int kSplit = 4;              // threads per query
constexpr int kQueries = 32;           // queries per block
constexpr int kThreads = kQueries * kSplit;

struct Strided {
  const void* ptr = nullptr;
  int64_t batch[kMaxBatchDims] = {};  // element strides of the batch dims (0: broadcast)
  int64_t row = 0, col = 0;           // of the query/key rows and of the last dim
};

struct AttentionArgs {
  Strided q, k, v, mask;
  void* out = nullptr;  // [batch..., L, Ev] contiguous
  int batch_dims = 0;
  int64_t batch_size[kMaxBatchDims] = {};
  int64_t L = 0, S = 0, E = 0, Ev = 0;
  double scale = 1;
  bool causal = false;
  int mask_kind = 0;  // 0 none, 1 bool (true attends), 2 float added to the scores
};

__device__ inline int64_t batch_offset(const AttentionArgs& a, const Strided& t, int64_t index) {
  int64_t offset = 0;
  for (int d = a.batch_dims - 1; d >= 0; --d) {
    const int64_t i = index % a.batch_size[d];
    index /= a.batch_size[d];
    offset += i * t.batch[d];
  }
  return offset;
}

// 16 bytes of C in one shared-memory load: float4 or double2.
template <typename C>
struct Vec16;
template <>
struct Vec16<float> {
  using type = float4;
  static constexpr int kLanes = 4;
  __device__ static void dot(const float4& k, const float* q, float* sum) {
    sum[0] += q[0] * k.x;
    sum[1] += q[1] * k.y;
    sum[2] += q[2] * k.z;
    sum[3] += q[3] * k.w;
  }
  __device__ static void axpy(const float4& v, float w, float* acc) {
    acc[0] += w * v.x;
    acc[1] += w * v.y;
    acc[2] += w * v.z;
    acc[3] += w * v.w;
  }
};
template <>
struct Vec16<double> {
  using type = double2;
  static constexpr int kLanes = 2;
  __device__ static void dot(const double2& k, const double* q, double* sum) {
    sum[0] += q[0] * k.x;
    sum[1] += q[1] * k.y;
  }
  __device__ static void axpy(const double2& v, double w, double* acc) {
    acc[0] += w * v.x;
    acc[1] += w * v.y;
  }
};

// Three blocks per SM where the state fits 168 registers (float compute, head
// dims up to 64; a few bytes spill), else as many as the registers allow.
template <typename T, int kMaxE>
constexpr int kBlocksPerSm = sizeof(dcompute_t<T>) == 4 && kMaxE <= 64 ? 3 : 1;

template <typename T, int kMaxE>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm<T, kMaxE>) attention_kernel(AttentionArgs a) {
  using C = dcompute_t<T>;
  using V = Vec16<C>;
  constexpr int kLanes = V::kLanes;
  constexpr int kTile = sizeof(C) == 8 ? 16 : 32;  // keys per shared-memory tile
  constexpr int kPer = kTile / kSplit;             // keys of a tile per thread
  // Rows padded by 16 bytes: the four threads of a query read four rows at
  // once, which then fall in different banks.
  constexpr int kRow = kMaxE + kLanes;
  __shared__ __align__(16) C k_tile[kTile][kRow];
  __shared__ __align__(16) C v_tile[kTile][kRow];
  const int64_t b = blockIdx.y;
  const int64_t first_query = blockIdx.x * int64_t{kQueries};
  const int64_t query = first_query + threadIdx.x / kSplit;
  const int part = threadIdx.x % kSplit;
  const bool active = query < a.L;
  const T* q = static_cast<const T*>(a.q.ptr) + batch_offset(a, a.q, b) + query * a.q.row;
  const T* k = static_cast<const T*>(a.k.ptr) + batch_offset(a, a.k, b);
  const T* v = static_cast<const T*>(a.v.ptr) + batch_offset(a, a.v, b);
  const int64_t mask_base = a.mask_kind ? batch_offset(a, a.mask, b) + query * a.mask.row : 0;
  // Under causal masking no query of this block sees keys past the last one.
  const int64_t last_query = first_query + kQueries - 1 < a.L ? first_query + kQueries - 1 : a.L - 1;
  const int64_t key_end = a.causal && last_query + 1 < a.S ? last_query + 1 : a.S;

  C qr[kMaxE], acc[kMaxE];
#pragma unroll
  for (int e = 0; e < kMaxE; ++e) {
    qr[e] = active && e < a.E ? to_compute(q[e]) * static_cast<C>(a.scale) : C(0);
    acc[e] = C(0);
  }
  const C neg_inf = -INFINITY;
  C running_max = neg_inf, total = 0;
  for (int64_t s0 = 0; s0 < key_end; s0 += kTile) {
    const int count = key_end - s0 < kTile ? static_cast<int>(key_end - s0) : kTile;
    __syncthreads();
    for (int i = threadIdx.x; i < count * kMaxE; i += kThreads) {
      const int j = i / kMaxE, e = i % kMaxE;
      k_tile[j][e] = e < a.E ? to_compute(k[(s0 + j) * a.k.row + e]) : C(0);
      v_tile[j][e] = e < a.Ev ? to_compute(v[(s0 + j) * a.v.row + e]) : C(0);
    }
    __syncthreads();
    if (!active) continue;
    // The scores of this thread's keys in the tile (keys part, part + 4, ...),
    // then one rescale of the running state for all of them.
    C score[kPer];
    C tile_max = neg_inf;
#pragma unroll
    for (int p = 0; p < kPer; ++p) {
      const int j = part + p * kSplit;
      const int64_t key = s0 + j;
      score[p] = neg_inf;
      if (j >= count || (a.causal && key > query)) continue;
      C sum[kLanes] = {};
      const auto* row = reinterpret_cast<const typename V::type*>(&k_tile[j][0]);
#pragma unroll
      for (int e = 0; e < kMaxE / kLanes; ++e) V::dot(row[e], &qr[e * kLanes], sum);
      C s = sum[0];
#pragma unroll
      for (int l = 1; l < kLanes; ++l) s += sum[l];
      if (a.mask_kind == 1) {
        if (!static_cast<const bool*>(a.mask.ptr)[mask_base + key * a.mask.col]) continue;
      } else if (a.mask_kind == 2) {
        s += static_cast<const C*>(a.mask.ptr)[mask_base + key * a.mask.col];
      }
      score[p] = s;
      tile_max = s > tile_max || s != s ? s : tile_max;  // a NaN score sticks, to reach the output
    }
    if (tile_max == neg_inf) continue;  // every key of the tile masked
    const C next_max = tile_max > running_max ? tile_max : running_max;
    const C shrink = ::exp(running_max - next_max);  // 0 while running_max is -inf
    total *= shrink;
#pragma unroll
    for (int e = 0; e < kMaxE; ++e) acc[e] *= shrink;
#pragma unroll
    for (int p = 0; p < kPer; ++p) {
      if (score[p] == neg_inf) continue;
      const C weight = ::exp(score[p] - next_max);
      total += weight;
      const auto* row = reinterpret_cast<const typename V::type*>(&v_tile[part + p * kSplit][0]);
#pragma unroll
      for (int e = 0; e < kMaxE / kLanes; ++e) V::axpy(row[e], weight, &acc[e * kLanes]);
    }
    running_max = next_max;
  }
  // Merge the four partial states of this query (lanes next to each other).
  C merged_max = running_max;
  for (int offset = 1; offset < kSplit; offset *= 2) {
    const C other = __shfl_xor_sync(0xffffffffu, merged_max, offset);
    merged_max = other > merged_max ? other : merged_max;
  }
  const C factor = running_max == neg_inf ? C(0) : ::exp(running_max - merged_max);
  total *= factor;
  for (int offset = 1; offset < kSplit; offset *= 2)
    total += __shfl_xor_sync(0xffffffffu, total, offset);
#pragma unroll
  for (int e = 0; e < kMaxE; ++e) {
    C x = acc[e] * factor;
    for (int offset = 1; offset < kSplit; offset *= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
    acc[e] = x;
  }
  if (!active) return;
  T* out = static_cast<T*>(a.out) + (b * a.L + query) * a.Ev;
#pragma unroll
  for (int e = 0; e < kMaxE; ++e) {  // unrolled, so that acc stays in registers; NaN stays NaN
    if (e % kSplit == part && e < a.Ev) out[e] = cvt<T>(total != C(0) ? acc[e] / total : C(0));
  }
}

// t expanded to batch + [rows, cols], as strides (0 along broadcast dims,
// a mask's rows among them).
void strided(const Tensor& t, const Shape& batch, int64_t rows, int64_t cols, Strided& s) {
  Shape shape = batch;
  shape.push_back(rows);
  shape.push_back(cols);
  const Tensor x = t.expand(shape);
  for (size_t d = 0; d < batch.size(); ++d) s.batch[d] = x.stride(static_cast<int64_t>(d));
  s.row = x.stride(-2);
  s.col = x.stride(-1);
  s.ptr = x.data_ptr();
}

}  // namespace

bool fused_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                     bool causal, double scale, const Tensor& out) {
  const int64_t E = q.size(-1), Ev = v.size(-1);
  const Shape batch(out.sizes().begin(), out.sizes().end() - 2);
  if (E > 128 || Ev > 128 || batch.size() > kMaxBatchDims || out.numel() == 0 || !out.is_contiguous() ||
      q.stride(-1) != 1 || k.stride(-1) != 1 || v.stride(-1) != 1 || k.size(-2) == 0)
    return false;
  AttentionArgs a;
  a.batch_dims = static_cast<int>(batch.size());
  int64_t entries = 1;
  for (size_t d = 0; d < batch.size(); ++d) {
    a.batch_size[d] = batch[d];
    entries *= batch[d];
  }
  if (entries > 65535) return false;
  a.L = q.size(-2);
  a.S = k.size(-2);
  a.E = E;
  a.Ev = Ev;
  a.scale = scale;
  a.causal = causal;
  strided(q, batch, a.L, E, a.q);
  strided(k, batch, a.S, E, a.k);
  strided(v, batch, a.S, Ev, a.v);
  if (mask.defined()) {
    a.mask_kind = mask.dtype() == kBool ? 1 : 2;
    strided(mask, batch, a.L, a.S, a.mask);
  }
  a.out = out.data_ptr();
  const dim3 grid(static_cast<unsigned>((a.L + kQueries - 1) / kQueries), static_cast<unsigned>(entries));
  DeviceGuard guard(out.device().index());
  const cudaStream_t stream = stream_for(out);
  visit_device_dtype(out.dtype(), [&]<typename T>() {
    if constexpr (kIsFloatT<T>) {
      if (E <= 64 && Ev <= 64) {
        attention_kernel<T, 64><<<grid, kThreads, 0, stream>>>(a);
      } else {
        attention_kernel<T, 128><<<grid, kThreads, 0, stream>>>(a);
      }
    }
  });
  check_launch("attention kernel");
  return true;
}

}  // namespace kiln::backend::cuda
