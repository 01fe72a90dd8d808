// CUDA kernels of lstm_cell, lstm_sequence and scaled_dot_product_attention:
// one fused LSTM cell kernel, and compositions of kiln ops on the device
// (cuBLASLt products) around it.
// With cuDNN, lstm_sequence runs cuDNN's LSTM (rnn_cudnn.cpp), which falls
// back to this one for configurations cuDNN refuses.
//
// lstm_sequence: per layer, the input projection of every step is one product;
// each step then adds h @ W_hh^T (addmm) and runs the cell kernel, which
// computes the gates, the new c in place and h into the output sequence.
// scaled_dot_product_attention: the fused kernel of attention.cu up to
// kFusedAttentionMaxRows query rows; above that, where it does not apply, or
// with KILN_CUDA_ATTENTION=math, scores = q @ k^T * scale
// (+ mask, causal), softmax, @ v, as PyTorch's math path; a row whose keys are
// all masked gives zeros, as the CPU kernel.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string_view>

#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/pointwise.cuh"
#include "backends/lstm_step.h"
#include "kiln/kiln.h"
#include "ops/dispatch.h"

namespace kiln::backend::cuda {
namespace {

using ops::OpId;

constexpr int kThreads = 256;
// Query rows (over the batch) up to which the fused attention kernel runs: on
// the H200 it beats the math path 0.057 to 0.073 ms at BERT-base batch 1
// (1536 rows), 0.068 to 0.096 at batch 8, and loses 0.263 to 0.257 at batch 32.
constexpr int64_t kFusedAttentionMaxRows = 32768;

template <typename C>
__device__ inline C sigmoid(C v) {
  return C(1) / (C(1) + ::exp(-v));
}

// rows of gates a (+ b when given) [rows, 4H] (i, f, g, o) and cx [rows, H]
// give cy and hy [rows, H]; cy may be cx (updated in place).
template <typename T>
__global__ void lstm_cell_kernel(const T* a, const T* b, const T* cx, T* cy, T* hy, int64_t rows,
                                 int64_t hidden) {
  using C = dcompute_t<T>;
  const int64_t n = rows * hidden;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = e / hidden, j = e - r * hidden;
    const int64_t base = r * 4 * hidden + j;
    auto gate = [&](int64_t k) {
      const int64_t at = base + k * hidden;
      return b ? to_compute(a[at]) + to_compute(b[at]) : to_compute(a[at]);
    };
    const C i = sigmoid(gate(0));
    const C f = sigmoid(gate(1));
    const C cell = ::tanh(gate(2));
    const C o = sigmoid(gate(3));
    const C c_next = f * to_compute(cx[e]) + i * cell;
    cy[e] = cvt<T>(c_next);
    hy[e] = cvt<T>(o * ::tanh(c_next));
  }
}

// a, b (undefined: none), cx contiguous; cy, hy contiguous, of cx's shape.
void lstm_cell(const Tensor& a, const Tensor& b, const Tensor& cx, const Tensor& cy,
               const Tensor& hy) {
  const int64_t hidden = cx.size(-1);
  const int64_t rows = hidden == 0 ? 0 : cx.numel() / hidden;
  if (rows * hidden == 0) return;
  DeviceGuard guard(cx.device().index());
  visit_device_dtype(cx.dtype(), [&]<typename T>() {
    if constexpr (kIsFloatT<T>) {
      const unsigned grid = static_cast<unsigned>(
          std::min<int64_t>((rows * hidden + kThreads - 1) / kThreads, 65536));
      lstm_cell_kernel<T><<<grid, kThreads, 0, stream_for(cx)>>>(
          static_cast<const T*>(a.data_ptr()),
          b.defined() ? static_cast<const T*>(b.data_ptr()) : nullptr,
          static_cast<const T*>(cx.data_ptr()), static_cast<T*>(cy.data_ptr()),
          static_cast<T*>(hy.data_ptr()), rows, hidden);
    }
  });
  check_launch("lstm cell kernel");
}

void lstm_cell_op(const KernelCall& call) {
  const Tensor &hy = call.out(0), &cy = call.out(1);
  const bool direct = hy.is_contiguous() && cy.is_contiguous();
  const Tensor h = direct ? hy : ops::make_tensor(hy.sizes(), hy.dtype(), hy.device(), false);
  const Tensor c = direct ? cy : ops::make_tensor(cy.sizes(), cy.dtype(), cy.device(), false);
  lstm_cell(call.in(0).contiguous(), call.in(1).contiguous(), call.in(2).contiguous(), c, h);
  if (!direct) {
    copy_same_dtype(hy, h);
    copy_same_dtype(cy, c);
  }
}

// lstm_step for up to kStepMaxRows rows, in one launch: block j computes
// hidden unit j of every row. Warp g of the block sums gate g's row of
// weight_ih against each input row and of weight_hh against each hx row
// (one coalesced pass over each weight row, 16 bytes per lane and load where
// the rows allow), adds the biases, and the cell update follows from the
// four gates in shared memory. Sums in float (double for float64), in a
// fixed order: results are deterministic.
constexpr int kStepMaxRows = 8;

template <typename T, int V>
struct alignas(16) Pack {
  T v[V];
};

// acc[r] += w . x_r over len elements, x_r = x + r * len, for the warp's lane.
template <bool kVector, typename T, typename C>
__device__ inline void add_dots(const T* w, const T* x, int64_t len, int rows, int lane, C* acc) {
  if constexpr (kVector) {
    constexpr int V = 16 / sizeof(T);
#pragma unroll 2
    for (int64_t k = int64_t{lane} * V; k < len; k += 32 * V) {
      const Pack<T, V> wp = *reinterpret_cast<const Pack<T, V>*>(w + k);
#pragma unroll
      for (int r = 0; r < kStepMaxRows; ++r) {
        if (r >= rows) break;
        const Pack<T, V> xp = *reinterpret_cast<const Pack<T, V>*>(x + r * len + k);
#pragma unroll
        for (int e = 0; e < V; ++e) acc[r] += to_compute(wp.v[e]) * to_compute(xp.v[e]);
      }
    }
  } else {
    for (int64_t k = lane; k < len; k += 32) {
      const C wv = to_compute(w[k]);
#pragma unroll
      for (int r = 0; r < kStepMaxRows; ++r)
        if (r < rows) acc[r] += wv * to_compute(x[r * len + k]);
    }
  }
}

template <bool kVector, typename T>
__global__ void __launch_bounds__(128) lstm_step_kernel(const T* x, const T* hx, const T* cx, const T* w_ih,
                                                        const T* w_hh, const T* b_ih, const T* b_hh, T* hy, T* cy,
                                                        int rows, int64_t in, int64_t hidden) {
  using C = dcompute_t<T>;
  __shared__ C gates[4][kStepMaxRows];
  const int64_t j = blockIdx.x;
  const int gate = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t feature = gate * hidden + j;
  C acc[kStepMaxRows] = {};
  add_dots<kVector>(w_ih + feature * in, x, in, rows, lane, acc);
  add_dots<kVector>(w_hh + feature * hidden, hx, hidden, rows, lane, acc);
  C bias = C(0);
  if (b_ih) bias += to_compute(b_ih[feature]);
  if (b_hh) bias += to_compute(b_hh[feature]);
#pragma unroll
  for (int r = 0; r < kStepMaxRows; ++r) {
    if (r >= rows) break;
    C v = acc[r];
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
    if (lane == 0) gates[gate][r] = v + bias;
  }
  __syncthreads();
  const int r = threadIdx.x;
  if (r < rows) {
    const C i = sigmoid(gates[0][r]);
    const C f = sigmoid(gates[1][r]);
    const C g = ::tanh(gates[2][r]);
    const C o = sigmoid(gates[3][r]);
    const C c_next = f * to_compute(cx[r * hidden + j]) + i * g;
    cy[r * hidden + j] = cvt<T>(c_next);
    hy[r * hidden + j] = cvt<T>(o * ::tanh(c_next));
  }
}

void lstm_step_op(const KernelCall& call) {
  const auto optional = [&](size_t i) { return i < call.inputs.size() ? call.in(i) : Tensor(); };
  const Tensor &hy = call.out(0), &cy = call.out(1);
  const int64_t rows = call.in(0).size(0), in = call.in(0).size(1), hidden = call.in(1).size(1);
  if (rows < 1 || rows > kStepMaxRows || in < 1 || !hy.is_contiguous() || !cy.is_contiguous()) {
    lstm_step_composite(call);
    return;
  }
  const Tensor x = call.in(0).contiguous(), hx = call.in(1).contiguous(), cx = call.in(2).contiguous(),
               w_ih = call.in(3).contiguous(), w_hh = call.in(4).contiguous();
  const Tensor b_ih = optional(5).defined() ? optional(5).contiguous() : Tensor();
  const Tensor b_hh = optional(6).defined() ? optional(6).contiguous() : Tensor();
  DeviceGuard guard(hy.device().index());
  visit_device_dtype(hy.dtype(), [&]<typename T>() {
    if constexpr (kIsFloatT<T>) {
      const auto data = [](const Tensor& t) { return t.defined() ? static_cast<const T*>(t.data_ptr()) : nullptr; };
      // 16-byte loads where every row starts on a 16-byte boundary.
      constexpr int64_t V = 16 / sizeof(T);
      const auto aligned = [](const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0; };
      const bool vector = in % V == 0 && hidden % V == 0 && aligned(x) && aligned(hx) && aligned(w_ih) && aligned(w_hh);
      const auto launch = [&](auto kernel) {
        kernel<<<static_cast<unsigned>(hidden), 128, 0, stream_for(hy)>>>(
            data(x), data(hx), data(cx), data(w_ih), data(w_hh), data(b_ih), data(b_hh),
            static_cast<T*>(hy.data_ptr()), static_cast<T*>(cy.data_ptr()), static_cast<int>(rows), in, hidden);
      };
      if (vector) {
        launch(lstm_step_kernel<true, T>);
      } else {
        launch(lstm_step_kernel<false, T>);
      }
    }
  });
  check_launch("lstm step kernel");
}

}  // namespace

void lstm_sequence_composite(const KernelCall& call) {
  NoGradGuard no_grad;
  const int64_t layers = call.attrs.i(0);
  const bool has_biases = call.attrs.b(1);
  const size_t per_layer = has_biases ? 4 : 2;
  const Tensor& x = call.in(0);
  if (!is_floating(x.dtype()))
    throw DTypeError(detail::str_cat("lstm_sequence: no CUDA kernel for ", x.dtype()));
  const int64_t steps = x.size(0), batch = x.size(1), hidden = call.in(4).size(1);
  Tensor seq = x.contiguous();
  for (int64_t l = 0; l < layers; ++l) {
    const size_t k = 3 + static_cast<size_t>(l) * per_layer;
    const Tensor& w_ih = call.in(k);
    const Tensor w_hh_t = call.in(k + 1).t();
    const Tensor bias = has_biases ? call.in(k + 2) + call.in(k + 3) : Tensor();
    // The input projection of every step at once: [T * B, 4H].
    const Tensor projected = linear(seq.reshape({steps * batch, seq.size(2)}), w_ih, bias)
                                 .view({steps, batch, 4 * hidden});
    Tensor h = call.out(1).select(0, l), c = call.out(2).select(0, l);
    copy_same_dtype(h, call.in(1).select(0, l));
    copy_same_dtype(c, call.in(2).select(0, l));
    Tensor out = l + 1 == layers
                     ? call.out(0)
                     : ops::make_tensor({steps, batch, hidden}, x.dtype(), x.device(), false);
    for (int64_t t = 0; t < steps; ++t) {
      const Tensor gates = addmm(projected.select(0, t), t == 0 ? h : out.select(0, t - 1), w_hh_t);
      lstm_cell(gates, Tensor(), c, c, out.select(0, t));
    }
    if (steps > 0) copy_same_dtype(h, out.select(0, steps - 1));
    seq = out;
  }
}

namespace {

// The fused kernel wins while the launches of the math path dominate; with
// many query rows cuBLAS's products win. KILN_CUDA_ATTENTION=fused or math
// forces one path.
bool prefer_fused_attention(const Tensor& out) {
  static const int choice = [] {  // 0 by size, 1 fused, 2 math
    const char* env = std::getenv("KILN_CUDA_ATTENTION");
    const std::string_view value = env ? env : "";
    return value == "fused" ? 1 : value == "math" ? 2 : 0;
  }();
  if (choice != 0) return choice == 1;
  const int64_t rows = out.numel() / std::max<int64_t>(out.size(-1), 1);  // query rows over the batch
  return rows <= kFusedAttentionMaxRows;
}

void sdpa_op(const KernelCall& c) {
  NoGradGuard no_grad;
  const Tensor &q = c.in(0), &k = c.in(1), &v = c.in(2);
  const Tensor mask = c.inputs.size() > 3 && c.in(3).defined() ? c.in(3) : Tensor();
  const double scale = c.attrs.f(1);
  const int64_t l = q.size(-2), s = k.size(-2);
  if (s == 0) {  // no keys: every row attends to nothing
    fill_bits(c.out(), 0);
    return;
  }
  if (prefer_fused_attention(c.out()) && fused_attention(q, k, v, mask, c.attrs.b(0), scale, c.out()))
    return;
  Tensor scores = matmul(q, k.transpose(-2, -1)) * scale;
  const double neg_inf = -std::numeric_limits<double>::infinity();
  if (mask.defined()) {
    // A float mask is added in the wider of the two dtypes, as the CPU adds it in double.
    scores = mask.dtype() == kBool ? masked_fill(scores, logical_not(mask), neg_inf) : scores + mask;
  }
  if (c.attrs.b(0)) {
    const Tensor above = triu(full({l, s}, true, {.dtype = kBool, .device = q.device()}), 1);
    scores = masked_fill(scores, above, neg_inf);
  }
  const Tensor dead = amax(scores, {-1}, true) == neg_inf;
  const Tensor p = masked_fill(softmax(scores, -1), dead, 0.0);
  copy_same_dtype(c.out(), matmul(p.to(v.dtype()), v).to(c.out().dtype()));
}

}  // namespace

void register_cuda_composite_kernels(KernelTable& t) {
  t.set(OpId::lstm_sequence, lstm_sequence_composite);
  t.set(OpId::lstm_cell, lstm_cell_op);
  t.set(OpId::lstm_step, lstm_step_op);
  t.set(OpId::scaled_dot_product_attention, sdpa_op);
}

}  // namespace kiln::backend::cuda
