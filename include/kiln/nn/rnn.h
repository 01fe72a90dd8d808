// Recurrent layers with PyTorch's semantics, parameter names and initialization.
//
//   kiln::nn::LSTM lstm{16, 32, {.num_layers = 2, .batch_first = true, .bidirectional = true}};
//   auto [output, state] = lstm(kiln::randn({8, 10, 16}));   // output [8, 10, 64]
//   // state.h, state.c: [num_layers * 2, 8, 32]
//   kiln::nn::GRU gru{16, 32};
//   auto [seq, h_n] = gru(kiln::randn({10, 8, 16}), kiln::zeros({1, 8, 32}));
//   kiln::nn::LSTMCell cell{16, 32};
//   auto next = cell(x, {h, c});                              // next.h, next.c
//
// Gates are stacked in PyTorch's order (LSTM: i, f, g, o; GRU: r, z, n), so
// weights load from a PyTorch state dict unchanged. Every weight and bias starts
// uniform in [-1/sqrt(hidden_size), 1/sqrt(hidden_size)].
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/nn/module.h"
#include "kiln/tensor.h"

namespace kiln::nn {

// An LSTM's hidden and cell state. For the layers: [num_layers * num_directions,
// batch, hidden_size] (without the batch dim for unbatched input); for a cell:
// [batch, hidden_size] or [hidden_size].
struct LSTMState {
  Tensor h;
  Tensor c;
};

namespace functional {

// One LSTM step: gates = W_ih x + b_ih + W_hh h + b_hh split as (i, f, g, o);
// c' = sigmoid(f) * c + sigmoid(i) * tanh(g), h' = sigmoid(o) * tanh(c').
// Biases may be undefined.
LSTMState lstm_cell(const Tensor& input, const LSTMState& state, const Tensor& weight_ih,
                    const Tensor& weight_hh, const Tensor& bias_ih = {},
                    const Tensor& bias_hh = {});

// One GRU step: r, z = sigmoid of the first two gate pairs,
// n = tanh(W_in x + b_in + r * (W_hn h + b_hn)), h' = (1 - z) * n + z * h.
Tensor gru_cell(const Tensor& input, const Tensor& hidden, const Tensor& weight_ih,
                const Tensor& weight_hh, const Tensor& bias_ih = {}, const Tensor& bias_hh = {});

}  // namespace functional

struct RNNCellOptions {
  bool bias = true;  // bias_ih and bias_hh
};

// One LSTM step as a module: weight_ih [4H, I], weight_hh [4H, H], bias_ih, bias_hh [4H].
class LSTMCell : public Module {
 public:
  using Options = RNNCellOptions;
  LSTMCell(int64_t input_size, int64_t hidden_size, RNNCellOptions options = {});
  // input [B, I] or [I]; state h, c of [B, H] or [H], zeros when not given.
  LSTMState forward(const Tensor& input, const LSTMState& state = {});
  LSTMState operator()(const Tensor& input, const LSTMState& state = {}) {
    return forward(input, state);
  }
  std::string extra_repr() const override;

  Tensor weight_ih, weight_hh, bias_ih, bias_hh;

 private:
  int64_t input_size_, hidden_size_;
  bool bias_;
};

// One GRU step as a module: weight_ih [3H, I], weight_hh [3H, H], bias_ih, bias_hh [3H].
class GRUCell : public Module {
 public:
  using Options = RNNCellOptions;
  GRUCell(int64_t input_size, int64_t hidden_size, RNNCellOptions options = {});
  // input [B, I] or [I]; hidden [B, H] or [H], zeros when not given.
  Tensor forward(const Tensor& input, const Tensor& hidden = {});
  Tensor operator()(const Tensor& input, const Tensor& hidden = {}) {
    return forward(input, hidden);
  }
  std::string extra_repr() const override;

  Tensor weight_ih, weight_hh, bias_ih, bias_hh;

 private:
  int64_t input_size_, hidden_size_;
  bool bias_;
};

struct RNNOptions {
  int64_t num_layers = 1;
  bool bias = true;
  bool batch_first = false;  // input and output [B, T, F] instead of [T, B, F]
  double dropout = 0;        // on the outputs of every layer but the last, when training
  bool bidirectional = false;
};

// What LSTM and GRU share: options, the parameters weight_ih_l{k}[_reverse],
// weight_hh_l{k}[_reverse], bias_ih_l{k}[_reverse], bias_hh_l{k}[_reverse] in
// PyTorch's order, and the checks of input and initial state.
class RNNBase : public Module {
 public:
  int64_t input_size() const noexcept { return input_size_; }
  int64_t hidden_size() const noexcept { return hidden_size_; }
  const RNNOptions& options() const noexcept { return options_; }
  std::string extra_repr() const override;

 protected:
  RNNBase(const char* name, int64_t gates, int64_t input_size, int64_t hidden_size,
          RNNOptions options);
  // input as [T, B, F] (a batch of one for unbatched input), after checking it.
  Tensor sequence_first(const Tensor& input) const;
  // The output back in the caller's layout.
  Tensor restore_layout(const Tensor& output, const Tensor& input) const;
  // state checked against [L * D, B, H] (or [L * D, H] for unbatched input) and
  // given a batch dim; zeros when undefined.
  Tensor initial_state(const Tensor& state, const Tensor& input, const char* which) const;
  // Runs every layer and direction; c is used (and returned) by LSTM only.
  LSTMState run(const Tensor& sequence, const LSTMState& initial, Tensor& output);

 private:
  const char* name_;
  int64_t gates_;  // 4 for LSTM, 3 for GRU
  int64_t input_size_, hidden_size_;
  RNNOptions options_;
  // weight_ih, weight_hh, bias_ih, bias_hh per layer and direction; sized once
  // in the constructor so the registered slots never move.
  std::vector<Tensor> weights_;
};

struct LSTMResult {
  Tensor output;    // [T, B, D * H] ([B, T, D * H] with batch_first, [T, D * H] unbatched)
  LSTMState state;  // h_n, c_n: [num_layers * D, B, H], layer-major, forward direction first
};

class LSTM : public RNNBase {
 public:
  using Options = RNNOptions;
  LSTM(int64_t input_size, int64_t hidden_size, RNNOptions options = {});
  LSTMResult forward(const Tensor& input, const LSTMState& initial = {});
  LSTMResult operator()(const Tensor& input, const LSTMState& initial = {}) {
    return forward(input, initial);
  }
};

struct GRUResult {
  Tensor output;  // as LSTMResult::output
  Tensor h_n;     // [num_layers * D, B, H]
};

class GRU : public RNNBase {
 public:
  using Options = RNNOptions;
  GRU(int64_t input_size, int64_t hidden_size, RNNOptions options = {});
  GRUResult forward(const Tensor& input, const Tensor& h0 = {});
  GRUResult operator()(const Tensor& input, const Tensor& h0 = {}) { return forward(input, h0); }
};

}  // namespace kiln::nn
