// kiln::compile's cache: guard keys, traces (cut at graph breaks into the
// segments of segment.h), replays and the recompile policy.
#include "kiln/compile.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "compiler/capture/capture.h"
#include "compiler/capture/guard_key.h"
#include "compiler/core_impl.h"
#include "compiler/ir/graph.h"
#include "compiler/logs.h"
#include "compiler/passes/pass.h"
#include "compiler/runtime/check.h"
#include "compiler/runtime/segment.h"
#include "kiln/autograd.h"
#include "kiln/runtime.h"

namespace kiln::compiler {

using kiln::operator<<;  // Shape

namespace {

std::atomic<uint64_t> g_epoch{0};  // bumped by reset()

}  // namespace

void reset() { g_epoch.fetch_add(1, std::memory_order_relaxed); }

namespace internal {

namespace {
thread_local bool t_profiling = false;  // a ProfilingScope lives on this thread
}  // namespace

ProfilingScope::ProfilingScope() noexcept : outer_(t_profiling) { t_profiling = true; }
ProfilingScope::~ProfilingScope() { t_profiling = outer_; }
bool profiling() noexcept { return t_profiling; }

// A traced graph made ready to run: verified, rewritten by the passes and
// lowered (or, when it is not kept, run as traced through dispatch).
std::shared_ptr<Segment> Core::Impl::compile_segment(
    Trace traced, TraceSignature signature, double trace_ms, bool keep,
    const std::function<Tensor(const Tensor&)>& grad_at_start) {
  auto seg = std::make_shared<Segment>();
  seg->trace_ms = trace_ms;
  seg->signature = std::move(signature);
  seg->traced_nodes = traced.graph.nodes().size();
  if (!keep) {
    seg->trace = std::make_shared<const Trace>(std::move(traced));
    return seg;
  }
  const auto verify_start = std::chrono::steady_clock::now();
  verify(traced.graph);
  seg->verify_ms = ms_since(verify_start);
  const auto passes_start = std::chrono::steady_clock::now();
  std::shared_ptr<FoldedConstants> function_folds;
  {
    std::lock_guard lock(mutex);
    function_folds = folded;
  }
  if (dump_root()) seg->dump = std::make_shared<GraphDump>();
  seg->trace = std::make_shared<const Trace>(
      options.backend == CompileBackend::Replay
          ? std::move(traced)
          : run_passes(traced, {.freeze = options.freeze,
                                .strict = options.strict,
                                .folded = function_folds.get(),
                                .snapshots = seg->dump ? &seg->dump->passes : nullptr}));
  seg->passes_ms = ms_since(passes_start);
  for (const Tensor& t : seg->trace->captured)
    seg->captured.push_back(layout_of(t, grad_at_start(t), seg->trace->captured));
  seg->slots = slot_guards(seg->trace->captured);
  return seg;
}

namespace {

// Whether replaying the trace through dispatch would record autograd: a node
// traced with grad mode on reads an argument or captured tensor that
// requires grad (a value of another node requires grad only through such a
// node). An optimizer's step, whose updates run under NoGradGuard, records
// nothing and gets an executable.
bool records_autograd_on_replay(const Trace& trace, const TensorList& inputs) {
  const Graph& g = trace.graph;
  std::vector<bool> needs(g.values().size(), false);
  for (size_t i = 0; i < g.inputs().size() && i < inputs.size(); ++i)
    needs[static_cast<size_t>(g.inputs()[i])] = inputs[i].requires_grad();
  for (size_t i = 0; i < g.captured().size() && i < trace.captured.size(); ++i)
    needs[static_cast<size_t>(g.captured()[i])] = trace.captured[i].requires_grad();
  const auto requires_grad = [&](ValueId v) {
    return v != kNoValue && needs[static_cast<size_t>(v)];
  };
  return std::any_of(g.nodes().begin(), g.nodes().end(), [&](const Node& n) {
    return n.grad_enabled && (requires_grad(n.target) ||
                              std::any_of(n.inputs.begin(), n.inputs.end(), requires_grad));
  });
}

}  // namespace

void Core::Impl::lower(Segment& seg, const TensorList& inputs,
                       const std::shared_ptr<Family>& family, uint64_t program,
                       const SymbolicProgram* symbolic) {
  const auto lower_start = std::chrono::steady_clock::now();
  // A training step's graph holds its backward ops: it records no autograd.
  const bool records_autograd =
      is_grad_enabled() && !seg.ran_backward && records_autograd_on_replay(*seg.trace, inputs);
  if (options.backend == CompileBackend::Default && !records_autograd) {
    ScheduleOptions schedule_options;
    schedule_options.strict = options.strict;
    std::optional<KernelSourceCollector> sources;
    if (dump_root()) sources.emplace();
    seg.executable = symbolic ? symbolic->executable(seg.trace)
                              : std::make_shared<const Executable>(seg.trace, schedule_options);
    if (sources && !sources->sources.empty()) {
      if (!seg.dump) seg.dump = std::make_shared<GraphDump>();
      for (auto& source : sources->sources) seg.dump->kernels.push_back(std::move(source));
    }
    if (log_enabled(LogChannel::kFusion)) {
      const Schedule& schedule = seg.executable->schedule();
      log(LogChannel::kFusion, detail::str_cat(options.name, ": ", seg.trace->graph.nodes().size(),
                                               " nodes in ", schedule.steps.size(), " steps"));
      std::vector<std::string> lines = {seg.executable->kernels().summary};
      lines.insert(lines.end(), schedule.fused.begin(), schedule.fused.end());
      lines.insert(lines.end(), schedule.not_fused.begin(), schedule.not_fused.end());
      for (const std::string& line : lines)
        if (!line.empty()) log(LogChannel::kFusion, detail::str_cat(options.name, ": ", line));
    }
  }
  seg.lower_ms = ms_since(lower_start);
  {
    std::lock_guard lock(mutex);
    if (records_autograd && options.backend == CompileBackend::Default && !said_autograd) {
      said_autograd = true;
      log(LogChannel::kPerf,
          detail::str_cat(
              options.name,
              ": its arguments or captured tensors require grad and grad mode "
              "is on, so its calls replay through dispatch to record autograd, without the "
              "executable's plan (slower); for inference, call it under NoGradGuard or "
              "InferenceModeGuard"));
    }
    seg.order = ++graphs;
    if (seg.instance_of) ++stats.dynamic_instances;
    if (family) family->programs.emplace(program, seg.order);
  }
  if (options.mode != Mode::Default) {
    if (seg.executable) {
      seg.graph_obstacles = GraphedExecutable::obstacles(*seg.executable);
    } else {
      seg.graph_obstacles.push_back(
          "its arguments or captured tensors require grad: calls replay through dispatch, which "
          "records "
          "autograd");
    }
    for (const std::string& why : seg.graph_obstacles)
      log(LogChannel::kPerf,
          detail::str_cat(options.name, ", graph ", seg.order, ": not a CUDA graph: ", why));
  }
  log(LogChannel::kGraphs,
      detail::str_cat(options.name, ", graph ", seg.order, ":\n", to_text(seg.trace->graph)));
  if (const auto root = dump_root()) {
    if (!seg.dump) seg.dump = std::make_shared<GraphDump>();
    write_graph_dump(function_dump_dir(*root, options.name), seg.order, *seg.trace, *seg.dump);
    seg.dump.reset();
    dump_pending = true;
  }
}

namespace {

// A graph made for new sizes from a family's generic trace, the function
// not called: its wiring is the trace's.
void make_instance(Segment& seg, const Family::Generic& generic, std::span<const int64_t> values,
                   size_t inputs) {
  seg.sources.resize(inputs);
  for (size_t i = 0; i < seg.sources.size(); ++i) seg.sources[i] = static_cast<int32_t>(i);
  seg.structure = generic.structure;
  seg.host_guards = generic.host_guards;
  seg.instance_of = generic.order;
  seg.retraced = true;
  for (size_t k = 0; k < values.size(); ++k)
    seg.symbols += detail::str_cat(k ? ", " : "", "s", k, " = ", values[k]);
}

}  // namespace

std::shared_ptr<const SymbolicProgram> Core::Impl::program_of(const Family::Generic& generic,
                                                              double& build_ms) {
  build_ms = 0;
  if (!generic.shapes || options.backend != CompileBackend::Default) return nullptr;
  std::lock_guard lock(generic.program_mutex);
  if (generic.program_tried) return generic.program;
  generic.program_tried = true;
  const auto start = std::chrono::steady_clock::now();
  std::shared_ptr<FoldedConstants> function_folds;
  {
    std::lock_guard functions_lock(mutex);
    function_folds = folded;
  }
  ScheduleOptions schedule_options;
  schedule_options.strict = options.strict;
  std::optional<KernelSourceCollector> sources;
  if (dump_root()) {
    generic.program_dump = std::make_shared<GraphDump>();
    sources.emplace();
  }
  generic.program =
      build_program(*generic.traced, *generic.shapes,
                    {.freeze = options.freeze,
                     .strict = options.strict,
                     .folded = function_folds.get(),
                     .snapshots = generic.program_dump ? &generic.program_dump->passes : nullptr},
                    schedule_options, generic.program_why);
  if (sources) generic.program_dump->kernels = std::move(sources->sources);
  build_ms = ms_since(start);
  if (generic.program) {
    {
      // explain() lists the guards of the program's decisions after the shapes'.
      std::lock_guard functions_lock(mutex);
      const SymbolicProgram& p = *generic.program;
      for (size_t i = p.guards.size() - p.decision_guards; i < p.guards.size(); ++i)
        symbolic_guards.push_back(
            detail::str_cat(p.guards[i].str(), "  (", p.guards[i].origin, ")"));
    }
    log(LogChannel::kRecompiles,
        detail::str_cat(options.name, ": graph ", generic.order,
                        "'s program is compiled for all sizes its guards admit (",
                        generic.program->guards.size(), " guards, ",
                        generic.program->decision_guards,
                        " of them from its passes and schedule)"));
  } else {
    log(LogChannel::kRecompiles,
        detail::str_cat(options.name, ": graph ", generic.order,
                        "'s program cannot be compiled for all sizes: ", generic.program_why));
  }
  return generic.program;
}

std::shared_ptr<Segment> Core::Impl::bound_segment(const Family::Generic& generic,
                                                   std::span<const int64_t> values,
                                                   const TensorList& inputs,
                                                   const std::shared_ptr<Family>& family,
                                                   std::string& why) {
  double build_ms = 0;
  const std::shared_ptr<const SymbolicProgram> program = program_of(generic, build_ms);
  if (!program || !program->admits(values, why)) return nullptr;
  const auto start = std::chrono::steady_clock::now();
  // The graph as traced at these sizes, for the signature a later trace
  // of them is compared with.
  Trace traced;
  traced.graph = bind_layouts(program->traced, values);
  traced.captured = generic.traced->captured;
  auto seg = std::make_shared<Segment>();
  seg->signature = signature_of(traced);
  seg->traced_nodes = traced.graph.nodes().size();
  seg->trace = program->bind(values);
  seg->trace_ms = ms_since(start);
  seg->passes_ms = build_ms;  // the program's passes and schedule, where this call made it
  for (const Tensor& t : seg->trace->captured)
    seg->captured.push_back(layout_of(t, t.grad(), seg->trace->captured));
  seg->slots = slot_guards(seg->trace->captured);
  make_instance(*seg, generic, values, inputs.size());
  seg->bound = true;
  {
    std::lock_guard lock(generic.program_mutex);
    seg->dump = std::move(generic.program_dump);  // where this call made the program
  }
  lower(*seg, inputs, family, program_hash(traced.graph), program.get());
  return seg;
}

std::optional<TensorList> Core::Impl::retraced(Entry& entry, const Family::Generic& generic,
                                               const FlatArgs& args,
                                               std::vector<int64_t>& structure, CallState* state,
                                               std::vector<std::shared_ptr<Segment>>& path,
                                               std::string& why) {
  const auto start = std::chrono::steady_clock::now();
  why = slots_changed(generic.slots, generic.traced->captured);
  if (why.empty()) why = host_guards_changed(generic.host_guards);
  if (!why.empty()) {
    why = "its trace depends on what changed since: " + why;
    return std::nullopt;
  }
  // The guards decide, from the sizes alone, whether the program is the
  // same, where the expressions cover the sizes (no symbol's is 0 or 1:
  // those are left to retrace's checks of each read).
  const SymbolicShapes* shapes = generic.shapes ? &*generic.shapes : nullptr;
  const std::vector<int64_t> values = shapes ? shapes->bind(args.tensors) : std::vector<int64_t>{};
  if (shapes && !shapes->covers(values)) shapes = nullptr;
  if (shapes && !shapes->admits(args.tensors, why)) return std::nullopt;
  std::shared_ptr<Segment> seg;
  if (shapes) {
    std::string unbound;
    seg = bound_segment(generic, values, args.tensors, entry.family, unbound);
    if (!seg && !unbound.empty())
      log(LogChannel::kRecompiles,
          detail::str_cat(options.name,
                          ": the program for all sizes does not serve these: ", unbound));
  }
  if (!seg) {
    std::optional<Trace> made = retrace(*generic.traced, generic.reads, args.tensors, why);
    if (!made) {
      if (shapes)
        log(LogChannel::kRecompiles,
            detail::str_cat(
                options.name,
                ": the symbolic shapes admit new sizes that the shape rules refuse: ", why));
      return std::nullopt;
    }
    if (shapes && !shapes->describes(made->graph, values, why)) {
      why = "the symbolic shapes differ from the graph made for the new sizes: " + why;
      log(LogChannel::kRecompiles, detail::str_cat(options.name, ": ", why));
      return std::nullopt;
    }
    TraceSignature signature = signature_of(*made);
    const uint64_t program = program_hash(made->graph);
    seg = compile_segment(std::move(*made), std::move(signature), ms_since(start), true,
                          [](const Tensor& t) { return t.grad(); });
    make_instance(*seg, generic, shapes ? values : std::vector<int64_t>{}, args.tensors.size());
    lower(*seg, args.tensors, entry.family, program);
  }
  {
    std::lock_guard lock(mutex);
    entry.root = seg;
    ++stats.retraces;
    if (seg->bound) ++stats.bound_sizes;
  }
  if (state) state->add(*seg, args.tensors);
  int64_t launches = 0;
  TensorList outs = first_run(*seg, args.tensors, options, launches);
  path.push_back(seg);
  structure = generic.structure;
  std::lock_guard lock(mutex);
  stats.graph_launches += launches;
  ++stats.replays;
  return outs;
}

TensorList Core::Impl::serve(Entry& entry, std::shared_ptr<Segment> root, const FlatArgs& args,
                             const Runner& run, std::vector<int64_t>& structure, CallState* state,
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
    bool by_host = false;
    reason = seg->stale(&by_host);
    if (!reason.empty() && first && by_host) {
      // A module's training flag changed: a first graph kept for the new value serves.
      if (std::shared_ptr<Segment> other = other_root(entry)) {
        seg = std::move(other);
        reason.clear();
      }
    }
    if (!reason.empty()) break;
    if (state) {
      fill_env();
      state->add(*seg, walk.env);
    }
    // A first graph's inputs are the arguments, in order (Tracer::input).
    TensorList outs =
        first ? run_segment(*seg, args.tensors, options.name, launches)
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
      {
        std::lock_guard lock(mutex);
        ++stats.new_value_traces;
      }
      walk.last_value = read_value_text(outs[static_cast<size_t>(seg->read)]);
      reason = detail::str_cat("graph ", seg->order, " ended at a graph break where ",
                               seg->read_description, " and read ", walk.last_value,
                               ", a value not seen there before");
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
                             std::vector<std::shared_ptr<Segment>>& path, const std::string& reason,
                             bool new_key, bool instance) {
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
  const auto grad_at_start = [&](const Tensor& t) {
    return tracer ? tracer->grad_at_start(t) : t.grad();
  };
  const auto place = [&](Trace traced, const std::vector<int32_t>& sources, int32_t read,
                         const HostRead* how, const std::string& description,
                         const std::vector<int64_t>& result_structure,
                         std::vector<HostGuard> host_guards, std::vector<GradWrite> grad_writes) {
    const double trace_ms = ms_since(mark);
    const size_t depth = path.size();
    const std::shared_ptr<Segment> parent = depth == 0 ? nullptr : path.back();
    const bool guarded = how == nullptr || how->guardable;
    TraceSignature signature = signature_of(traced);
    const uint64_t program = entry.family ? program_hash(traced.graph) : 0;
    int64_t instance_of = 0;
    std::shared_ptr<Segment> seg;
    bool keep = !unguarded && guarded;
    {
      std::lock_guard lock(mutex);
      std::vector<std::shared_ptr<Segment>> candidates;
      if (parent) {
        for (const auto& [key, link] : parent->next) candidates.push_back(link.next);
      } else {
        if (entry.root) candidates.push_back(entry.root);
        candidates.insert(candidates.end(), entry.other_roots.begin(), entry.other_roots.end());
      }
      const auto same_writes = [&](const Segment& c) {
        if (c.grad_writes.size() != grad_writes.size() ||
            c.host_guards.size() != host_guards.size())
          return false;
        for (size_t i = 0; i < grad_writes.size(); ++i)
          if (c.grad_writes[i].owner.impl_ptr() != grad_writes[i].owner.impl_ptr() ||
              c.grad_writes[i].output != grad_writes[i].output)
            return false;
        return c.ran_backward == ran_backward;
      };
      for (const auto& c : candidates) {
        if (c->stale().empty() && c->signature == signature && c->sources == sources &&
            c->read == read && c->guarded == guarded && c->structure == result_structure &&
            same_writes(*c)) {
          seg = c;
          break;
        }
      }
      if (!seg && keep && entry.family) {
        // The program compiled before for other sizes of the dynamic dims: an instance, no
        // recompile.
        const auto known = entry.family->programs.find(program);
        if (known != entry.family->programs.end()) instance_of = known->second;
      }
      if (!seg && keep && !compiled_any && instance_of == 0) {
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
      seg = compile_segment(std::move(traced), std::move(signature), trace_ms, keep, grad_at_start);
      seg->ran_backward = ran_backward;
      seg->grad_writes = std::move(grad_writes);
      seg->host_guards = std::move(host_guards);
      seg->sources = sources;
      seg->read = read;
      seg->guarded = guarded;
      seg->read_description = description;
      seg->structure = result_structure;
      if (keep) {
        seg->resumes = parent ? parent->order : 0;
        seg->instance_of = instance_of;
        lower(*seg, gather(walk.env, sources), entry.family, program);
        if (read >= 0) {
          std::lock_guard lock(mutex);
          ++stats.graph_breaks;
          graph_breaks.push_back(
              detail::str_cat("graph ", seg->order, ": ", description,
                              "; the graph after it is chosen by the value read"));
          log(LogChannel::kGraphBreaks, detail::str_cat(options.name, ": ", graph_breaks.back()));
        }
      }
    }
    kept_all = kept_all && keep;
    if (keep) {
      std::lock_guard lock(mutex);
      if (!parent) {
        set_root(entry, seg);
      } else {
        auto it = parent->next.find(walk.keys.back());
        if (it != parent->next.end()) {
          it->second.next = seg;  // it was stale
        } else if (parent->next.size() < kMaxValuesPerRead) {
          parent->next.emplace(walk.keys.back(), Link{seg, walk.last_value});
          if (parent->next.size() == kWarnValuesPerRead) warn_values(*parent);
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
          structural_hash(cut.trace.graph) != ran.signature.hash) {
        throw Error(
            detail::str_cat("compile: ", options.name,
                            ": traced again with the same guards, the function did "
                            "not reach graph break ",
                            k + 1, " as before (", ran.read_description, "; now ", cut.description,
                            "): its ops depend on something besides its arguments, captured "
                            "tensors and the values it read"));
      }
      mark = std::chrono::steady_clock::now();
      return TensorList(
          walk.env.begin() + static_cast<std::ptrdiff_t>(walk.offsets[k]),
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
  std::vector<LayoutRead> layout_reads = tracer->layout_reads();
  const bool unmapped_read = tracer->unmapped_read();
  tracer.reset();  // the last graph runs for real
  if (cuts < follow) {
    throw Error(detail::str_cat(
        "compile: ", options.name,
        ": traced again with the same guards, the function ended "
        "before graph break ",
        cuts + 1, " (", path[cuts]->read_description,
        "): its ops "
        "depend on something besides its arguments, captured tensors and the values it read"));
  }
  // A family's one-graph trace: later sizes are made from it (retrace).
  std::shared_ptr<Family::Generic> generic;
  if (entry.family && cuts == 0 && !ran_backward && grad_writes.empty() && !unmapped_read) {
    generic = std::make_shared<Family::Generic>();
    generic->traced = std::make_shared<const Trace>(last);
    generic->reads = std::move(layout_reads);
    generic->structure = structure;
    generic->host_guards = host_guards;
    generic->slots = slot_guards(generic->traced->captured);
    std::vector<uint64_t> dims;
    {
      std::lock_guard lock(mutex);
      dims = dynamic;
    }
    std::string why;
    generic->shapes = symbolize(*generic->traced, generic->reads, dims, why);
    std::lock_guard lock(mutex);
    symbolic_guards.clear();
    if (generic->shapes) {
      symbolic_text = generic->shapes->text(generic->traced->graph);
      for (const sym::Guard& g : generic->shapes->guards)
        symbolic_guards.push_back(detail::str_cat(g.str(), "  (", g.origin, ")"));
      log(LogChannel::kGraphs,
          detail::str_cat(options.name, ", symbolic shapes:\n", symbolic_text));
    } else {
      symbolic_text = "not symbolic: " + why;
      log(LogChannel::kRecompiles, detail::str_cat(options.name, ": ", symbolic_text));
    }
  }
  TensorList results = place(std::move(last), sources, -1, nullptr, "", structure,
                             std::move(host_guards), std::move(grad_writes));
  std::lock_guard lock(mutex);
  if (generic && kept_all && path.size() == 1 && path.back()->order > 0) {
    generic->order = path.back()->instance_of ? path.back()->instance_of : path.back()->order;
    auto& kept = entry.family->generics;
    kept.insert(kept.begin(), std::move(generic));
    if (kept.size() > Family::kMaxGenerics) kept.pop_back();
  }
  stats.graph_launches += launches;
  if (unguarded) {  // later calls with this key run eagerly
    entry.root.reset();
    entry.other_roots.clear();
  }
  if (kept_all) {
    ++stats.replays;
  } else {
    ++stats.eager_calls;
  }
  if (!new_key && compiled_any) recompiles.push_back(reason);
  if (instance && compiled_any) {
    recompiles.push_back(reason + ", and its ops differ from those compiled for other sizes");
    log(LogChannel::kRecompiles,
        detail::str_cat("recompiling ", options.name, ": ", recompiles.back()));
  }
  return results;
}

Core::Core(CompileOptions options, std::string default_name) : impl_(std::make_shared<Impl>()) {
  if (options.name.empty()) options.name = std::move(default_name);
  if (options.strict && options.freeze) {
    throw ValueError(
        detail::str_cat("compile: ", options.name,
                        ": strict and freeze: freezing folds batch norms into convolutions, which "
                        "rounds differently from eager"));
  }
  if (options.cache_limit < 1) {
    throw ValueError(
        detail::str_cat("compile: cache_limit must be at least 1, got ", options.cache_limit));
  }
  if (options.recompile_limit < 1) {
    throw ValueError(detail::str_cat("compile: recompile_limit must be at least 1, got ",
                                     options.recompile_limit));
  }
  if (options.backend != CompileBackend::Default &&
      (options.mode != Mode::Default || options.freeze)) {
    throw ValueError(detail::str_cat("compile: ", options.name, ": the ",
                                     options.backend == CompileBackend::Replay ? "Replay" : "Eager",
                                     " backend runs no passes and no executable: ",
                                     options.freeze ? "freeze" : "a mode other than Default",
                                     " needs the Default backend"));
  }
  impl_->options = std::move(options);
  impl_->epoch = g_epoch.load(std::memory_order_relaxed);
}

Core::~Core() = default;

const CompileOptions& Core::options() const { return impl_->options; }

TensorList Core::call(const FlatArgs& args, const Runner& run, std::vector<int64_t>& structure) {
  TensorList results = impl_->call(args, run, structure);
  if (impl_->dump_pending.exchange(false)) {
    if (const auto root = dump_root())
      write_explain_dump(function_dump_dir(*root, impl_->options.name), explain());
  }
  return results;
}

TensorList Core::Impl::call(const FlatArgs& args, const Runner& run,
                            std::vector<int64_t>& structure) {
  Impl& m = *this;
  if (Tracer::active() != nullptr) {
    // Called by a function being traced: inlined, as torch.compile does;
    // its ops go into the caller's graph.
    {
      std::lock_guard lock(m.mutex);
      ++m.stats.calls;
      ++m.stats.inlined_calls;
    }
    return run(args.tensors, structure);
  }
  std::vector<int64_t> key = build_key(args);
  std::shared_ptr<Entry> entry;
  std::shared_ptr<Segment> root;
  bool forced_eager = false;
  {
    std::lock_guard lock(m.mutex);
    const uint64_t epoch = g_epoch.load(std::memory_order_relaxed);
    if (epoch != m.epoch) {  // compiler::reset()
      m.cache.clear();
      m.families.clear();
      m.folded = std::make_shared<FoldedConstants>();
      m.dynamic.clear();
      m.dynamic_reasons.clear();
      m.sizes_note.clear();
      m.recompiles.clear();
      m.graph_breaks.clear();
      m.stats.traces = 0;
      m.compiling_traces = 0;
      m.graphs = 0;
      m.warned_limit = false;
      m.epoch = epoch;
    }
    ++m.stats.calls;
    if (stance() == Stance::ForceEager) {
      ++m.stats.eager_calls;
      ++m.stats.stance_eager_calls;
      if (m.stance_calls_logged++ == 0) {
        log(LogChannel::kRecompiles,
            detail::str_cat(m.options.name, ": runs eagerly (stance force_eager)"));
      }
      forced_eager = true;
    } else if (m.options.backend == CompileBackend::Eager) {
      ++m.stats.eager_calls;
    } else if (const auto it = m.cache.find(key); it != m.cache.end()) {
      entry = it->second;
      entry->last_used = ++m.tick;
      root = entry->root;
      if (!root) ++m.stats.eager_calls;  // a graph break that cannot resume
    }
  }
  if (forced_eager || m.options.backend == CompileBackend::Eager) {
    return run(args.tensors, structure);
  }
  if (entry) {
    if (!root) return run(args.tensors, structure);
    std::vector<std::shared_ptr<Segment>> path;
    if (!m.options.check)
      return m.serve(*entry, std::move(root), args, run, structure, nullptr, path);
    return checked_call(args.tensors, run, m.options,
                        [&](CallState* state, std::vector<std::shared_ptr<Segment>>& walked) {
                          return m.serve(*entry, root, args, run, structure, state, walked);
                        });
  }
  // A new key: trace, within the limit (new sizes of a program's dynamic dims aside).
  const auto described = describe(args);
  const auto names = tensor_names(args);
  std::vector<int64_t> shapeless =
      build_key(args, std::vector<uint64_t>(args.tensors.size(), ~uint64_t{0}));
  std::string reason;
  bool instance = false;
  {
    std::lock_guard lock(m.mutex);
    bool known = false;
    std::shared_ptr<Family> family = m.family_of(args, shapeless, names, known);
    if (known) {
      instance = true;
      reason = "new sizes of dynamic dims:";
      for (size_t i = 0; i < args.tensors.size(); ++i)
        if (m.dynamic[i])
          reason += detail::str_cat(" ", names[i], " sizes ", str(args.tensors[i].sizes()));
      log(LogChannel::kRecompiles,
          detail::str_cat(m.options.name, ": ", reason,
                          " (graphs of a program compiled for other sizes are instances, "
                          "not recompiles)"));
      entry = std::make_shared<Entry>();
    } else if (m.compiling_traces >= m.options.recompile_limit) {
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
      const Stance now = stance();
      if (!m.cache.empty() && now == Stance::FailOnRecompile) {
        throw Error(detail::str_cat(m.options.name, ": a recompile under the stance ",
                                    "fail_on_recompile: ", reason));
      }
      if (!m.cache.empty() && now == Stance::EagerOnRecompile) {
        // No entry: the call runs eagerly below, outside the lock.
        ++m.stats.eager_calls;
        ++m.stats.stance_eager_calls;
        log(LogChannel::kRecompiles,
            detail::str_cat(m.options.name, ": runs eagerly instead of recompiling (stance ",
                            "eager_on_recompile): ", reason));
      } else {
        if (!m.cache.empty()) {
          m.recompiles.push_back(reason);
          log(LogChannel::kRecompiles,
              detail::str_cat("recompiling ", m.options.name, " (trace ", m.compiling_traces + 1,
                              " of at most ", m.options.recompile_limit, "): ", reason));
        }
        entry = std::make_shared<Entry>();
      }
    }
    if (entry) entry->family = std::move(family);
  }
  if (!entry) return run(args.tensors, structure);
  entry->key = key;
  entry->described = described;
  entry->shapeless = std::move(shapeless);
  for (const Tensor& t : args.tensors) entry->sizes.push_back(t.sizes());
  std::vector<std::shared_ptr<const Family::Generic>> generics;
  if (instance) {
    std::lock_guard lock(m.mutex);
    generics = entry->family->generics;
  }
  const CompiledCall traced = [&](CallState* state, std::vector<std::shared_ptr<Segment>>& path) {
    std::optional<TensorList> made;
    std::string why = "no trace of its program made one graph without a graph break or backward()";
    int64_t from = 0;
    for (size_t i = 0; i < generics.size() && !made; ++i) {
      std::string refused;
      made = m.retraced(*entry, *generics[i], args, structure, state, path, refused);
      if (i == 0) why = refused;  // the latest trace's reason
      from = generics[i]->order;
    }
    if (instance) {
      const bool bound = made && !path.empty() && path.back()->bound;
      const std::string note =
          bound  ? detail::str_cat("new sizes bind graph ", from,
                                   "'s program, compiled once for all sizes its guards admit")
          : made ? detail::str_cat("new sizes are made from graph ", from,
                                   "'s trace, without calling the function")
                 : detail::str_cat("new sizes are traced: ", why);
      log(LogChannel::kRecompiles, detail::str_cat(m.options.name, ": ", note));
      std::lock_guard lock(m.mutex);
      m.sizes_note = note;
    }
    TensorList out = made ? std::move(*made) : [&] {
      Walk walk;
      walk.env = args.tensors;
      return m.trace(*entry, walk, args, run, structure, state, path, reason, true, instance);
    }();
    std::lock_guard lock(m.mutex);
    entry->last_used = ++m.tick;
    m.cache.insert_or_assign(key, entry);
    m.evict(key);
    return out;
  };
  if (m.options.check) return checked_call(args.tensors, run, m.options, traced);
  std::vector<std::shared_ptr<Segment>> path;
  return traced(nullptr, path);
}

}  // namespace internal
}  // namespace kiln::compiler
