// The kiln command line (tools/kiln): bad arguments give one clear line and a
// non-zero status; a small run on the CPU writes a table, JSON, CSV and HTML.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "kiln/bench.h"
#include "kiln/kiln.h"

namespace {

namespace fs = std::filesystem;

struct Outcome {
  int status = -1;
  std::string out, err;
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

fs::path scratch(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("kiln_cli_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir / name;
}

// The kiln binary of this build: <build>/tools/kiln beside <build>/tests/
// (also where the build was copied elsewhere), else the path CMake gave.
std::string cli_path() {
  const fs::path beside =
      fs::read_symlink("/proc/self/exe").parent_path().parent_path() / "tools" / "kiln";
  return fs::is_regular_file(beside) ? beside.string() : std::string(KILN_CLI_PATH);
}

// Runs the kiln binary with args (shell words) and env assignments before it.
Outcome kiln_cli(const std::string& args, const std::string& env = "") {
  const fs::path out = scratch("stdout.txt"), err = scratch("stderr.txt");
  const std::string cmd =
      env + " " + cli_path() + " " + args + " >" + out.string() + " 2>" + err.string();
  const int raw = std::system(cmd.c_str());
  Outcome o;
  o.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  o.out = slurp(out);
  o.err = slurp(err);
  return o;
}

size_t lines(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

// A usage error: status 2 and one line on stderr that contains `says`.
void expect_usage_error(const std::string& args, const std::string& says, int status = 2) {
  const Outcome o = kiln_cli(args);
  EXPECT_EQ(o.status, status) << args << "\n" << o.err;
  EXPECT_EQ(lines(o.err), 1u) << args << "\n" << o.err;
  EXPECT_NE(o.err.find(says), std::string::npos) << args << "\n" << o.err;
  EXPECT_EQ(o.out, "") << args;
}

// kiln report reads regular files only: a FIFO would block it and /dev/zero
// never ends (it used to abort with an uncaught std::bad_alloc).
TEST(Cli, ReportRefusesWhatIsNotARegularFile) {
  const fs::path fifo = scratch("report.fifo");
  fs::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expect_usage_error("report " + fifo.string(), "not a regular file");
  expect_usage_error("report /dev/zero", "not a regular file");
  fs::remove(fifo);
}

TEST(Cli, BadArgumentsGiveOneLineAndAStatus) {
  expect_usage_error("", "A subcommand is required");
  expect_usage_error("bench --model resnet5", "resnet5");
  expect_usage_error("bench --dtype fp64", "fp64");
  expect_usage_error("bench --device tpu", "tpu");
  expect_usage_error("bench --mode fast", "fast");
  expect_usage_error("bench --iters 0", "--iters");
  expect_usage_error("bench --batch 0", "--batch");
  expect_usage_error("bench --frobnicate", "--frobnicate");
  // Lists with an empty element, counts not in decimal, empty paths.
  expect_usage_error("bench --batch 1,,2", "empty element");
  expect_usage_error("bench --dtype fp32,", "empty element");
  expect_usage_error("bench --model=,resnet18", "empty element");
  expect_usage_error("bench --batch 0x10", "not a decimal count");
  expect_usage_error("bench --iters 010", "not a decimal count");
  expect_usage_error("bench --json ''", "--json needs a file name");
  expect_usage_error("report x.json --html ''", "--html needs a file name");
  expect_usage_error("bench --weights /tmp", "not a regular file");
  const Outcome timeout = kiln_cli("bench --vs-torch --torch-timeout -1");
  EXPECT_EQ(timeout.status, 2);
  EXPECT_LT(timeout.err.size(), 200u) << timeout.err;
  expect_usage_error("bench --device cpu --mode reduce-overhead",
                     "--mode reduce-overhead needs a CUDA device");
  expect_usage_error("bench --model all --weights w.safetensors",
                     "--weights needs exactly one --model");
  expect_usage_error("bench --model lstm_loop --weights /nonexistent/w.safetensors",
                     "no such file");
  expect_usage_error("bench --model resnet18 --seq-len 8",
                     "--seq-len applies to bert, lstm and lstm_loop");
  if (!kiln::cuda::is_available())
    expect_usage_error("bench --device cuda", "--device cuda: no CUDA device");
}

TEST(Cli, MalformedWeightsNameTheFile) {
  const fs::path bad = scratch("bad.safetensors");
  std::ofstream(bad) << "this is not a safetensors file";
  expect_usage_error("bench --model lstm_loop --device cpu --weights " + bad.string(), bad.string(),
                     1);
  // Weights of another model: the file's model and --model's are named.
  const fs::path other = scratch("resnet.safetensors");
  kiln::manual_seed(0);
  kiln::save_safetensors(
      other.string(),
      kiln::models::resnet18({.num_classes = 10, .widths = {8, 8, 8, 8}})->state_dict());
  expect_usage_error("bench --model lstm_loop --device cpu --weights " + other.string(), "lstm", 1);
}

// A small BERT as Hugging Face saves a BertForPreTraining: "bert." before
// every name, the position_ids buffer and a head kiln's BertModel lacks;
// with its config.json beside it when asked.
kiln::models::BertConfig small_bert_config() {
  kiln::models::BertConfig c;
  c.vocab_size = 64;
  c.hidden_size = 24;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.intermediate_size = 48;
  c.max_position_embeddings = 32;
  return c;
}

fs::path write_hf_bert(const std::string& dir_name, bool with_config) {
  const fs::path dir = scratch(dir_name);
  fs::create_directories(dir);
  kiln::manual_seed(3);
  kiln::models::BertModel bert(small_bert_config());
  kiln::StateDict dict;
  for (const auto& [name, t] : bert.state_dict()) dict.set("bert." + name, t);
  dict.set("bert.embeddings.position_ids", kiln::arange(32, {.dtype = kiln::kInt64}).unsqueeze(0));
  dict.set("cls.predictions.bias", kiln::zeros({64}));
  const fs::path weights = dir / "model.safetensors";
  kiln::save_safetensors(weights.string(), dict);
  if (with_config) {
    std::ofstream(dir / "config.json")
        << R"({"architectures": ["BertForPreTraining"], "model_type": "bert", "vocab_size": 64,
              "hidden_size": 24, "num_hidden_layers": 2, "num_attention_heads": 4,
              "intermediate_size": 48, "max_position_embeddings": 32, "type_vocab_size": 2,
              "hidden_act": "gelu", "layer_norm_eps": 1e-12, "pad_token_id": 0})";
  }
  return weights;
}

int64_t bytes_of(const kiln::nn::Module& m) {
  int64_t bytes = 0;
  for (const auto& [name, t] : m.state_dict())
    bytes += static_cast<int64_t>(t.numel() * t.element_size());
  return bytes;
}

TEST(Cli, BenchBuildsBertFromAHuggingFaceCheckpointOfAnySize) {
  const std::string run =
      "bench --model bert --device cpu --mode eager,default --iters 1 --warmup 0 --quiet ";
  const fs::path json = scratch("hf_bert.json");
  // Its config.json says the heads: nothing to note but the head it skips.
  const fs::path with_config = write_hf_bert("hf_bert_config", true);
  Outcome o =
      kiln_cli(run + "--seq-len 8 --weights " + with_config.string() + " --json " + json.string());
  ASSERT_EQ(o.status, 0) << o.err;
  EXPECT_EQ(o.err, "kiln bench: --weights '" + with_config.string() +
                       "': skipped 1 key BertModel does not have: 'cls.predictions.bias'\n");
  kiln::bench::Report r = kiln::bench::Report::from_json(slurp(json));
  ASSERT_EQ(r.cases.size(), 1u);
  EXPECT_EQ(r.cases[0].weights_bytes, bytes_of(kiln::models::BertModel(small_bert_config())));
  EXPECT_EQ(r.cases[0].seq_len, 8);
  ASSERT_NE(r.cases[0].find("kiln", "default"), nullptr);
  EXPECT_LE(r.cases[0].find("kiln", "default")->max_rel_error, 1e-5);

  // Without config.json: the sizes come from the tensors, and a note says
  // what they cannot say.
  const fs::path bare = write_hf_bert("hf_bert_bare", false);
  o = kiln_cli(run + "--seq-len 8 --weights " + bare.string() + " --json " + json.string());
  ASSERT_EQ(o.status, 0) << o.err;
  EXPECT_NE(o.err.find("no config.json beside it: its tensors give a 24-wide, 2-layer BERT "
                       "(intermediate 48, vocab 64, 32 positions)"),
            std::string::npos)
      << o.err;
  EXPECT_NE(o.err.find("the number of attention heads (12), hidden_act (gelu) and layer_norm_eps "
                       "(1e-12), which tensors cannot say, are transformers' defaults"),
            std::string::npos)
      << o.err;
  r = kiln::bench::Report::from_json(slurp(json));
  EXPECT_EQ(r.cases[0].weights_bytes, bytes_of(kiln::models::BertModel(small_bert_config())));

  expect_usage_error(run + "--seq-len 40 --weights " + with_config.string(),
                     "--seq-len 40 is longer than the 32 positions of the weights' BERT");
}

// The file's model and sizes against --model's, in one short line, for every
// model: never the list of every key.
TEST(Cli, WeightsOfAnotherModelOrSizeSayWhatTheFileHoldsAndWhatWasExpected) {
  auto expect_short = [](const std::string& args, const std::vector<std::string>& says) {
    const Outcome o = kiln_cli("bench --device cpu --mode eager --iters 1 --warmup 0 " + args);
    EXPECT_EQ(o.status, 1) << args << "\n" << o.err;
    EXPECT_EQ(lines(o.err), 1u) << o.err;
    EXPECT_LT(o.err.size(), 400u) << o.err;
    for (const std::string& s : says) EXPECT_NE(o.err.find(s), std::string::npos) << o.err;
  };
  const fs::path resnet = scratch("small_resnet.safetensors");
  kiln::save_safetensors(
      resnet.string(),
      kiln::models::resnet18({.num_classes = 10, .widths = {8, 8, 8, 8}})->state_dict());
  expect_short("--model lstm --seq-len 2 --weights " + resnet.string(),
               {"holds a ResNet-18 (10 classes, widths [8, 8, 8, 8]); --model lstm is a 2-layer "
                "LSTM (256 inputs, 512 hidden, 10 classes)"});
  const fs::path bert = write_hf_bert("hf_bert_other", true);
  expect_short("--model resnet18 --weights " + bert.string(),
               {"holds a 24-wide, 2-layer BERT (intermediate 48, vocab 64, 32 positions); "
                "--model resnet18 is a ResNet-18 (1000 classes)"});
  expect_short("--model bert --weights " + resnet.string(),
               {"no config.json beside it", "a ResNet-18 (10 classes", "not a BERT"});

  const fs::path narrow = scratch("narrow_lstm.safetensors");
  kiln::save_safetensors(narrow.string(), kiln::models::LSTMNet({.hidden_size = 64}).state_dict());
  expect_short("--model lstm_loop --seq-len 2 --weights " + narrow.string(),
               {"holds a 2-layer LSTM (256 inputs, 64 hidden, 10 classes); --model lstm_loop is "
                "a 2-layer LSTM (256 inputs, 512 hidden, 10 classes)"});
  kiln::StateDict partial = kiln::models::LSTMNet().state_dict();
  partial.erase("head.bias");
  kiln::save_safetensors(narrow.string(), partial);
  expect_short("--model lstm --seq-len 2 --weights " + narrow.string(),
               {"1 missing key ('head.bias')"});

  // A config.json that does not fit the tensors beside it.
  std::ofstream(bert.parent_path() / "config.json")
      << R"({"hidden_size": 24, "num_hidden_layers": 3, "num_attention_heads": 4,
            "intermediate_size": 48, "vocab_size": 64, "max_position_embeddings": 32})";
  expect_short("--model bert --seq-len 8 --weights " + bert.string(),
               {"and its config.json: BertModel.load_hf_state_dict: the state dict holds a "
                "24-wide, 2-layer BERT",
                "this model is a 24-wide, 3-layer BERT", "16 missing keys"});
}

TEST(Cli, ASmallRunOnTheCpuWritesEveryFormat) {
  const fs::path json = scratch("r.json"), csv = scratch("r.csv"), html = scratch("r.html");
  // Weights of the model with another seed, through --weights.
  const fs::path weights = scratch("lstm.safetensors");
  kiln::manual_seed(1);
  kiln::models::LSTMCellLoop loop;
  kiln::save_safetensors(weights.string(), loop.state_dict());
  const Outcome o = kiln_cli(
      "bench --model lstm_loop --batch 2 --seq-len 4 --device cpu --iters 3 --warmup 1 "
      "--threads 1 --weights " +
      weights.string() + " --json " + json.string() + " --csv " + csv.string() + " --html " +
      html.string());
  ASSERT_EQ(o.status, 0) << o.err;
  EXPECT_NE(o.out.find("lstm_loop, batch 2, sequence 4, fp32, cpu"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("wrote " + json.string()), std::string::npos) << o.out;
  EXPECT_NE(o.err.find("eager: first call"), std::string::npos)
      << o.err;  // progress, plain lines off a TTY

  const kiln::bench::Report r = kiln::bench::Report::from_json(slurp(json));
  EXPECT_EQ(r.environment.iters, 3);
  EXPECT_EQ(r.environment.threads, 1);
  ASSERT_EQ(r.cases.size(), 1u);
  const kiln::bench::Case& c = r.cases[0];
  EXPECT_EQ(c.model, "lstm_loop");
  EXPECT_EQ(c.seq_len, 4);
  EXPECT_EQ(c.batch, 2);
  ASSERT_EQ(c.results.size(), 2u);
  EXPECT_EQ(c.results[1].mode, "default");
  EXPECT_EQ(c.results[1].graphs, 1);
  EXPECT_EQ(c.results[1].latency_ms.samples, 3);
  EXPECT_LE(c.results[1].max_rel_error, 1e-5);
  int64_t bytes = 0;
  for (const auto& [name, t] : loop.state_dict())
    bytes += static_cast<int64_t>(t.numel() * t.element_size());
  EXPECT_EQ(c.weights_bytes, bytes);

  EXPECT_EQ(lines(slurp(csv)), 3u);
  const std::string page = slurp(html);
  EXPECT_NE(page.find("Chart.js v3"), std::string::npos);  // inlined
  EXPECT_NE(page.find("\"model\": \"lstm_loop\""), std::string::npos);
}

TEST(Cli, ReportMergesSavedReports) {
  const fs::path a = scratch("a.json"), b = scratch("b.json"), merged = scratch("merged.json");
  const std::string run =
      "bench --device cpu --iters 1 --warmup 0 --quiet --seq-len 2 --mode eager ";
  ASSERT_EQ(kiln_cli(run + "--model lstm_loop --json " + a.string()).status, 0);
  ASSERT_EQ(kiln_cli(run + "--model lstm --batch 2 --json " + b.string()).status, 0);
  const Outcome o =
      kiln_cli("report " + a.string() + " " + b.string() + " --json " + merged.string());
  ASSERT_EQ(o.status, 0) << o.err;
  EXPECT_NE(o.out.find("lstm_loop, batch 1"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("lstm, batch 2"), std::string::npos) << o.out;
  const kiln::bench::Report r = kiln::bench::Report::from_json(slurp(merged));
  ASSERT_EQ(r.cases.size(), 2u);
  EXPECT_EQ(r.cases[0].model, "lstm_loop");
  EXPECT_EQ(r.cases[1].model, "lstm");

  const fs::path bad = scratch("bad.json");
  std::ofstream(bad) << "{\"schema\": \"kiln-bench\", \"schema_version\": 7}";
  expect_usage_error("report " + bad.string(), "schema version 7", 1);
  expect_usage_error("report " + scratch("missing.json").string(), "cannot open it");
  expect_usage_error("report", "reports is required");
}

// '-' writes one output to standard output (the table then goes to standard
// error); a device is written in place, never replaced (as root the writer
// used to rename a regular file over /dev/null), and a full one is an error.
TEST(Cli, OutputsGoToStandardOutputAndDevicesInPlace) {
  const fs::path a = scratch("for_stdout.json");
  ASSERT_EQ(kiln_cli("bench --device cpu --iters 1 --warmup 0 --quiet --seq-len 2 --mode eager "
                     "--model lstm_loop --json " +
                     a.string())
                .status,
            0);
  const Outcome o = kiln_cli("report " + a.string() + " --json -");
  ASSERT_EQ(o.status, 0) << o.err;
  const kiln::bench::Report r = kiln::bench::Report::from_json(o.out);
  ASSERT_EQ(r.cases.size(), 1u);
  EXPECT_EQ(r.cases[0].model, "lstm_loop");
  EXPECT_NE(o.err.find("lstm_loop, batch 1"), std::string::npos) << o.err;
  const Outcome csv = kiln_cli("report " + a.string() + " --csv - --html /dev/null");
  ASSERT_EQ(csv.status, 0) << csv.err;
  EXPECT_EQ(csv.out.rfind("model,", 0), 0u) << csv.out;
  struct stat st {};
  ASSERT_EQ(::stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode)) << "/dev/null was replaced";
  expect_usage_error("report " + a.string() + " --json - --csv -", "both write to standard output");
  expect_usage_error("bench --weights -", "--weights needs a file name");
  if (fs::exists("/dev/full")) {
    const Outcome full = kiln_cli("report " + a.string() + " --html /dev/full");
    EXPECT_NE(full.status, 0);
    EXPECT_NE(full.err.find("/dev/full"), std::string::npos) << full.err;
    EXPECT_NE(full.err.find("No space left"), std::string::npos) << full.err;
  }
}

// Empty when $KILN_PYTHON (default python3) imports what --vs-torch needs,
// else why not.
std::string why_no_torch() {
  const char* python = std::getenv("KILN_PYTHON");
  const std::string py = python && *python ? python : "python3";
  const std::string probe =
      py + " -c 'import torch, torchvision, transformers, safetensors' >/dev/null 2>&1";
  if (std::system(probe.c_str()) == 0) return "";
  return py + " cannot import torch, torchvision, transformers and safetensors";
}

// PyTorch's rows on kiln's weights and inputs agree with kiln eager: the
// weights' names and the inputs reach PyTorch's models as kiln's.
TEST(Cli, VsTorchAddsPyTorchsRowsOnTheSameWeights) {
  if (const std::string why = why_no_torch(); !why.empty()) GTEST_SKIP() << why;
  for (const std::string model : {"lstm_loop", "resnet18"}) {
    const fs::path json = scratch(model + "_vs_torch.json");
    const std::string seq = model == "lstm_loop" ? " --seq-len 3" : "";
    const Outcome o =
        kiln_cli("bench --model " + model + seq + " --device cpu --mode eager --iters 2 " +
                 "--warmup 0 --quiet --vs-torch --json " + json.string());
    ASSERT_EQ(o.status, 0) << o.err;
    const kiln::bench::Report r = kiln::bench::Report::from_json(slurp(json));
    EXPECT_FALSE(r.environment.torch.empty());
    ASSERT_EQ(r.cases.size(), 1u);
    const kiln::bench::Case& c = r.cases[0];
    const kiln::bench::Result* kiln_eager = c.find("kiln", "eager");
    const kiln::bench::Result* torch_eager = c.find("pytorch", "eager");
    ASSERT_NE(kiln_eager, nullptr);
    ASSERT_NE(torch_eager, nullptr) << o.err;
    EXPECT_EQ(torch_eager->note, "");
    EXPECT_EQ(torch_eager->latency_ms.samples, 2);
    EXPECT_GE(torch_eager->max_rel_error, 0);
    EXPECT_LE(torch_eager->max_rel_error, 1e-4) << model;
    EXPECT_DOUBLE_EQ(kiln_eager->max_abs_error_vs_torch, torch_eager->max_abs_error) << model;
    EXPECT_GT(kiln_eager->speedup_vs_torch_eager, 0);
  }
}

// PyTorch's side builds transformers' BertModel of the checkpoint's config
// (4 heads, from its config.json), not BERT-base.
TEST(Cli, VsTorchBuildsTheHuggingFaceCheckpointsBert) {
  if (const std::string why = why_no_torch(); !why.empty()) GTEST_SKIP() << why;
  const fs::path weights = write_hf_bert("hf_bert_vs_torch", true);
  const fs::path json = scratch("hf_bert_vs_torch.json");
  const Outcome o = kiln_cli(
      "bench --model bert --seq-len 8 --device cpu --mode eager --iters 2 "
      "--warmup 0 --quiet --vs-torch --weights " +
      weights.string() + " --json " + json.string());
  ASSERT_EQ(o.status, 0) << o.err;
  const kiln::bench::Report r = kiln::bench::Report::from_json(slurp(json));
  ASSERT_EQ(r.cases.size(), 1u);
  const kiln::bench::Result* torch_eager = r.cases[0].find("pytorch", "eager");
  ASSERT_NE(torch_eager, nullptr) << o.err;
  EXPECT_EQ(torch_eager->note, "");
  EXPECT_GE(torch_eager->max_rel_error, 0);
  EXPECT_LE(torch_eager->max_rel_error, 1e-4);
}

TEST(Cli, VsTorchWithoutPyTorchSaysSoAndGoesOn) {
  const Outcome o = kiln_cli(
      "bench --model lstm_loop --batch 1 --seq-len 2 --device cpu --iters 1 --warmup 0 "
      "--quiet --vs-torch",
      "KILN_PYTHON=/nonexistent/python3");
  ASSERT_EQ(o.status, 0) << o.err;
  EXPECT_NE(o.err.find("--vs-torch: '/nonexistent/python3' was not found"), std::string::npos)
      << o.err;
  EXPECT_NE(o.err.find("continuing with kiln alone"), std::string::npos) << o.err;
  EXPECT_NE(o.out.find("lstm_loop"), std::string::npos);
}

}  // namespace
