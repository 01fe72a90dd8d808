// kiln::bench: what compilation buys a model, measured. evaluate() runs a
// module or a callable eagerly and through kiln::compile in each mode on the
// same inputs, and reports for each: the first call (split into trace,
// passes, build and first run), the latency of warm calls (median, p10, p90,
// p99, min, max, mean), throughput, peak memory, graphs, graph breaks,
// recompiles, kernel launches per call and the outputs' error against eager.
// `kiln bench` (tools/kiln) is built on it; docs/bench.md describes the
// report and its JSON schema.
//
//   auto net = kiln::models::resnet50();
//   net->eval();
//   kiln::InferenceModeGuard inference;
//   kiln::bench::Report report;
//   report.cases.push_back(kiln::bench::evaluate(*net, std::tuple{kiln::randn({1, 3, 224, 224})},
//                                                {.name = "resnet50"}));
//   std::cout << report.to_table();
//   kiln::bench::write_file("report.html", report.to_html());
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/compile.h"
#include "kiln/nn/module.h"
#include "kiln/tensor.h"

namespace kiln::bench {

// The JSON report's schema version (docs/bench.md); from_json rejects others.
inline constexpr int kSchemaVersion = 1;

// Milliseconds per call over the timed calls (warm-up excluded, none dropped).
struct Latency {
  double median = 0, p10 = 0, p90 = 0, p99 = 0, min = 0, max = 0, mean = 0, stddev = 0;
  int64_t samples = 0;
};

// The first call of a mode: compiling it (trace, passes, build: lowering,
// CUDA-graph recording, autotuning) and running it. Eager: total only.
struct FirstCall {
  double total_ms = 0, trace_ms = 0, passes_ms = 0, build_ms = 0, run_ms = 0;
  // Of build: generating the CPU kernels of fused groups and compiling (or
  // loading) them.
  double codegen_ms = 0;
};

// One framework in one mode on one case.
struct Result {
  std::string framework = "kiln";  // "kiln" or "pytorch"
  std::string mode;                // "eager", "default", "reduce-overhead", "max-autotune"
  Latency latency_ms;
  double throughput = 0;  // samples per second at the median latency
  FirstCall first_call;
  // The most memory the calls held beyond the weights and inputs (the
  // device's allocator on a GPU, kiln's CPU allocator on the CPU).
  int64_t peak_bytes = 0;
  // From kiln::compile's explain(); eager: 0 graphs.
  int64_t graphs = 0, graph_breaks = 0, recompiles = 0;
  // Kernel launches issued from the host per warm call (kiln::kernel_launches:
  // an eager op's kernels, a compiled step, a CUDA graph's launch); -1: not
  // measured (PyTorch).
  double launches_per_call = -1;
  // Kernels kiln generated for groups of pointwise nodes, over the graphs;
  // of the graphs that have any, those whose kernels came from the disk
  // cache or were already loaded (not compiled in this run). -1: not
  // measured (PyTorch).
  int64_t generated_kernels = -1, kernel_cache_hits = -1;
  // Against kiln eager's outputs (eager itself: 0), and against PyTorch's
  // eager outputs when they were measured (-1: not measured). Relative error
  // is the largest absolute difference over the reference's largest
  // magnitude, per output, the largest over the outputs.
  double max_abs_error = 0, max_rel_error = 0;
  double max_abs_error_vs_torch = -1, max_rel_error_vs_torch = -1;
  // Speed-ups of the median latency (>1: faster): against kiln eager, against
  // PyTorch eager, against torch.compile in the same mode, and against
  // PyTorch's fastest mode, eager or compiled (Case::torch_best_mode); -1: no
  // figure.
  double speedup_vs_eager = -1, speedup_vs_torch_eager = -1, speedup_vs_torch_mode = -1,
         speedup_vs_torch_best = -1;
  std::string note;  // why a figure is missing, or what to know about this one
};

// One model at one batch, dtype and device, with a result per framework and mode.
struct Case {
  std::string model;
  int64_t batch = 0;    // samples per call
  int64_t seq_len = 0;  // 0: not a sequence model
  std::string dtype;    // "fp32", "bf16", "fp16"
  std::string device;   // "cpu", "cuda:0"
  int64_t weights_bytes = 0;
  int64_t input_bytes = 0;
  std::vector<Result> results;
  // PyTorch's fastest mode here, eager or compiled (empty without PyTorch's
  // timed rows): kiln's fastest against it is the report's headline. On the
  // CPU, PyTorch eager often beats torch.compile.
  std::string torch_best_mode;

  // The result of a framework and mode, or nullptr.
  const Result* find(std::string_view framework, std::string_view mode) const;
  // A framework's result (of a compiled mode, when asked) with the lowest
  // median over timed calls, or nullptr.
  const Result* fastest(std::string_view framework, bool compiled_only = false) const;
  // Fills each result's speed-ups and torch_best_mode from the medians present.
  void compute_speedups();
  // One line: kiln's fastest mode against PyTorch's fastest ("kiln
  // reduce-overhead 0.800 ms against PyTorch eager 0.840 ms: 1.05x"); empty
  // without both frameworks' timed rows.
  std::string headline() const;
};

// Where the figures were measured.
struct Environment {
  std::string kiln_version;  // kiln::version_string()
  std::string commit;
  std::string date;  // UTC, ISO 8601
  std::string host;
  std::string cpu;
  int64_t cpu_cores = 0;
  int threads = 0;     // kiln's CPU threads
  std::string gpu;     // empty: none
  std::string driver;  // CUDA driver version
  std::string cuda;    // CUDA runtime version
  std::string cudnn;
  std::string onednn;
  std::string precision;  // "fp32; TF32 matmul off, conv on"
  std::string torch;      // PyTorch's version when it was measured, else empty
  int64_t iters = 0, warmup = 0;
  // What the environment of this process is (a report made here).
  static Environment current();
};

struct Report {
  int schema_version = kSchemaVersion;
  Environment environment;
  std::vector<Case> cases;

  // JSON of schema kSchemaVersion (docs/bench.md).
  std::string to_json() const;
  // ValueError naming what is wrong: not JSON, another schema version, a
  // missing or mistyped field.
  static Report from_json(std::string_view json);
  // One row per case and result, with a header row.
  std::string to_csv() const;
  // An aligned table for a terminal; with color, speed-ups are coloured.
  std::string to_table(bool color = false) const;
  // One self-contained HTML page with charts (Chart.js inlined).
  std::string to_html() const;
};

// The modes evaluate() measures when Options::modes is empty: eager and
// default, and on a CUDA device reduce-overhead and max-autotune.
std::vector<std::string> default_modes(Device device);
// Whether a mode runs only on a CUDA device (it records CUDA graphs).
bool needs_cuda(std::string_view mode);

// Writes text to path through a temporary file renamed into place, so a
// failure leaves no half-written file; IOError naming the path on failure.
void write_file(const std::string& path, std::string_view text);

// Where evaluate() is: called before each stage and during timing.
struct Progress {
  std::string stage;    // "eager: first call", "default: timing", ...
  double fraction = 0;  // of the whole evaluation, 0 to 1
};

struct Options {
  // What a case is called in the report.
  std::string name = "model";
  // Modes measured, in order, from "eager", "default", "reduce-overhead",
  // "max-autotune". Empty: eager and every compiled mode the device of the
  // inputs supports (the CPU: default; CUDA: all three). A CUDA-only mode on
  // the CPU is a ValueError. Eager is always measured: it is the reference.
  std::vector<std::string> modes;
  int iters = 50;  // timed calls per mode
  int warmup = 5;  // untimed calls per mode after the first
  // Samples per call for throughput; 0: dim 0 of the first tensor argument.
  int64_t batch = 0;
  bool freeze = false;  // kiln::CompileOptions::freeze for the compiled modes
  // Bytes the model's weights hold (a module's parameters and buffers are
  // counted when 0 and a module is given).
  int64_t weights_bytes = 0;
  std::function<void(const Progress&)> on_progress;
  // Called with each mode's outputs of its last timed call (for instance to
  // compare them with another framework's).
  std::function<void(const std::string& mode, const std::vector<Tensor>& outputs)> on_outputs;
};

namespace detail {

// A measured function, type-erased: run() calls it on the example inputs and
// returns its tensor outputs flattened.
struct Subject {
  std::function<std::vector<Tensor>()> eager;
  // The compiled function for a mode; its first call compiles.
  struct Compiled {
    std::function<std::vector<Tensor>()> run;
    std::function<ExplainReport()> explain;
  };
  std::function<Compiled(const CompileOptions&)> compile;
  std::vector<Tensor> inputs;  // the tensor arguments (device, batch, bytes)
};

Case evaluate(const Subject& subject, const Options& options);

// The largest absolute and relative error of outputs against a reference's,
// as docs/bench.md defines them; infinite, with a note, when their number or
// shapes differ.
struct Errors {
  double abs = 0, rel = 0;
  std::string note;
};
Errors compare_outputs(const std::vector<Tensor>& got, const std::vector<Tensor>& reference);

inline void flatten_into(std::vector<Tensor>& out, const Tensor& t) { out.push_back(t); }
inline void flatten_into(std::vector<Tensor>& out, const std::vector<Tensor>& v) {
  out.insert(out.end(), v.begin(), v.end());
}
template <typename... T>
void flatten_into(std::vector<Tensor>& out, const std::tuple<T...>& t) {
  std::apply([&](const auto&... x) { (flatten_into(out, x), ...); }, t);
}
template <typename A, typename B>
void flatten_into(std::vector<Tensor>& out, const std::pair<A, B>& p) {
  flatten_into(out, p.first);
  flatten_into(out, p.second);
}
template <typename R>
std::vector<Tensor> flatten_outputs(const R& r) {
  std::vector<Tensor> out;
  flatten_into(out, r);
  return out;
}

inline void tensors_of(std::vector<Tensor>& out, const Tensor& t) { out.push_back(t); }
inline void tensors_of(std::vector<Tensor>& out, const std::vector<Tensor>& v) {
  out.insert(out.end(), v.begin(), v.end());
}
template <typename T>
void tensors_of(std::vector<Tensor>&, const T&) {}

int64_t weights_bytes_of(const nn::Module& module);

template <typename F, typename... Args>
Subject make_subject(F f, std::tuple<Args...> args) {
  Subject s;
  std::apply([&](const auto&... a) { (tensors_of(s.inputs, a), ...); }, args);
  s.eager = [f, args]() mutable { return flatten_outputs(std::apply(f, args)); };
  s.compile = [f, args](const CompileOptions& options) {
    auto compiled = std::make_shared<kiln::Compiled<F>>(f, options);
    return Subject::Compiled{
        [compiled, args] { return flatten_outputs(std::apply(*compiled, args)); },
        [compiled] { return compiled->explain(); }};
  };
  return s;
}

}  // namespace detail

// Measures f(args...) eagerly and compiled in each mode of options; f is any
// callable kiln::compile takes. The arguments are fixed for every call.
//   kiln::bench::evaluate([&](const Tensor& x) { return net(x); }, std::tuple{x}, {.name = "net"});
template <typename F, typename... Args>
requires(!std::is_base_of_v<nn::Module, F>) Case
    evaluate(F f, std::tuple<Args...> example_inputs, const Options& options = {}) {
  return detail::evaluate(detail::make_subject(std::move(f), std::move(example_inputs)), options);
}

// A module's forward on the arguments (tensors and numbers); its parameters
// and buffers are the weights. The module must outlive the call.
//   kiln::bench::evaluate(*net, std::tuple{images}, {.name = "resnet50"});
template <typename M, typename... Args>
requires std::is_base_of_v<nn::Module, M> Case evaluate(M& module,
                                                        std::tuple<Args...> example_inputs,
                                                        Options options = {}) {
  if (options.weights_bytes == 0) options.weights_bytes = detail::weights_bytes_of(module);
  auto forward = [m = &module](const auto&... args) { return m->forward(args...); };
  return detail::evaluate(detail::make_subject(std::move(forward), std::move(example_inputs)),
                          options);
}

}  // namespace kiln::bench
