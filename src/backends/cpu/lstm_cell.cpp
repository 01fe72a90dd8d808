// CPU kernel of lstm_cell: one pass over the rows, each hidden unit reading
// its four gates from both projections (float compute for 16-bit types).
#include "backends/cpu/loops.h"
#include "backends/cpu/nn.h"
#include "backends/cpu/vec_math.h"
#include "backends/lstm_step.h"
#include "kiln/autograd.h"
#include "kiln/ops/linalg.h"
#include "ops/dispatch.h"
#include "ops/op_table.h"

namespace kiln::backend::cpu {
namespace {

template <typename C>
[[gnu::always_inline]] inline C sigmoid(C x) {
  return C(1) / (C(1) + exp_f32(-x));
}

void lstm_cell(const KernelCall& call) {
  const Tensor xg = call.in(0).contiguous(), hg = call.in(1).contiguous(),
               cx = call.in(2).contiguous();
  const Tensor &hy = call.out(0), &cy = call.out(1);
  const int64_t hidden = cx.size(-1), rows = cx.numel() / std::max<int64_t>(hidden, 1);
  visit_floating(cx.dtype(), [&]<typename T>() {
    using C = compute_t<T>;
    const T* a = xg.data<T>();
    const T* b = hg.data<T>();
    const T* c = cx.data<T>();
    T* h_out = hy.data<T>();
    T* c_out = cy.data<T>();
    parallel_for(rows, std::max<int64_t>(1, kParallelGrain / (4 * hidden)), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const T* ga = a + r * 4 * hidden;
        const T* gb = b + r * 4 * hidden;
        for (int64_t j = 0; j < hidden; ++j) {
          const C i = sigmoid(C(ga[j]) + C(gb[j]));
          const C f = sigmoid(C(ga[hidden + j]) + C(gb[hidden + j]));
          const C g = tanh_f32(C(ga[2 * hidden + j]) + C(gb[2 * hidden + j]));
          const C o = sigmoid(C(ga[3 * hidden + j]) + C(gb[3 * hidden + j]));
          const C next = f * C(c[r * hidden + j]) + i * g;
          c_out[r * hidden + j] = T(next);
          h_out[r * hidden + j] = T(o * tanh_f32(next));
        }
      }
    });
  });
}

}  // namespace

void register_cpu_lstm_cell_kernel(KernelTable& t) {
  t.set(ops::OpId::lstm_cell, lstm_cell);
  t.set(ops::OpId::lstm_step, lstm_step_composite);
}

}  // namespace kiln::backend::cpu

namespace kiln::backend {

void lstm_step_composite(const KernelCall& call) {
  NoGradGuard no_grad;
  const auto optional = [&](size_t i) { return i < call.inputs.size() ? call.in(i) : Tensor(); };
  const Tensor x_proj = linear(call.in(0), call.in(3), optional(5));
  const Tensor h_proj = linear(call.in(1), call.in(4), optional(6));
  // The cell's kernel writes the step's outputs.
  const TensorList inputs = {x_proj, h_proj, call.in(2)};
  TensorList outputs = {call.out(0), call.out(1)};
  const ops::Attrs none;
  ops::kernel_for(ops::OpId::lstm_cell, call.out(0).device())(
      KernelCall{ops::op_schema(ops::OpId::lstm_cell), inputs, outputs, none});
}

}  // namespace kiln::backend
