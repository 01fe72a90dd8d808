// The benchmark's LSTM sequence model in both of its forms: LSTMNet runs
// nn::LSTM over the whole sequence, LSTMCellLoop is the same network written as
// a loop over LSTMCells. Both load one state dict, run a batch of random
// sequences, and must agree; the example prints their logits and eager latency.
//
//   lstm_sequence [--weights FILE.safetensors] [--batch B] [--steps T]
//
// Weights: a state dict saved from PyTorch with
// safetensors.torch.save_file(model.state_dict(), FILE) for
//   lstm = nn.LSTM(I, H, num_layers=L, batch_first=True); head = nn.Linear(H, C)
// (keys lstm.weight_ih_l0, ..., head.bias); the sizes are read from the file.
// Without --weights: random weights of the benchmark's size (256, 512, 2 layers,
// 10 classes). Exits with 1 when the two forms disagree by more than 1e-4 of the
// logits' scale, 2 on bad arguments.
#include <kiln/kiln.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

using namespace kiln;

namespace {

struct Args {
  std::string weights;
  int64_t batch = 4;
  int64_t steps = 32;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr, "lstm_sequence: %s\nusage: lstm_sequence [--weights FILE] [--batch B] [--steps T]\n", why);
  std::exit(2);
}

int64_t positive(const char* flag, const char* text) {
  char* end = nullptr;
  const long long v = std::strtoll(text, &end, 10);
  if (*text == '\0' || *end != '\0' || v < 1 || v > 100000) {
    usage((std::string(flag) + " takes a positive integer, got '" + text + "'").c_str());
  }
  return v;
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) usage(("missing the value of " + flag).c_str());
    const char* value = argv[++i];
    if (flag == "--weights") a.weights = value;
    else if (flag == "--batch") a.batch = positive("--batch", value);
    else if (flag == "--steps") a.steps = positive("--steps", value);
    else usage(("unknown argument " + flag).c_str());
  }
  return a;
}

// The sizes of the network a state dict holds.
models::LSTMNetOptions sizes_of(const StateDict& dict) {
  models::LSTMNetOptions o;
  const Shape w_ih = dict.at("lstm.weight_ih_l0").sizes();
  o.hidden_size = w_ih[0] / 4;
  o.input_size = w_ih[1];
  o.num_layers = 0;
  while (dict.contains("lstm.weight_ih_l" + std::to_string(o.num_layers))) ++o.num_layers;
  o.num_classes = dict.at("head.weight").size(0);
  return o;
}

// The median of five calls after one warm-up call.
template <typename Model>
double milliseconds(Model& model, const Tensor& x) {
  model(x);
  std::vector<double> ms;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    model(x);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[2];
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  try {
    InferenceModeGuard inference;
    StateDict weights;
    models::LSTMNetOptions options;
    if (!args.weights.empty()) {
      weights = load_safetensors(args.weights);
      options = sizes_of(weights);
    }
    models::LSTMNet net(options);
    if (args.weights.empty()) {
      std::printf("no --weights: random weights\n");
      weights = net.state_dict();
    }
    net.load_state_dict(weights);
    models::LSTMCellLoop loop(options);
    loop.load_state_dict(weights);  // the same names: lstm.weight_ih_l0, ..., head.bias
    std::printf("LSTM(%lld, %lld, num_layers=%lld) + Linear(%lld, %lld); batch %lld, %lld steps\n",
                (long long)options.input_size, (long long)options.hidden_size,
                (long long)options.num_layers, (long long)options.hidden_size,
                (long long)options.num_classes, (long long)args.batch, (long long)args.steps);

    manual_seed(0);
    const Tensor x = randn({args.batch, args.steps, options.input_size});
    const Tensor a = net(x), b = loop(x);
    std::printf("logits of the first sequence: %s\n", to_string(a.select(0, 0)).c_str());
    const double scale = a.abs().max().item<double>();
    const double diff = (a - b).abs().max().item<double>();
    std::printf("LSTMNet vs LSTMCellLoop: max difference %.3g (scale %.3g)\n", diff, scale);
    std::printf("eager latency (median of 5): LSTMNet %.2f ms, LSTMCellLoop %.2f ms\n", milliseconds(net, x),
                milliseconds(loop, x));
    if (!(diff <= 1e-4 * scale)) {
      std::fprintf(stderr, "lstm_sequence: the two forms disagree\n");
      return 1;
    }
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "lstm_sequence: %s\n", e.what());
    return 1;
  }
}
