// CPU kernel of lstm_sequence: oneDNN's LSTM primitive, one call per layer
// (a primitive over several layers needs equal input and hidden sizes, and one
// per layer costs nothing measurable). Primitives are cached by shape, and the
// weights reordered into the primitive's layout are kept in the weight cache
// (weight_cache.h), so an inference loop reorders them once. Batches below
// kMinPrimitiveBatch run kiln's step loop instead, which is faster there.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <unordered_map>
#include <vector>

#include "backends/cpu/loops.h"
#include "backends/cpu/nn.h"
#include "backends/cpu/onednn_context.h"
#include "backends/cpu/onednn_gemm.h"
#include "backends/cpu/vec_math.h"
#include "backends/cpu/weight_cache.h"
#include "kiln/error.h"

namespace kiln::backend::cpu {
namespace {

using dnnl::memory;
using Tag = memory::format_tag;
constexpr auto kF32 = memory::data_type::f32;

// One layer's primitive for [steps, batch, in] -> [steps, batch, hidden].
struct LstmPrimitive {
  dnnl::lstm_forward primitive;
  memory::desc src_layer, state, weights_layer, weights_iter, bias, dst_layer, scratchpad;
};

LstmPrimitive make_lstm(int64_t steps, int64_t batch, int64_t in, int64_t hidden) {
  LstmPrimitive p;
  p.src_layer = memory::desc({steps, batch, in}, kF32, Tag::tnc);
  p.dst_layer = memory::desc({steps, batch, hidden}, kF32, Tag::tnc);
  p.state = memory::desc({1, 1, batch, hidden}, kF32, Tag::ldnc);
  p.bias = memory::desc({1, 1, 4, hidden}, kF32, Tag::ldgo);
  const memory::desc weights_layer_any({1, 1, in, 4, hidden}, kF32, Tag::any);
  const memory::desc weights_iter_any({1, 1, hidden, 4, hidden}, kF32, Tag::any);
  const dnnl::lstm_forward::desc desc(dnnl::prop_kind::forward_inference,
                                      dnnl::rnn_direction::unidirectional_left2right, p.src_layer,
                                      p.state, p.state, weights_layer_any, weights_iter_any, p.bias,
                                      p.dst_layer, p.state, p.state);
  const dnnl::lstm_forward::primitive_desc pd(desc, onednn_default_attr(), onednn_engine());
  p.primitive = dnnl::lstm_forward(pd);
  p.weights_layer = pd.weights_layer_desc();
  p.weights_iter = pd.weights_iter_desc();
  p.scratchpad = pd.scratchpad_desc();
  return p;
}

std::shared_ptr<const LstmPrimitive> lstm_primitive(int64_t steps, int64_t batch, int64_t in,
                                                    int64_t hidden) {
  static OnednnPrimitiveCache<LstmPrimitive> cache;
  return cache.get({steps, batch, in, hidden}, [&] { return make_lstm(steps, batch, in, hidden); });
}

// Weights [4H, K] (PyTorch's layout, "ldgoi" for one layer) reordered into the
// layout a primitive wants.
memory reorder(const Tensor& weight, const memory::desc& wanted) {
  const Tensor w = weight.contiguous();
  const int64_t gates_rows = w.size(0), cols = w.size(1);
  const memory::desc user({1, 1, cols, 4, gates_rows / 4}, kF32, Tag::ldgoi);
  const dnnl::engine& engine = onednn_engine();
  memory src(user, engine, w.data_ptr());
  memory dst(wanted, engine);  // owned by oneDNN, freed with the last handle
  dnnl::stream& stream = onednn_stream();
  dnnl::reorder(src, dst).execute(stream, src, dst);
  stream.wait();
  return dst;
}

// The reordered weights, kept in the weight cache (weight_cache.h) while the
// tensor is alive and unmodified, so an inference loop reorders them once; a
// primitive that wants another layout gets a new copy.
memory reordered_weight(const Tensor& weight, const memory::desc& wanted) {
  const auto value = derived_weight(
      weight, DerivedWeight::lstm_layout, wanted.get_size(),
      [&] { return std::make_shared<const memory>(reorder(weight, wanted)); },
      [&](const void* cached) { return static_cast<const memory*>(cached)->get_desc() == wanted; });
  return value ? *static_cast<const memory*>(value.get()) : reorder(weight, wanted);
}

const float* floats_of(const Tensor& t) { return static_cast<const float*>(t.data_ptr()); }

// b_ih + b_hh, or zeros without biases.
std::vector<float> summed_bias(const Tensor& b_ih, const Tensor& b_hh, int64_t hidden) {
  std::vector<float> bias(static_cast<size_t>(4 * hidden), 0.f);
  if (!b_ih.defined()) return bias;
  const Tensor a = b_ih.contiguous(), b = b_hh.contiguous();
  const float* pa = static_cast<const float*>(a.data_ptr());
  const float* pb = static_cast<const float*>(b.data_ptr());
  for (size_t i = 0; i < bias.size(); ++i) bias[i] = pa[i] + pb[i];
  return bias;
}

struct LayerArgs {
  const float* src;
  float* dst;
  const float *h0, *c0;
  float *h_n, *c_n;
  Tensor w_ih, w_hh, b_ih, b_hh;
};

void run_layer(const LstmPrimitive& p, const LayerArgs& a, int64_t hidden) {
  const dnnl::engine& engine = onednn_engine();
  std::vector<float> bias = summed_bias(a.b_ih, a.b_hh, hidden);
  auto mem = [&](const memory::desc& d, const float* data) {
    return memory(d, engine, const_cast<float*>(data));
  };
  std::unordered_map<int, memory> args{
      {DNNL_ARG_SRC_LAYER, mem(p.src_layer, a.src)},
      {DNNL_ARG_SRC_ITER, mem(p.state, a.h0)},
      {DNNL_ARG_SRC_ITER_C, mem(p.state, a.c0)},
      {DNNL_ARG_WEIGHTS_LAYER, reordered_weight(a.w_ih, p.weights_layer)},
      {DNNL_ARG_WEIGHTS_ITER, reordered_weight(a.w_hh, p.weights_iter)},
      {DNNL_ARG_BIAS, mem(p.bias, bias.data())},
      {DNNL_ARG_DST_LAYER, mem(p.dst_layer, a.dst)},
      {DNNL_ARG_DST_ITER, mem(p.state, a.h_n)},
      {DNNL_ARG_DST_ITER_C, mem(p.state, a.c_n)}};
  const size_t scratch = p.scratchpad.get_size();
  if (scratch > 0) {
    args.emplace(DNNL_ARG_SCRATCHPAD, memory(p.scratchpad, engine, onednn_scratchpad(scratch)));
  }
  dnnl::stream& stream = onednn_stream();
  p.primitive.execute(stream, args);
  stream.wait();
}

// --- the step loop ---------------------------------------------------------------
//
// The same layer as a loop over steps: one GEMM projects the input of every step,
// then one parallel region runs all steps. Each thread owns blocks of kUnits
// hidden units: for every step it computes the four gates of its units from the
// previous h, updates their c and h, and waits at a barrier. A thread reads the
// same slice of W_hh at every step, so the slice stays in that core's cache, and
// a step costs one barrier instead of a GEMM call and a pass over the gates.

constexpr int64_t kUnits = 16;            // hidden units per block
constexpr int64_t kBlockWidth = 4 * kUnits;  // their gate rows: i, f, g, o
constexpr int kMaxRows = 4;               // batch rows per pass over a block's weights

using Vec = float __attribute__((vector_size(kUnits * sizeof(float))));
using VecUnaligned = float __attribute__((vector_size(kUnits * sizeof(float)), aligned(4)));

int64_t unit_blocks(int64_t hidden) { return (hidden + kUnits - 1) / kUnits; }

// W_hh [4H, H] as [blocks][H][4][kUnits]: for a block and an input k, the
// weights of the block's 4 * kUnits gate rows, zero past the last unit.
std::shared_ptr<const std::vector<float>> pack_step_weights(const Tensor& w_hh, int64_t hidden) {
  const Tensor w = w_hh.contiguous();
  const float* src = floats_of(w);
  const int64_t blocks = unit_blocks(hidden);
  auto packed = std::make_shared<std::vector<float>>(static_cast<size_t>(blocks * hidden * kBlockWidth), 0.f);
  float* dst = packed->data();
  parallel_for(blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t blk = b0; blk < b1; ++blk) {
      for (int64_t gate = 0; gate < 4; ++gate) {
        for (int64_t u = 0; u < kUnits && blk * kUnits + u < hidden; ++u) {
          const float* row = src + (gate * hidden + blk * kUnits + u) * hidden;
          float* out = dst + blk * hidden * kBlockWidth + gate * kUnits + u;
          for (int64_t k = 0; k < hidden; ++k) out[k * kBlockWidth] = row[k];
        }
      }
    }
  });
  return packed;
}

// The packed weights, kept in the weight cache while w_hh is unchanged.
std::shared_ptr<const std::vector<float>> step_weights(const Tensor& w_hh, int64_t hidden) {
  const size_t bytes = static_cast<size_t>(unit_blocks(hidden) * hidden * kBlockWidth) * sizeof(float);
  auto cached = derived_weight(w_hh, DerivedWeight::lstm_step_layout, bytes,
                               [&] { return pack_step_weights(w_hh, hidden); });
  return cached ? std::static_pointer_cast<const std::vector<float>>(cached)
                : pack_step_weights(w_hh, hidden);
}

// One step of one block of units for `Rows` batch rows. gates: the rows'
// input projections (with bias) [Rows][4H]; h_prev [Rows][H]; c and h_out
// [Rows][H] are updated at the block's units.
template <int Rows>
void step_block(const float* packed, int64_t blk, int64_t hidden, const float* gates,
                const float* h_prev, float* c, float* h_out) {
  const int64_t u0 = blk * kUnits, units = std::min(kUnits, hidden - u0);
  Vec acc[Rows][4];
  for (int r = 0; r < Rows; ++r) {
    for (int gate = 0; gate < 4; ++gate) {
      const float* g = gates + r * 4 * hidden + gate * hidden + u0;
      if (units == kUnits) {
        acc[r][gate] = *reinterpret_cast<const VecUnaligned*>(g);
      } else {
        acc[r][gate] = Vec{};
        for (int64_t u = 0; u < units; ++u) acc[r][gate][u] = g[u];
      }
    }
  }
  const float* w = packed + blk * hidden * kBlockWidth;
  for (int64_t k = 0; k < hidden; ++k, w += kBlockWidth) {
    const VecUnaligned* wk = reinterpret_cast<const VecUnaligned*>(w);
    const Vec w0 = wk[0], w1 = wk[1], w2 = wk[2], w3 = wk[3];
    for (int r = 0; r < Rows; ++r) {
      const float hv = h_prev[r * hidden + k];
      acc[r][0] += hv * w0;
      acc[r][1] += hv * w1;
      acc[r][2] += hv * w2;
      acc[r][3] += hv * w3;
    }
  }
  for (int r = 0; r < Rows; ++r) {
    float pre[4][kUnits];
    for (int gate = 0; gate < 4; ++gate) {
      for (int64_t u = 0; u < kUnits; ++u) pre[gate][u] = acc[r][gate][u];
    }
    float new_c[kUnits], new_h[kUnits];
    const float* c_row = c + r * hidden + u0;
    for (int64_t u = 0; u < kUnits; ++u) {
      const float i_gate = 1.f / (1.f + exp_f32(-pre[0][u]));
      const float f_gate = 1.f / (1.f + exp_f32(-pre[1][u]));
      const float o_gate = 1.f / (1.f + exp_f32(-pre[3][u]));
      const float c_old = u < units ? c_row[u] : 0.f;
      new_c[u] = f_gate * c_old + i_gate * tanh_f32(pre[2][u]);
      new_h[u] = o_gate * tanh_f32(new_c[u]);
    }
    std::copy_n(new_c, units, c + r * hidden + u0);
    std::copy_n(new_h, units, h_out + r * hidden + u0);
  }
}

void step_rows(int rows, const float* packed, int64_t blk, int64_t hidden, const float* gates,
               const float* h_prev, float* c, float* h_out) {
  switch (rows) {
    case 1: return step_block<1>(packed, blk, hidden, gates, h_prev, c, h_out);
    case 2: return step_block<2>(packed, blk, hidden, gates, h_prev, c, h_out);
    case 3: return step_block<3>(packed, blk, hidden, gates, h_prev, c, h_out);
    default: return step_block<4>(packed, blk, hidden, gates, h_prev, c, h_out);
  }
}

void run_layer_by_steps(const LayerArgs& a, int64_t steps, int64_t batch, int64_t in,
                        int64_t hidden) {
  const int64_t g = 4 * hidden, state = batch * hidden;
  const std::vector<float> bias = summed_bias(a.b_ih, a.b_hh, hidden);
  std::vector<float> gates(static_cast<size_t>(steps * batch * g));
  for (int64_t r = 0; r < steps * batch; ++r) {
    std::copy(bias.begin(), bias.end(), gates.begin() + r * g);
  }
  const Tensor w_ih = a.w_ih.contiguous();
  gemm_f32({a.src, steps * batch, in, in, 1}, {floats_of(w_ih), in, g, 1, in}, gates.data(), g, 1.f,
           1.f);
  const auto packed = step_weights(a.w_hh, hidden);
  std::copy(a.c0, a.c0 + state, a.c_n);
  const int64_t blocks = unit_blocks(hidden);
  // The full team (see parallel_for); threads past the number of blocks only
  // keep step with the barriers.
#pragma omp parallel if (!omp_in_parallel())
  {
    const int64_t nt = std::min<int64_t>(omp_get_num_threads(), blocks), tid = omp_get_thread_num();
    const int64_t first = tid < nt ? tid * blocks / nt : 0, last = tid < nt ? (tid + 1) * blocks / nt : 0;
    for (int64_t t = 0; t < steps; ++t) {
      const float* h_prev = t == 0 ? a.h0 : a.dst + (t - 1) * state;
      float* h = a.dst + t * state;
      const float* gate = gates.data() + t * batch * g;
      for (int64_t blk = first; blk < last; ++blk) {
        for (int64_t b = 0; b < batch; b += kMaxRows) {
          step_rows(static_cast<int>(std::min<int64_t>(kMaxRows, batch - b)), packed->data(), blk,
                    hidden, gate + b * g, h_prev + b * hidden, a.c_n + b * hidden, h + b * hidden);
        }
      }
#pragma omp barrier
    }
  }
  const float* last_h = steps > 0 ? a.dst + (steps - 1) * state : a.h0;
  std::copy(last_h, last_h + state, a.h_n);
}

// From this batch size on the primitive is faster than the step loop (hidden
// 512, 128 steps, two layers; step loop against primitive: 2-core AMD EPYC,
// batch 4 10.1 against 12.0 ms, batch 8 20.2 against 17.6; 16-core Xeon at 16
// threads, batch 4 6.9 against 8.4, batch 8 11.8 against 10.9).
constexpr int64_t kMinPrimitiveBatch = 8;

void lstm_sequence(const KernelCall& call) {
  const int64_t layers = call.attrs.i(0);
  const size_t per_layer = call.attrs.b(1) ? 4 : 2;
  const Tensor x = call.in(0).contiguous();
  const Tensor h0 = call.in(1).contiguous(), c0 = call.in(2).contiguous();
  const int64_t steps = x.size(0), batch = x.size(1), hidden = call.in(4).size(1);
  const int64_t state = batch * hidden;
  // Layers between the first and the last ping-pong between two buffers.
  std::vector<float> buffers[2];
  const float* src = floats_of(x);
  int64_t in = x.size(2);
  try {
    for (int64_t l = 0; l < layers; ++l) {
      const size_t k = 3 + static_cast<size_t>(l) * per_layer;
      std::vector<float>& buffer = buffers[l % 2];
      if (l + 1 < layers) buffer.resize(static_cast<size_t>(steps * state));
      float* dst = l + 1 < layers ? buffer.data() : static_cast<float*>(call.out(0).data_ptr());
      const LayerArgs args{src,
                           dst,
                           floats_of(h0) + l * state,
                           floats_of(c0) + l * state,
                           static_cast<float*>(call.out(1).data_ptr()) + l * state,
                           static_cast<float*>(call.out(2).data_ptr()) + l * state,
                           call.in(k),
                           call.in(k + 1),
                           per_layer == 4 ? call.in(k + 2) : Tensor(),
                           per_layer == 4 ? call.in(k + 3) : Tensor()};
      if (batch < kMinPrimitiveBatch) {
        run_layer_by_steps(args, steps, batch, in, hidden);
      } else {
        run_layer(*lstm_primitive(steps, batch, in, hidden), args, hidden);
      }
      src = dst;
      in = hidden;
    }
  } catch (const dnnl::error& e) {
    throw Error(detail::str_cat("onednn: lstm primitive failed: ", e.what()));
  }
}

}  // namespace

void register_cpu_rnn_kernels(KernelTable& t) { t.set(ops::OpId::lstm_sequence, lstm_sequence); }

}  // namespace kiln::backend::cpu
