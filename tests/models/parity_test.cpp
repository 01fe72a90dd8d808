// PyTorch parity of the reference models. tests/parity/make_reference.py builds
// each model in PyTorch with a fixed seed and saves its weights (as PyTorch and
// Hugging Face users save them), inputs, outputs and gradients; these tests load
// the same files into kiln's models and compare, with the bound of the models'
// issue: max |kiln - PyTorch| <= 1e-4 x max |PyTorch| per tensor, fp32.
//
// The small cases live in tests/data/parity and run everywhere. The full-size
// ones (ResNet-50, BERT-base, the benchmark LSTM) are generated where PyTorch is
// (make_reference.py --full --out DIR) and run when KILN_PARITY_DIR=DIR is set;
// without it they skip, saying so.
//
// On a CUDA device (the ParityCuda tests) the same weights and inputs are
// compared with PyTorch's GPU outputs, made by make_reference.py --device cuda
// with TF32 off (in DIR/cuda/); kiln runs with TF32 off as well.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>

#include "kiln/autograd.h"
#include "kiln/cuda.h"
#include "kiln/runtime.h"
#include "kiln/models/bert.h"
#include "kiln/models/lstm.h"
#include "kiln/models/resnet.h"
#include "kiln/ops/pointwise.h"
#include "kiln/ops/reduce.h"
#include "kiln/safetensors.h"
#include "models/model_testing.h"

namespace kiln::models {
namespace {

namespace fs = std::filesystem;

std::string small_dir() { return testing::test_data_dir() + "/parity"; }

// The directory of the full-size references, or "" when they were not made.
std::string full_dir() {
  const char* dir = std::getenv("KILN_PARITY_DIR");
  return dir ? dir : "";
}

// Where the references of a run are and where kiln runs: the weights in
// `weights`, the inputs and PyTorch's outputs in `io` (the cuda/ subdirectory
// for a CUDA device).
struct Target {
  std::string weights, io;
  Device device = Device::cpu();
};

Target on_cpu(const std::string& dir) { return {dir, dir, Device::cpu()}; }
Target on_cuda(const std::string& dir) { return {dir, dir + "/cuda", Device::cuda(0)}; }

// The reference tensors of a case, on the target's device.
StateDict load_io(const Target& t, const std::string& name) {
  StateDict io;
  for (const auto& [key, v] : load_safetensors(t.io + "/" + name + ".io.safetensors"))
    io.set(key, v.to(t.device));
  return io;
}

// Exact float32 on CUDA for its lifetime, as the GPU references were made.
class NoTf32 : public Tf32PolicyGuard {
 public:
  NoTf32() : Tf32PolicyGuard({.matmul = false, .conv = false}) {}
};

#define KILN_SKIP_WITHOUT_CUDA() \
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device: " << cuda::unavailable_reason()

#define KILN_SKIP_WITHOUT_FULL_REFERENCES()                                                   \
  if (full_dir().empty())                                                                     \
  GTEST_SKIP() << "KILN_PARITY_DIR is not set: the full-size references are made where "     \
                  "PyTorch is (python3 tests/parity/make_reference.py --full --out DIR)"

// The reference tensors under a prefix ("input.", "grad.") without it.
StateDict with_prefix(const StateDict& io, const std::string& prefix) {
  StateDict out;
  for (const auto& [name, t] : io) {
    if (name.starts_with(prefix)) out.set(name.substr(prefix.size()), t);
  }
  return out;
}

// sum(out * loss.weight.<name>) over the named outputs: the scalar PyTorch's
// gradients were taken of.
Tensor projected_loss(const StateDict& io, const std::vector<std::pair<std::string, Tensor>>& outs) {
  Tensor loss;
  for (const auto& [name, out] : outs) {
    Tensor term = (out * io.at("loss.weight." + name)).sum();
    loss = loss.defined() ? loss + term : term;
  }
  return loss;
}

void expect_outputs(const StateDict& io, const std::string& stage,
                    const std::vector<std::pair<std::string, Tensor>>& outs) {
  for (const auto& [name, out] : outs) {
    const auto result = testing::within_scaled_bound(out, io.at(stage + "." + name));
    EXPECT_TRUE(result) << stage << "." << name;
    if (result) std::printf("%s.%s: %s\n", stage.c_str(), name.c_str(), result.message());
  }
}

// Every parameter's gradient within the bound. A gradient that is zero in
// exact arithmetic (the key bias of attention: softmax ignores a shift shared by
// all keys) is rounding noise on both sides; it is checked to stay at that level,
// below 1e-6 of the largest gradient of the model, instead.
void expect_gradients(const StateDict& io, const nn::Module& model) {
  const StateDict grads = with_prefix(io, "grad.");
  double largest = 0;
  for (const auto& [name, g] : grads) largest = std::max(largest, g.abs().max().item<double>());
  size_t checked = 0;
  for (const auto& [name, p] : model.named_parameters()) {
    const Tensor* want = grads.find(name);
    ASSERT_NE(want, nullptr) << "PyTorch has no gradient for " << name;
    ASSERT_TRUE(p.grad().defined()) << name;
    ++checked;
    if (want->abs().max().item<double>() < 1e-6 * largest) {
      EXPECT_LT(p.grad().abs().max().item<double>(), 1e-6 * largest) << "grad of " << name;
      continue;
    }
    EXPECT_TRUE(testing::within_scaled_bound(p.grad(), *want)) << "grad of " << name;
  }
  EXPECT_EQ(checked, grads.size()) << "parameters kiln's model lacks";
}

// --- ResNet --------------------------------------------------------------------

// Eval outputs; then one training-mode forward (batch statistics, running
// statistics updated), its outputs, buffers and, where given, gradients.
void check_resnet(ResNet& model, const Target& t, const std::string& name) {
  NoTf32 exact;
  model.load_state_dict(load_safetensors(t.weights + "/" + name + ".safetensors"));
  model.to(t.device);
  const StateDict io = load_io(t, name);
  const Tensor images = io.at("input.images");
  model.eval();
  {
    NoGradGuard no_grad;
    expect_outputs(io, "eval", {{"logits", model(images)}});
  }
  model.train();
  const bool grads = io.contains("loss.weight.logits");
  std::optional<NoGradGuard> no_grad;
  if (!grads) no_grad.emplace();
  const Tensor logits = model(images);
  expect_outputs(io, "train", {{"logits", logits}});
  const StateDict buffers = with_prefix(io, "train.buffer.");
  ASSERT_EQ(buffers.size(), model.named_buffers().size());
  for (const auto& [bname, b] : model.named_buffers()) {
    EXPECT_TRUE(testing::within_scaled_bound(b, buffers.at(bname))) << bname;
  }
  if (grads) {
    projected_loss(io, {{"logits", logits}}).backward();
    expect_gradients(io, model);
  }
}

const ResNetOptions kNarrow{.num_classes = 10, .widths = {8, 16, 32, 64}};

TEST(Parity, NarrowResNet50LayoutMatchesPyTorchInEvalAndTrainingWithGradients) {
  ResNet model(ResNetBlock::kBottleneck, {2, 1, 1, 1}, kNarrow);
  check_resnet(model, on_cpu(small_dir()), "resnet_small");
}

TEST(Parity, NarrowResNet18LayoutMatchesPyTorchInEvalAndTrainingWithGradients) {
  ResNet model(ResNetBlock::kBasic, {1, 1, 1, 1}, kNarrow);
  check_resnet(model, on_cpu(small_dir()), "resnet_basic_small");
}

TEST(ParityFull, ResNet50MatchesTorchvisionInEvalAndTraining) {
  KILN_SKIP_WITHOUT_FULL_REFERENCES();
  check_resnet(*resnet50(), on_cpu(full_dir()), "resnet50");
}

// --- BERT ----------------------------------------------------------------------

void check_bert(const Target& t, const std::string& name, size_t heads_ignored) {
  NoTf32 exact;
  const std::string checkpoint = t.weights + "/" + name;
  BertModel model(BertConfig::from_json_file(checkpoint + "/config.json"));
  const nn::LoadResult loaded = model.load_hf_state_dict(load_safetensors(checkpoint + "/model.safetensors"));
  EXPECT_TRUE(loaded.missing_keys.empty());
  EXPECT_EQ(loaded.unexpected_keys.size(), heads_ignored);  // a classifier's head
  model.eval();
  model.to(t.device);
  const StateDict io = load_io(t, name);
  const bool grads = io.contains("loss.weight.last_hidden_state");
  std::optional<NoGradGuard> no_grad;
  if (!grads) no_grad.emplace();
  const BertOutput out = model(io.at("input.input_ids"), io.at("input.attention_mask"),
                               io.at("input.token_type_ids"));
  const std::vector<std::pair<std::string, Tensor>> outs = {
      {"last_hidden_state", out.last_hidden_state}, {"pooler_output", out.pooler_output}};
  expect_outputs(io, "eval", outs);
  if (grads) {
    projected_loss(io, outs).backward();
    expect_gradients(io, model);
  }
}

TEST(Parity, SmallBertClassifierCheckpointMatchesHuggingFaceWithGradients) {
  check_bert(on_cpu(small_dir()), "bert_small", 2);
}

TEST(ParityFull, BertBaseMatchesHuggingFace) {
  KILN_SKIP_WITHOUT_FULL_REFERENCES();
  check_bert(on_cpu(full_dir()), "bert_base", 0);
}

// --- LSTM ----------------------------------------------------------------------

template <typename Model>
void check_lstm(Model& model, const Target& t, const std::string& name, bool with_grads = true) {
  NoTf32 exact;
  model.load_state_dict(load_safetensors(t.weights + "/" + name + ".safetensors"));
  model.to(t.device);
  const StateDict io = load_io(t, name);
  const bool grads = with_grads && io.contains("loss.weight.logits");
  std::optional<NoGradGuard> no_grad;
  if (!grads) no_grad.emplace();
  const Tensor logits = model(io.at("input.x"));
  expect_outputs(io, "eval", {{"logits", logits}});
  if (grads) {
    projected_loss(io, {{"logits", logits}}).backward();
    expect_gradients(io, model);
  }
}

const LSTMNetOptions kSmallLSTM{.input_size = 16, .hidden_size = 32, .num_layers = 2, .num_classes = 10};

TEST(Parity, SmallLSTMNetMatchesPyTorchWithGradients) {
  LSTMNet model(kSmallLSTM);
  check_lstm(model, on_cpu(small_dir()), "lstm_small");
}

TEST(Parity, SmallLSTMCellLoopMatchesPyTorchsLSTMWithGradients) {
  LSTMCellLoop model(kSmallLSTM);
  check_lstm(model, on_cpu(small_dir()), "lstm_small");
}

TEST(ParityFull, LSTMNetMatchesPyTorch) {
  KILN_SKIP_WITHOUT_FULL_REFERENCES();
  LSTMNet model;
  check_lstm(model, on_cpu(full_dir()), "lstm");
}

TEST(ParityFull, LSTMCellLoopMatchesPyTorch) {
  KILN_SKIP_WITHOUT_FULL_REFERENCES();
  LSTMCellLoop model;
  check_lstm(model, on_cpu(full_dir()), "lstm");
}

// --- on a CUDA device, against PyTorch's GPU outputs ----------------------------

TEST(ParityCuda, NarrowResNet50LayoutMatchesPyTorchInEvalAndTrainingWithGradients) {
  KILN_SKIP_WITHOUT_CUDA();
  ResNet model(ResNetBlock::kBottleneck, {2, 1, 1, 1}, kNarrow);
  check_resnet(model, on_cuda(small_dir()), "resnet_small");
}

TEST(ParityCuda, NarrowResNet18LayoutMatchesPyTorchInEvalAndTrainingWithGradients) {
  KILN_SKIP_WITHOUT_CUDA();
  ResNet model(ResNetBlock::kBasic, {1, 1, 1, 1}, kNarrow);
  check_resnet(model, on_cuda(small_dir()), "resnet_basic_small");
}

TEST(ParityCuda, SmallBertClassifierCheckpointMatchesHuggingFaceWithGradients) {
  KILN_SKIP_WITHOUT_CUDA();
  check_bert(on_cuda(small_dir()), "bert_small", 2);
}

TEST(ParityCuda, SmallLSTMNetMatchesPyTorchWithGradients) {
  KILN_SKIP_WITHOUT_CUDA();
  LSTMNet model(kSmallLSTM);
  check_lstm(model, on_cuda(small_dir()), "lstm_small");
}

TEST(ParityCuda, SmallLSTMCellLoopMatchesPyTorchsLSTMWithGradients) {
  KILN_SKIP_WITHOUT_CUDA();
  LSTMCellLoop model(kSmallLSTM);
  check_lstm(model, on_cuda(small_dir()), "lstm_small");
}

// Inference only (no gradients), so that the LSTM runs cuDNN's kernel.
TEST(ParityCuda, SmallLSTMNetInferenceMatchesPyTorch) {
  KILN_SKIP_WITHOUT_CUDA();
  LSTMNet model(kSmallLSTM);
  check_lstm(model, on_cuda(small_dir()), "lstm_small", false);
}

#define KILN_SKIP_WITHOUT_FULL_CUDA_REFERENCES() \
  KILN_SKIP_WITHOUT_CUDA();                      \
  KILN_SKIP_WITHOUT_FULL_REFERENCES()

TEST(ParityFullCuda, ResNet50MatchesTorchvisionInEvalAndTraining) {
  KILN_SKIP_WITHOUT_FULL_CUDA_REFERENCES();
  check_resnet(*resnet50(), on_cuda(full_dir()), "resnet50");
}

TEST(ParityFullCuda, BertBaseMatchesHuggingFace) {
  KILN_SKIP_WITHOUT_FULL_CUDA_REFERENCES();
  check_bert(on_cuda(full_dir()), "bert_base", 0);
}

TEST(ParityFullCuda, LSTMNetMatchesPyTorch) {
  KILN_SKIP_WITHOUT_FULL_CUDA_REFERENCES();
  LSTMNet model;
  check_lstm(model, on_cuda(full_dir()), "lstm");
}

TEST(ParityFullCuda, LSTMCellLoopMatchesPyTorch) {
  KILN_SKIP_WITHOUT_FULL_CUDA_REFERENCES();
  LSTMCellLoop model;
  check_lstm(model, on_cuda(full_dir()), "lstm");
}

}  // namespace
}  // namespace kiln::models
