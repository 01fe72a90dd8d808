// kiln writes files PyTorch loads: each small reference model is loaded into
// kiln, its weights changed, saved with save_safetensors(model.state_dict());
// tests/parity/check_kiln_files.py loads them into the PyTorch models (strict)
// and checks PyTorch computes kiln's outputs. Needs Python with PyTorch
// (KILN_PYTHON, default python3); skips, saying so, where it is missing.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <unistd.h>

#include "kiln/autograd.h"
#include "kiln/models/bert.h"
#include "kiln/models/lstm.h"
#include "kiln/models/resnet.h"
#include "kiln/safetensors.h"
#include "models/model_testing.h"

namespace kiln::models {
namespace {

namespace fs = std::filesystem;


// Every floating parameter and buffer scaled, so the file holds weights only
// kiln produced.
void perturb(nn::Module& model) {
  NoGradGuard no_grad;
  for (Tensor& p : model.parameters()) p.mul_(1.05);
}

// Saves the model's state dict and the inputs with kiln's eval outputs.
void save_case(const fs::path& dir, const std::string& name, nn::Module& model, const StateDict& io,
               const std::vector<std::pair<std::string, Tensor>>& outs) {
  save_safetensors((dir / (name + ".safetensors")).string(), model.state_dict());
  StateDict out;
  for (const auto& [key, t] : io) {
    if (key.starts_with("input.")) out.set(key, t);
  }
  for (const auto& [key, t] : outs) out.set("kiln." + key, t);
  save_safetensors((dir / (name + ".io.safetensors")).string(), out);
}

std::string parity_dir() { return testing::test_data_dir() + "/parity"; }

StateDict reference_io(const std::string& name) {
  return load_safetensors(parity_dir() + "/" + name + ".io.safetensors");
}

TEST(Parity, PyTorchLoadsTheFilesKilnWrites) {
  const fs::path dir = fs::temp_directory_path() / ("kiln_parity_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  NoGradGuard no_grad;
  {
    ResNet resnet(ResNetBlock::kBottleneck, {2, 1, 1, 1}, {.num_classes = 10, .widths = {8, 16, 32, 64}});
    resnet.load_state_dict(load_safetensors(parity_dir() + "/resnet_small.safetensors"));
    perturb(resnet);
    resnet.eval();
    const StateDict io = reference_io("resnet_small");
    save_case(dir, "resnet_small", resnet, io, {{"logits", resnet(io.at("input.images"))}});
  }
  {
    BertModel bert(BertConfig::from_json_file(parity_dir() + "/bert_small/config.json"));
    bert.load_hf_state_dict(load_safetensors(parity_dir() + "/bert_small/model.safetensors"), false);
    perturb(bert);
    bert.eval();
    const StateDict io = reference_io("bert_small");
    const BertOutput out =
        bert(io.at("input.input_ids"), io.at("input.attention_mask"), io.at("input.token_type_ids"));
    save_case(dir, "bert_small", bert, io,
              {{"last_hidden_state", out.last_hidden_state}, {"pooler_output", out.pooler_output}});
  }
  {
    LSTMCellLoop lstm({.input_size = 16, .hidden_size = 32, .num_layers = 2, .num_classes = 10});
    lstm.load_state_dict(load_safetensors(parity_dir() + "/lstm_small.safetensors"));
    perturb(lstm);
    const StateDict io = reference_io("lstm_small");
    save_case(dir, "lstm_small", lstm, io, {{"logits", lstm(io.at("input.x"))}});
  }
  const char* python = std::getenv("KILN_PYTHON");
  const std::string command = std::string(python ? python : "python3") + " " + testing::test_data_dir() +
                              "/../parity/check_kiln_files.py " + dir.string();
  const int status = std::system(command.c_str());
  fs::remove_all(dir);
  ASSERT_TRUE(WIFEXITED(status)) << command;
  if (WEXITSTATUS(status) == 77) {
    GTEST_SKIP() << "Python with PyTorch is missing (set KILN_PYTHON to an interpreter that has "
                    "torch, torchvision and transformers)";
  }
  EXPECT_EQ(WEXITSTATUS(status), 0) << command;
}

}  // namespace
}  // namespace kiln::models
