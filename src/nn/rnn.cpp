// LSTM and GRU: the cells as functions and modules, and the layers over sequences.
#include "kiln/nn/rnn.h"

#include <cmath>
#include <span>
#include <string>
#include <vector>

#include "kiln/autograd.h"
#include "kiln/nn/init.h"
#include "kiln/ops/factory.h"
#include "kiln/ops/linalg.h"
#include "kiln/ops/nn.h"
#include "kiln/ops/pointwise.h"
#include "kiln/ops/shape.h"
#include "ops/dispatch.h"

namespace kiln::nn {
namespace {

// One LSTM step from the input projection x_proj = W_ih x + b_ih and the
// hidden projection h_proj = W_hh h + b_hh of this step.
LSTMState lstm_step(const Tensor& x_proj, const Tensor& h_proj, const Tensor& c_prev) {
  TensorList out = ops::dispatch(ops::OpId::lstm_cell, TensorList{x_proj, h_proj, c_prev}, {});
  return {std::move(out[0]), std::move(out[1])};
}

// One GRU step; b_hn stays inside the reset gate's product, so the hidden
// projection cannot be folded into the input projection.
Tensor gru_step(const Tensor& x_proj, const Tensor& h_proj, const Tensor& h) {
  const auto x_gates = chunk(x_proj, 3, -1);
  const auto h_gates = chunk(h_proj, 3, -1);
  const Tensor reset = sigmoid(x_gates[0] + h_gates[0]);
  const Tensor update = sigmoid(x_gates[1] + h_gates[1]);
  const Tensor candidate = tanh(x_gates[2] + reset * h_gates[2]);
  return candidate + update * (h - candidate);
}

}  // namespace

namespace functional {

LSTMState lstm_cell(const Tensor& input, const LSTMState& state, const Tensor& weight_ih,
                    const Tensor& weight_hh, const Tensor& bias_ih, const Tensor& bias_hh) {
  // With nothing to differentiate, one op (lstm_step: on CUDA one kernel for
  // a few rows); else the projections and the cell, which autograd follows.
  const TensorList all = {input, state.h, state.c, weight_ih, weight_hh, bias_ih, bias_hh};
  bool one_op = input.dim() == 2 && state.h.dim() == 2 && state.c.dim() == 2;
  for (const Tensor& t : all) {
    if (!t.defined()) continue;
    one_op = one_op && t.dtype() == input.dtype() && t.device() == input.device() &&
             !(t.requires_grad() && is_grad_enabled());
  }
  if (one_op) {
    TensorList out = ops::dispatch(ops::OpId::lstm_step, all, {});
    return {std::move(out[0]), std::move(out[1])};
  }
  return lstm_step(linear(input, weight_ih, bias_ih), linear(state.h, weight_hh, bias_hh), state.c);
}

Tensor gru_cell(const Tensor& input, const Tensor& hidden, const Tensor& weight_ih,
                const Tensor& weight_hh, const Tensor& bias_ih, const Tensor& bias_hh) {
  return gru_step(linear(input, weight_ih, bias_ih), linear(hidden, weight_hh, bias_hh), hidden);
}

}  // namespace functional

namespace {

enum class RecurrentKind { lstm, gru };

// Four parameters per layer and direction, in PyTorch's registration order.
constexpr size_t kWeightIh = 0, kWeightHh = 1, kBiasIh = 2, kBiasHh = 3, kPerDirection = 4;

// Every weight and bias uniform in [-1/sqrt(H), 1/sqrt(H)], as PyTorch's reset_parameters.
Tensor uniform_parameter(const Shape& shape, int64_t hidden_size) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(hidden_size));
  return init::uniform_(empty(shape), -bound, bound);
}

// Runs one direction of one layer over input [T, B, F] from the given state;
// returns the outputs [T, B, H] and the state after the last step taken.
LSTMState run_direction(RecurrentKind kind, const Tensor& input, std::span<const Tensor> w,
                        LSTMState state, bool reverse, Tensor& output) {
  const int64_t steps = input.size(0);
  // The input projection of every step in one matmul; only h @ W_hh^T is
  // sequential. A batch-first input is projected in its own layout, where its
  // rows merge into one GEMM, and the result viewed time-first.
  const Tensor batch_first = input.transpose(0, 1);
  const Tensor x_proj = batch_first.is_contiguous()
                            ? linear(batch_first, w[kWeightIh], w[kBiasIh]).transpose(0, 1)
                            : linear(input, w[kWeightIh], w[kBiasIh]);
  const auto hidden_projection = [&](const Tensor& h) { return linear(h, w[kWeightHh], w[kBiasHh]); };
  std::vector<Tensor> outputs(static_cast<size_t>(steps));
  for (int64_t i = 0; i < steps; ++i) {
    const int64_t t = reverse ? steps - 1 - i : i;
    if (kind == RecurrentKind::lstm) {
      state = lstm_step(x_proj.select(0, t), hidden_projection(state.h), state.c);
    } else {
      state.h = gru_step(x_proj.select(0, t), hidden_projection(state.h), state.h);
    }
    outputs[static_cast<size_t>(t)] = state.h;
  }
  output = stack(outputs, 0);
  return state;
}

// Assigns a fresh uniform tensor to slot and registers it under name.
void register_uniform(Module& module, const std::string& name, Tensor& slot, const Shape& shape,
                      int64_t hidden_size) {
  slot = uniform_parameter(shape, hidden_size);
  module.register_parameter(name, slot);
}

// --- cells ------------------------------------------------------------------

// Checks a cell's input [B, I] or [I] and its state (zeros when undefined)
// against [B, H] or [H]; returns the state to use. The checks compare sizes
// (size_is) and the zeros take the input's batch from its shape (zeros_like
// of a view), so a compiled program reads no batch size and serves every
// batch from one trace.
Tensor cell_state(const char* name, const Tensor& input, int64_t input_size, int64_t hidden_size,
                  const Tensor& state, const char* which) {
  KILN_CHECK(input.dim() == 1 || input.dim() == 2, ShapeError, name,
             ": expected a 1-D (unbatched) or 2-D input, got shape ", input.sizes());
  KILN_CHECK(input.size_is(-1, SizeCmp::kEq, input_size), ShapeError, name, ": input has ",
             input.size(-1), " features in its last dim, expected ", input_size);
  const bool batched = input.dim() == 2;
  if (!state.defined()) {
    const Tensor column = input.narrow(-1, 0, 1);  // [B, 1] or [1]: a view
    return zeros_like(column.expand(batched ? Shape{-1, hidden_size} : Shape{hidden_size}));
  }
  const bool fits = state.dim() == input.dim() && state.size_is(-1, SizeCmp::kEq, hidden_size) &&
                    (!batched || state.size_is(0, SizeCmp::kEq, input, 0));
  if (!fits) {
    Shape expected = {hidden_size};
    if (batched) expected.insert(expected.begin(), input.size(0));
    throw ShapeError(detail::str_cat(name, ": expected ", which, " of shape ", expected, ", got ",
                                     state.sizes()));
  }
  return state;
}

}  // namespace

LSTMCell::LSTMCell(int64_t input_size, int64_t hidden_size, RNNCellOptions options)
    : input_size_(input_size), hidden_size_(hidden_size), bias_(options.bias) {
  KILN_CHECK(input_size > 0 && hidden_size > 0, ValueError,
             "LSTMCell: input_size and hidden_size must be positive, got ", input_size, " and ",
             hidden_size);
  register_uniform(*this, "weight_ih", weight_ih, {4 * hidden_size, input_size}, hidden_size);
  register_uniform(*this, "weight_hh", weight_hh, {4 * hidden_size, hidden_size}, hidden_size);
  if (bias_) {
    register_uniform(*this, "bias_ih", bias_ih, {4 * hidden_size}, hidden_size);
    register_uniform(*this, "bias_hh", bias_hh, {4 * hidden_size}, hidden_size);
  }
}

LSTMState LSTMCell::forward(const Tensor& input, const LSTMState& state) {
  KILN_CHECK(state.h.defined() == state.c.defined(), ValueError,
             "LSTMCell: give both h and c of the state, or neither");
  LSTMState start{cell_state("LSTMCell", input, input_size_, hidden_size_, state.h, "h"),
                  cell_state("LSTMCell", input, input_size_, hidden_size_, state.c, "c")};
  return functional::lstm_cell(input, start, weight_ih, weight_hh, bias_ih, bias_hh);
}

std::string LSTMCell::extra_repr() const {
  return detail::str_cat(input_size_, ", ", hidden_size_, bias_ ? "" : ", bias=False");
}

GRUCell::GRUCell(int64_t input_size, int64_t hidden_size, RNNCellOptions options)
    : input_size_(input_size), hidden_size_(hidden_size), bias_(options.bias) {
  KILN_CHECK(input_size > 0 && hidden_size > 0, ValueError,
             "GRUCell: input_size and hidden_size must be positive, got ", input_size, " and ",
             hidden_size);
  register_uniform(*this, "weight_ih", weight_ih, {3 * hidden_size, input_size}, hidden_size);
  register_uniform(*this, "weight_hh", weight_hh, {3 * hidden_size, hidden_size}, hidden_size);
  if (bias_) {
    register_uniform(*this, "bias_ih", bias_ih, {3 * hidden_size}, hidden_size);
    register_uniform(*this, "bias_hh", bias_hh, {3 * hidden_size}, hidden_size);
  }
}

Tensor GRUCell::forward(const Tensor& input, const Tensor& hidden) {
  const Tensor h = cell_state("GRUCell", input, input_size_, hidden_size_, hidden, "hidden");
  return functional::gru_cell(input, h, weight_ih, weight_hh, bias_ih, bias_hh);
}

std::string GRUCell::extra_repr() const {
  return detail::str_cat(input_size_, ", ", hidden_size_, bias_ ? "" : ", bias=False");
}

// --- layers -----------------------------------------------------------------

RNNBase::RNNBase(const char* name, int64_t gates, int64_t input_size, int64_t hidden_size,
                 RNNOptions options)
    : name_(name),
      gates_(gates),
      input_size_(input_size),
      hidden_size_(hidden_size),
      options_(options) {
  KILN_CHECK(input_size > 0 && hidden_size > 0, ValueError, name,
             ": input_size and hidden_size must be positive, got ", input_size, " and ",
             hidden_size);
  KILN_CHECK(options.num_layers >= 1, ValueError, name, ": num_layers must be at least 1, got ",
             options.num_layers);
  KILN_CHECK(options.dropout >= 0 && options.dropout <= 1, ValueError, name,
             ": dropout must be in [0, 1], got ", options.dropout);
  const int64_t directions = options.bidirectional ? 2 : 1;
  weights_.resize(static_cast<size_t>(options.num_layers * directions) * kPerDirection);
  for (int64_t layer = 0; layer < options.num_layers; ++layer) {
    const int64_t layer_input = layer == 0 ? input_size : directions * hidden_size;
    for (int64_t d = 0; d < directions; ++d) {
      const std::string suffix = detail::str_cat("_l", layer, d == 1 ? "_reverse" : "");
      Tensor* slot = &weights_[static_cast<size_t>(layer * directions + d) * kPerDirection];
      const int64_t rows = gates * hidden_size;
      register_uniform(*this, "weight_ih" + suffix, slot[kWeightIh], {rows, layer_input},
                       hidden_size);
      register_uniform(*this, "weight_hh" + suffix, slot[kWeightHh], {rows, hidden_size},
                       hidden_size);
      if (!options.bias) continue;
      register_uniform(*this, "bias_ih" + suffix, slot[kBiasIh], {rows}, hidden_size);
      register_uniform(*this, "bias_hh" + suffix, slot[kBiasHh], {rows}, hidden_size);
    }
  }
}

std::string RNNBase::extra_repr() const {
  std::string s = detail::str_cat(input_size_, ", ", hidden_size_);
  if (options_.num_layers != 1) s += detail::str_cat(", num_layers=", options_.num_layers);
  if (!options_.bias) s += ", bias=False";
  if (options_.batch_first) s += ", batch_first=True";
  if (options_.dropout != 0) s += ", dropout=" + repr::number(options_.dropout);
  if (options_.bidirectional) s += ", bidirectional=True";
  return s;
}

Tensor RNNBase::sequence_first(const Tensor& input) const {
  KILN_CHECK(input.dim() == 2 || input.dim() == 3, ShapeError, name_,
             ": expected a 2-D (unbatched) or 3-D input, got shape ", input.sizes());
  KILN_CHECK(input.size(-1) == input_size_, ShapeError, name_, ": input has ", input.size(-1),
             " features in its last dim, expected ", input_size_);
  if (input.dim() == 2) {
    KILN_CHECK(input.size_is(0, SizeCmp::kGt, 0), ShapeError, name_,
               ": input has no time steps, shape ", input.sizes());
    return input.unsqueeze(1);
  }
  const Tensor sequence = options_.batch_first ? input.transpose(0, 1) : input;
  KILN_CHECK(sequence.size_is(0, SizeCmp::kGt, 0), ShapeError, name_,
             ": input has no time steps, shape ", input.sizes());
  return sequence;
}

Tensor RNNBase::restore_layout(const Tensor& output, const Tensor& input) const {
  if (input.dim() == 2) return output.squeeze(1);
  return options_.batch_first ? output.transpose(0, 1) : output;
}

// The state [layers * directions, B, H] (or [layers * directions, H]
// unbatched), or zeros of that shape. The batch is the input's as a SymSize
// and the check compares sizes (size_is), so a compiled program reads no
// batch size and serves every batch from one trace.
Tensor RNNBase::initial_state(const Tensor& state, const Tensor& input, const char* which) const {
  const int64_t directions = options_.bidirectional ? 2 : 1;
  const int64_t slots = options_.num_layers * directions;
  const bool batched = input.dim() == 3;
  const int64_t batch_dim = options_.batch_first ? 0 : 1;
  if (!state.defined()) {
    if (!batched)
      return zeros({slots, 1, hidden_size_}, {.dtype = input.dtype(), .device = input.device()});
    return zeros({slots, input.sym_size(batch_dim), hidden_size_},
                 {.dtype = input.dtype(), .device = input.device()});
  }
  const bool ok = state.dim() == (batched ? 3 : 2) && state.size_is(0, SizeCmp::kEq, slots) &&
                  state.size_is(-1, SizeCmp::kEq, hidden_size_) &&
                  (!batched || state.size_is(1, SizeCmp::kEq, input, batch_dim));
  if (!ok) {
    Shape expected = {slots, hidden_size_};
    if (batched) expected.insert(expected.begin() + 1, input.size(batch_dim));
    throw ShapeError(detail::str_cat(name_, ": expected ", which, " of shape ", expected, ", got ",
                                     state.sizes()));
  }
  return batched ? state : state.unsqueeze(1);
}

LSTMState RNNBase::run(const Tensor& sequence, const LSTMState& initial, Tensor& output) {
  const auto kind = gates_ == 4 ? RecurrentKind::lstm : RecurrentKind::gru;
  const int64_t directions = options_.bidirectional ? 2 : 1;
  std::vector<Tensor> last_h, last_c;
  Tensor layer_input = sequence;
  for (int64_t layer = 0; layer < options_.num_layers; ++layer) {
    std::vector<Tensor> direction_outputs(static_cast<size_t>(directions));
    for (int64_t d = 0; d < directions; ++d) {
      const int64_t slot = layer * directions + d;
      LSTMState start{initial.h.select(0, slot),
                      kind == RecurrentKind::lstm ? initial.c.select(0, slot) : Tensor()};
      const std::span<const Tensor> weights(
          weights_.data() + static_cast<size_t>(slot) * kPerDirection, kPerDirection);
      LSTMState end = run_direction(kind, layer_input, weights, std::move(start), d == 1,
                                    direction_outputs[static_cast<size_t>(d)]);
      last_h.push_back(std::move(end.h));
      if (kind == RecurrentKind::lstm) last_c.push_back(std::move(end.c));
    }
    layer_input = directions == 1 ? direction_outputs[0] : cat(direction_outputs, -1);
    // Dropout feeds the next layer only: never after the last one.
    if (layer + 1 < options_.num_layers && options_.dropout > 0) {
      layer_input = functional::dropout(layer_input, options_.dropout, is_training());
    }
  }
  output = std::move(layer_input);
  return {stack(last_h, 0), kind == RecurrentKind::lstm ? stack(last_c, 0) : Tensor()};
}

namespace {

// Whether an LSTM call can take the fused lstm_sequence op: nothing to record
// for autograd, one direction, no dropout between layers, float32 tensors all
// on the CPU (oneDNN's kernel) or all on one CUDA device (cuDNN's).
bool can_run_fused(const Tensor& sequence, const LSTMState& initial, const TensorList& weights,
                   const RNNOptions& options, bool training) {
  if (options.bidirectional || sequence.size_is(1, SizeCmp::kEq, 0)) return false;
  if (options.dropout > 0 && options.num_layers > 1 && training) return false;
  const bool grad = is_grad_enabled();
  const Device device = sequence.device();
  if (!device.is_cpu() && !device.is_cuda()) return false;
  const auto usable = [&](const Tensor& t) {
    return t.dtype() == kFloat32 && t.device() == device &&
           !(grad && t.requires_grad());
  };
  if (!usable(sequence) || !usable(initial.h) || !usable(initial.c)) return false;
  for (const Tensor& w : weights) {
    if (!usable(w)) return false;
  }
  return true;
}

// weights: the module's parameters in registration order, which is the op's order.
LSTMState run_fused(const Tensor& sequence, const LSTMState& initial, const TensorList& weights,
                    const RNNOptions& options, Tensor& output) {
  TensorList tensors = {sequence, initial.h, initial.c};
  tensors.insert(tensors.end(), weights.begin(), weights.end());
  TensorList out =
      ops::dispatch(ops::OpId::lstm_sequence, tensors, {options.num_layers, options.bias});
  output = std::move(out[0]);
  return {std::move(out[1]), std::move(out[2])};
}

}  // namespace

LSTM::LSTM(int64_t input_size, int64_t hidden_size, RNNOptions options)
    : RNNBase("LSTM", 4, input_size, hidden_size, options) {}

LSTMResult LSTM::forward(const Tensor& input, const LSTMState& initial) {
  const Tensor sequence = sequence_first(input);
  KILN_CHECK(initial.h.defined() == initial.c.defined(), ValueError,
             "LSTM: give both h0 and c0 of the initial state, or neither");
  const LSTMState start{initial_state(initial.h, input, "h0"),
                        initial_state(initial.c, input, "c0")};
  Tensor output;
  // Inference goes through one fused op (oneDNN's LSTM on the CPU); training and
  // other dtypes through the step loop, whose ops autograd records.
  const TensorList weights = parameters(false);
  LSTMState end = can_run_fused(sequence, start, weights, options(), is_training())
                      ? run_fused(sequence, start, weights, options(), output)
                      : run(sequence, start, output);
  if (input.dim() == 2) end = {end.h.squeeze(1), end.c.squeeze(1)};
  return {restore_layout(output, input), std::move(end)};
}

GRU::GRU(int64_t input_size, int64_t hidden_size, RNNOptions options)
    : RNNBase("GRU", 3, input_size, hidden_size, options) {}

GRUResult GRU::forward(const Tensor& input, const Tensor& h0) {
  const Tensor sequence = sequence_first(input);
  Tensor output;
  Tensor h_n = run(sequence, {initial_state(h0, input, "h0"), Tensor()}, output).h;
  if (input.dim() == 2) h_n = h_n.squeeze(1);
  return {restore_layout(output, input), std::move(h_n)};
}

}  // namespace kiln::nn
