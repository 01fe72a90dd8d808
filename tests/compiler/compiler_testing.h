// Helpers of the compiler's tests: exact comparison, tracing a program of
// tensors, a graph's op names, capturing log lines.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/kernel_compiler.h"
#include "compiler/capture/capture.h"
#include "compiler/logs.h"
#include "compiler/runtime/executable.h"
#include "compiler/schedule/memory_plan.h"
#include "kiln/kiln.h"
#include "kiln/models.h"

namespace kiln::compiler::testing {

using Program = std::function<TensorList(const TensorList&)>;

// Same sizes, dtype and values exactly (NaN equal to NaN), read as doubles:
// exact for the dtypes the tests use.
inline bool same(const Tensor& a, const Tensor& b) {
  if (a.sizes() != b.sizes() || a.dtype() != b.dtype()) return false;
  const auto x = a.to_vector<double>(), y = b.to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i)
    if (!(x[i] == y[i] || (x[i] != x[i] && y[i] != y[i]))) return false;
  return true;
}

// Same sizes and dtype, values within float32's tolerance of
// docs/compile.md (1e-5 relative, 1e-6 absolute; NaN where b has NaN): what
// default mode promises where a fusion rounds otherwise than eager.
inline bool near(const Tensor& a, const Tensor& b) {
  if (a.sizes() != b.sizes() || a.dtype() != b.dtype()) return false;
  const auto x = a.to_vector<double>(), y = b.to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i) {
    if (y[i] != y[i] ? x[i] == x[i] : !(std::abs(x[i] - y[i]) <= 1e-6 + 1e-5 * std::abs(y[i])))
      return false;
  }
  return true;
}

inline Trace trace_of(const Program& f, const TensorList& args) {
  Tracer tracer;
  TensorList proxies;
  for (const Tensor& a : args) proxies.push_back(tracer.input(a));
  return tracer.finish(f(proxies));
}

// A program traced on args and lowered to an executable (its memory plan
// checked), for tests of schedules and fused steps.
struct Lowered {
  std::shared_ptr<const Trace> trace;
  std::unique_ptr<Executable> exe;
};

inline Lowered lower(const Program& f, const TensorList& args,
                     const ScheduleOptions& options = {}) {
  Lowered l;
  l.trace = std::make_shared<const Trace>(trace_of(f, args));
  verify(l.trace->graph);
  l.exe = std::make_unique<Executable>(l.trace, options);
  check_plan(l.trace->graph, l.exe->schedule(), l.exe->plan());
  return l;
}

// A schedule's steps that run a generated kernel.
inline size_t generated_steps(const Schedule& s) {
  size_t n = 0;
  for (const auto& st : s.steps) n += st.kernel >= 0;
  return n;
}

// Within the per-dtype tolerance of docs/compile.md of the reference kernels
// (float32: 1e-5 relative, 1e-6 absolute; float64: 1e-12, 1e-13), NaN where
// they have NaN, infinities equal. On any device (compared on the CPU).
inline void expect_near_reference(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  const bool f64 = got.dtype() == kFloat64;
  const double rel = f64 ? 1e-12 : 2e-5, abs = f64 ? 1e-13 : 1e-6;
  const auto a = got.to(Device::cpu()).to_vector<double>();
  const auto b = want.to(Device::cpu()).to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(std::isnan(a[i]), std::isnan(b[i]))
        << what << ": element " << i << " " << a[i] << " vs " << b[i];
    if (std::isnan(b[i])) continue;
    if (std::isinf(b[i])) {
      ASSERT_EQ(a[i], b[i]) << what << ": element " << i;
      continue;
    }
    ASSERT_LE(std::abs(a[i] - b[i]), abs + rel * std::abs(b[i]))
        << what << ": element " << i << " " << a[i] << " vs " << b[i];
  }
}

// Values over the ops' interesting ranges: signed, some large, zeros, and a
// NaN and infinities where there is room.
inline Tensor values(const Shape& sizes, DType dtype, Generator& gen) {
  Tensor x = (randn(sizes, {}, &gen) * 3.0).to(dtype);
  if (x.numel() >= 8) {
    Tensor flat = x.reshape({-1});
    flat.narrow(0, 1, 1).fill_(0.0);
    flat.narrow(0, 3, 1).fill_(std::numeric_limits<double>::quiet_NaN());
    flat.narrow(0, 5, 1).fill_(std::numeric_limits<double>::infinity());
    flat.narrow(0, 6, 1).fill_(-std::numeric_limits<double>::infinity());
  }
  return x;
}

// The unary ops generated kernels have, each on one input.
struct UnaryCase {
  const char* name;
  std::function<Tensor(const Tensor&)> op;
  bool positive_only = false;  // log, sqrt...: inputs in (0.25, 4.25)
};

inline std::vector<UnaryCase> unary_cases() {
  return {
      {"neg", [](const Tensor& x) { return -x; }},
      {"abs", [](const Tensor& x) { return x.abs(); }},
      {"exp", [](const Tensor& x) { return x.exp(); }},
      {"log", [](const Tensor& x) { return x.log(); }, true},
      {"log1p", [](const Tensor& x) { return log1p(x); }, true},
      {"expm1", [](const Tensor& x) { return expm1(x); }},
      {"sqrt", [](const Tensor& x) { return x.sqrt(); }, true},
      {"rsqrt", [](const Tensor& x) { return x.rsqrt(); }, true},
      {"reciprocal", [](const Tensor& x) { return reciprocal(x); }, true},
      {"square", [](const Tensor& x) { return x.square(); }},
      {"sin", [](const Tensor& x) { return x.sin(); }},
      {"cos", [](const Tensor& x) { return x.cos(); }},
      {"tanh", [](const Tensor& x) { return x.tanh(); }},
      {"sigmoid", [](const Tensor& x) { return x.sigmoid(); }},
      {"relu", [](const Tensor& x) { return x.relu(); }},
      {"gelu", [](const Tensor& x) { return gelu(x); }},
      {"gelu_tanh", [](const Tensor& x) { return gelu(x, "tanh"); }},
      {"silu", [](const Tensor& x) { return silu(x); }},
      {"leaky_relu", [](const Tensor& x) { return leaky_relu(x, 0.3); }},
      {"hardtanh", [](const Tensor& x) { return hardtanh(x, -0.75, 1.25); }},
      {"elu", [](const Tensor& x) { return elu(x, 0.6); }},
      {"softplus", [](const Tensor& x) { return softplus(x, 1.5, 2.0); }},
      {"hardsigmoid", [](const Tensor& x) { return hardsigmoid(x); }},
      {"hardswish", [](const Tensor& x) { return hardswish(x); }},
      {"mish", [](const Tensor& x) { return mish(x); }},
      {"erf", [](const Tensor& x) { return erf(x); }},
      {"sign", [](const Tensor& x) { return sign(x); }},
      {"floor", [](const Tensor& x) { return floor(x); }},
      {"ceil", [](const Tensor& x) { return ceil(x); }},
      {"round", [](const Tensor& x) { return round(x); }},
      {"clamp", [](const Tensor& x) { return x.clamp(-1.5, 2.25); }},
      {"clamp_min", [](const Tensor& x) { return x.clamp(0.5, std::nullopt); }},
      {"clamp_max", [](const Tensor& x) { return x.clamp(std::nullopt, -0.5); }},
  };
}

// Whether this machine has a C++ compiler for generated kernels (without
// one, fused pointwise groups run on the library kernels).
inline bool can_generate_kernels() {
  std::string why;
  return !backend::cpu::KernelCompiler::find_compiler(why).empty();
}

// Each graph's fused steps (or, with `fused` false, the candidates left
// apart) in a report, one per line.
inline std::string explain_lines(const ExplainReport& r, bool fused = true) {
  std::string s;
  for (const auto& g : r.graphs)
    for (const auto& line : fused ? g.fused : g.not_fused) s += line + "\n";
  return s;
}

// Skips a test of generated kernels where they cannot be built.
#define KILN_NEEDS_COMPILER()                             \
  if (!::kiln::compiler::testing::can_generate_kernels()) \
  GTEST_SKIP() << "no C++ compiler: kernels cannot be generated here"

// The graph's ops in order, in-place ones with a trailing underscore.
inline std::vector<std::string> op_names(const Graph& g) {
  std::vector<std::string> names;
  for (const Node& n : g.nodes()) names.push_back(std::string(ops::op_schema(n.op).name) + (n.inplace() ? "_" : ""));
  return names;
}

// Collects the lines of the given log channels while alive.
class LogCapture {
 public:
  explicit LogCapture(const std::string& channels) {
    set_log_capture(channels, [this](const std::string& line) { lines.push_back(line); });
  }
  ~LogCapture() { set_log_capture("", {}); }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;
  bool contains(const std::string& s) const {
    for (const auto& l : lines)
      if (l.find(s) != std::string::npos) return true;
    return false;
  }
  std::vector<std::string> lines;
};

// A small BERT in eval mode (vocab 100, hidden 32, 4 heads, 2 layers, 64 positions).
inline std::shared_ptr<models::BertModel> small_bert() {
  models::BertConfig config;
  config.vocab_size = 100;
  config.hidden_size = 32;
  config.num_hidden_layers = 2;
  config.num_attention_heads = 4;
  config.intermediate_size = 64;
  config.max_position_embeddings = 64;
  manual_seed(3);
  auto net = std::make_shared<models::BertModel>(config);
  net->eval();
  return net;
}

}  // namespace kiln::compiler::testing
