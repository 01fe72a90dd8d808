// kiln::compile's cache: guard keys, traces, replays and the recompile policy.
#include "kiln/compile.h"

#include <algorithm>
#include <cmath>
#include <atomic>
#include <chrono>
#include <bit>
#include <cstdio>
#include <mutex>
#include <optional>
#include <span>
#include <sstream>
#include <unordered_map>

#include "backends/autotune.h"
#include "compiler/capture.h"
#include "compiler/device_graph.h"
#include "compiler/executable.h"
#include "compiler/graph.h"
#include "compiler/logs.h"
#include "compiler/passes/pass.h"
#include "kiln/autograd.h"
#include "kiln/runtime.h"

#include <nlohmann/json.hpp>

namespace kiln::compiler {

using kiln::operator<<;  // Shape

namespace {

std::atomic<uint64_t> g_epoch{0};  // bumped by reset()

struct KeyHash {
  size_t operator()(const std::vector<int64_t>& key) const noexcept {
    uint64_t h = 0x9e3779b97f4a7c15ull ^ key.size();
    for (int64_t v : key) {
      h ^= static_cast<uint64_t>(v) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    }
    return static_cast<size_t>(h);
  }
};

// The facts about a captured tensor a graph depends on.
struct LayoutGuard {
  Shape sizes, strides;
  DType dtype;
  Device device;
  bool requires_grad;
  bool matches(const Tensor& t) const {
    return t.sizes() == sizes && t.strides() == strides && t.dtype() == dtype && t.device() == device &&
           t.requires_grad() == requires_grad;
  }
};

LayoutGuard layout_of(const Tensor& t) {
  return {t.sizes(), t.strides(), t.dtype(), t.device(), t.requires_grad()};
}

struct Entry {
  std::vector<int64_t> key;
  std::vector<std::pair<std::string, std::string>> described;  // (guard, value), for logs
  std::shared_ptr<const Trace> trace;  // none: calls with this key run eagerly (a graph break)
  // The lowered schedule, where no gradient is recorded; else calls replay
  // the trace through dispatch, which records autograd as eager does.
  std::shared_ptr<const Executable> executable;
  std::vector<int64_t> structure;
  std::vector<LayoutGuard> captured;
  double trace_ms = 0, verify_ms = 0, passes_ms = 0, lower_ms = 0, record_ms = 0, autotune_ms = 0;
  size_t traced_nodes = 0;
  int64_t order = 0;  // the trace's number, from 1
  // Mode::ReduceOverhead: the executable recorded as one device graph, or
  // why it is not (obstacles found before recording, or the recording's failure).
  mutable std::mutex graph_mutex;
  std::shared_ptr<GraphedExecutable> graphed;
  std::vector<std::string> graph_obstacles;
};

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

// Records the entry's executable as a device graph for arguments laid out as
// `tensors` (the executable has just run on them); a failure becomes the
// reason the entry has none.
void record_graph(Entry& entry, const TensorList& tensors, const std::string& name) {
  const auto start = std::chrono::steady_clock::now();
  std::shared_ptr<GraphedExecutable> graphed;
  std::string failure;
  try {
    graphed = std::make_shared<GraphedExecutable>(entry.executable, tensors);
  } catch (const Error& e) {
    failure = detail::str_cat("the device refused to record it: ", e.what());
  }
  const double ms = ms_since(start);
  std::lock_guard lock(entry.graph_mutex);
  entry.graphed = std::move(graphed);
  entry.record_ms += ms;
  if (!failure.empty()) {
    entry.graph_obstacles.push_back(failure);
    log(LogChannel::kPerf, detail::str_cat(name, ", trace ", entry.order, ": not a CUDA graph: ", failure));
  } else {
    log(LogChannel::kPerf, detail::str_cat(name, ", trace ", entry.order, ": recorded as a CUDA graph in ", ms, " ms"));
  }
}

// A recorded graph's call: its device graph, its executable, or where
// autograd must record, a replay through dispatch.
TensorList run_entry(Entry& entry, const TensorList& tensors, const std::string& name, int64_t& graph_calls) {
  if (!entry.executable) return replay(*entry.trace, tensors);
  std::shared_ptr<GraphedExecutable> graphed;
  {
    std::lock_guard lock(entry.graph_mutex);
    graphed = entry.graphed;
  }
  if (graphed) {
    TensorList results;
    switch (graphed->run(tensors, results)) {
      case GraphedExecutable::Outcome::kRan:
        ++graph_calls;
        return results;
      case GraphedExecutable::Outcome::kBusy:
        break;  // another thread is in the graph: this call runs the executable
      case GraphedExecutable::Outcome::kMoved: {
        {
          std::lock_guard lock(entry.graph_mutex);
          if (entry.graphed != graphed) break;  // another thread is recording it anew
          entry.graphed.reset();
        }
        log(LogChannel::kPerf, detail::str_cat(name, ", trace ", entry.order,
                                               ": a captured tensor moved to other memory; recording again"));
        TensorList out = entry.executable->run(tensors);
        record_graph(entry, tensors, name);
        return out;
      }
    }
  }
  return entry.executable->run(tensors);
}

// --- CompileOptions::check ----------------------------------------------------

// Where compiled and eager values may differ without strict: |a - b| <=
// atol + rtol * |b| (docs/compile.md).
std::pair<double, double> tolerance_of(DType t) {
  switch (t) {
    case kFloat64: return {1e-12, 1e-12};
    case kFloat32: return {1e-5, 1e-6};
    case kFloat16: return {1e-3, 1e-5};
    case kBFloat16: return {1e-2, 1e-5};
    default: return {0.0, 0.0};
  }
}

// Why `got` does not pass for `want`; empty when it does.
std::string difference(const Tensor& got, const Tensor& want, bool strict) {
  if (!got.defined() || !want.defined()) {
    return got.defined() == want.defined() ? "" : "one side is an undefined tensor";
  }
  if (got.sizes() != want.sizes() || got.dtype() != want.dtype()) {
    return detail::str_cat("it is ", got.dtype(), got.sizes(), ", eager's is ", want.dtype(), want.sizes());
  }
  NoGradGuard no_grad;
  const std::vector<double> a = got.detach().to_vector<double>(), b = want.detach().to_vector<double>();
  const auto [rtol, atol] = strict ? std::pair<double, double>{0.0, 0.0} : tolerance_of(got.dtype());
  for (size_t i = 0; i < a.size(); ++i) {
    const bool both_nan = a[i] != a[i] && b[i] != b[i];
    if (both_nan || a[i] == b[i] || std::abs(a[i] - b[i]) <= atol + rtol * std::abs(b[i])) continue;
    return detail::str_cat("element ", i, " is ", a[i], ", eager's is ", b[i],
                           strict ? " (strict: bitwise)" : detail::str_cat(" (tolerance ", rtol, " relative, ", atol, " absolute)"));
  }
  return "";
}

// What a graph's call may change besides its results: the arguments and
// captured tensors it writes, and the generators its random nodes draw
// from. Saved before the compiled run so that eager starts from the same state.
class CallState {
 public:
  CallState(const Trace& trace, const TensorList& args) {
    const Graph& g = trace.graph;
    const std::vector<bool> written = written_storages(g);
    for (size_t i = 0; i < g.inputs().size(); ++i) {
      if (!written[static_cast<size_t>(g.value(g.inputs()[i]).storage)]) continue;
      tensors_.push_back(args[i]);
      labels_.push_back(detail::str_cat("argument ", i));
    }
    for (size_t i = 0; i < g.captured().size(); ++i) {
      if (!written[static_cast<size_t>(g.value(g.captured()[i]).storage)]) continue;
      tensors_.push_back(trace.captured[i]);
      labels_.push_back(detail::str_cat("captured tensor ", i));
    }
    for (const Node& n : g.nodes()) {
      if (n.draw_count < 0) continue;
      Generator* gen = n.generator ? n.generator : &default_generator();
      if (std::none_of(generators_.begin(), generators_.end(), [&](const auto& p) { return p.first == gen; }))
        generators_.emplace_back(gen, *gen);
    }
    saved_ = values();
  }
  // The written tensors' values now.
  TensorList values() const {
    NoGradGuard no_grad;
    TensorList out;
    for (const Tensor& t : tensors_) out.push_back(t.detach().clone());
    return out;
  }
  const std::string& label(size_t i) const { return labels_[i]; }
  // Back to the state at construction.
  void restore() {
    restore_values(saved_);
    for (auto& [gen, state] : generators_) *gen = state;
  }
  // The written tensors back to `values`.
  void restore_values(const TensorList& values) {
    NoGradGuard no_grad;
    for (size_t i = 0; i < tensors_.size(); ++i) {
      Tensor t = tensors_[i].detach();
      t.copy_(values[i]);
    }
  }

 private:
  TensorList tensors_, saved_;
  std::vector<std::string> labels_;
  std::vector<std::pair<Generator*, Generator>> generators_;
};

TensorList detached_clones(std::span<const Tensor> ts) {
  TensorList out;
  for (const Tensor& t : ts) out.push_back(t.defined() ? t.detach().clone() : Tensor());
  return out;
}

// The first node whose value the executable computes differently from eager
// dispatch (replay), both run from the call's saved state.
std::string first_divergence(const Entry& entry, const TensorList& args, CallState& state, bool strict) {
  if (!entry.executable) {
    return "the graph replays through dispatch (for autograd), as eager runs its ops: the trace does not record "
           "what the function does";
  }
  NoGradGuard no_grad;
  std::vector<TensorList> reference;
  state.restore();
  (void)replay(*entry.trace, args, [&](size_t, std::span<const Tensor> outs) { reference.push_back(detached_clones(outs)); });
  state.restore();
  std::string found;
  (void)entry.executable->run(args, [&](size_t node, std::span<const Tensor> outs) {
    for (size_t k = 0; k < outs.size() && found.empty(); ++k) {
      const std::string d = difference(outs[k], reference.at(node)[k], strict);
      if (!d.empty()) {
        const Node& n = entry.trace->graph.nodes()[node];
        found = detail::str_cat("node ", node, " (", ops::op_schema(n.op).name, n.inplace() ? "_" : "", ") output ",
                                k, " is the first to differ from eager dispatch: ", d);
      }
    }
  });
  return found.empty() ? "every node of the graph gives eager dispatch's value: the trace does not record what the "
                         "function does"
                       : found;
}

// CompileOptions::check: runs the graph's call (`compiled`) and the function
// eagerly from the same state and compares results and written tensors;
// kiln::Error naming the first divergence. Leaves eager's state.
TensorList checked_call(const Entry& entry, const TensorList& args, const internal::Runner& run,
                        const CompileOptions& options, const std::function<TensorList()>& compiled) {
  CallState state(*entry.trace, args);
  const TensorList got = compiled();
  const TensorList got_state = state.values();
  state.restore();
  std::vector<int64_t> structure;
  TensorList want;
  {
    TracerPause no_tracing;
    want = run(args, structure);
  }
  const TensorList want_state = state.values();
  std::string what;
  if (got.size() != want.size()) what = detail::str_cat("it returns ", got.size(), " tensors, eager ", want.size());
  for (size_t i = 0; i < got.size() && what.empty(); ++i) {
    const std::string d = difference(got[i], want[i], options.strict);
    if (!d.empty()) what = detail::str_cat("result ", i, ": ", d);
  }
  for (size_t i = 0; i < got_state.size() && what.empty(); ++i) {
    const std::string d = difference(got_state[i], want_state[i], options.strict);
    if (!d.empty()) what = detail::str_cat(state.label(i), " after the call: ", d);
  }
  if (what.empty()) return got;
  const std::string where = first_divergence(entry, args, state, options.strict);
  state.restore_values(want_state);
  throw Error(detail::str_cat("compile: ", options.name, " (check): ", what, "; ", where));
}

void append_tensor_key(const Tensor& t, std::vector<int64_t>& key) {
  key.push_back(t.dim());
  key.insert(key.end(), t.sizes().begin(), t.sizes().end());
  key.insert(key.end(), t.strides().begin(), t.strides().end());
  key.push_back(static_cast<int64_t>(t.dtype()));
  key.push_back(static_cast<int64_t>(t.device().kind()));
  key.push_back(t.device().index());
  key.push_back(t.requires_grad());
}

std::vector<int64_t> build_key(const internal::FlatArgs& args) {
  std::vector<int64_t> key = args.key;
  key.reserve(key.size() + args.tensors.size() * 12 + 4);
  for (const Tensor& t : args.tensors) {
    if (!t.defined()) throw Error("compile: an argument is an undefined tensor");
    append_tensor_key(t, key);
  }
  const Tf32Policy tf32 = allow_tf32();
  key.push_back(is_grad_enabled());
  key.push_back(tf32.matmul);
  key.push_back(tf32.conv);
  return key;
}

std::string str(const Shape& s) {
  std::ostringstream os;
  os << s;
  return os.str();
}

// Every guard of a call, named, in a fixed order: what recompile logs compare.
std::vector<std::pair<std::string, std::string>> describe(const internal::FlatArgs& args) {
  std::vector<std::pair<std::string, std::string>> out;
  size_t tensor = 0, position = 0;
  for (size_t k = 0; k < args.key.size(); ++position) {
    const int64_t tag = args.key[k];
    const std::string arg = "argument " + std::to_string(position);
    if (tag == 1) {
      const Tensor& t = args.tensors[tensor++];
      out.emplace_back(arg + " sizes", str(t.sizes()));
      out.emplace_back(arg + " strides", str(t.strides()));
      out.emplace_back(arg + " dtype", std::string(dtype_name(t.dtype())));
      std::ostringstream d;
      d << t.device();
      out.emplace_back(arg + " device", d.str());
      out.emplace_back(arg + " requires_grad", t.requires_grad() ? "true" : "false");
      k += 1;
    } else if (tag == 2) {
      out.emplace_back(arg + " list length", std::to_string(args.key[k + 1]));
      for (int64_t i = 0; i < args.key[k + 1]; ++i) {
        const Tensor& t = args.tensors[tensor++];
        const std::string item = arg + "[" + std::to_string(i) + "]";
        std::ostringstream d;
        d << t.dtype() << t.sizes() << " strides " << t.strides() << " " << t.device()
          << (t.requires_grad() ? " requires_grad" : "");
        out.emplace_back(item, d.str());
      }
      k += 2;
    } else if (tag == 3) {
      std::ostringstream d;
      d << std::bit_cast<double>(args.key[k + 1]);
      out.emplace_back(arg + " value", d.str());
      k += 2;
    } else {
      out.emplace_back(arg + " value", std::to_string(args.key[k + 1]));
      k += 2;
    }
  }
  const Tf32Policy tf32 = allow_tf32();
  out.emplace_back("grad mode", is_grad_enabled() ? "enabled" : "disabled");
  out.emplace_back("TF32 policy", std::string("matmul ") + (tf32.matmul ? "on" : "off") + ", conv " +
                                      (tf32.conv ? "on" : "off"));
  return out;
}

// The first guard in which `now` differs from `before`.
std::string first_difference(const std::vector<std::pair<std::string, std::string>>& before,
                             const std::vector<std::pair<std::string, std::string>>& now) {
  for (size_t i = 0; i < std::min(before.size(), now.size()); ++i) {
    if (before[i].first != now[i].first) return "the arguments' kinds changed (" + now[i].first + ")";
    if (before[i].second != now[i].second)
      return now[i].first + " was " + before[i].second + ", now " + now[i].second;
  }
  return "the number of arguments changed";
}

}  // namespace

void reset() { g_epoch.fetch_add(1, std::memory_order_relaxed); }

namespace internal {

struct Core::Impl {
  CompileOptions options;
  std::mutex mutex;
  std::unordered_map<std::vector<int64_t>, std::shared_ptr<Entry>, KeyHash> cache;
  CompileStats stats;
  std::vector<std::string> recompiles, graph_breaks;
  bool warned_limit = false;
  uint64_t epoch = 0;
};

Core::Core(CompileOptions options, std::string default_name) : impl_(std::make_shared<Impl>()) {
  if (options.name.empty()) options.name = std::move(default_name);
  if (options.strict && options.freeze) {
    throw ValueError(detail::str_cat("compile: ", options.name,
                                     ": strict and freeze: freezing folds batch norms into convolutions, which "
                                     "rounds differently from eager"));
  }
  if (options.recompile_limit < 1) {
    throw ValueError(detail::str_cat("compile: recompile_limit must be at least 1, got ", options.recompile_limit));
  }
  impl_->options = std::move(options);
  impl_->epoch = g_epoch.load(std::memory_order_relaxed);
}

Core::~Core() = default;

CompileStats Core::stats() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->stats;
}

const CompileOptions& Core::options() const { return impl_->options; }

ExplainReport Core::explain() const {
  std::lock_guard lock(impl_->mutex);
  ExplainReport r;
  r.name = impl_->options.name;
  r.stats = impl_->stats;
  r.recompiles = impl_->recompiles;
  r.graph_breaks = impl_->graph_breaks;
  std::vector<std::shared_ptr<Entry>> entries;
  for (const auto& [key, e] : impl_->cache)
    if (e->trace) entries.push_back(e);
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a->order < b->order; });
  for (const auto& e : entries) {
    ExplainReport::Graph g;
    const Graph& graph = e->trace->graph;
    g.nodes = static_cast<int64_t>(graph.nodes().size());
    for (const Node& n : graph.nodes()) {
      const std::string name(ops::op_schema(n.op).name);
      const std::string op = n.inplace() ? name + "_" : name;
      auto it = std::find_if(g.ops.begin(), g.ops.end(), [&](const auto& p) { return p.first == op; });
      if (it == g.ops.end()) {
        g.ops.emplace_back(op, 1);
      } else {
        ++it->second;
      }
    }
    g.guards = e->described;
    g.captured = static_cast<int64_t>(graph.captured().size());
    g.executable = e->executable != nullptr;
    if (e->executable) {
      for (const auto& a : e->executable->plan().arenas) g.arena_bytes += a.nbytes;
      g.planned_bytes = e->executable->plan().planned_bytes;
    }
    g.trace_ms = e->trace_ms;
    g.verify_ms = e->verify_ms;
    g.passes_ms = e->passes_ms;
    g.traced_nodes = static_cast<int64_t>(e->traced_nodes);
    g.lower_ms = e->lower_ms;
    {
      std::lock_guard graph_lock(e->graph_mutex);
      g.cuda_graph = e->graphed != nullptr;
      g.record_ms = e->record_ms;
      g.autotune_ms = e->autotune_ms;
      for (const std::string& why : e->graph_obstacles)
        r.cuda_graph_skips.push_back(detail::str_cat("graph ", r.graphs.size() + 1, ": ", why));
    }
    g.text = to_text(graph);
    r.graphs.push_back(std::move(g));
  }
  return r;
}

TensorList Core::call(const FlatArgs& args, const Runner& run, std::vector<int64_t>& structure) {
  Impl& m = *impl_;
  std::vector<int64_t> key = build_key(args);
  std::shared_ptr<Entry> entry;
  {
    std::lock_guard lock(m.mutex);
    const uint64_t epoch = g_epoch.load(std::memory_order_relaxed);
    if (epoch != m.epoch) {  // compiler::reset()
      m.cache.clear();
      m.recompiles.clear();
      m.graph_breaks.clear();
      m.stats.traces = 0;
      m.warned_limit = false;
      m.epoch = epoch;
    }
    ++m.stats.calls;
    const auto it = m.cache.find(key);
    if (it != m.cache.end()) entry = it->second;
  }
  std::string reason;
  if (entry) {
    if (!entry->trace) {  // a graph break: this key runs eagerly
      std::lock_guard lock(m.mutex);
      ++m.stats.eager_calls;
    } else {
      bool fresh = true;
      for (size_t i = 0; i < entry->captured.size() && fresh; ++i) {
        if (!entry->captured[i].matches(entry->trace->captured[i])) {
          fresh = false;
          reason = detail::str_cat("captured tensor ", i, " (", entry->captured[i].dtype, entry->captured[i].sizes,
                                   " ", entry->captured[i].device, ") is now ",
                                   entry->trace->captured[i].dtype(), entry->trace->captured[i].sizes(), " ",
                                   entry->trace->captured[i].device());
        }
      }
      if (fresh) {
        {
          std::lock_guard lock(m.mutex);
          ++m.stats.replays;
        }
        structure = entry->structure;
        int64_t graph_calls = 0;
        const auto compiled = [&] { return run_entry(*entry, args.tensors, m.options.name, graph_calls); };
        TensorList out = m.options.check ? checked_call(*entry, args.tensors, run, m.options, compiled) : compiled();
        if (graph_calls) {
          std::lock_guard lock(m.mutex);
          m.stats.graph_launches += graph_calls;
        }
        return out;
      }
    }
    if (!entry->trace) return run(args.tensors, structure);
  }
  // A new key (or a stale graph): trace, within the limit.
  const auto described = describe(args);
  {
    std::lock_guard lock(m.mutex);
    if (m.stats.traces >= m.options.recompile_limit) {
      ++m.stats.eager_calls;
      if (!m.warned_limit) {
        m.warned_limit = true;
        std::fprintf(stderr,
                     "kiln: %s reached its recompile limit (%d traces); calls with new guards run eagerly "
                     "(CompileOptions::recompile_limit; KILN_LOGS=recompiles shows why each trace was made)\n",
                     m.options.name.c_str(), m.options.recompile_limit);
      }
      entry.reset();
    } else {
      ++m.stats.traces;
      if (reason.empty()) {  // against the cached graph whose guards are closest
        size_t best = SIZE_MAX;
        for (const auto& [k, e] : m.cache) {
          size_t differences = e->described.size() == described.size() ? 0 : SIZE_MAX / 2;
          for (size_t i = 0; i < std::min(e->described.size(), described.size()); ++i)
            differences += e->described[i] != described[i];
          if (differences < best) {
            best = differences;
            reason = first_difference(e->described, described);
          }
        }
      }
      if (m.stats.traces > 1) {
        m.recompiles.push_back(reason);
        log(LogChannel::kRecompiles, detail::str_cat("recompiling ", m.options.name, " (trace ", m.stats.traces,
                                                     " of at most ", m.options.recompile_limit, "): ", reason));
      }
      entry = std::make_shared<Entry>();
      entry->order = m.stats.traces;
    }
  }
  if (!entry) return run(args.tensors, structure);
  entry->key = key;
  entry->described = described;
  std::string break_reason;
  const auto trace_start = std::chrono::steady_clock::now();
  try {
    Tracer tracer;
    TensorList proxies;
    proxies.reserve(args.tensors.size());
    for (const Tensor& t : args.tensors) proxies.push_back(tracer.input(t));
    const TensorList outputs = run(proxies, structure);
    entry->trace = std::make_shared<const Trace>(tracer.finish(outputs));
  } catch (const DataDependentRead& e) {
    if (m.options.fullgraph) {
      throw Error(detail::str_cat("compile: ", m.options.name, " (fullgraph): ", e.what()));
    }
    break_reason = e.what();
    log(LogChannel::kGraphBreaks, detail::str_cat(m.options.name, ": ", e.what(), "; this key runs eagerly"));
    entry->trace.reset();
  }
  entry->trace_ms = ms_since(trace_start);
  entry->structure = structure;
  if (entry->trace) {
    const auto verify_start = std::chrono::steady_clock::now();
    verify(entry->trace->graph);
    entry->verify_ms = ms_since(verify_start);
    const auto passes_start = std::chrono::steady_clock::now();
    entry->traced_nodes = entry->trace->graph.nodes().size();
    entry->trace = std::make_shared<const Trace>(run_passes(*entry->trace, nullptr, m.options.freeze));
    entry->passes_ms = ms_since(passes_start);
    bool needs_grad = false;
    for (const Tensor& t : entry->trace->captured) {
      entry->captured.push_back(layout_of(t));
      needs_grad = needs_grad || t.requires_grad();
    }
    for (const Tensor& t : args.tensors) needs_grad = needs_grad || t.requires_grad();
    const auto lower_start = std::chrono::steady_clock::now();
    if (!(needs_grad && is_grad_enabled())) entry->executable = std::make_shared<const Executable>(entry->trace);
    entry->lower_ms = ms_since(lower_start);
    if (m.options.mode != Mode::Default) {
      if (entry->executable) {
        entry->graph_obstacles = GraphedExecutable::obstacles(*entry->executable);
      } else {
        entry->graph_obstacles.push_back(
            "its arguments or captured tensors require grad: calls replay through dispatch, which records autograd");
      }
      for (const std::string& why : entry->graph_obstacles)
        log(LogChannel::kPerf, detail::str_cat(m.options.name, ", trace ", entry->order, ": not a CUDA graph: ", why));
    }
    log(LogChannel::kGraphs, detail::str_cat(m.options.name, ", trace ", m.stats.traces, ":\n",
                                             to_text(entry->trace->graph)));
  }
  {
    std::lock_guard lock(m.mutex);
    if (!entry->trace) {
      ++m.stats.graph_breaks;
      m.graph_breaks.push_back(break_reason);
    }
    m.cache[key] = entry;
  }
  if (!entry->trace) {
    {
      std::lock_guard lock(m.mutex);
      ++m.stats.eager_calls;
    }
    return run(args.tensors, structure);
  }
  {
    std::lock_guard lock(m.mutex);
    ++m.stats.replays;
  }
  const auto compiled = [&] {
    // This first run makes the libraries' plans and handles (under
    // MaxAutotune, by timing their candidates).
    const auto start = std::chrono::steady_clock::now();
    std::optional<backend::autotune::Scope> tune;
    if (m.options.mode == Mode::MaxAutotune) tune.emplace();
    int64_t graph_calls = 0;
    TensorList out = run_entry(*entry, args.tensors, m.options.name, graph_calls);
    if (tune) entry->autotune_ms = ms_since(start);
    tune.reset();  // recording times nothing
    // The graph records the same work, and replays it from the next call.
    if (m.options.mode != Mode::Default && entry->executable && entry->graph_obstacles.empty())
      record_graph(*entry, args.tensors, m.options.name);
    return out;
  };
  return m.options.check ? checked_call(*entry, args.tensors, run, m.options, compiled) : compiled();
}

}  // namespace internal
}  // namespace kiln::compiler

namespace kiln {

std::string ExplainReport::to_string() const {
  std::ostringstream os;
  os << name << ": " << graphs.size() << " graph" << (graphs.size() == 1 ? "" : "s") << ", " << graph_breaks.size()
     << " graph break" << (graph_breaks.size() == 1 ? "" : "s") << ", " << recompiles.size() << " recompile"
     << (recompiles.size() == 1 ? "" : "s") << "; " << stats.calls << " calls: " << stats.replays << " replayed, "
     << stats.eager_calls << " eager";
  if (stats.graph_launches) os << ", " << stats.graph_launches << " as CUDA graphs";
  os << "\n";
  for (size_t i = 0; i < graphs.size(); ++i) {
    const Graph& g = graphs[i];
    os << "graph " << i + 1 << ": " << g.nodes << " ops (";
    for (size_t k = 0; k < g.ops.size(); ++k) os << (k ? ", " : "") << g.ops[k].first << " x" << g.ops[k].second;
    os << "), " << g.captured << " captured tensors, "
       << (g.executable ? "planned executable" : "replayed through dispatch (records autograd)");
    if (g.executable) os << ", arena " << g.arena_bytes << " bytes for " << g.planned_bytes << " planned";
    if (g.cuda_graph) os << ", replayed as one CUDA graph";
    os << "\n  passes: " << g.traced_nodes << " traced ops -> " << g.nodes << "\n  compile: trace " << g.trace_ms
       << " ms, verify " << g.verify_ms << " ms, passes " << g.passes_ms << " ms, lower " << g.lower_ms << " ms";
    if (g.autotune_ms > 0) os << ", first run with autotuning " << g.autotune_ms << " ms";
    if (g.cuda_graph || g.record_ms > 0) os << ", record " << g.record_ms << " ms";
    os << "\n";
    os << "  guards:\n";
    for (const auto& [guard, value] : g.guards) os << "    " << guard << " == " << value << "\n";
  }
  for (const auto& b : graph_breaks) os << "graph break: " << b << "\n";
  for (const auto& r : recompiles) os << "recompile: " << r << "\n";
  for (const auto& c : cuda_graph_skips) os << "not captured as a CUDA graph: " << c << "\n";
  return os.str();
}

std::string ExplainReport::to_json() const {
  nlohmann::json j;
  j["name"] = name;
  j["stats"] = {{"calls", stats.calls},
                {"replays", stats.replays},
                {"traces", stats.traces},
                {"eager_calls", stats.eager_calls},
                {"graph_breaks", stats.graph_breaks},
                {"graph_launches", stats.graph_launches}};
  j["graphs"] = nlohmann::json::array();
  for (const Graph& g : graphs) {
    nlohmann::json ops = nlohmann::json::array(), guards = nlohmann::json::array();
    for (const auto& [op, count] : g.ops) ops.push_back({{"op", op}, {"count", count}});
    for (const auto& [guard, value] : g.guards) guards.push_back({{"guard", guard}, {"value", value}});
    j["graphs"].push_back({{"nodes", g.nodes},
                           {"ops", ops},
                           {"guards", guards},
                           {"captured", g.captured},
                           {"executable", g.executable},
                           {"cuda_graph", g.cuda_graph},
                           {"arena_bytes", g.arena_bytes},
                           {"planned_bytes", g.planned_bytes},
                           {"traced_nodes", g.traced_nodes},
                           {"compile_ms",
                            {{"trace", g.trace_ms},
                             {"verify", g.verify_ms},
                             {"passes", g.passes_ms},
                             {"lower", g.lower_ms},
                             {"record", g.record_ms},
                             {"autotune", g.autotune_ms}}},
                           {"text", g.text}});
  }
  j["graph_breaks"] = graph_breaks;
  j["recompiles"] = recompiles;
  j["cuda_graph_skips"] = cuda_graph_skips;
  return j.dump(1);
}

}  // namespace kiln
