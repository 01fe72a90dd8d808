#include "compiler/segment.h"

#include <algorithm>
#include <optional>
#include <sstream>

#include "backends/autotune.h"
#include "compiler/logs.h"
#include "kiln/autograd.h"

namespace kiln::compiler {

using kiln::operator<<;  // Shape

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

std::string Segment::stale() const {
  for (size_t i = 0; i < captured.size(); ++i) {
    const LayoutGuard& was = captured[i];
    const Tensor& now = trace->captured[i];
    if (was.matches(now)) continue;
    std::string reason = detail::str_cat("captured tensor ", i, " (", was.dtype, was.sizes, " ", was.device,
                                         ") is now ", now.dtype(), now.sizes(), " ", now.device());
    if (order > 1) reason += detail::str_cat(" (graph ", order, ")");
    return reason;
  }
  for (const HostGuard& h : host_guards) {
    if (const double now = h.read(); now != h.value) return detail::str_cat(h.what, " was ", h.value, ", now ", now);
  }
  return "";
}

TraceSignature signature_of(const Trace& traced) {
  TraceSignature s;
  s.hash = structural_hash(traced.graph);
  for (const Tensor& t : traced.captured) s.captured.push_back(t.impl_ptr().get());
  for (const Node& n : traced.graph.nodes())
    if (n.draw_count >= 0) s.generators.push_back(n.generator);
  return s;
}

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

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
    log(LogChannel::kPerf, detail::str_cat(name, ", graph ", seg.order, ": recorded as a CUDA graph in ", ms,
                                           " ms; it holds ", seg.graphed->pool_bytes(), " bytes of device memory"));
  }
}

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

void apply_grad_writes(const Segment& seg, TensorList& outs) {
  if (seg.grad_writes.empty()) return;
  const size_t results = outs.size() - static_cast<size_t>(std::count_if(
      seg.grad_writes.begin(), seg.grad_writes.end(), [](const GradWrite& w) { return w.output >= 0; }));
  for (const GradWrite& w : seg.grad_writes) w.owner.set_grad(w.output >= 0 ? outs.at(static_cast<size_t>(w.output)) : Tensor());
  outs.resize(results);
}

TensorList gather(const TensorList& env, const std::vector<int32_t>& sources) {
  TensorList out;
  out.reserve(sources.size());
  for (int32_t s : sources) out.push_back(env.at(static_cast<size_t>(s)));
  return out;
}

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

}  // namespace kiln::compiler
