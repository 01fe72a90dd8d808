#include "tools/kiln/torch_side.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "bench/torch_results.h"
#include "kiln/safetensors.h"

#ifndef KILN_TORCH_SCRIPT
#define KILN_TORCH_SCRIPT "bench/torch/bench_torch.py"
#endif

namespace fs = std::filesystem;
using kiln::Tensor;

namespace {

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs argv with stdout and stderr into log; returns the exit status (-1:
// could not run it).
int run_process(const std::vector<std::string>& argv, const fs::path& log) {
  const pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0) {
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
    }
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status)
                           : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

std::string tail(const std::string& text, size_t lines) {
  size_t pos = text.size();
  while (pos > 0 && (text[pos - 1] == '\n')) --pos;
  size_t n = 0;
  size_t start = pos;
  while (start > 0 && n < lines) {
    --start;
    if (text[start] == '\n') ++n;
  }
  return text.substr(start == 0 ? 0 : start + 1, pos - (start == 0 ? 0 : start + 1));
}

// A temporary directory, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "kiln-bench-XXXXXX").string();
    if (!mkdtemp(pattern.data()))
      throw kiln::IOError("kiln bench: cannot make a temporary directory");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

}  // namespace

TorchSide::TorchSide() {
  const char* python = std::getenv("KILN_PYTHON");
  python_ = python && *python ? python : "python3";
  const char* script = std::getenv("KILN_BENCH_TORCH_SCRIPT");
  script_ = script && *script ? script : KILN_TORCH_SCRIPT;
  if (!fs::is_regular_file(script_)) {
    why_not_ = "the PyTorch script '" + script_ + "' is not there (set KILN_BENCH_TORCH_SCRIPT)";
    return;
  }
  TempDir dir;
  const fs::path log = dir.path() / "version.txt";
  const int status = run_process(
      {python_, "-c",
       "import torch, torchvision, transformers, safetensors; print(torch.__version__)"},
      log);
  const std::string out = read_file(log);
  if (status != 0) {
    why_not_ = status == 127 || status < 0 ? "'" + python_ + "' was not found (set KILN_PYTHON)"
                                           : "'" + python_ +
                                                 "' cannot import torch, torchvision, transformers "
                                                 "and safetensors: " +
                                                 tail(out, 1);
    return;
  }
  version_ = tail(out, 1);
}

TorchSide::Run TorchSide::run(const std::string& model, const nlohmann::json& model_options,
                              const kiln::nn::Module& module, const Tensor& input, int64_t batch,
                              int64_t seq_len, const std::string& dtype, kiln::Device device,
                              const std::vector<std::string>& modes, int iters, int warmup,
                              int threads, bool freeze, double first_call_timeout_s) const {
  TempDir dir;
  const fs::path weights = dir.path() / "weights.safetensors";
  const fs::path inputs = dir.path() / "inputs.safetensors";
  const fs::path outputs = dir.path() / "outputs";
  kiln::save_safetensors(weights.string(), module.state_dict());
  kiln::StateDict in;
  in.set("input0", input);
  kiln::save_safetensors(inputs.string(), in);
  const std::vector<std::string> job_modes =
      modes.empty() ? kiln::bench::default_modes(device) : modes;
  const nlohmann::json job{{"model", model},
                           {"model_options", model_options},
                           {"batch", batch},
                           {"seq_len", seq_len},
                           {"dtype", dtype},
                           {"device", device.is_cuda() ? "cuda" : "cpu"},
                           {"modes", job_modes},
                           {"iters", iters},
                           {"warmup", warmup},
                           {"threads", threads},
                           {"freeze", freeze},
                           {"weights", weights.string()},
                           {"inputs", inputs.string()},
                           {"outputs_dir", outputs.string()},
                           {"first_call_timeout_s", first_call_timeout_s}};
  const fs::path job_file = dir.path() / "job.json";
  const fs::path out_file = dir.path() / "out.json";
  std::ofstream(job_file) << job.dump(1);
  const fs::path log = dir.path() / "log.txt";
  const int status = run_process({python_, script_, job_file.string(), out_file.string()}, log);
  if (status != 0) {
    throw kiln::Error(kiln::detail::str_cat("--vs-torch: '", script_, "' failed (exit status ",
                                            status, "): ", tail(read_file(log), 5)));
  }
  const auto results =
      kiln::bench::detail::torch_results_from_json(read_file(out_file), out_file.string());
  Run r;
  r.results_ = results.results;
  for (const auto& res : r.results_) {
    const fs::path file = outputs / (res.mode + ".safetensors");
    if (!fs::is_regular_file(file)) continue;  // the mode failed: its note says why
    const kiln::StateDict sd = kiln::load_safetensors(file.string());
    std::vector<Tensor> outs;
    for (size_t k = 0; const Tensor* t = sd.find("output" + std::to_string(k)); ++k)
      outs.push_back(t->clone());
    r.outputs_[res.mode] = std::move(outs);
  }
  return r;
}

void TorchSide::Run::compare(const std::string& mode, const std::vector<Tensor>& kiln_outputs) {
  if (mode == "eager") {
    for (auto& res : results_) {
      auto it = outputs_.find(res.mode);
      if (it == outputs_.end()) continue;
      const auto e = kiln::bench::detail::compare_outputs(it->second, kiln_outputs);
      res.max_abs_error = e.abs;
      res.max_rel_error = e.rel;
      if (!e.note.empty()) res.note += (res.note.empty() ? "" : "; ") + e.note;
    }
  }
  auto eager = outputs_.find("eager");
  if (eager != outputs_.end())
    kiln_vs_torch_[mode] = kiln::bench::detail::compare_outputs(kiln_outputs, eager->second);
}

void TorchSide::Run::merge_into(kiln::bench::Case& c) const {
  for (auto& r : c.results) {
    auto it = kiln_vs_torch_.find(r.mode);
    if (r.framework != "kiln" || it == kiln_vs_torch_.end()) continue;
    r.max_abs_error_vs_torch = it->second.abs;
    r.max_rel_error_vs_torch = it->second.rel;
  }
  for (const auto& res : results_) c.results.push_back(res);
}
