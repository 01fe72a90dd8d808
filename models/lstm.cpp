#include "kiln/models/lstm.h"

#include "kiln/error.h"
#include "kiln/ops/shape.h"

namespace kiln::models {

namespace {

void check_options(const char* model, const LSTMNetOptions& o) {
  KILN_CHECK(o.input_size > 0 && o.hidden_size > 0 && o.num_layers > 0 && o.num_classes > 0,
             ValueError, model, ": sizes must be positive, got input_size=", o.input_size,
             ", hidden_size=", o.hidden_size, ", num_layers=", o.num_layers,
             ", num_classes=", o.num_classes);
}

// Both forms take a batch of sequences [B, T, input_size] with T >= 1.
void check_input(const char* model, const Tensor& input, int64_t input_size) {
  KILN_CHECK(input.dim() == 3 && input.size_is(2, SizeCmp::kEq, input_size) &&
                 input.size_is(1, SizeCmp::kGt, 0),
             ShapeError, model, ": expected input [batch, time, ", input_size,
             "] with time >= 1, got ", input.shape());
}

}  // namespace

LSTMNet::LSTMNet(Options options)
    : lstm((check_options("LSTMNet", options), options.input_size), options.hidden_size,
           {.num_layers = options.num_layers, .batch_first = true}),
      head(options.hidden_size, options.num_classes),
      options_(options) {
  register_module("lstm", lstm);
  register_module("head", head);
}

Tensor LSTMNet::forward(const Tensor& input) {
  check_input("LSTMNet", input, options_.input_size);
  const Tensor output = lstm(input).output;  // [B, T, H]
  return head(output.select(1, -1));         // the last step, its index left to select's rule
}

StackedLSTMCells::StackedLSTMCells(int64_t input_size, int64_t hidden_size, int64_t num_layers)
    : input_size_(input_size), hidden_size_(hidden_size) {
  cells_.reserve(static_cast<size_t>(num_layers));
  for (int64_t k = 0; k < num_layers; ++k) {
    auto& cell = *cells_.emplace_back(
        std::make_unique<nn::LSTMCell>(k == 0 ? input_size : hidden_size, hidden_size));
    const std::string suffix = detail::str_cat("_l", k);
    register_parameter("weight_ih" + suffix, cell.weight_ih);
    register_parameter("weight_hh" + suffix, cell.weight_hh);
    register_parameter("bias_ih" + suffix, cell.bias_ih);
    register_parameter("bias_hh" + suffix, cell.bias_hh);
  }
}

nn::LSTMCell& StackedLSTMCells::cell(int64_t layer) {
  KILN_CHECK(layer >= 0 && layer < num_layers(), IndexError, "StackedLSTMCells: layer ", layer,
             " out of range for ", num_layers(), " layers");
  return *cells_[static_cast<size_t>(layer)];
}

std::string StackedLSTMCells::extra_repr() const {
  return detail::str_cat(input_size_, ", ", hidden_size_, ", num_layers=", cells_.size());
}

LSTMCellLoop::LSTMCellLoop(Options options)
    : lstm((check_options("LSTMCellLoop", options), options.input_size), options.hidden_size,
           options.num_layers),
      head(options.hidden_size, options.num_classes),
      options_(options) {
  register_module("lstm", lstm);
  register_module("head", head);
}

Tensor LSTMCellLoop::forward(const Tensor& input) {
  check_input("LSTMCellLoop", input, options_.input_size);
  const int64_t layers = lstm.num_layers();
  // Zero states for every layer, as the cells start when given none.
  std::vector<nn::LSTMState> state(static_cast<size_t>(layers));
  for (int64_t t = 0; t < input.size(1); ++t) {
    Tensor x = input.select(1, t);
    for (int64_t k = 0; k < layers; ++k) {
      auto& s = state[static_cast<size_t>(k)];
      s = lstm.cell(k)(x, s);
      x = s.h;
    }
  }
  return head(state.back().h);
}

}  // namespace kiln::models
