// kiln: the command line. `kiln bench` measures the reference models eagerly
// and through kiln::compile in each mode, optionally beside PyTorch eager and
// torch.compile, and writes a table, JSON, CSV and an HTML report
// (docs/bench.md). `kiln report` merges saved JSON reports and writes them
// again in any format.
//
//   kiln bench                        # resnet50, batch 1, fp32, every mode of the device
//   kiln bench --model all --batch 1,8 --html report.html
//   kiln bench --model bert --weights all-MiniLM-L6-v2/model.safetensors --seq-len 16
//   kiln bench --model bert --device cuda --mode eager,reduce-overhead --vs-torch
//   kiln report resnet.json bert.json --html both.html
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <new>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "core/state_dict_diff.h"
#include "kiln/bench.h"
#include "kiln/kiln.h"
#include "tools/kiln/progress.h"
#include "tools/kiln/torch_side.h"

namespace {

using namespace kiln;
using detail::str_cat;
namespace fs = std::filesystem;

const std::vector<std::string> kModels = {"resnet50", "resnet18", "bert", "lstm", "lstm_loop"};

struct Args {
  std::vector<std::string> models = {"resnet50"};
  std::vector<int64_t> batches = {1};
  int64_t seq_len = 0;  // 0: the model's default
  std::vector<std::string> dtypes = {"fp32"};
  std::string device = "auto";
  std::vector<std::string> modes;  // empty: every mode of the device
  int iters = 50;
  int warmup = 5;
  int threads = 0;
  std::string weights;
  std::string json, csv, html;
  bool vs_torch = false;
  double torch_timeout = 300;
  bool quiet = false;
  std::string freeze = "on";
};

// A usage error: one line on stderr, exit status 2.
struct UsageError {
  std::string message;
};

DType dtype_of(const std::string& name) {
  if (name == "bf16") return kBFloat16;
  if (name == "fp16") return kFloat16;
  return kFloat32;
}

int64_t default_seq(const std::string& model) {
  if (model == "bert" || model == "lstm") return 128;
  if (model == "lstm_loop") return 32;
  return 0;
}

// The --weights file, read once: its tensors and, for BERT, the model they
// are of.
struct Weights {
  std::string path;
  StateDict tensors;
  models::BertConfig bert_config;  // bert: its config.json's, or the sizes its tensors fix
  bool bert_pooler = true;         // bert: whether it holds the pooling layer
  bool noted_skipped = false;      // the note on keys BertModel skips is printed once
};

// A Hugging Face BERT checkpoint's config: its config.json when one lies
// beside it, else the sizes its tensors fix and transformers' defaults for
// what they cannot say (a note on stderr tells which).
models::BertConfig bert_config_of(const Weights& w) {
  const fs::path config_file = fs::path(w.path).parent_path() / "config.json";
  if (fs::is_regular_file(config_file))
    return models::BertConfig::from_json_file(config_file.string());
  const models::BertConfig defaults;
  models::BertConfig c;
  try {
    c = models::BertConfig::from_state_dict(w.tensors, defaults);
  } catch (const ValueError& e) {
    throw ValueError(
        str_cat("--weights '", w.path, "': ", e.what(), " (no config.json beside it)"));
  }
  std::fprintf(stderr,
               "kiln bench: --weights '%s': no config.json beside it: its tensors give %s; the "
               "number of attention heads (%lld), hidden_act (%s) and layer_norm_eps (%g), which "
               "tensors cannot say, are transformers' defaults\n",
               w.path.c_str(), models::describe_checkpoint(w.tensors).c_str(),
               static_cast<long long>(c.num_attention_heads), c.hidden_act.c_str(),
               c.layer_norm_eps);
  return c;
}

Weights read_weights(const std::string& path, const std::string& model) {
  Weights w;
  w.path = path;
  w.tensors = load_safetensors(path);
  if (model == "bert") {
    w.bert_config = bert_config_of(w);
    w.bert_pooler =
        w.tensors.contains("pooler.dense.weight") || w.tensors.contains("bert.pooler.dense.weight");
  }
  return w;
}

// Copies the file's tensors into module, or throws a ValueError saying what
// the file holds and what the model is (and, when they read alike, which
// keys or shapes differ), in one short line.
void load_weights(nn::Module& module, const Weights& w, const std::string& model) {
  const StateDict own = module.state_dict();
  const StateDictDiff diff = diff_state_dicts(w.tensors, own);
  if (!diff.empty()) {
    const std::string holds = models::describe_checkpoint(w.tensors);
    const std::string is = models::describe_checkpoint(own);
    throw ValueError(str_cat("--weights '", w.path, "' holds ", holds, "; --model ", model, " is ",
                             is, holds == is ? ": " + diff.summary("the file") : ""));
  }
  module.load_state_dict(w.tensors);
}

void load_bert_weights(models::BertModel& bert, Weights& w) {
  nn::LoadResult result;
  try {
    result = bert.load_hf_state_dict(w.tensors);
  } catch (const ValueError& e) {
    const bool with_config = fs::is_regular_file(fs::path(w.path).parent_path() / "config.json");
    throw ValueError(str_cat("--weights '", w.path, "'", with_config ? " and its config.json" : "",
                             ": ", e.what()));
  }
  if (!result.unexpected_keys.empty() && !w.noted_skipped) {
    w.noted_skipped = true;
    const size_t n = result.unexpected_keys.size();
    std::fprintf(stderr, "kiln bench: --weights '%s': skipped %zu %s BertModel does not have: %s\n",
                 w.path.c_str(), n, n == 1 ? "key" : "keys",
                 summarize_keys(result.unexpected_keys).c_str());
  }
}

// A reference model with random weights (seed 0) or the weights file, on the
// device in the dtype, its input, and how to measure its forward on it.
struct Subject {
  std::shared_ptr<nn::Module> module;
  Tensor input;
  int64_t seq_len = 0;
  // What PyTorch's side builds beyond the model's name (bench/torch/bench_torch.py).
  nlohmann::json torch_options = nlohmann::json::object();
  std::function<bench::Case(const Tensor& input, const bench::Options&)> measure;
};

// Holds net in s; forward(net, input) is what is measured.
template <typename M, typename Forward>
void hold(Subject& s, std::shared_ptr<M> net, Forward forward) {
  s.module = net;
  s.measure = [net, forward](const Tensor& input, const bench::Options& options) {
    return bench::evaluate([net, forward](const Tensor& x) { return forward(*net, x); },
                           std::tuple{input}, options);
  };
}

constexpr auto kForward = [](auto& net, const Tensor& x) { return net.forward(x); };

// BERT of the weights' config (BERT-base without weights); its forward gives
// the last hidden state and, with the pooling layer, the pooled output.
void make_bert(Subject& s, int64_t batch, Weights* weights) {
  const models::BertConfig config = weights ? weights->bert_config : models::BertConfig{};
  const bool pooler = weights ? weights->bert_pooler : true;
  if (s.seq_len > config.max_position_embeddings) {
    throw UsageError{str_cat("--seq-len ", s.seq_len, " is longer than the ",
                             config.max_position_embeddings, " positions of ",
                             weights ? "the weights' BERT" : "BERT-base")};
  }
  auto bert = std::make_shared<models::BertModel>(config, pooler);
  if (weights) load_bert_weights(*bert, *weights);
  if (pooler) {
    hold(s, bert, [](models::BertModel& net, const Tensor& ids) {
      models::BertOutput out = net.forward(ids);
      return std::make_tuple(out.last_hidden_state, out.pooler_output);
    });
  } else {
    hold(s, bert, [](models::BertModel& net, const Tensor& ids) {
      return net.forward(ids).last_hidden_state;
    });
  }
  s.input = randint(0, config.vocab_size, {batch, s.seq_len});
  s.torch_options = {
      {"add_pooling_layer", pooler},
      {"config",
       {{"vocab_size", config.vocab_size},
        {"hidden_size", config.hidden_size},
        {"num_hidden_layers", config.num_hidden_layers},
        {"num_attention_heads", config.num_attention_heads},
        {"intermediate_size", config.intermediate_size},
        {"max_position_embeddings", config.max_position_embeddings},
        {"type_vocab_size", config.type_vocab_size},
        {"pad_token_id",
         config.pad_token_id >= 0 ? nlohmann::json(config.pad_token_id) : nlohmann::json(nullptr)},
        {"hidden_act", config.hidden_act},
        {"layer_norm_eps", config.layer_norm_eps}}}};
}

Subject make_subject(const std::string& model, int64_t batch, int64_t seq, DType dtype,
                     Device device, Weights* weights) {
  manual_seed(0);
  Subject s;
  s.seq_len = default_seq(model) == 0 ? 0 : (seq > 0 ? seq : default_seq(model));
  if (model == "resnet50" || model == "resnet18") {
    hold(s, model == "resnet50" ? models::resnet50() : models::resnet18(), kForward);
    s.input = randn({batch, 3, 224, 224});
  } else if (model == "bert") {
    make_bert(s, batch, weights);
  } else if (model == "lstm") {
    hold(s, std::make_shared<models::LSTMNet>(), kForward);
    s.input = randn({batch, s.seq_len, 256});
  } else {
    hold(s, std::make_shared<models::LSTMCellLoop>(), kForward);
    s.input = randn({batch, s.seq_len, 256});
  }
  if (weights && model != "bert") load_weights(*s.module, *weights, model);
  s.module->eval();
  s.module->to(device, dtype);
  s.input = s.input.to(device);
  if (is_floating(s.input.dtype())) s.input = s.input.to(dtype);
  return s;
}

Device resolve_device(const std::string& name) {
  if (name == "cpu") return Device::cpu();
  if (name == "cuda" && !cuda::is_available()) {
    throw UsageError{"--device cuda: no CUDA device: " + cuda::unavailable_reason()};
  }
  if (name == "cuda" || cuda::is_available()) return Device::cuda();
  return Device::cpu();
}

void check_args(Args& a, Device device) {
  for (const std::string& m : a.models) {
    if (m == "all") {
      a.models = kModels;
      break;
    }
  }
  if (!a.weights.empty() && a.models.size() != 1) {
    throw UsageError{"--weights needs exactly one --model, got " + std::to_string(a.models.size())};
  }
  if (!a.weights.empty() && !fs::is_regular_file(a.weights)) {
    throw UsageError{"--weights '" + a.weights +
                     "': " + (fs::exists(a.weights) ? "not a regular file" : "no such file")};
  }
  for (const std::string& m : a.modes) {
    if (bench::needs_cuda(m) && !device.is_cuda()) {
      throw UsageError{"--mode " + m +
                       " needs a CUDA device (it records CUDA graphs); the device is " +
                       device.str()};
    }
  }
  if (a.seq_len > 0) {
    bool any = false;
    for (const std::string& m : a.models) any = any || default_seq(m) > 0;
    if (!any) throw UsageError{"--seq-len applies to bert, lstm and lstm_loop only"};
  }
}

// The table, then each file asked for. An output named '-' goes to standard
// output alone: the table and the "wrote" lines then go to standard error.
void write_outputs(const bench::Report& report, const Args& a) {
  const bool piped = a.json == "-" || a.csv == "-" || a.html == "-";
  std::ostream& info = piped ? std::cerr : std::cout;
  info << report.to_table(isatty(piped ? STDERR_FILENO : STDOUT_FILENO) != 0);
  std::vector<std::string> wrote;
  const auto emit = [&](const std::string& path, const std::string& text) {
    if (path.empty()) return;
    if (path == "-") {
      std::cout << text << std::flush;
      if (!std::cout) throw IOError("kiln: cannot write to standard output");
      return;
    }
    bench::write_file(path, text);
    wrote.push_back(fs::absolute(path).string());
  };
  emit(a.json, report.to_json());
  emit(a.csv, report.to_csv());
  emit(a.html, report.to_html());
  for (const std::string& path : wrote) info << "wrote " << path << "\n";
}

int run(Args a) {
  const Device device = resolve_device(a.device);
  check_args(a, device);
  if (a.threads > 0) set_num_threads(a.threads);
  InferenceModeGuard inference;

  bench::Report report;
  report.environment = bench::Environment::current();
  report.environment.iters = a.iters;
  report.environment.warmup = a.warmup;
  if (a.freeze == "on")
    report.environment.precision += "; compiled modes frozen (CompileOptions::freeze)";

  std::optional<TorchSide> torch;
  if (a.vs_torch) {
    torch.emplace();
    if (!torch->available()) {
      std::fprintf(stderr, "kiln bench: --vs-torch: %s; continuing with kiln alone\n",
                   torch->why_not().c_str());
      torch.reset();
    } else {
      report.environment.torch = torch->version();
    }
  }

  std::optional<Weights> weights;
  if (!a.weights.empty()) weights = read_weights(a.weights, a.models.front());

  const size_t n_cases = a.models.size() * a.batches.size() * a.dtypes.size();
  ProgressBar bar(!a.quiet);
  size_t index = 0;
  for (const std::string& model : a.models) {
    for (int64_t batch : a.batches) {
      for (const std::string& dtype_name : a.dtypes) {
        const DType dtype = dtype_of(dtype_name);
        const Subject s =
            make_subject(model, batch, a.seq_len, dtype, device, weights ? &*weights : nullptr);
        const std::string label = str_cat(model, " b", batch, " ", dtype_name);
        bench::Options options;
        options.name = model;
        options.modes = a.modes;
        options.iters = a.iters;
        options.warmup = a.warmup;
        options.freeze = a.freeze == "on";
        options.weights_bytes = bench::detail::weights_bytes_of(*s.module);
        const double share = 1.0 / static_cast<double>(n_cases);
        const double base = static_cast<double>(index) * share;
        std::optional<TorchSide::Run> torch_run;
        if (torch) {
          bar.update(label + ": PyTorch (eager and torch.compile)", base);
          torch_run = torch->run(model, s.torch_options, *s.module, s.input, batch, s.seq_len,
                                 dtype_name, device, options.modes, a.iters, a.warmup,
                                 get_num_threads(), options.freeze, a.torch_timeout);
        }
        options.on_progress = [&](const bench::Progress& p) {
          bar.update(label + ": " + p.stage,
                     base + share * (torch ? 0.5 + 0.5 * p.fraction : p.fraction));
        };
        options.on_outputs = [&](const std::string& mode, const std::vector<Tensor>& outputs) {
          if (torch_run) torch_run->compare(mode, outputs);
        };
        bench::Case c = s.measure(s.input, options);
        c.seq_len = s.seq_len;
        c.dtype = dtype_name;
        if (torch_run) torch_run->merge_into(c);
        c.compute_speedups();
        report.cases.push_back(std::move(c));
        ++index;
      }
    }
  }
  bar.finish();

  write_outputs(report, a);
  return 0;
}

// kiln report: the cases of saved JSON reports, in order, with the first
// report's environment (the others' are checked to match where it matters).
int run_report(const std::vector<std::string>& inputs, const Args& a) {
  bench::Report merged;
  for (size_t i = 0; i < inputs.size(); ++i) {
    // A FIFO or a device would block or never end: only regular files, and
    // none larger than a report can be.
    constexpr std::uintmax_t kMaxReportBytes = std::uintmax_t{256} << 20;
    std::error_code ec;
    if (const fs::file_status status = fs::status(inputs[i], ec); fs::exists(status)) {
      if (!fs::is_regular_file(status)) throw UsageError{"'" + inputs[i] + "': not a regular file"};
      if (const std::uintmax_t bytes = fs::file_size(inputs[i], ec); bytes > kMaxReportBytes) {
        throw UsageError{str_cat("'", inputs[i], "': ", bytes,
                                 " bytes, more than a report can be (", kMaxReportBytes, ")")};
      }
    }
    std::ifstream in(inputs[i], std::ios::binary);
    if (!in) throw UsageError{"'" + inputs[i] + "': cannot open it"};
    std::ostringstream text;
    text << in.rdbuf();
    bench::Report r;
    try {
      r = bench::Report::from_json(text.str());
    } catch (const ValueError& e) {
      throw ValueError("'" + inputs[i] + "': " + e.what());
    }
    if (i == 0) {
      merged.environment = r.environment;
    } else if (r.environment.gpu != merged.environment.gpu ||
               r.environment.cpu != merged.environment.cpu) {
      throw UsageError{"'" + inputs[i] + "' was measured on another machine (" + r.environment.cpu +
                       ", " + (r.environment.gpu.empty() ? "no GPU" : r.environment.gpu) +
                       ") than '" + inputs[0] + "'"};
    }
    if (merged.environment.torch.empty()) merged.environment.torch = r.environment.torch;
    for (auto& c : r.cases) merged.cases.push_back(std::move(c));
  }
  write_outputs(merged, a);
  return 0;
}

// A comma-separated list with an empty element ("1,,2", "fp32,"): CLI11 drops
// the empty element, so the mistake is found here, in the arguments as
// written. Returns the message, or "" when every list is whole.
std::string empty_list_element(int argc, char** argv) {
  const std::vector<std::string> lists = {"--model", "--batch", "--dtype", "--mode"};
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    for (const std::string& name : lists) {
      std::string value;
      if (arg == name && i + 1 < argc) {
        value = argv[i + 1];
      } else if (arg.starts_with(name + "=")) {
        value = arg.substr(name.size() + 1);
      } else {
        continue;
      }
      if (value.empty() || value.front() == ',' || value.back() == ',' ||
          value.find(",,") != std::string::npos) {
        return name + " '" + value + "': an empty element in the comma-separated list";
      }
    }
  }
  return "";
}

// Counts written in decimal only: CLI11 would read 0x10 as 16 and 010 as 8.
const CLI::Validator kDecimal(
    [](std::string& s) {
      const bool digits = !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
      return digits && (s.size() == 1 || s.front() != '0') ? std::string()
                                                           : "'" + s + "' is not a decimal count";
    },
    "DECIMAL");

// An output or input path given as "": refused rather than ignored.
void check_paths_given(CLI::App& sub, const Args& a) {
  const std::pair<const char*, const std::string*> paths[] = {
      {"--json", &a.json}, {"--csv", &a.csv}, {"--html", &a.html}, {"--weights", &a.weights}};
  const char* to_stdout = nullptr;
  for (const auto& [name, value] : paths) {
    const CLI::Option* o = sub.get_option_no_throw(name);
    if (o && o->count() > 0 && value->empty())
      throw UsageError{std::string(name) + " needs a file name, got ''"};
    if (*value != "-") continue;
    if (value == &a.weights) throw UsageError{"--weights needs a file name, got '-'"};
    if (to_stdout) {
      throw UsageError{std::string(to_stdout) + " and " + name +
                       " both write to standard output ('-'); give one of them a file name"};
    }
    to_stdout = name;
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kiln: eager C++ tensors, compiled when you ask"};
  app.require_subcommand(1);
  Args a;
  CLI::App* bench =
      app.add_subcommand("bench", "measure eager against compiled, and kiln against PyTorch");
  bench
      ->add_option("--model", a.models,
                   "resnet50, resnet18, bert, lstm, lstm_loop or all (comma-separated)")
      ->delimiter(',')
      ->check(CLI::IsMember({"resnet50", "resnet18", "bert", "lstm", "lstm_loop", "all"}));
  bench->add_option("--batch", a.batches, "batch sizes (comma-separated)")
      ->delimiter(',')
      ->check(kDecimal & CLI::Range(int64_t{1}, int64_t{4096}));
  bench
      ->add_option("--seq-len", a.seq_len,
                   "sequence length of bert, lstm, lstm_loop (default 128, 128, 32)")
      ->check(kDecimal & CLI::Range(int64_t{1}, int64_t{4096}));
  bench->add_option("--dtype", a.dtypes, "fp32, bf16 or fp16 (comma-separated)")
      ->delimiter(',')
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  bench->add_option("--device", a.device, "auto (CUDA when present), cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  bench
      ->add_option(
          "--mode", a.modes,
          "eager, default, reduce-overhead, max-autotune (comma-separated; default: every mode the "
          "device runs)")
      ->delimiter(',')
      ->check(CLI::IsMember({"eager", "default", "reduce-overhead", "max-autotune"}));
  bench->add_option("--iters", a.iters, "timed calls per mode")
      ->check(kDecimal & CLI::Range(1, 1000000));
  bench->add_option("--warmup", a.warmup, "untimed calls per mode after the first")
      ->check(kDecimal & CLI::Range(0, 1000000));
  bench->add_option("--threads", a.threads, "CPU threads (default: kiln's)")
      ->check(kDecimal & CLI::Range(1, 4096));
  bench->add_option("--weights", a.weights,
                    "a safetensors file of the model's weights (default: random, seed 0)");
  bench->add_option("--json", a.json, "write the report as JSON (docs/bench.md)");
  bench->add_option("--csv", a.csv, "write the report as CSV");
  bench->add_option("--html", a.html, "write the report as one self-contained HTML page");
  bench->add_flag("--vs-torch", a.vs_torch,
                  "also measure PyTorch eager and torch.compile (bench/torch/bench_torch.py)");
  bench
      ->add_option("--torch-timeout", a.torch_timeout,
                   "with --vs-torch: seconds PyTorch's first call of a mode may take "
                   "(torch.compile's compiling; "
                   "0: no limit)")
      ->check(CLI::Range(0.0, 1e6));
  bench->add_flag("--quiet", a.quiet, "no progress");
  bench
      ->add_option("--freeze", a.freeze,
                   "on or off: the compiled modes freeze the weights (CompileOptions::freeze: "
                   "constants, batch norms folded into convolutions, activations channels last "
                   "between them on the CPU; and torch.compile's freezing with --vs-torch; "
                   "default on)")
      ->check(CLI::IsMember({"on", "off"}));
  std::vector<std::string> report_inputs;
  CLI::App* report = app.add_subcommand(
      "report", "merge saved JSON reports and write them as a table, JSON, CSV or HTML");
  report->add_option("reports", report_inputs, "JSON reports of kiln bench (--json)")->required();
  report->add_option("--json", a.json, "write the merged report as JSON");
  report->add_option("--csv", a.csv, "write it as CSV");
  report->add_option("--html", a.html, "write it as one self-contained HTML page");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    const char* who = bench->parsed() ? "kiln bench" : report->parsed() ? "kiln report" : "kiln";
    std::fprintf(stderr, "%s: %s (see --help)\n", who, e.what());
    return 2;
  }
  const char* who = bench->parsed() ? "kiln bench" : "kiln report";
  try {
    if (const std::string bad = empty_list_element(argc, argv); !bad.empty()) throw UsageError{bad};
    check_paths_given(bench->parsed() ? *bench : *report, a);
    return bench->parsed() ? run(a) : run_report(report_inputs, a);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "%s: %s\n", who, e.message.c_str());
    return 2;
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "%s: %s\n", who, e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "%s: out of memory\n", who);
    return 1;
  } catch (const std::exception& e) {  // any other failure: one line and a status, never an abort
    std::fprintf(stderr, "%s: %s\n", who, e.what());
    return 1;
  }
}
