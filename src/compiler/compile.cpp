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
// The facts about a captured tensor a graph depends on; for a leaf that
// requires grad, also whether it had a gradient when traced, and which, when
// the graph reads that gradient (it is then captured too).
struct LayoutGuard {
  Shape sizes, strides;
  DType dtype;
  Device device;
  bool requires_grad;
  bool has_grad = false;
  const TensorImpl* grad = nullptr;
  bool matches(const Tensor& t) const {
    if (!(t.sizes() == sizes && t.strides() == strides && t.dtype() == dtype && t.device() == device &&
          t.requires_grad() == requires_grad))
      return false;
    if (!requires_grad) return true;
    const Tensor g = t.grad();
    return g.defined() == has_grad && (grad == nullptr || g.impl_ptr().get() == grad);
  }
};

// `grad`: the tensor's gradient as the trace found it.
LayoutGuard layout_of(const Tensor& t, const Tensor& grad, const TensorList& captured) {
  LayoutGuard l{t.sizes(), t.strides(), t.dtype(), t.device(), t.requires_grad()};
  if (l.requires_grad) {
    l.has_grad = grad.defined();
    for (const Tensor& c : captured)
      if (grad.defined() && c.impl_ptr() == grad.impl_ptr()) l.grad = grad.impl_ptr().get();
  }
  return l;
}

// One graph of a trace. A trace that breaks at host reads (graph breaks) is a
// tree of segments: each ends where the program read a value on the host,
// and the segment that follows is chosen by the bytes read.
struct Segment;

struct Link {
  std::shared_ptr<Segment> next;
  std::string value;  // the value read, printed
};

struct Segment {
  std::shared_ptr<const Trace> trace;  // after the passes
  // The lowered schedule, where no gradient is recorded; else calls replay
  // the trace through dispatch, which records autograd as eager does.
  std::shared_ptr<const Executable> executable;
  std::vector<int32_t> sources;  // graph input i is the call's tensor sources[i] (Tracer::sources)
  std::vector<LayoutGuard> captured;
  // What a later trace must match to reuse this graph: the traced graph's
  // structure, its captured tensors and random generators.
  uint64_t traced_hash = 0;
  std::vector<const TensorImpl*> captured_ids;
  std::vector<const Generator*> generators;
  int32_t read = -1;      // the output the program read on the host; -1: the last graph
  bool guarded = true;    // the read can be guarded (else calls with this key run eagerly afterwards)
  std::string read_description;
  std::vector<int64_t> structure;  // the last graph's: the results' nesting
  // A training step: the function ran backward() (its graph holds the backward
  // ops and runs as an executable, recording no autograd), and the last
  // graph's gradient outputs, which follow its results.
  bool ran_backward = false;
  std::vector<GradWrite> grad_writes;
  std::vector<HostGuard> host_guards;
  std::unordered_map<std::string, Link> next;  // by the bytes read (under Impl::mutex)
  int64_t order = 0;    // the graph's number in its function, from 1
  int64_t resumes = 0;  // the number of the graph whose read it follows (0: a first graph)
  double trace_ms = 0, verify_ms = 0, passes_ms = 0, lower_ms = 0, record_ms = 0, autotune_ms = 0;
  size_t traced_nodes = 0;
  // Mode::ReduceOverhead: the executable recorded as one device graph, or
  // why it is not (obstacles found before recording, or the recording's failure).
  mutable std::mutex graph_mutex;
  std::shared_ptr<GraphedExecutable> graphed;
  std::vector<std::string> graph_obstacles;

  size_t outputs() const { return trace->graph.outputs().size(); }
};

struct Entry {
  std::vector<int64_t> key;
  std::vector<std::pair<std::string, std::string>> described;  // (guard, value), for logs
  // The first graph (under Impl::mutex); none: calls with this key run
  // eagerly (a graph break that cannot resume, or the recompile limit).
  std::shared_ptr<Segment> root;
};

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

// Records the segment's executable as a device graph for arguments laid out
// as `tensors` (the executable has just run on them); a failure becomes the
// reason the segment has none.
void record_graph(Segment& seg, const TensorList& tensors, const std::string& name) {
  const auto start = std::chrono::steady_clock::now();
  std::shared_ptr<GraphedExecutable> graphed;
  std::string failure;
  try {
    graphed = std::make_shared<GraphedExecutable>(seg.executable, tensors);
  } catch (const Error& e) {
    failure = detail::str_cat("the device refused to record it: ", e.what());
  }
  const double ms = ms_since(start);
  std::lock_guard lock(seg.graph_mutex);
  seg.graphed = std::move(graphed);
  seg.record_ms += ms;
  if (!failure.empty()) {
    seg.graph_obstacles.push_back(failure);
    log(LogChannel::kPerf, detail::str_cat(name, ", graph ", seg.order, ": not a CUDA graph: ", failure));
  } else {
    log(LogChannel::kPerf, detail::str_cat(name, ", graph ", seg.order, ": recorded as a CUDA graph in ", ms, " ms"));
  }
}

// A segment's call: its device graph, its executable, or where autograd
// must record, a replay through dispatch.
TensorList run_segment(Segment& seg, const TensorList& tensors, const std::string& name, int64_t& graph_calls) {
  if (!seg.executable) return replay(*seg.trace, tensors);
  std::shared_ptr<GraphedExecutable> graphed;
  {
    std::lock_guard lock(seg.graph_mutex);
    graphed = seg.graphed;
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
          std::lock_guard lock(seg.graph_mutex);
          if (seg.graphed != graphed) break;  // another thread is recording it anew
          seg.graphed.reset();
        }
        log(LogChannel::kPerf, detail::str_cat(name, ", graph ", seg.order,
                                               ": a captured tensor moved to other memory; recording again"));
        TensorList out = seg.executable->run(tensors);
        record_graph(seg, tensors, name);
        return out;
      }
    }
  }
  return seg.executable->run(tensors);
}

// A segment's first call: it makes the libraries' plans and handles (under
// MaxAutotune, by timing their candidates); then, under ReduceOverhead and
// MaxAutotune, the same work is recorded as a device graph for later calls.
TensorList first_run(Segment& seg, const TensorList& tensors, const CompileOptions& options, int64_t& graph_calls) {
  const auto start = std::chrono::steady_clock::now();
  std::optional<backend::autotune::Scope> tune;
  if (options.mode == Mode::MaxAutotune) tune.emplace();
  TensorList out = run_segment(seg, tensors, options.name, graph_calls);
  if (tune) seg.autotune_ms = ms_since(start);
  tune.reset();  // recording times nothing
  if (options.mode != Mode::Default && seg.executable && seg.graph_obstacles.empty())
    record_graph(seg, tensors, options.name);
  return out;
}

// A training step's last graph: its gradient outputs go to their tensors'
// grad(), and the results are what is left.
void apply_grad_writes(const Segment& seg, TensorList& outs) {
  if (seg.grad_writes.empty()) return;
  const size_t results = outs.size() - static_cast<size_t>(std::count_if(
      seg.grad_writes.begin(), seg.grad_writes.end(), [](const GradWrite& w) { return w.output >= 0; }));
  for (const GradWrite& w : seg.grad_writes) w.owner.set_grad(w.output >= 0 ? outs.at(static_cast<size_t>(w.output)) : Tensor());
  outs.resize(results);
}

// The tensors a segment reads, from the call's tensors.
TensorList gather(const TensorList& env, const std::vector<int32_t>& sources) {
  TensorList out;
  out.reserve(sources.size());
  for (int32_t s : sources) out.push_back(env.at(static_cast<size_t>(s)));
  return out;
}

// The bytes of a tensor the program read: what a graph break is guarded on.
std::string read_key(const Tensor& t) {
  TracerPause untraced;
  NoGradGuard no_grad;
  const Tensor c = t.detach().to(Device::cpu()).contiguous();
  std::string key = detail::str_cat(dtype_name(c.dtype()), ":");
  key.append(static_cast<const char*>(c.data_ptr()), static_cast<size_t>(c.numel()) * c.element_size());
  return key;
}

std::string read_value_text(const Tensor& t) {
  TracerPause untraced;
  NoGradGuard no_grad;
  if (t.numel() > 8) return detail::str_cat(t.numel(), " values");
  std::ostringstream os;
  const std::vector<double> v = t.detach().to_vector<double>();
  if (t.dim() > 0) os << "[";
  for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
  if (t.dim() > 0) os << "]";
  return os.str();
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

// What a call may change besides its results: the arguments and captured
// tensors its graphs write, and the generators their random nodes draw
// from. Each graph's share is saved before the graph runs, so that eager
// can start from the state the call started from.
class CallState {
 public:
  explicit CallState(size_t arguments) : arguments_(arguments) {}

  // Saves what `seg` may change, before it runs on the call's tensors `env`.
  void add(const Segment& seg, const TensorList& env) {
    const Trace& trace = *seg.trace;
    const Graph& g = trace.graph;
    const std::vector<bool> written = written_storages(g);
    const auto take = [&](const Tensor& t, std::string label) {
      for (const Tensor& have : tensors_)
        if (have.shares_storage(t) && have.sizes() == t.sizes() && have.strides() == t.strides() &&
            have.storage_offset() == t.storage_offset())
          return;
      tensors_.push_back(t);
      labels_.push_back(std::move(label));
      NoGradGuard no_grad;
      saved_.push_back(t.detach().clone());
    };
    for (size_t i = 0; i < g.inputs().size(); ++i) {
      const auto source = static_cast<size_t>(seg.sources[i]);
      // Other inputs are tensors of earlier graphs of this call, which eager never sees.
      if (source < arguments_ && written[static_cast<size_t>(g.value(g.inputs()[i]).storage)])
        take(env[source], detail::str_cat("argument ", source));
    }
    for (size_t i = 0; i < g.captured().size(); ++i) {
      if (written[static_cast<size_t>(g.value(g.captured()[i]).storage)])
        take(trace.captured[i], seg.order == 1 ? detail::str_cat("captured tensor ", i)
                                               : detail::str_cat("captured tensor ", i, " of graph ", seg.order));
    }
    for (const Node& n : g.nodes()) {
      if (n.draw_count < 0) continue;
      Generator* gen = n.generator ? n.generator : &default_generator();
      if (std::none_of(generators_.begin(), generators_.end(), [&](const auto& p) { return p.first == gen; }))
        generators_.emplace_back(gen, *gen);
    }
    for (const GradWrite& w : seg.grad_writes) {
      if (std::any_of(grads_.begin(), grads_.end(), [&](const auto& o) { return o.first.impl_ptr() == w.owner.impl_ptr(); }))
        continue;
      grads_.emplace_back(w.owner, w.owner.grad());
      grad_labels_.push_back(detail::str_cat("the gradient of a ", w.owner.dtype(), w.owner.sizes(), " tensor"));
    }
  }
  // The written tensors' values now, then the gradients written.
  TensorList values() const {
    NoGradGuard no_grad;
    TensorList out;
    for (const Tensor& t : tensors_) out.push_back(t.detach().clone());
    for (const auto& [owner, saved] : grads_) out.push_back(owner.grad().defined() ? owner.grad().detach().clone() : Tensor());
    return out;
  }
  const std::string& label(size_t i) const {
    return i < labels_.size() ? labels_[i] : grad_labels_.at(i - labels_.size());
  }
  // Back to the state the call started from.
  void restore() {
    NoGradGuard no_grad;
    for (size_t i = 0; i < tensors_.size(); ++i) {
      Tensor t = tensors_[i].detach();
      t.copy_(saved_[i]);
    }
    for (const auto& [owner, saved] : grads_) owner.set_grad(saved);
    for (auto& [gen, state] : generators_) *gen = state;
  }
  // The written tensors and gradients back to `values` (from values()).
  void restore_values(const TensorList& values) {
    NoGradGuard no_grad;
    for (size_t i = 0; i < tensors_.size(); ++i) {
      Tensor t = tensors_[i].detach();
      t.copy_(values[i]);
    }
    for (size_t i = 0; i < grads_.size(); ++i) grads_[i].first.set_grad(values[tensors_.size() + i]);
  }

 private:
  size_t arguments_;
  TensorList tensors_, saved_;
  std::vector<std::string> labels_;
  std::vector<std::pair<Generator*, Generator>> generators_;
  std::vector<std::pair<Tensor, Tensor>> grads_;  // gradient owners, and their gradients before the call
  std::vector<std::string> grad_labels_;
};

TensorList detached_clones(std::span<const Tensor> ts) {
  TensorList out;
  for (const Tensor& t : ts) out.push_back(t.defined() ? t.detach().clone() : Tensor());
  return out;
}

// The first node whose value an executable computes differently from eager
// dispatch (replay), both run along the graphs the call took from its saved state.
std::string first_divergence(const std::vector<std::shared_ptr<Segment>>& path, const TensorList& args,
                             CallState& state, bool strict) {
  NoGradGuard no_grad;
  std::vector<std::vector<TensorList>> reference(path.size());
  state.restore();
  TensorList env = args;
  for (size_t k = 0; k < path.size(); ++k) {
    const TensorList outs = replay(*path[k]->trace, gather(env, path[k]->sources),
                                   [&](size_t, std::span<const Tensor> o) { reference[k].push_back(detached_clones(o)); });
    env.insert(env.end(), outs.begin(), outs.end());
  }
  state.restore();
  env = args;
  std::string found;
  bool any_executable = false;
  for (size_t k = 0; k < path.size() && found.empty(); ++k) {
    const Segment& seg = *path[k];
    const TensorList inputs = gather(env, seg.sources);
    TensorList outs;
    if (!seg.executable) {
      outs = replay(*seg.trace, inputs);
    } else {
      any_executable = true;
      outs = seg.executable->run(inputs, [&](size_t node, std::span<const Tensor> o) {
        for (size_t i = 0; i < o.size() && found.empty(); ++i) {
          const std::string d = difference(o[i], reference[k].at(node)[i], strict);
          if (d.empty()) continue;
          const Node& n = seg.trace->graph.nodes()[node];
          found = detail::str_cat(path.size() > 1 ? detail::str_cat("graph ", seg.order, " ") : std::string(), "node ",
                                  node, " (", ops::op_schema(n.op).name, n.inplace() ? "_" : "", ") output ", i,
                                  " is the first to differ from eager dispatch: ", d);
        }
      });
    }
    env.insert(env.end(), outs.begin(), outs.end());
  }
  if (!found.empty()) return found;
  if (!any_executable) {
    return "the graphs replay through dispatch (for autograd), as eager runs its ops: the trace does not record "
           "what the function does";
  }
  return detail::str_cat("every node of the graph", path.size() == 1 ? "" : "s",
                         " gives eager dispatch's value: the trace does not record what the function does");
}

// CompileOptions::check: runs the call through its graphs (`compiled`, which
// saves state into the CallState and lists the graphs it ran) and the
// function eagerly from the same state, and compares results and written
// tensors; kiln::Error naming the first divergence. Leaves eager's state.
using CompiledCall = std::function<TensorList(CallState*, std::vector<std::shared_ptr<Segment>>& path)>;

TensorList checked_call(const TensorList& args, const internal::Runner& run, const CompileOptions& options,
                        const CompiledCall& compiled) {
  CallState state(args.size());
  std::vector<std::shared_ptr<Segment>> path;
  const TensorList got = compiled(&state, path);
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
  const std::string where = first_divergence(path, args, state, options.strict);
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
  if (t.requires_grad()) {
    // Its gradient, which a traced backward() adds to in place: by identity.
    const Tensor g = t.grad();
    key.push_back(g.defined() ? static_cast<int64_t>(reinterpret_cast<intptr_t>(g.impl_ptr().get())) : 0);
  }
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
      if (t.requires_grad()) {
        std::ostringstream g;
        if (t.grad().defined()) g << "a tensor at " << static_cast<const void*>(t.grad().impl_ptr().get());
        out.emplace_back(arg + " grad", t.grad().defined() ? g.str() : "none");
      }
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

namespace {

// A graph break's tree keeps at most this many values per read; a value
// read past it runs the rest of its call from a trace, unkept.
constexpr size_t kMaxValuesPerRead = 256;

// One call's way through an entry's graphs.
struct Walk {
  TensorList env;                    // the arguments, then each graph's outputs
  std::vector<size_t> offsets;       // where each graph's outputs start in env
  std::vector<std::string> keys;     // the bytes read after each graph
  std::string last_value;            // the last of them, printed
};

}  // namespace

struct Core::Impl {
  CompileOptions options;
  std::mutex mutex;
  std::unordered_map<std::vector<int64_t>, std::shared_ptr<Entry>, KeyHash> cache;
  CompileStats stats;
  std::vector<std::string> recompiles, graph_breaks;
  bool warned_limit = false;
  uint64_t epoch = 0;
  int64_t compiling_traces = 0;  // traces that compiled a graph: what recompile_limit bounds
  int64_t graphs = 0;            // graphs compiled, which numbers them

  void warn_limit() {  // under mutex
    if (warned_limit) return;
    warned_limit = true;
    std::fprintf(stderr,
                 "kiln: %s reached its recompile limit (%d traces); calls with new guards run eagerly "
                 "(CompileOptions::recompile_limit; KILN_LOGS=recompiles shows why each trace was made)\n",
                 options.name.c_str(), options.recompile_limit);
  }

  std::shared_ptr<Segment> compile_segment(Trace traced, double trace_ms, bool keep,
                                           const std::function<Tensor(const Tensor&)>& grad_at_start);
  // A call of a key seen before, from its first graph (root).
  TensorList serve(Entry& entry, std::shared_ptr<Segment> root, const FlatArgs& args, const Runner& run,
                   std::vector<int64_t>& structure, CallState* state, std::vector<std::shared_ptr<Segment>>& path);
  TensorList trace(Entry& entry, Walk& walk, const FlatArgs& args, const Runner& run,
                   std::vector<int64_t>& structure, CallState* state, std::vector<std::shared_ptr<Segment>>& path,
                   const std::string& reason, bool new_key);
};

// A traced graph made ready to run: verified, rewritten by the passes and
// lowered (or, when it is not kept, run as traced through dispatch).
std::shared_ptr<Segment> Core::Impl::compile_segment(Trace traced, double trace_ms, bool keep,
                                                     const std::function<Tensor(const Tensor&)>& grad_at_start) {
  auto seg = std::make_shared<Segment>();
  seg->trace_ms = trace_ms;
  seg->traced_hash = structural_hash(traced.graph);
  for (const Tensor& t : traced.captured) seg->captured_ids.push_back(t.impl_ptr().get());
  for (const Node& n : traced.graph.nodes())
    if (n.draw_count >= 0) seg->generators.push_back(n.generator);
  seg->traced_nodes = traced.graph.nodes().size();
  if (!keep) {
    seg->trace = std::make_shared<const Trace>(std::move(traced));
    return seg;
  }
  const auto verify_start = std::chrono::steady_clock::now();
  verify(traced.graph);
  seg->verify_ms = ms_since(verify_start);
  const auto passes_start = std::chrono::steady_clock::now();
  seg->trace = std::make_shared<const Trace>(options.backend == CompileBackend::Replay
                                                 ? std::move(traced)
                                                 : run_passes(traced, nullptr, options.freeze));
  seg->passes_ms = ms_since(passes_start);
  for (const Tensor& t : seg->trace->captured)
    seg->captured.push_back(layout_of(t, grad_at_start(t), seg->trace->captured));
  return seg;
}

TensorList Core::Impl::serve(Entry& entry, std::shared_ptr<Segment> root, const FlatArgs& args, const Runner& run,
                             std::vector<int64_t>& structure, CallState* state,
                             std::vector<std::shared_ptr<Segment>>& path) {
  Walk walk;  // its env is filled at the first graph break (the first graph reads the arguments)
  std::shared_ptr<Segment> seg = std::move(root);
  const auto fill_env = [&] {
    if (walk.env.empty()) walk.env = args.tensors;
  };
  bool first = true;
  std::string reason;
  int64_t launches = 0;
  while (true) {
    for (size_t i = 0; i < seg->captured.size() && reason.empty(); ++i) {
      const LayoutGuard& was = seg->captured[i];
      const Tensor& now = seg->trace->captured[i];
      if (!was.matches(now)) {
        reason = detail::str_cat("captured tensor ", i, " (", was.dtype, was.sizes, " ", was.device, ") is now ",
                                 now.dtype(), now.sizes(), " ", now.device());
        if (seg->order > 1) reason += detail::str_cat(" (graph ", seg->order, ")");
      }
    }
    for (size_t i = 0; i < seg->host_guards.size() && reason.empty(); ++i) {
      const HostGuard& h = seg->host_guards[i];
      if (const double now = h.read(); now != h.value)
        reason = detail::str_cat(h.what, " was ", h.value, ", now ", now);
    }
    if (!reason.empty()) break;
    if (state) {
      fill_env();
      state->add(*seg, walk.env);
    }
    // A first graph's inputs are the arguments, in order (Tracer::input).
    TensorList outs = first ? run_segment(*seg, args.tensors, options.name, launches)
                                  : run_segment(*seg, gather(walk.env, seg->sources), options.name, launches);
    first = false;
    if (state || seg->read >= 0) path.push_back(seg);
    apply_grad_writes(*seg, outs);
    if (seg->read < 0) {
      structure = seg->structure;
      std::lock_guard lock(mutex);
      ++stats.replays;
      stats.graph_launches += launches;
      return outs;
    }
    fill_env();
    walk.offsets.push_back(walk.env.size());
    walk.env.insert(walk.env.end(), outs.begin(), outs.end());
    walk.keys.push_back(read_key(outs[static_cast<size_t>(seg->read)]));
    std::shared_ptr<Segment> child;
    {
      std::lock_guard lock(mutex);
      const auto it = seg->next.find(walk.keys.back());
      if (it != seg->next.end()) child = it->second.next;
    }
    if (!child) {
      walk.last_value = read_value_text(outs[static_cast<size_t>(seg->read)]);
      reason = detail::str_cat("graph ", seg->order, " ended at a graph break where ", seg->read_description,
                               " and read ", walk.last_value, ", a value not seen there before");
      break;
    }
    seg = child;
  }
  {
    std::lock_guard lock(mutex);
    stats.graph_launches += launches;
  }
  fill_env();
  return trace(entry, walk, args, run, structure, state, path, reason, false);
}

// Traces the function for this call. The graphs the call already ran (path)
// are traced again and answered from their results (their outputs in
// walk.env); from there on, each graph the trace cuts is placed in the tree:
// an equal graph already there is reused, else a new one is compiled (within
// the recompile limit) and linked under the value read before it.
TensorList Core::Impl::trace(Entry& entry, Walk& walk, const FlatArgs& args, const Runner& run,
                             std::vector<int64_t>& structure, CallState* state,
                             std::vector<std::shared_ptr<Segment>>& path, const std::string& reason, bool new_key) {
  const size_t follow = path.size();
  {
    std::lock_guard lock(mutex);
    ++stats.traces;
  }
  if (!new_key) {
    log(LogChannel::kRecompiles, detail::str_cat("tracing ", options.name, " again: ", reason));
  }
  bool compiled_any = false, kept_all = true, unguarded = false, ran_backward = false;
  int64_t launches = 0;
  auto mark = std::chrono::steady_clock::now();

  // The graph for the trace's next cut: an equal one already in the tree, or a new one.
  std::optional<Tracer> tracer(std::in_place);
  const auto grad_at_start = [&](const Tensor& t) { return tracer ? tracer->grad_at_start(t) : t.grad(); };
  const auto place = [&](Trace traced, const std::vector<int32_t>& sources, int32_t read, const HostRead* how,
                         const std::string& description, const std::vector<int64_t>& result_structure,
                         std::vector<HostGuard> host_guards, std::vector<GradWrite> grad_writes) {
    const double trace_ms = ms_since(mark);
    const size_t depth = path.size();
    const std::shared_ptr<Segment> parent = depth == 0 ? nullptr : path.back();
    const bool guarded = how == nullptr || how->guardable;
    const uint64_t hash = structural_hash(traced.graph);
    std::vector<const TensorImpl*> ids;
    for (const Tensor& t : traced.captured) ids.push_back(t.impl_ptr().get());
    std::vector<const Generator*> gens;
    for (const Node& n : traced.graph.nodes())
      if (n.draw_count >= 0) gens.push_back(n.generator);
    std::shared_ptr<Segment> seg;
    bool keep = !unguarded && guarded;
    {
      std::lock_guard lock(mutex);
      std::vector<std::shared_ptr<Segment>> candidates;
      if (parent) {
        for (const auto& [key, link] : parent->next) candidates.push_back(link.next);
      } else if (entry.root) {
        candidates.push_back(entry.root);
      }
      const auto same_writes = [&](const Segment& c) {
        if (c.grad_writes.size() != grad_writes.size() || c.host_guards.size() != host_guards.size()) return false;
        for (size_t i = 0; i < grad_writes.size(); ++i)
          if (c.grad_writes[i].owner.impl_ptr() != grad_writes[i].owner.impl_ptr() ||
              c.grad_writes[i].output != grad_writes[i].output)
            return false;
        return c.ran_backward == ran_backward;
      };
      for (const auto& c : candidates) {
        bool fresh = true;
        for (size_t i = 0; i < c->captured.size() && fresh; ++i) fresh = c->captured[i].matches(c->trace->captured[i]);
        for (size_t i = 0; i < c->host_guards.size() && fresh; ++i)
          fresh = c->host_guards[i].read() == c->host_guards[i].value;
        if (fresh && c->traced_hash == hash && c->sources == sources && c->read == read && c->guarded == guarded &&
            c->structure == result_structure && c->captured_ids == ids && c->generators == gens && same_writes(*c)) {
          seg = c;
          break;
        }
      }
      if (!seg && keep && !compiled_any) {
        if (compiling_traces >= options.recompile_limit) {
          keep = false;
          warn_limit();
        } else {
          ++compiling_traces;
          compiled_any = true;
        }
      }
    }
    const bool fresh_segment = !seg;
    if (fresh_segment) {
      seg = compile_segment(std::move(traced), trace_ms, keep, grad_at_start);
      seg->ran_backward = ran_backward;
      seg->grad_writes = std::move(grad_writes);
      seg->host_guards = std::move(host_guards);
      seg->sources = sources;
      seg->read = read;
      seg->guarded = guarded;
      seg->read_description = description;
      seg->structure = result_structure;
      if (keep) {
        const auto lower_start = std::chrono::steady_clock::now();
        bool needs_grad = false;
        for (const Tensor& t : seg->trace->captured) needs_grad = needs_grad || t.requires_grad();
        for (int32_t s : sources) needs_grad = needs_grad || walk.env.at(static_cast<size_t>(s)).requires_grad();
        // A training step's graph holds its backward ops: it records no autograd.
        if (options.backend == CompileBackend::Default && (!(needs_grad && is_grad_enabled()) || seg->ran_backward))
          seg->executable = std::make_shared<const Executable>(seg->trace);
        seg->lower_ms = ms_since(lower_start);
        std::lock_guard lock(mutex);
        seg->order = ++graphs;
        seg->resumes = parent ? parent->order : 0;
        if (read >= 0) {
          ++stats.graph_breaks;
          graph_breaks.push_back(detail::str_cat("graph ", seg->order, ": ", description,
                                                 "; the graph after it is chosen by the value read"));
          log(LogChannel::kGraphBreaks, detail::str_cat(options.name, ": ", graph_breaks.back()));
        }
      }
      if (keep && options.mode != Mode::Default) {
        if (seg->executable) {
          seg->graph_obstacles = GraphedExecutable::obstacles(*seg->executable);
        } else {
          seg->graph_obstacles.push_back(
              "its arguments or captured tensors require grad: calls replay through dispatch, which records "
              "autograd");
        }
        for (const std::string& why : seg->graph_obstacles)
          log(LogChannel::kPerf, detail::str_cat(options.name, ", graph ", seg->order, ": not a CUDA graph: ", why));
      }
      if (keep) {
        log(LogChannel::kGraphs, detail::str_cat(options.name, ", graph ", seg->order, ":\n", to_text(seg->trace->graph)));
      }
    }
    kept_all = kept_all && keep;
    if (keep) {
      std::lock_guard lock(mutex);
      if (!parent) {
        entry.root = seg;
      } else {
        auto it = parent->next.find(walk.keys.back());
        if (it != parent->next.end()) {
          it->second.next = seg;  // it was stale
        } else if (parent->next.size() < kMaxValuesPerRead) {
          parent->next.emplace(walk.keys.back(), Link{seg, walk.last_value});
        }
      }
    }
    // Its run.
    const TensorList inputs = gather(walk.env, seg->sources);
    if (state) state->add(*seg, walk.env);
    TensorList outs = fresh_segment && keep ? first_run(*seg, inputs, options, launches)
                                            : run_segment(*seg, inputs, options.name, launches);
    apply_grad_writes(*seg, outs);
    path.push_back(seg);
    mark = std::chrono::steady_clock::now();
    return outs;
  };

  size_t cuts = 0;
  tracer->on_break([&](Cut cut) -> TensorList {
    const size_t k = cuts++;
    if (k < follow) {  // a graph this call has run: its results answer the trace
      const Segment& ran = *path[k];
      if (cut.read != static_cast<size_t>(ran.read) || cut.sources != ran.sources ||
          structural_hash(cut.trace.graph) != ran.traced_hash) {
        throw Error(detail::str_cat("compile: ", options.name, ": traced again with the same guards, the function did "
                                    "not reach graph break ", k + 1, " as before (", ran.read_description, "; now ",
                                    cut.description, "): its ops depend on something besides its arguments, captured "
                                    "tensors and the values it read"));
      }
      mark = std::chrono::steady_clock::now();
      return TensorList(walk.env.begin() + static_cast<std::ptrdiff_t>(walk.offsets[k]),
                        walk.env.begin() + static_cast<std::ptrdiff_t>(walk.offsets[k] + ran.outputs()));
    }
    if (options.fullgraph) {
      throw Error(detail::str_cat("compile: ", options.name, " (fullgraph): ", cut.description));
    }
    const int32_t read = static_cast<int32_t>(cut.read);
    if (!cut.how.guardable && !unguarded) {
      unguarded = true;
      std::lock_guard lock(mutex);
      ++stats.graph_breaks;
      graph_breaks.push_back(detail::str_cat(cut.description, "; calls with this key run eagerly"));
      log(LogChannel::kGraphBreaks, detail::str_cat(options.name, ": ", graph_breaks.back()));
    }
    ran_backward = ran_backward || tracer->ran_backward();
    TensorList outs = place(std::move(cut.trace), cut.sources, read, &cut.how, cut.description, {},
                            std::move(cut.host_guards), {});
    walk.offsets.push_back(walk.env.size());
    walk.env.insert(walk.env.end(), outs.begin(), outs.end());
    walk.keys.push_back(read_key(outs[cut.read]));
    walk.last_value = read_value_text(outs[cut.read]);
    return outs;
  });
  TensorList proxies;
  proxies.reserve(args.tensors.size());
  for (const Tensor& t : args.tensors) proxies.push_back(tracer->input(t));
  const TensorList outputs = run(proxies, structure);
  Trace last = tracer->finish(outputs);
  const std::vector<int32_t> sources = tracer->sources();
  std::vector<HostGuard> host_guards = tracer->take_host_guards();
  std::vector<GradWrite> grad_writes = tracer->grad_writes();
  ran_backward = ran_backward || tracer->ran_backward();
  tracer.reset();  // the last graph runs for real
  if (cuts < follow) {
    throw Error(detail::str_cat("compile: ", options.name, ": traced again with the same guards, the function ended "
                                "before graph break ", cuts + 1, " (", path[cuts]->read_description, "): its ops "
                                "depend on something besides its arguments, captured tensors and the values it read"));
  }
  TensorList results =
      place(std::move(last), sources, -1, nullptr, "", structure, std::move(host_guards), std::move(grad_writes));
  std::lock_guard lock(mutex);
  stats.graph_launches += launches;
  if (unguarded) entry.root.reset();  // later calls with this key run eagerly
  if (kept_all) {
    ++stats.replays;
  } else {
    ++stats.eager_calls;
  }
  if (!new_key && compiled_any) recompiles.push_back(reason);
  return results;
}

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
  if (options.backend != CompileBackend::Default && (options.mode != Mode::Default || options.freeze)) {
    throw ValueError(detail::str_cat("compile: ", options.name, ": the ",
                                     options.backend == CompileBackend::Replay ? "Replay" : "Eager",
                                     " backend runs no passes and no executable: ",
                                     options.freeze ? "freeze" : "a mode other than Default", " needs the Default backend"));
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
  // Every kept graph, once, with the guards that lead to it.
  struct Found {
    std::shared_ptr<Segment> seg;
    std::vector<std::pair<std::string, std::string>> guards;
  };
  std::vector<Found> found;
  std::unordered_map<const Segment*, size_t> seen;
  for (const auto& [key, e] : impl_->cache) {
    if (!e->root) continue;
    std::vector<std::pair<std::shared_ptr<Segment>, std::pair<std::string, std::string>>> stack{{e->root, {}}};
    while (!stack.empty()) {
      auto [seg, via] = std::move(stack.back());
      stack.pop_back();
      auto [it, added] = seen.emplace(seg.get(), found.size());
      if (added) found.push_back({seg, e->described});
      if (!via.first.empty()) found[it->second].guards.push_back(std::move(via));
      if (!added) continue;
      for (const auto& [bytes, link] : seg->next) {
        stack.push_back({link.next, {detail::str_cat("value read by graph ", seg->order, " (", seg->read_description, ")"),
                                     link.value}});
      }
    }
  }
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) { return a.seg->order < b.seg->order; });
  for (const Found& f : found) {
    const Segment& s = *f.seg;
    ExplainReport::Graph g;
    const Graph& graph = s.trace->graph;
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
    g.guards = f.guards;
    g.captured = static_cast<int64_t>(graph.captured().size());
    g.executable = s.executable != nullptr;
    if (s.executable) {
      for (const auto& a : s.executable->plan().arenas) g.arena_bytes += a.nbytes;
      g.planned_bytes = s.executable->plan().planned_bytes;
    }
    g.resumes = s.resumes;
    g.read = s.read >= 0 ? s.read_description : "";
    g.trace_ms = s.trace_ms;
    g.verify_ms = s.verify_ms;
    g.passes_ms = s.passes_ms;
    g.traced_nodes = static_cast<int64_t>(s.traced_nodes);
    g.lower_ms = s.lower_ms;
    {
      std::lock_guard graph_lock(s.graph_mutex);
      g.cuda_graph = s.graphed != nullptr;
      g.record_ms = s.record_ms;
      g.autotune_ms = s.autotune_ms;
      for (const std::string& why : s.graph_obstacles)
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
  std::shared_ptr<Segment> root;
  {
    std::lock_guard lock(m.mutex);
    const uint64_t epoch = g_epoch.load(std::memory_order_relaxed);
    if (epoch != m.epoch) {  // compiler::reset()
      m.cache.clear();
      m.recompiles.clear();
      m.graph_breaks.clear();
      m.stats.traces = 0;
      m.compiling_traces = 0;
      m.graphs = 0;
      m.warned_limit = false;
      m.epoch = epoch;
    }
    ++m.stats.calls;
    if (m.options.backend == CompileBackend::Eager) {
      ++m.stats.eager_calls;
    } else if (const auto it = m.cache.find(key); it != m.cache.end()) {
      entry = it->second;
      root = entry->root;
      if (!root) ++m.stats.eager_calls;  // a graph break that cannot resume
    }
  }
  if (m.options.backend == CompileBackend::Eager) return run(args.tensors, structure);
  if (entry) {
    if (!root) return run(args.tensors, structure);
    std::vector<std::shared_ptr<Segment>> path;
    if (!m.options.check) return m.serve(*entry, std::move(root), args, run, structure, nullptr, path);
    return checked_call(args.tensors, run, m.options,
                        [&](CallState* state, std::vector<std::shared_ptr<Segment>>& walked) {
                          return m.serve(*entry, root, args, run, structure, state, walked);
                        });
  }
  // A new key: trace, within the limit.
  const auto described = describe(args);
  std::string reason;
  {
    std::lock_guard lock(m.mutex);
    if (m.compiling_traces >= m.options.recompile_limit) {
      ++m.stats.eager_calls;
      m.warn_limit();
    } else {
      size_t best = SIZE_MAX;  // against the cached graph whose guards are closest
      for (const auto& [k, e] : m.cache) {
        size_t differences = e->described.size() == described.size() ? 0 : SIZE_MAX / 2;
        for (size_t i = 0; i < std::min(e->described.size(), described.size()); ++i)
          differences += e->described[i] != described[i];
        if (differences < best) {
          best = differences;
          reason = first_difference(e->described, described);
        }
      }
      if (!m.cache.empty()) {
        m.recompiles.push_back(reason);
        log(LogChannel::kRecompiles, detail::str_cat("recompiling ", m.options.name, " (trace ", m.compiling_traces + 1,
                                                     " of at most ", m.options.recompile_limit, "): ", reason));
      }
      entry = std::make_shared<Entry>();
    }
  }
  if (!entry) return run(args.tensors, structure);
  entry->key = key;
  entry->described = described;
  const CompiledCall traced = [&](CallState* state, std::vector<std::shared_ptr<Segment>>& path) {
    Walk walk;
    walk.env = args.tensors;
    TensorList out = m.trace(*entry, walk, args, run, structure, state, path, reason, true);
    std::lock_guard lock(m.mutex);
    m.cache[key] = entry;
    return out;
  };
  if (m.options.check) return checked_call(args.tensors, run, m.options, traced);
  std::vector<std::shared_ptr<Segment>> path;
  return traced(nullptr, path);
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
       << (g.executable ? "planned executable" : "replayed through dispatch (it records autograd, or the backend is Replay)");
    if (g.executable) os << ", arena " << g.arena_bytes << " bytes for " << g.planned_bytes << " planned";
    if (g.cuda_graph) os << ", replayed as one CUDA graph";
    if (g.resumes) os << "\n  resumes after graph " << g.resumes;
    if (!g.read.empty()) os << "\n  ends at a graph break: " << g.read;
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
                           {"resumes", g.resumes},
                           {"read", g.read},
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
