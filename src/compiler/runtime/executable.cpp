#include "compiler/runtime/executable.h"

#include <algorithm>
#include <chrono>
#include <optional>

#include "backends/backend.h"
#include "backends/prepared.h"
#include "backends/writes_nothing.h"
#include "compiler/codegen/generated.h"
#include "compiler/codegen/row_reduction.h"
#include "compiler/ir/readers.h"
#include "core/launch_count.h"
#include "kiln/autograd.h"
#include "ops/dispatch.h"
#include "ops/workspace.h"

namespace kiln::compiler {

struct Executable::Step {
  enum class Kind { kKernel, kView, kInplace, kFused } kind = Kind::kKernel;
  const Node* node = nullptr;  // the last node of the step
  const ScheduledStep* scheduled = nullptr;
  const ops::OpSchema* schema = nullptr;
  const backend::KernelFn* kernel = nullptr;
  ops::Attrs attrs;  // canonicalized by the shape rule
  std::vector<std::optional<DType>> input_casts;
  std::vector<ops::TensorMeta> outputs;  // kernel outputs: sizes, dtype, device
  Device device;                         // where its kernel runs (its workspaces)
  // Views: each output's strides and offset relative to its input's offset.
  std::vector<int64_t> view_offset_delta;
  // Views: each output's sizes and strides; other kernels: each output's
  // strides where a pass chose them (channels last), else empty.
  std::vector<Shape> view_sizes, strides;
  Shape reduced_sizes;  // a generated row reduction's input's sizes
  // A fused step's values: a generated group's stored ones, then the
  // result (its last node's output), by output.
  std::vector<ValueId> made;
  std::vector<int32_t> writes;               // by output: the input whose memory it writes, else -1
  codegen::PointwiseFn generated = nullptr;  // a generated kernel's function
  const void* device_generated = nullptr;    // a generated device kernel's
  codegen::PointwiseFn epilogue = nullptr;   // its row reduction's epilogue's
  codegen::PointwiseFn row = nullptr;        // the ops on the reduction's result
  // An input its backend prepared (backends/prepared.h), passed as
  // KernelCall::prepared; null where none.
  std::shared_ptr<const void> prepared;
};

namespace {

Tensor view_of(const Tensor& base, const Shape& sizes, const Shape& strides, int64_t offset,
               DType dtype) {
  return ops::make_strided(base.storage(), sizes, strides, offset, dtype);
}

// An executable runs a graph of plain layouts: a program's symbolic graph is
// bound to sizes first (docs/architecture.md, "Symbolic sizes").
void check_plain(const Graph& g) {
  if (g.symbolic()) throw Error("compiler: an executable's graph has symbolic layouts");
}

}  // namespace

Schedule lower_schedule(const Graph& g, const ScheduleOptions& options,
                        codegen::BuiltKernels& kernels) {
  Schedule schedule = schedule_graph(g, options);
  if (schedule.kernels.empty()) return schedule;
  std::string why;
  if (auto built = codegen::build_kernels(schedule.kernels, why)) {
    kernels = std::move(*built);
    return schedule;
  }
  // No compiler, or a build error: the library kernels run the groups.
  ScheduleOptions off = options;
  off.generate = false;
  off.generate_off = detail::str_cat("generated kernels are off: ", why);
  kernels = {};
  kernels.summary = off.generate_off;
  return schedule_graph(g, off);
}

Executable::Executable(std::shared_ptr<const Trace> trace, const ScheduleOptions& options)
    : trace_(std::move(trace)), current_(&plan_) {
  check_plain(trace_->graph);
  schedule_ = lower_schedule(trace_->graph, options, kernels_);
  build_steps();
}

Executable::Executable(std::shared_ptr<const Trace> trace, Schedule schedule,
                       codegen::BuiltKernels kernels)
    : trace_(std::move(trace)),
      schedule_(std::move(schedule)),
      current_(&plan_),
      kernels_(std::move(kernels)) {
  check_plain(trace_->graph);
  build_steps();
}

void Executable::build_steps() {
  const Graph& g = trace_->graph;
  plan_ = plan_memory(g, schedule_);
  NoGradGuard no_grad;
  steps_.reserve(schedule_.steps.size());
  for (const ScheduledStep& scheduled : schedule_.steps) {
    const Node& n = g.nodes()[static_cast<size_t>(scheduled.nodes.back())];
    Step s;
    s.node = &n;
    s.scheduled = &scheduled;
    s.schema = &ops::op_schema(n.op);
    if (scheduled.kernel >= 0) {
      s.kind = Step::Kind::kFused;
      const auto kernel = static_cast<size_t>(scheduled.kernel);
      s.generated = kernels_.functions[kernel];
      if (kernel < kernels_.device_functions.size())
        s.device_generated = kernels_.device_functions[kernel];
      const auto function = [&](int32_t k) {
        return k < 0 ? nullptr : kernels_.functions[static_cast<size_t>(k)];
      };
      if (scheduled.reduction) {
        s.epilogue = function(scheduled.reduction->epilogue_kernel);
        s.row = function(scheduled.reduction->row_kernel);
      }
      s.made = schedule_.results(g, steps_.size());
      s.writes = scheduled.stored_writes;
      s.writes.push_back(scheduled.writes_input);
      for (ValueId id : s.made) {
        const Value& out = g.value(id);
        s.outputs.push_back({sym::hints(out.sizes), out.dtype, out.device, {}, 0});
      }
      if (scheduled.reduction)
        s.reduced_sizes = sym::hints(
            g.value(g.nodes()[static_cast<size_t>(scheduled.reduction->node)].inputs[0]).sizes);
      s.device = g.value(s.made.back()).device;
    } else if (scheduled.fused()) {
      // The library call's attributes as its shape rule canonicalizes them.
      const Node& call = g.nodes()[static_cast<size_t>(scheduled.nodes.front())];
      TensorList metas;
      for (ValueId id : call.inputs) metas.push_back(id == kNoValue ? Tensor() : g.meta_tensor(id));
      ops::Inferred inferred = ops::infer(call.op, metas, call.attrs);
      s.kind = Step::Kind::kFused;
      s.node = &call;
      s.schema = &ops::op_schema(call.op);
      s.attrs = std::move(inferred.attrs);
      s.made = {schedule_.result(g, steps_.size())};
      s.writes = {-1};
      const Value& out = g.value(s.made.back());
      s.outputs = {{sym::hints(out.sizes), out.dtype, out.device, {}, 0}};
      s.device = out.device;
    } else if (n.inplace()) {
      s.kind = Step::Kind::kInplace;
      s.attrs = n.attrs;
      s.device = g.value(n.target).device;
    } else if (s.schema->has_flag(ops::kView)) {
      s.kind = Step::Kind::kView;
      const int64_t base = g.value(n.inputs[0]).offset.hint();
      for (ValueId out : n.outputs) {
        const Value& v = g.value(out);
        s.view_offset_delta.push_back(v.offset.hint() - base);
        s.view_sizes.push_back(sym::hints(v.sizes));
        s.strides.push_back(sym::hints(v.strides));
      }
    } else {
      TensorList metas;
      for (ValueId id : n.inputs) metas.push_back(id == kNoValue ? Tensor() : g.meta_tensor(id));
      ops::Inferred inferred = ops::infer(n.op, metas, n.attrs);
      s.attrs = std::move(inferred.attrs);
      s.input_casts = std::move(inferred.input_casts);
      s.outputs = std::move(inferred.outputs);
      s.device = ops::kernel_device(s.outputs, metas);
      s.kernel = &ops::kernel_for(n.op, s.device);
    }
    if (s.kind == Step::Kind::kKernel || s.kind == Step::Kind::kFused) {
      // Each output's strides where a pass chose other than row-major ones.
      const std::vector<ValueId>& made = s.kind == Step::Kind::kFused ? s.made : n.outputs;
      for (size_t k = 0; k < s.outputs.size() && k < made.size(); ++k) {
        Shape strides = sym::hints(g.value(made[k]).strides);
        if (strides != ops::contiguous_strides(s.outputs[k].sizes)) {
          s.strides.resize(s.outputs.size());
          s.strides[k] = std::move(strides);
        }
      }
    }
    steps_.push_back(std::move(s));
  }
  prepare_constants();
  // The values of each arena storage, let go after its last use (by a
  // measuring run).
  release_after_.resize(steps_.size());
  for (size_t v = 0; v < g.values().size(); ++v) {
    const Value& value = g.values()[v];
    if (value.kind != ValueKind::kNode) continue;
    const PlannedStorage& p = plan_.storages[static_cast<size_t>(value.storage)];
    if (p.in_arena && p.last >= 0)
      release_after_[static_cast<size_t>(p.last)].push_back(static_cast<ValueId>(v));
  }
}

Executable::~Executable() = default;

// Constants a backend can prepare, as the weights of frozen convolutions on
// the CPU (backends/prepared.h), are handed to it once here. A constant that
// only such inputs read is then bound as a tensor without bytes: the
// executable holds its prepared form alone, and a lazy one (a folded weight)
// is made a block of rows at a time as the backend packs it, never whole
// (docs/architecture.md, "Prepared weights").
void Executable::prepare_constants() {
  const Graph& g = trace_->graph;
  std::vector<int32_t> prepared(g.constants().size(), 0);  // by slot: steps that prepared it
  const auto slot_of = [&](ValueId id) {
    return id != kNoValue && g.value(id).kind == ValueKind::kConstant ? g.value(id).slot : -1;
  };
  for (Step& s : steps_) {
    if ((s.kind != Step::Kind::kKernel && s.kind != Step::Kind::kFused) || s.generated ||
        s.device_generated)
      continue;
    const backend::InputPreparation* prep = backend::input_preparation(s.device.kind(), s.node->op);
    if (!prep) continue;
    const std::vector<ValueId>& ids = s.scheduled->fused() ? s.scheduled->inputs : s.node->inputs;
    if (prep->input >= ids.size() || prep->input >= s.node->inputs.size()) continue;
    const int32_t slot = slot_of(ids[prep->input]);
    if (slot < 0 || g.value(ids[prep->input]).sizes.empty()) continue;
    if (prep->input < s.input_casts.size() && s.input_casts[prep->input]) continue;
    TensorList inputs, outputs;
    for (size_t i = 0; i < s.node->inputs.size(); ++i)
      inputs.push_back(ids[i] == kNoValue ? Tensor() : g.meta_tensor(ids[i]));
    outputs.push_back(g.meta_tensor(s.scheduled->fused() ? s.made.back() : s.node->outputs[0]));
    s.prepared = prep->prepare(
        backend::KernelCall{*s.schema, inputs, outputs, s.attrs},
        [&g, slot](int64_t begin, int64_t end) {
          return g.constant_rows(static_cast<size_t>(slot), begin, end);
        },
        g.constant_identity(static_cast<size_t>(slot)));
    if (s.prepared) ++prepared[static_cast<size_t>(slot)];
  }
  // A prepared step is one node reading the constant once, and a returned
  // constant counts as more reads: equal counts mean no other reader.
  const Readers readers(g);
  constants_.resize(g.constants().size());
  for (size_t slot = 0; slot < constants_.size(); ++slot) {
    if (prepared[slot] > 0 &&
        prepared[slot] == readers.count[static_cast<size_t>(g.constants()[slot])]) {
      constants_[slot] = g.meta_tensor(g.constants()[slot]);
      ++prepared_constants_;
    } else {
      constants_[slot] = g.constant(slot);
    }
  }
}

size_t Executable::num_steps() const noexcept { return steps_.size(); }

std::vector<const void*> Executable::prepared_forms() const {
  std::vector<const void*> forms;
  for (const Step& s : steps_)
    if (s.prepared) forms.push_back(s.prepared.get());
  return forms;
}

namespace {

// A profiling run's clock around one step: the device's queue drained
// before and after it, so that the time is the step's alone.
class StepTimer {
 public:
  explicit StepTimer(Device device) : device_(device) {
    if (!device_.is_cpu()) backend::backend_for(device_.kind()).synchronize(device_);
    start_ = std::chrono::steady_clock::now();
  }
  double ms() const {
    if (!device_.is_cpu()) backend::backend_for(device_.kind()).synchronize(device_);
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_)
        .count();
  }

 private:
  Device device_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace

TensorList Executable::run(const TensorList& inputs, const NodeObserver& observe,
                           PhiloxRecording* philox, StepTimes* times) const {
  // Nothing here is differentiated: a training step's graph holds its own
  // backward ops, and writes parameters that require grad in place.
  NoGradGuard no_grad;
  const Graph& g = trace_->graph;
  std::vector<Tensor> env = bind_sources(*trace_, inputs, constants_);
  // The first run measures the steps' workspaces (one run does, while
  // others go on with the plan they found). It runs as eager would hold
  // memory: each intermediate allocated on its own and let go after its
  // last use, so that it peaks no higher than eager.
  const MemoryPlan& plan_now = *current_.load(std::memory_order_acquire);
  const bool measure = &plan_now == &plan_ && !measuring_.exchange(true);
  std::vector<size_t> workspaces(measure ? steps_.size() : 0);
  // One arena per device; planned storages are slices that keep it alive.
  std::vector<std::shared_ptr<Storage>> arenas;
  if (!measure) {
    arenas.reserve(plan_now.arenas.size());
    for (const auto& a : plan_now.arenas)
      arenas.push_back(backend::backend_for(a.device.kind()).allocate(a.nbytes, a.device));
  }
  TensorList args;
  ops::Attrs scratch;
  CallDraws draws;
  std::vector<uint64_t> step_draws;  // a generated step's seeds and offsets
  ops::Attrs draw_scratch;
  draws.recording = philox;
  std::optional<ops::WorkspaceScope> workspace;
  std::optional<ops::RecordedPhiloxScope> recorded_draw;
  for (size_t index = 0; index < steps_.size(); ++index) {
    const Step& s = steps_[index];
    const Node& n = *s.node;
    const auto observed = static_cast<size_t>(s.scheduled->nodes.back());
    args.clear();
    workspace.reset();
    if (s.kind != Step::Kind::kView) {
      if (measure) {
        workspace.emplace(s.device);
      } else if (!plan_now.workspaces.empty() && plan_now.workspaces[index].in_arena) {
        const PlannedStorage& w = plan_now.workspaces[index];
        workspace.emplace(s.device, arenas[static_cast<size_t>(plan_now.workspace_arena[index])],
                          w.offset, w.nbytes);
      }
    }
    for (ValueId id : s.kind == Step::Kind::kFused ? s.scheduled->inputs : n.inputs)
      args.push_back(id == kNoValue ? Tensor() : env[static_cast<size_t>(id)]);
    const uint64_t* words = nullptr;
    const ops::Attrs* attrs = &call_attrs(n, s.attrs, scratch, draws, &words);
    recorded_draw.reset();
    if (words) recorded_draw.emplace(words);
    switch (s.kind) {
      case Step::Kind::kView:
        for (size_t k = 0; k < n.outputs.size(); ++k)
          env[static_cast<size_t>(n.outputs[k])] = view_of(
              args[0], s.view_sizes[k], s.strides[k],
              args[0].storage_offset() + s.view_offset_delta[k], g.value(n.outputs[k]).dtype);
        if (observe) {
          TensorList views;
          for (ValueId out : n.outputs) views.push_back(env[static_cast<size_t>(out)]);
          observe(observed, views);
        }
        break;
      case Step::Kind::kInplace: {
        Tensor target = env[static_cast<size_t>(n.target)];
        ops::dispatch_inplace(n.op, target, args, *attrs);
        if (measure) workspaces[index] = workspace->high_water();
        env[static_cast<size_t>(n.outputs[0])] = target;
        if (observe) observe(observed, std::span<const Tensor>(&target, 1));
        break;
      }
      case Step::Kind::kKernel:
      case Step::Kind::kFused: {
        for (size_t i = 0; i < s.input_casts.size() && i < args.size(); ++i)
          if (s.input_casts[i]) args[i] = args[i].to(*s.input_casts[i]);
        const bool fused = s.kind == Step::Kind::kFused;
        const std::span<const ValueId> made =
            fused ? std::span<const ValueId>(s.made) : std::span<const ValueId>(n.outputs);
        TensorList outs;
        outs.reserve(s.outputs.size());
        for (size_t k = 0; k < s.outputs.size(); ++k) {
          if (fused && s.writes[k] >= 0) {  // a generated group in place: its input's memory
            outs.push_back(args[static_cast<size_t>(s.writes[k])]);
            continue;
          }
          const ops::TensorMeta& m = s.outputs[k];
          const Value& v = g.value(made[k]);
          const auto storage = static_cast<size_t>(v.storage);
          const PlannedStorage& p = plan_now.storages[storage];
          if (p.in_arena && !measure) {
            const std::shared_ptr<Storage>& arena =
                arenas[static_cast<size_t>(plan_now.arena_of[storage])];
            auto slice = std::make_shared<Storage>(static_cast<char*>(arena->data()) + p.offset,
                                                   p.nbytes, m.device, [keep = arena](void*) {});
            outs.push_back(ops::make_tensor(std::move(slice), m.sizes, m.dtype));
          } else {
            outs.push_back(ops::make_tensor(m.sizes, m.dtype, m.device));
          }
          // A layout a pass chose (channels last): the same bytes, its strides.
          if (k < s.strides.size() && !s.strides[k].empty())
            outs.back() = view_of(outs.back(), m.sizes, s.strides[k], 0, m.dtype);
        }
        if (s.generated) {
          // Its random nodes' draws, in program order (ScheduledStep::draws).
          step_draws.clear();
          for (int32_t k : s.scheduled->draws) {
            const ops::PhiloxDraw d =
                call_draw(g.nodes()[static_cast<size_t>(k)], draw_scratch, draws);
            step_draws.push_back(static_cast<uint64_t>(d.seed));
            step_draws.push_back(static_cast<uint64_t>(d.offset));
          }
        }
        const uint64_t* seeds = step_draws.empty() ? nullptr : step_draws.data();
        std::optional<StepTimer> timer;
        if (times && (s.generated || s.device_generated)) timer.emplace(s.device);
        if (s.generated && s.scheduled->reduction) {
          detail::count_kernel_launch();
          const codegen::RowReduction& reduction = *s.scheduled->reduction;
          const DType x_dtype =
              g.value(g.nodes()[static_cast<size_t>(reduction.node)].inputs[0]).dtype;
          // Its input stored as it is reduced, where it is read after it.
          codegen::run_row_reduction(s.generated, reduction, s.reduced_sizes, x_dtype, outs.back(),
                                     args, s.epilogue, s.row, seeds,
                                     outs.size() > 1 ? outs[0] : Tensor());
        } else if (s.device_generated && s.scheduled->reduction) {
          detail::count_kernel_launch();
          codegen::run_device_rows(s.device_generated, *s.scheduled->reduction, outs.back(),
                                   outs.size() > 1 ? outs[0] : Tensor(), args);
        } else if (s.generated || s.device_generated) {
          detail::count_kernel_launch();
          if (s.generated)
            codegen::run_pointwise(s.generated, outs, args, seeds);
          else
            codegen::run_device_pointwise(s.device_generated, outs, args);
          for (size_t k = 0; k < outs.size(); ++k)
            if (s.writes[k] >= 0) outs[k].bump_version();
        } else if (fused) {
          detail::count_kernel_launch();
          s.scheduled->lowering->run(
              backend::KernelCall{*s.schema, args, outs, *attrs, s.prepared.get()},
              s.scheduled->epilogue);
        } else if (!backend::writes_nothing(outs, args)) {
          detail::count_kernel_launch();
          (*s.kernel)(backend::KernelCall{*s.schema, args, outs, *attrs, s.prepared.get()});
        }
        if (timer) {
          times->resize(steps_.size(), -1.0);
          (*times)[index] = timer->ms();
        }
        if (measure) workspaces[index] = workspace->high_water();
        if (observe && fused && made.size() > 1) {
          // Each stored value under the node that made it.
          for (size_t k = 0; k < outs.size(); ++k)
            observe(static_cast<size_t>(g.value(made[k]).producer),
                    std::span<const Tensor>(&outs[k], 1));
        } else if (observe) {
          observe(observed, outs);
        }
        for (size_t k = 0; k < outs.size(); ++k)
          env[static_cast<size_t>(made[k])] = std::move(outs[k]);
        break;
      }
    }
    if (measure) {
      args.clear();
      for (ValueId id : release_after_[index]) env[static_cast<size_t>(id)] = Tensor();
    }
  }
  workspace.reset();
  recorded_draw.reset();
  if (measure &&
      std::any_of(workspaces.begin(), workspaces.end(), [](size_t b) { return b > 0; })) {
    measured_ = std::make_unique<const MemoryPlan>(plan_memory(g, schedule_, workspaces));
    current_.store(measured_.get(), std::memory_order_release);
  }
  TensorList results;
  results.reserve(g.outputs().size());
  for (ValueId id : g.outputs()) results.push_back(env[static_cast<size_t>(id)]);
  return results;
}

}  // namespace kiln::compiler
