// CPU kernel of lstm_sequence: oneDNN's LSTM primitive, one call per layer
// (a primitive over several layers needs equal input and hidden sizes, and one
// per layer costs nothing measurable). Primitives are cached by shape, and the
// weights reordered into the primitive's layout are kept in the weight cache
// (weight_cache.h), so an inference loop reorders them once. Batches of one or two
// run a fused step loop over sgemm instead, which is faster there.
#include <algorithm>
#include <cstring>
#include <memory>
#include <unordered_map>
#include <vector>

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

// The same layer as a loop over steps: one GEMM for the input projection of
// every step, then per step a GEMM with W_hh and one fused pass over the gates.
// At small batches this beats the primitive, whose per-step work is a
// matrix-vector product split over threads with barriers between its stages.
void run_layer_by_steps(const LayerArgs& a, int64_t steps, int64_t batch, int64_t in,
                        int64_t hidden) {
  const int64_t g = 4 * hidden, state = batch * hidden;
  const std::vector<float> bias = summed_bias(a.b_ih, a.b_hh, hidden);
  std::vector<float> gates(static_cast<size_t>(steps * batch * g));
  for (int64_t r = 0; r < steps * batch; ++r) {
    std::copy(bias.begin(), bias.end(), gates.begin() + r * g);
  }
  const Tensor w_ih = a.w_ih.contiguous(), w_hh = a.w_hh.contiguous();
  gemm_f32({a.src, steps * batch, in, in, 1}, {floats_of(w_ih), in, g, 1, in}, gates.data(), g, 1.f,
           1.f);
  std::copy(a.c0, a.c0 + state, a.c_n);
  const float* h_prev = a.h0;
  for (int64_t t = 0; t < steps; ++t) {
    float* gate = gates.data() + t * batch * g;
    gemm_f32({h_prev, batch, hidden, hidden, 1}, {floats_of(w_hh), hidden, g, 1, hidden}, gate, g,
             1.f, 1.f);
    float* h = a.dst + t * state;
    for (int64_t b = 0; b < batch; ++b) {
      const float* row = gate + b * g;
      float* c = a.c_n + b * hidden;
      float* hb = h + b * hidden;
      for (int64_t j = 0; j < hidden; ++j) {
        const float i_gate = 1.f / (1.f + exp_f32(-row[j]));
        const float f_gate = 1.f / (1.f + exp_f32(-row[hidden + j]));
        const float o_gate = 1.f / (1.f + exp_f32(-row[3 * hidden + j]));
        c[j] = f_gate * c[j] + i_gate * tanh_f32(row[2 * hidden + j]);
        hb[j] = o_gate * tanh_f32(c[j]);
      }
    }
    h_prev = h;
  }
  std::copy(h_prev, h_prev + state, a.h_n);
}

// From this batch size on the primitive is faster than the step loop (2 cores,
// hidden 512: batch 1 8.9 against 11.5 ms, batch 2 9.0 against 11.7, batch 4
// 17.5 against 12.7).
constexpr int64_t kMinPrimitiveBatch = 3;

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
