// Consistency cases of lstm_cell (every floating dtype) and lstm_sequence
// (float32 only: the op's one dtype), called through the dispatcher as the
// nn modules call them.
#include "ops/consistency.h"
#include "ops/dispatch.h"

namespace kiln::testing {
namespace {

struct LstmCase {
  std::string name;
  int64_t steps, batch, input, hidden, layers;
  bool bias = true;
  bool strided_input = false;  // a non-contiguous input view
};

// input [T, B, I], h0, c0 [L, B, H], then per layer weight_ih, weight_hh[, biases].
// Weights in [-0.5, 0.5) keep the gates off saturation, so errors show.
TensorList make_lstm_inputs(const LstmCase& s, Generator& g) {
  const Shape x_shape = {s.steps, s.batch, s.input};
  TensorList in = {
      s.strided_input ? uniform_strided(x_shape, kFloat32, g) : uniform(x_shape, kFloat32, g),
      uniform({s.layers, s.batch, s.hidden}, kFloat32, g, -1, 1),
      uniform({s.layers, s.batch, s.hidden}, kFloat32, g, -1, 1)};
  for (int64_t l = 0; l < s.layers; ++l) {
    const int64_t layer_input = l == 0 ? s.input : s.hidden;
    in.push_back(uniform({4 * s.hidden, layer_input}, kFloat32, g, -0.5, 0.5));
    in.push_back(uniform({4 * s.hidden, s.hidden}, kFloat32, g, -0.5, 0.5));
    if (!s.bias) continue;
    in.push_back(uniform({4 * s.hidden}, kFloat32, g, -0.5, 0.5));
    in.push_back(uniform({4 * s.hidden}, kFloat32, g, -0.5, 0.5));
  }
  return in;
}

void add_lstm(CaseList& cases, const LstmCase& s) {
  cases.push_back({.name = "lstm_sequence/" + s.name,
                   .ops = {OpId::lstm_sequence},
                   .dtypes = {kFloat32},
                   .make = [s](DType, Generator& g) { return make_lstm_inputs(s, g); },
                   .run =
                       [s](TensorList& in) {
                         return ops::dispatch(OpId::lstm_sequence, in, {s.layers, s.bias});
                       }});
}

// lstm_cell: gate projections and cell state of every floating dtype; inputs
// in [-2, 2) reach the gates' curved parts.
void add_lstm_cell(CaseList& cases, const std::string& name, const Shape& state, bool strided) {
  Shape gates = state;
  gates.back() *= 4;
  cases.push_back({.name = "lstm_cell/" + name,
                   .ops = {OpId::lstm_cell},
                   .dtypes = kFloatTypes,
                   .make =
                       [=](DType t, Generator& g) {
                         return TensorList{
                             strided ? uniform_strided(gates, t, g) : uniform(gates, t, g, -2, 2),
                             uniform(gates, t, g, -2, 2), uniform(state, t, g, -2, 2)};
                       },
                   .run = [](TensorList& in) { return ops::dispatch(OpId::lstm_cell, in, {}); }});
}

// lstm_step: input, state, weights (and biases) of every floating dtype;
// CUDA fuses up to 8 rows into one kernel, and composes above.
void add_lstm_step(CaseList& cases, const std::string& name, int64_t batch, int64_t in,
                   int64_t hidden, bool bias, bool strided) {
  cases.push_back({.name = "lstm_step/" + name,
                   .ops = {OpId::lstm_step},
                   .dtypes = kFloatTypes,
                   .make =
                       [=](DType t, Generator& g) {
                         TensorList v = {strided ? uniform_strided({batch, in}, t, g)
                                                 : uniform({batch, in}, t, g, -1, 1),
                                         uniform({batch, hidden}, t, g, -1, 1),
                                         uniform({batch, hidden}, t, g, -2, 2),
                                         uniform({4 * hidden, in}, t, g, -0.5, 0.5),
                                         uniform({4 * hidden, hidden}, t, g, -0.5, 0.5)};
                         if (bias) {
                           v.push_back(uniform({4 * hidden}, t, g, -0.5, 0.5));
                           v.push_back(uniform({4 * hidden}, t, g, -0.5, 0.5));
                         } else {
                           v.push_back(Tensor());
                           v.push_back(Tensor());
                         }
                         return v;
                       },
                   .run = [](TensorList& in) { return ops::dispatch(OpId::lstm_step, in, {}); }});
}

const CaseRegistration kCases([](CaseList& cases) {
  add_lstm_step(cases, "batch_1", 1, 12, 9, true, false);
  add_lstm_step(cases, "batch_8_no_bias", 8, 40, 33, false, false);
  add_lstm_step(cases, "batch_9_composed", 9, 7, 5, true, false);
  add_lstm_step(cases, "strided_input", 3, 6, 4, true, true);
  add_lstm_cell(cases, "batch", {3, 5}, false);
  add_lstm_cell(cases, "unbatched", {7}, false);
  add_lstm_cell(cases, "strided_gates", {4, 6}, true);
  add_lstm_cell(cases, "wide", {2, 300}, false);
  add_lstm(cases, {"one_layer", 5, 3, 7, 11, 1});
  add_lstm(cases, {"batch_1", 6, 1, 8, 8, 2});
  add_lstm(cases, {"one_step", 1, 4, 5, 6, 2});
  add_lstm(cases, {"three_layers_input_ne_hidden", 7, 2, 13, 9, 3});
  add_lstm(cases, {"no_bias", 4, 3, 6, 5, 2, false});
  add_lstm(cases, {"strided_input", 5, 2, 6, 4, 2, true, true});
  add_lstm(cases, {"large", 19, 8, 64, 48, 2});
  // The step loop runs batches in passes of up to four rows, hidden units in blocks of 16.
  add_lstm(cases, {"batch_7_hidden_37", 6, 7, 10, 37, 2});
});

}  // namespace
}  // namespace kiln::testing
