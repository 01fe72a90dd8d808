// kiln::compile's cache: guard keys, traces, replays and the recompile policy.
#include "kiln/compile.h"

#include <atomic>
#include <bit>
#include <cstdio>
#include <mutex>
#include <optional>
#include <sstream>
#include <unordered_map>

#include "compiler/capture.h"
#include "compiler/executable.h"
#include "compiler/graph.h"
#include "compiler/logs.h"
#include "kiln/autograd.h"
#include "kiln/runtime.h"

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
};

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
  bool warned_limit = false;
  uint64_t epoch = 0;
};

Core::Core(CompileOptions options, std::string default_name) : impl_(std::make_shared<Impl>()) {
  if (options.name.empty()) options.name = std::move(default_name);
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

TensorList Core::call(const FlatArgs& args, const Runner& run, std::vector<int64_t>& structure) {
  Impl& m = *impl_;
  std::vector<int64_t> key = build_key(args);
  std::shared_ptr<Entry> entry;
  {
    std::lock_guard lock(m.mutex);
    const uint64_t epoch = g_epoch.load(std::memory_order_relaxed);
    if (epoch != m.epoch) {  // compiler::reset()
      m.cache.clear();
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
        return entry->executable ? entry->executable->run(args.tensors) : replay(*entry->trace, args.tensors);
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
        log(LogChannel::kRecompiles, detail::str_cat("recompiling ", m.options.name, " (trace ", m.stats.traces,
                                                     " of at most ", m.options.recompile_limit, "): ", reason));
      }
      entry = std::make_shared<Entry>();
    }
  }
  if (!entry) return run(args.tensors, structure);
  entry->key = key;
  entry->described = described;
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
    log(LogChannel::kGraphBreaks, detail::str_cat(m.options.name, ": ", e.what(), "; this key runs eagerly"));
    entry->trace.reset();
  }
  entry->structure = structure;
  if (entry->trace) {
    verify(entry->trace->graph);
    bool needs_grad = false;
    for (const Tensor& t : entry->trace->captured) {
      entry->captured.push_back(layout_of(t));
      needs_grad = needs_grad || t.requires_grad();
    }
    for (const Tensor& t : args.tensors) needs_grad = needs_grad || t.requires_grad();
    if (!(needs_grad && is_grad_enabled())) entry->executable = std::make_shared<const Executable>(entry->trace);
    log(LogChannel::kGraphs, detail::str_cat(m.options.name, ", trace ", m.stats.traces, ":\n",
                                             to_text(entry->trace->graph)));
  }
  {
    std::lock_guard lock(m.mutex);
    if (!entry->trace) ++m.stats.graph_breaks;
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
  return entry->executable ? entry->executable->run(args.tensors) : replay(*entry->trace, args.tensors);
}

}  // namespace internal
}  // namespace kiln::compiler
