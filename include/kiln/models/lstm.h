// The LSTM sequence model of kiln's benchmarks, in two forms with one state dict:
// LSTMNet runs nn::LSTM over the whole sequence; LSTMCellLoop is the same
// network written as an explicit time loop over nn::LSTMCells (the dynamic-graph
// form, one small op chain per step).
//
//   kiln::models::LSTMNet net;                       // LSTM(256, 512, 2 layers) + Linear(512, 10)
//   auto logits = net(kiln::randn({1, 128, 256}));   // [1, 10], from the last step
//   kiln::models::LSTMCellLoop loop;
//   loop.load_state_dict(net.state_dict());          // same names: lstm.weight_ih_l0, ..., head.bias
//   auto same = loop(kiln::randn({1, 32, 256}));
//
// Names follow PyTorch's nn.LSTM(batch_first=True) + nn.Linear, so a state dict
// saved from PyTorch (safetensors.torch.save_file(model.state_dict(), path))
// loads into either form unchanged.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/nn/linear.h"
#include "kiln/nn/module.h"
#include "kiln/nn/rnn.h"
#include "kiln/tensor.h"

namespace kiln::models {

struct LSTMNetOptions {
  int64_t input_size = 256;
  int64_t hidden_size = 512;
  int64_t num_layers = 2;
  int64_t num_classes = 10;
};

// nn.LSTM(input_size, hidden_size, num_layers, batch_first=True), then
// Linear(hidden_size, num_classes) on the top layer's output at the last step.
class LSTMNet : public nn::Module {
 public:
  using Options = LSTMNetOptions;
  explicit LSTMNet(Options options = {});
  // input [B, T, input_size] -> logits [B, num_classes]
  Tensor forward(const Tensor& input);
  Tensor operator()(const Tensor& input) { return forward(input); }
  const Options& options() const noexcept { return options_; }

  nn::LSTM lstm;
  nn::Linear head;

 private:
  Options options_;
};

// The stacked cells of LSTMCellLoop under nn.LSTM's parameter names
// (weight_ih_l{k}, weight_hh_l{k}, bias_ih_l{k}, bias_hh_l{k}): the cells hold
// the tensors, this module registers them.
class StackedLSTMCells : public nn::Module {
 public:
  StackedLSTMCells(int64_t input_size, int64_t hidden_size, int64_t num_layers);
  int64_t num_layers() const noexcept { return static_cast<int64_t>(cells_.size()); }
  nn::LSTMCell& cell(int64_t layer);
  std::string name() const override { return "StackedLSTMCells"; }
  std::string extra_repr() const override;

 private:
  std::vector<std::unique_ptr<nn::LSTMCell>> cells_;
  int64_t input_size_, hidden_size_;
};

// LSTMNet as a loop over time and layers:
//   for t: h[0], c[0] = cell0(x[:, t], (h[0], c[0])); h[k], c[k] = cellk(h[k-1], ...)
// then head(h[top]).
class LSTMCellLoop : public nn::Module {
 public:
  using Options = LSTMNetOptions;
  explicit LSTMCellLoop(Options options = {});
  // input [B, T, input_size] -> logits [B, num_classes]
  Tensor forward(const Tensor& input);
  Tensor operator()(const Tensor& input) { return forward(input); }
  const Options& options() const noexcept { return options_; }

  StackedLSTMCells lstm;
  nn::Linear head;

 private:
  Options options_;
};

}  // namespace kiln::models
