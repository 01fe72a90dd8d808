#include "compiler/runtime/check.h"

#include <algorithm>
#include <cmath>
#include <span>

#include "kiln/autograd.h"

namespace kiln::compiler {

using kiln::operator<<;  // Shape
namespace {

// Where compiled and eager values may differ without strict: |a - b| <=
// atol + rtol * |b| (docs/compile.md).
std::pair<double, double> tolerance_of(DType t) {
  switch (t) {
    case kFloat64:
      return {1e-12, 1e-12};
    case kFloat32:
      return {1e-5, 1e-6};
    case kFloat16:
      return {1e-3, 1e-5};
    case kBFloat16:
      return {1e-2, 1e-5};
    default:
      return {0.0, 0.0};
  }
}

// Why `got` does not pass for `want`; empty when it does.
std::string difference(const Tensor& got, const Tensor& want, bool strict) {
  if (!got.defined() || !want.defined()) {
    return got.defined() == want.defined() ? "" : "one side is an undefined tensor";
  }
  if (got.sizes() != want.sizes() || got.dtype() != want.dtype()) {
    return detail::str_cat("it is ", got.dtype(), got.sizes(), ", eager's is ", want.dtype(),
                           want.sizes());
  }
  NoGradGuard no_grad;
  const std::vector<double> a = got.detach().to_vector<double>(),
                            b = want.detach().to_vector<double>();
  const auto [rtol, atol] =
      strict ? std::pair<double, double>{0.0, 0.0} : tolerance_of(got.dtype());
  for (size_t i = 0; i < a.size(); ++i) {
    const bool both_nan = a[i] != a[i] && b[i] != b[i];
    if (both_nan || a[i] == b[i] || std::abs(a[i] - b[i]) <= atol + rtol * std::abs(b[i])) continue;
    return detail::str_cat(
        "element ", i, " is ", a[i], ", eager's is ", b[i],
        strict ? " (strict: bitwise)"
               : detail::str_cat(" (tolerance ", rtol, " relative, ", atol, " absolute)"));
  }
  return "";
}

TensorList detached_clones(std::span<const Tensor> ts) {
  TensorList out;
  for (const Tensor& t : ts) out.push_back(t.defined() ? t.detach().clone() : Tensor());
  return out;
}

// The first node whose value an executable computes differently from eager
// dispatch (replay), both run along the graphs the call took from its saved state.
std::string first_divergence(const std::vector<std::shared_ptr<Segment>>& path,
                             const TensorList& args, CallState& state, bool strict) {
  NoGradGuard no_grad;
  std::vector<std::vector<TensorList>> reference(path.size());
  state.restore();
  TensorList env = args;
  for (size_t k = 0; k < path.size(); ++k) {
    const TensorList outs = replay(
        *path[k]->trace, gather(env, path[k]->sources),
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
          const Graph& g = seg.trace->graph;
          const Node& n = g.nodes()[node];
          const Schedule& schedule = seg.executable->schedule();
          const auto step = static_cast<size_t>(schedule.step_of[node]);
          const std::string group =
              schedule.steps[step].fused()
                  ? detail::str_cat(", the result of the fused group ", schedule.describe(g, step))
                  : std::string();
          found = detail::str_cat(
              path.size() > 1 ? detail::str_cat("graph ", seg.order, " ") : std::string(), "node ",
              node, " (", op_name(n), n.inplace() ? "_" : "", group, ") output ", i,
              " is the first to differ from eager dispatch: ", d);
        }
      });
    }
    env.insert(env.end(), outs.begin(), outs.end());
  }
  if (!found.empty()) return found;
  if (!any_executable) {
    return "the graphs replay through dispatch (for autograd), as eager runs its ops: the trace "
           "does not record "
           "what the function does";
  }
  return detail::str_cat(
      "every node of the graph", path.size() == 1 ? "" : "s",
      " gives eager dispatch's value: the trace does not record what the function does");
}

}  // namespace

void CallState::add(const Segment& seg, const TensorList& env) {
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
      take(trace.captured[i],
           seg.order == 1 ? detail::str_cat("captured tensor ", i)
                          : detail::str_cat("captured tensor ", i, " of graph ", seg.order));
  }
  for (const Node& n : g.nodes()) {
    if (n.draw_count < 0) continue;
    Generator* gen = n.generator ? n.generator : &default_generator();
    if (std::none_of(generators_.begin(), generators_.end(),
                     [&](const auto& p) { return p.first == gen; }))
      generators_.emplace_back(gen, *gen);
  }
  for (const GradWrite& w : seg.grad_writes) {
    if (std::any_of(grads_.begin(), grads_.end(),
                    [&](const auto& o) { return o.first.impl_ptr() == w.owner.impl_ptr(); }))
      continue;
    grads_.emplace_back(w.owner, w.owner.grad());
    grad_labels_.push_back(
        detail::str_cat("the gradient of a ", w.owner.dtype(), w.owner.sizes(), " tensor"));
  }
}

TensorList CallState::values() const {
  NoGradGuard no_grad;
  TensorList out;
  for (const Tensor& t : tensors_) out.push_back(t.detach().clone());
  for (const auto& [owner, saved] : grads_)
    out.push_back(owner.grad().defined() ? owner.grad().detach().clone() : Tensor());
  return out;
}

const std::string& CallState::label(size_t i) const {
  return i < labels_.size() ? labels_[i] : grad_labels_.at(i - labels_.size());
}

void CallState::restore() {
  TensorList values = saved_;
  for (const auto& [owner, saved] : grads_) values.push_back(saved);
  restore_values(values);
  for (auto& [gen, state] : generators_) *gen = state;
}

void CallState::restore_values(const TensorList& values) {
  NoGradGuard no_grad;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    Tensor t = tensors_[i].detach();
    t.copy_(values[i]);
  }
  for (size_t i = 0; i < grads_.size(); ++i) grads_[i].first.set_grad(values[tensors_.size() + i]);
}

TensorList checked_call(const TensorList& args, const internal::Runner& run,
                        const CompileOptions& options, const CompiledCall& compiled) {
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
  if (got.size() != want.size())
    what = detail::str_cat("it returns ", got.size(), " tensors, eager ", want.size());
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

}  // namespace kiln::compiler
