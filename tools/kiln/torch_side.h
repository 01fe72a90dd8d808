// kiln bench --vs-torch: runs bench/torch/bench_torch.py on the same weights
// and inputs (exported as safetensors), reads PyTorch's figures and outputs
// back, and merges them into kiln's case.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kiln/bench.h"
#include "kiln/nn/module.h"

class TorchSide {
 public:
  // Finds Python ($KILN_PYTHON, else python3) with torch, torchvision,
  // transformers and safetensors, and the script ($KILN_BENCH_TORCH_SCRIPT,
  // else the one in kiln's source tree).
  TorchSide();
  bool available() const { return why_not_.empty(); }
  const std::string& why_not() const { return why_not_; }
  const std::string& version() const { return version_; }

  // PyTorch's results for one case, and its outputs per mode.
  class Run {
   public:
    // Compares kiln's outputs of a mode with PyTorch's: kiln's eager
    // outputs are the reference of PyTorch's rows, PyTorch's eager outputs
    // the reference of kiln's rows (the *_vs_torch errors).
    void compare(const std::string& mode, const std::vector<kiln::Tensor>& kiln_outputs);
    // Adds PyTorch's rows and the errors to c (then c.compute_speedups()).
    void merge_into(kiln::bench::Case& c) const;

   private:
    friend class TorchSide;
    std::vector<kiln::bench::Result> results_;
    std::map<std::string, std::vector<kiln::Tensor>> outputs_;          // PyTorch's, per mode
    std::map<std::string, kiln::bench::detail::Errors> kiln_vs_torch_;  // per kiln mode
  };

  // Runs the script: modes empty means every mode of the device;
  // model_options, what the script builds beyond the model's name (BERT: its
  // config and whether it has the pooling layer). kiln::Error naming the
  // script and its last lines of output when it fails.
  Run run(const std::string& model, const nlohmann::json& model_options,
          const kiln::nn::Module& module, const kiln::Tensor& input, int64_t batch, int64_t seq_len,
          const std::string& dtype, kiln::Device device, const std::vector<std::string>& modes,
          int iters, int warmup, int threads, bool freeze, double first_call_timeout_s) const;

 private:
  std::string python_;
  std::string script_;
  std::string version_;
  std::string why_not_;
};
