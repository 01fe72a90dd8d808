#include "compiler/runtime/segment.h"

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

namespace {

// How a captured tensor differs from its guard, in words.
std::string layout_change(size_t i, const LayoutGuard& was, const Tensor& now) {
  const std::string which =
      detail::str_cat("captured tensor ", i, " (", was.dtype, was.sizes, " ", was.device, ")");
  if (now.sizes() == was.sizes && now.strides() == was.strides && now.dtype() == was.dtype &&
      now.device() == was.device) {
    if (now.requires_grad() != was.requires_grad)
      return detail::str_cat(
          which, now.requires_grad() ? " requires grad now" : " no longer requires grad");
    const Tensor g = now.grad();
    if (g.defined() != was.has_grad)
      return detail::str_cat(which, g.defined() ? " has a gradient now (none when traced)"
                                                : " has no gradient now (it had one when traced)");
    return detail::str_cat(which, "'s gradient is another tensor than when traced");
  }
  if (now.sizes() == was.sizes && now.dtype() == was.dtype && now.device() == was.device)
    return detail::str_cat(which, " has strides ", now.strides(), " now, ", was.strides,
                           " when traced");
  return detail::str_cat(which, " is now ", now.dtype(), now.sizes(), " ", now.device());
}

}  // namespace

std::vector<SlotGuard> slot_guards(const TensorList& captured) {
  std::vector<SlotGuard> out;
  std::vector<std::optional<nn::internal::SlotRef>> found = nn::internal::find_slots(captured);
  for (size_t i = 0; i < found.size(); ++i)
    if (found[i]) out.push_back({i, std::move(*found[i])});
  return out;
}

std::string slots_changed(const std::vector<SlotGuard>& slots, const TensorList& captured) {
  for (const SlotGuard& s : slots) {
    if (!s.ref.owner->alive || s.ref.slot->impl_ptr() == captured[s.captured].impl_ptr()) continue;
    return detail::str_cat("the ", s.ref.description,
                           " is another tensor than when traced (the slot was assigned)");
  }
  return "";
}

std::string host_guards_changed(const std::vector<HostGuard>& guards) {
  for (const HostGuard& h : guards)
    if (const double now = h.read(); now != h.value) return h.changed(now);
  return "";
}

std::string Segment::stale(bool* by_host) const {
  if (by_host) *by_host = false;
  for (size_t i = 0; i < captured.size(); ++i) {
    if (captured[i].matches(trace->captured[i])) continue;
    std::string reason = layout_change(i, captured[i], trace->captured[i]);
    if (order > 1) reason += detail::str_cat(" (graph ", order, ")");
    return reason;
  }
  if (std::string reason = slots_changed(slots, trace->captured); !reason.empty()) return reason;
  std::string reason = host_guards_changed(host_guards);
  if (by_host) *by_host = !reason.empty();
  return reason;
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
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
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
    log(LogChannel::kPerf,
        detail::str_cat(name, ", graph ", seg.order, ": not a CUDA graph: ", failure));
  } else {
    log(LogChannel::kPerf,
        detail::str_cat(name, ", graph ", seg.order, ": recorded as a CUDA graph in ", ms,
                        " ms; it holds ", seg.graphed->pool_bytes(), " bytes of device memory"));
  }
}

TensorList run_segment(Segment& seg, const TensorList& tensors, const std::string& name,
                       int64_t& graph_calls) {
  if (!seg.executable) return replay(*seg.trace, tensors);
  if (internal::profiling()) {  // step by step, timed
    Executable::StepTimes times;
    TensorList out = seg.executable->run(tensors, {}, nullptr, &times);
    std::lock_guard lock(seg.graph_mutex);
    seg.kernel_ms = std::move(times);
    return out;
  }
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
        log(LogChannel::kPerf,
            detail::str_cat(name, ", graph ", seg.order,
                            ": a captured tensor moved to other memory; recording again"));
        TensorList out = seg.executable->run(tensors);
        record_graph(seg, tensors, name);
        return out;
      }
    }
  }
  return seg.executable->run(tensors);
}

TensorList first_run(Segment& seg, const TensorList& tensors, const CompileOptions& options,
                     int64_t& graph_calls) {
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
                                           seg.grad_writes.begin(), seg.grad_writes.end(),
                                           [](const GradWrite& w) { return w.output >= 0; }));
  for (const GradWrite& w : seg.grad_writes)
    w.owner.set_grad(w.output >= 0 ? outs.at(static_cast<size_t>(w.output)) : Tensor());
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
  key.append(static_cast<const char*>(c.data_ptr()),
             static_cast<size_t>(c.numel()) * c.element_size());
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
