// Reference kernels of lstm_sequence and lstm_cell: the LSTM recurrence
// written out with double accumulation, one layer after another, gates i, f, g, o.
#include <cmath>
#include <vector>

#include "backends/reference/ref_util.h"
#include "backends/reference/reference.h"

namespace kiln::backend {
namespace {

double sigmoid(double v) { return 1.0 / (1.0 + std::exp(-v)); }

void write_all(const Tensor& out, const std::vector<double>& values, int64_t offset) {
  for (size_t i = 0; i < values.size(); ++i) {
    ref::write(out, offset + static_cast<int64_t>(i), values[i]);
  }
}

// One layer over seq [T, B, in] (row-major); h and c [B, H] are updated in place
// and the returned sequence is [T, B, H].
std::vector<double> lstm_layer(const std::vector<double>& seq, int64_t steps, int64_t batch,
                               int64_t in, int64_t hidden, const std::vector<double>& w_ih,
                               const std::vector<double>& w_hh, const std::vector<double>& bias,
                               std::vector<double>& h, std::vector<double>& c) {
  std::vector<double> out(static_cast<size_t>(steps * batch * hidden));
  std::vector<double> gates(static_cast<size_t>(4 * hidden));
  for (int64_t t = 0; t < steps; ++t) {
    std::vector<double> h_next(h.size());
    for (int64_t b = 0; b < batch; ++b) {
      const double* x = &seq[static_cast<size_t>((t * batch + b) * in)];
      const double* h_prev = &h[static_cast<size_t>(b * hidden)];
      for (int64_t r = 0; r < 4 * hidden; ++r) {
        double acc = bias[static_cast<size_t>(r)];
        for (int64_t k = 0; k < in; ++k) acc += w_ih[static_cast<size_t>(r * in + k)] * x[k];
        for (int64_t k = 0; k < hidden; ++k) {
          acc += w_hh[static_cast<size_t>(r * hidden + k)] * h_prev[k];
        }
        gates[static_cast<size_t>(r)] = acc;
      }
      for (int64_t j = 0; j < hidden; ++j) {
        const size_t s = static_cast<size_t>(b * hidden + j);
        const double i_gate = sigmoid(gates[static_cast<size_t>(j)]);
        const double f_gate = sigmoid(gates[static_cast<size_t>(hidden + j)]);
        const double g_gate = std::tanh(gates[static_cast<size_t>(2 * hidden + j)]);
        const double o_gate = sigmoid(gates[static_cast<size_t>(3 * hidden + j)]);
        c[s] = f_gate * c[s] + i_gate * g_gate;
        h_next[s] = o_gate * std::tanh(c[s]);
        out[static_cast<size_t>(t * batch * hidden) + s] = h_next[s];
      }
    }
    h = std::move(h_next);
  }
  return out;
}

void lstm_sequence(const KernelCall& call) {
  const int64_t layers = call.attrs.i(0);
  const bool has_biases = call.attrs.b(1);
  const size_t per_layer = has_biases ? 4 : 2;
  const Tensor& x = call.in(0);
  const int64_t steps = x.size(0), batch = x.size(1), hidden = call.in(4).size(1);
  const std::vector<double> h0 = call.in(1).to_vector<double>(),
                            c0 = call.in(2).to_vector<double>();
  const size_t state = static_cast<size_t>(batch * hidden);
  std::vector<double> seq = x.to_vector<double>();
  int64_t in = x.size(2);
  for (int64_t l = 0; l < layers; ++l) {
    const size_t k = 3 + static_cast<size_t>(l) * per_layer;
    std::vector<double> bias(static_cast<size_t>(4 * hidden), 0.0);
    if (has_biases) {
      const std::vector<double> b_ih = call.in(k + 2).to_vector<double>();
      const std::vector<double> b_hh = call.in(k + 3).to_vector<double>();
      for (size_t r = 0; r < bias.size(); ++r) bias[r] = b_ih[r] + b_hh[r];
    }
    std::vector<double> h(h0.begin() + static_cast<std::ptrdiff_t>(l * state),
                          h0.begin() + static_cast<std::ptrdiff_t>((l + 1) * state));
    std::vector<double> c(c0.begin() + static_cast<std::ptrdiff_t>(l * state),
                          c0.begin() + static_cast<std::ptrdiff_t>((l + 1) * state));
    seq = lstm_layer(seq, steps, batch, in, hidden, call.in(k).to_vector<double>(),
                     call.in(k + 1).to_vector<double>(), bias, h, c);
    write_all(call.out(1), h, l * static_cast<int64_t>(state));
    write_all(call.out(2), c, l * static_cast<int64_t>(state));
    in = hidden;
  }
  write_all(call.out(0), seq, 0);
}

// lstm_cell: the gates summed and the cell update, per row of [..., H].
void lstm_cell(const KernelCall& call) {
  const std::vector<double> xg = call.in(0).to_vector<double>(), hg = call.in(1).to_vector<double>(),
                            cx = call.in(2).to_vector<double>();
  const int64_t hidden = call.in(2).size(-1);
  const int64_t rows = static_cast<int64_t>(cx.size()) / hidden;
  for (int64_t r = 0; r < rows; ++r) {
    auto gate = [&](int64_t k, int64_t j) {
      const size_t at = static_cast<size_t>(r * 4 * hidden + k * hidden + j);
      return xg[at] + hg[at];
    };
    for (int64_t j = 0; j < hidden; ++j) {
      const int64_t s = r * hidden + j;
      const double c = sigmoid(gate(1, j)) * cx[static_cast<size_t>(s)] +
                       sigmoid(gate(0, j)) * std::tanh(gate(2, j));
      ref::write(call.out(1), s, c);
      ref::write(call.out(0), s, sigmoid(gate(3, j)) * std::tanh(c));
    }
  }
}

// lstm_step: both projections and the cell, per row, in double.
void lstm_step(const KernelCall& call) {
  const std::vector<double> x = call.in(0).to_vector<double>(), h = call.in(1).to_vector<double>(),
                            cx = call.in(2).to_vector<double>(), w_ih = call.in(3).to_vector<double>(),
                            w_hh = call.in(4).to_vector<double>();
  const auto optional = [&](size_t i) {
    return i < call.inputs.size() && call.in(i).defined() ? call.in(i).to_vector<double>() : std::vector<double>();
  };
  const std::vector<double> b_ih = optional(5), b_hh = optional(6);
  const int64_t rows = call.in(0).size(0), in = call.in(0).size(1), hidden = call.in(1).size(1);
  std::vector<double> gates(static_cast<size_t>(4 * hidden));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t k = 0; k < 4 * hidden; ++k) {
      double sum = b_ih.empty() ? 0 : b_ih[static_cast<size_t>(k)];
      if (!b_hh.empty()) sum += b_hh[static_cast<size_t>(k)];
      for (int64_t i = 0; i < in; ++i) sum += x[static_cast<size_t>(r * in + i)] * w_ih[static_cast<size_t>(k * in + i)];
      for (int64_t j = 0; j < hidden; ++j)
        sum += h[static_cast<size_t>(r * hidden + j)] * w_hh[static_cast<size_t>(k * hidden + j)];
      gates[static_cast<size_t>(k)] = sum;
    }
    for (int64_t j = 0; j < hidden; ++j) {
      const int64_t s = r * hidden + j;
      const auto gate = [&](int64_t g) { return gates[static_cast<size_t>(g * hidden + j)]; };
      const double c = sigmoid(gate(1)) * cx[static_cast<size_t>(s)] + sigmoid(gate(0)) * std::tanh(gate(2));
      ref::write(call.out(1), s, c);
      ref::write(call.out(0), s, sigmoid(gate(3)) * std::tanh(c));
    }
  }
}

}  // namespace

void register_reference_rnn_kernels(KernelTable& t) {
  t.set(ops::OpId::lstm_cell, lstm_cell);
  t.set(ops::OpId::lstm_step, lstm_step);
  t.set(ops::OpId::lstm_sequence, lstm_sequence);
}

}  // namespace kiln::backend
