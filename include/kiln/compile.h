// kiln::compile: runs a function once per new guard key on meta tensors,
// records its ops into a graph, and replays the graph on later calls with the
// same key, never calling the function again (docs/architecture.md, "Capture").
//
//   auto fast = kiln::compile(model);                           // a module: its forward
//   Tensor y = fast(x);
//   auto step = kiln::compile([&](Tensor a, Tensor b, double s) { return (a * s + b).relu(); });
//   Tensor z = step(x, y, 0.5);                                  // traced on the first call
//
// Arguments and results may be tensors, and optionals, vectors, string-keyed
// maps, tuples and aggregates (structs) of them; arguments also numbers,
// enums and strings (kiln/compile_args.h). The guard key of a call: each tensor's sizes, strides,
// dtype, device and requires_grad, each number's value, each list's length,
// grad mode and the TF32 policy; captured tensors (module parameters and
// buffers, tensors of a closure) are bound by reference and guarded on their
// sizes, strides, dtype and device. A dim whose size changes between calls
// becomes dynamic (CompileOptions::dynamic, compiler::mark_dynamic): its new
// sizes are instances of the program compiled, not recompiles.
//
// Contract: host side effects inside the function (printing, counters, I/O
// that is not a kiln op) happen while tracing only.
//
// Graph breaks: when the function reads tensor values on the host (item(),
// to_vector()), the graph traced so far ends there and runs, the read is
// answered with the real values, and tracing goes on in a new graph. The
// graphs of a key form a tree: the graph after a read is chosen by the
// values read, and a value not seen there before traces the function again
// (re-running the graphs before it is not needed: their results are reused)
// and compiles only graphs that differ from those already kept. A read
// through a pointer (data(), data_ptr()) cannot be guarded: that call
// finishes from its trace and later calls with the key run eagerly.
// KILN_LOGS=graph_breaks logs each break with its source line; with
// fullgraph a break is an error naming it. Copies between devices
// (to(Device)) are no break: they are recorded.
//
// Training steps: backward() inside the function is traced (the autograd
// engine's ops are recorded), so forward, loss, backward and an optimizer's
// step become one graph; the gradients it leaves in grad() are set by each
// call, and the optimizer's options are guarded (docs/compile.md, "A whole
// training step").
#pragma once

#include <bit>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/compile_args.h"
#include "kiln/tensor.h"

namespace kiln {

enum class Mode { Default, ReduceOverhead, MaxAutotune };

// Which dims of the tensor arguments are dynamic: dims whose sizes are left
// out of the guard key that picks a program (docs/compile.md, "Dynamic
// dims"). Each size a dynamic dim takes is still guarded exactly: a new size
// is traced again (C++ sizes are plain integers, so only a trace shows what
// the function does with them) and its graphs are compiled for that size, as
// an instance of the program already compiled, not a recompile. A new size
// whose trace has different ops (a loop over the dim) is a recompile.
enum class Dynamic {
  Auto,  // dims marked with compiler::mark_dynamic, and a dim whose size changes between calls
  On,    // every dim of every tensor argument, from the first call
  Off,   // none: every new size is a recompile (marks are ignored)
};

// What runs the graphs (torch.compile's backend=). Replay and Eager are for
// finding where a difference comes from: a compiled function that differs
// from eager under Default but not under Replay points at the passes or the
// executable; one that differs under Replay points at the trace.
enum class CompileBackend {
  Default,  // the passes, the planned executable, and CUDA graphs as the mode asks
  Replay,   // traced and guarded alike; each graph runs its traced ops through eager dispatch
  Eager,    // nothing is traced: every call runs the function
};

struct CompileOptions {
  // Default: passes and the planned executable. ReduceOverhead: as Default,
  // and a graph whose work is all on one CUDA device is recorded as one CUDA
  // graph on its first call and replayed by one launch from then on
  // (docs/compile.md says how arguments and results are bound, and explain()
  // why a graph was not recorded). MaxAutotune: as ReduceOverhead, and the
  // first call times cuDNN's and cuBLASLt's candidate algorithms for each
  // new convolution and matmul shape, keeps the fastest (for eager calls of
  // those shapes too) and records the choices in an on-disk cache
  // (docs/compile.md, "MaxAutotune").
  Mode mode = Mode::Default;
  Dynamic dynamic = Dynamic::Auto;
  // A data-dependent read while tracing is an error naming the read, instead
  // of eager execution for that key.
  bool fullgraph = false;
  // For inference: parameters and buffers the function does not write become
  // constants, read once when a graph is compiled (later updates are not
  // seen: call compiler::reset()), so that what depends on them alone is
  // folded, convolutions absorb the eval-mode batch norms after them. Results
  // then differ from eager by rounding (the folded weights).
  bool freeze = false;
  // Results must equal eager's bitwise: no transformation that rounds
  // differently is allowed (with freeze, a ValueError), and check compares
  // bitwise. Without it, compiled results may differ from eager's within the
  // tolerance of their dtype (docs/compile.md); today only freeze does.
  bool strict = false;
  // Debugging: every call served by a graph also runs the function eagerly
  // from the same state (arguments and captured tensors the graph writes,
  // random generators) and compares results and written tensors. On a
  // difference, the graph's nodes are run one by one through the executable
  // and through eager dispatch to find the first node that diverges, and a
  // kiln::Error names it. Slow: each call runs at least twice.
  bool check = false;
  // Traces that compile a new graph, per compiled function. Past it, calls
  // with new guards run eagerly, with one warning, and a call that reads a
  // value not seen before at a graph break finishes without keeping graphs.
  int recompile_limit = 8;
  // What the cache keeps: graphs for at most this many guard keys (each
  // size of a dynamic dim is a key), and at most this many bytes of device
  // memory held by their CUDA graphs. Past either, the keys used least
  // recently are let go (KILN_LOGS=recompiles logs each); a call with one
  // later compiles it again, as an instance where its program is known.
  int cache_limit = 64;
  size_t cache_bytes_limit = size_t{1} << 30;
  // For logs and explain(): defaults to "compiled function".
  std::string name = {};
  // Replay and Eager take no mode but Default, and no freeze (a ValueError).
  CompileBackend backend = CompileBackend::Default;
};

struct CompileStats {
  int64_t calls = 0;
  int64_t graphs = 0;  // graphs compiled (numbered from 1 in explain())
  // Of those, the graphs kept now (the cache's bounds let go of the least recently used).
  int64_t graphs_kept = 0;
  // Traces that compiled graphs after the first (explain().recompiles says why).
  int64_t recompiles = 0;
  int64_t replays = 0;      // calls served by graphs (a tracing call that kept its graphs included)
  // Times the function was traced: the first, for new guards, and for values
  // not seen before at a graph break.
  int64_t traces = 0;
  int64_t eager_calls = 0;   // calls past the recompile limit, or with a key a break made eager
  int64_t graph_breaks = 0;  // the graph breaks kept (each ends a graph)
  int64_t graph_launches = 0;  // replays served by one CUDA graph launch (Mode::ReduceOverhead)
  // Graphs compiled for a new size of a dynamic dim, as instances of a program
  // already compiled for other sizes (no recompiles).
  int64_t dynamic_instances = 0;
  // Of those, the graphs made from a kept trace for the new sizes without
  // calling the function (the program read no size that changed).
  int64_t retraces = 0;
  // Of those, the sizes served by the program compiled once for all sizes
  // that its guards admit: its graph's layouts evaluated at the new sizes,
  // with no trace, pass, schedule or kernel build of their own.
  int64_t bound_sizes = 0;
  // Calls made while another compiled function was tracing: the function
  // ran inline, its ops recorded into the caller's graph.
  int64_t inlined_calls = 0;
  // Traces made because a graph break read a value not seen there before
  // (a float that differs on every call traces every call: compare it on
  // the device and read the outcome, docs/compile.md, "Graph breaks").
  int64_t new_value_traces = 0;
  // Guard keys whose graphs the cache let go (least recently used first),
  // to stay within CompileOptions::cache_limit and cache_bytes_limit.
  int64_t evictions = 0;
  // Of eager_calls, those the stance ran eagerly (compiler::set_stance).
  int64_t stance_eager_calls = 0;
};

// What a compiled function recorded: its graphs with their ops and guards,
// graph breaks, recompiles with the guard that failed, and the time each
// compile stage took. Printable (to_string) and as JSON (to_json).
struct ExplainReport {
  struct Graph {
    int64_t nodes = 0;
    std::vector<std::pair<std::string, int64_t>> ops;      // op name -> count, by first use
    std::vector<std::pair<std::string, std::string>> guards;  // guard -> value
    int64_t captured = 0;                                  // tensors bound by reference
    bool executable = false;  // runs the lowered schedule (else replays through dispatch, for autograd)
    size_t arena_bytes = 0;   // the memory plan's arenas, all devices
    size_t planned_bytes = 0; // the planned storages' sizes before sharing
    // The kernels' workspaces (cuDNN, cuBLASLt, split reductions) planned in
    // the arena, each for its step's time, as the first run measured them.
    size_t workspace_bytes = 0;
    // The executable's steps: kernel calls per run (a fused group is one).
    int64_t steps = 0;
    // Each fused group ("conv2d + add_ + relu_ (nodes 7-9): one conv2d call
    // with epilogue add, relu"), and each candidate left apart, with why.
    std::vector<std::string> fused, not_fused;
    // Of the steps, those that run a kernel kiln generated for a group of
    // pointwise nodes (CPU), and how they were had: "2 kernels compiled in
    // 412 ms", "... read from the disk cache in 3 ms", or why there are
    // none ("generated kernels are off: no C++ compiler ..."; the groups
    // run on the library kernels). Empty where no group was found.
    int64_t generated_kernels = 0;
    std::string codegen;
    bool codegen_compiled = false;  // this graph's build ran the C++ compiler
    double codegen_ms = 0;          // the time building or loading them took
    int64_t traced_nodes = 0;  // before the passes (nodes: after)
    // Node results a pass laid out channels last (a frozen graph's
    // convolutions and pools on the CPU: docs/compile.md, "Passes").
    int64_t channels_last = 0;
    // Constants held only in the layout their kernel reads, prepared when the
    // graph was lowered (a frozen graph's convolution weights on the CPU:
    // docs/architecture.md, "Prepared weights").
    int64_t prepared_weights = 0;
    // The prepared copies it reads that another graph of the function reads
    // too (its other sizes of a dynamic dim, where their kernels read one
    // layout): made once, held once.
    int64_t prepared_shared = 0;
    bool cuda_graph = false;   // replayed as one CUDA graph (Mode::ReduceOverhead)
    size_t cuda_graph_bytes = 0;  // the device memory the CUDA graph holds (static arguments, results, buffers)
    int64_t resumes = 0;       // after a graph break: the number of the graph whose read it follows (else 0)
    // Compiled for new sizes of dynamic dims: the number of the graph whose
    // program (ops and wiring, sizes aside) it repeats (else 0).
    int64_t instance_of = 0;
    // Made from graph instance_of's trace for the new sizes by shape rules
    // alone, without calling the function (trace_ms is that time).
    bool retraced = false;
    // Of those, bound from the program compiled once for all sizes its guards
    // admit: its graph's layouts evaluated at these sizes, with no pass or
    // schedule of its own (trace_ms is that time).
    bool bound = false;
    // Where its sizes were checked against the program's symbolic shapes:
    // the symbols' values ("s0 = 9, s1 = 16"; empty otherwise).
    std::string symbols;
    std::string read;          // the graph break it ends at (empty: its outputs are the results)
    double trace_ms = 0, verify_ms = 0, passes_ms = 0, lower_ms = 0;
    double record_ms = 0;      // recording the CUDA graph (all recordings)
    double autotune_ms = 0;    // MaxAutotune: the first run, which times the libraries' candidates
    // Each step that runs a generated kernel: its group (as in `fused`), the
    // kernel's function (in KILN_DUMP_DIR's sources), how it runs over the
    // traced sizes, and its time in the latest profiling run
    // (Compiled::profile; -1 where none ran).
    struct Kernel {
      std::string group, name, launch;
      double ms = -1;
    };
    std::vector<Kernel> kernels;
    std::string text;  // the graph, as compiler::to_text prints it
  };
  std::string name;
  std::vector<Graph> graphs;
  std::vector<std::string> graph_breaks;  // why a key runs eagerly
  std::vector<std::string> recompiles;    // why each trace after the first was made
  std::vector<std::string> cuda_graph_skips;  // why a graph was not captured as a CUDA graph
  // The dynamic dims of the tensor arguments ("argument 0 dim 1"), and how
  // each became dynamic.
  std::vector<std::string> dynamic_dims;
  // How the latest new size of a dynamic dim got its graphs: made from a
  // kept trace, or traced, and why (empty before one).
  std::string dynamic_sizes;
  // The latest program made for dynamic dims, with symbolic sizes: its
  // symbols (each an argument's dim), its graph with every size an
  // expression of them ("float32[s0, 64]"), and its guards, which say for
  // which sizes the program is the same (empty when no dim is dynamic, or
  // when the program's shapes could not be made symbolic: then why).
  std::string symbolic_graph;
  // "s0 == 16  (the function's read of size(1) of %0 at bert.cpp:147)"; once
  // its program is compiled for all sizes, then the guards of the passes'
  // and the schedule's decisions ("s1 != 16  (the passes)").
  std::vector<std::string> symbolic_guards;
  // The stance when the report was made, and what it did to calls
  // ("force_eager: 3 calls ran eagerly"; empty under Default with none).
  std::string stance;
  CompileStats stats;

  std::string to_string() const;
  std::string to_json() const;
};

namespace compiler {

// Forgets every compiled function's recorded graphs: the next call of each traces anew.
void reset();

// What compiled functions do when called (torch.compiler.set_stance):
//   Default           trace new arguments, replay known ones;
//   ForceEager        run every compiled function's function eagerly, so that
//                     breakpoints and prints inside it work (KILN_COMPILE=0 in
//                     the environment starts the process so);
//   EagerOnRecompile  replay what is compiled, but run eagerly where a new
//                     trace for new guards (a recompile) would be made;
//   FailOnRecompile   throw a kiln::Error there instead, naming the guard.
// Process-wide, as a debugging session is: it holds for every thread.
// explain() and the recompile logs say which stance ran a call eagerly.
enum class Stance { Default, ForceEager, EagerOnRecompile, FailOnRecompile };
void set_stance(Stance stance);
Stance stance();
std::string_view stance_name(Stance stance);  // "force_eager", ...

// Sets the stance for its lifetime, then restores the one before it.
class StanceGuard {
 public:
  explicit StanceGuard(Stance stance) : previous_(compiler::stance()) { set_stance(stance); }
  ~StanceGuard() { set_stance(previous_); }
  StanceGuard(const StanceGuard&) = delete;
  StanceGuard& operator=(const StanceGuard&) = delete;

 private:
  Stance previous_;
};

// While the returned guard lives, compiled functions run eagerly:
//   { auto off = kiln::compiler::disable(); step(x); }
[[nodiscard]] inline StanceGuard disable() { return StanceGuard(Stance::ForceEager); }

// Marks dim `dim` of t dynamic (torch._dynamo.mark_dynamic): a compiled
// function that misses its cache on a call with t as an argument leaves that
// dim out of the guard key from then on, so other sizes are instances of one
// program (CompileOptions::dynamic). Negative dims count from the end. The
// mark belongs to t's handle: copies of t share it, a view of t is unmarked.
void mark_dynamic(const Tensor& t, int64_t dim);
// The dims of t that mark_dynamic marked, as a bit mask (bit d: dim d).
uint64_t dynamic_marks(const Tensor& t);

namespace internal {

// The type-erased cache of a compiled function.
class Core {
 public:
  Core(CompileOptions options, std::string default_name);
  ~Core();
  Core(const Core&) = delete;
  Core& operator=(const Core&) = delete;
  TensorList call(const FlatArgs& args, const Runner& run, std::vector<int64_t>& structure);
  CompileStats stats() const;
  ExplainReport explain() const;
  const CompileOptions& options() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

// While one lives, this thread's calls of compiled functions are profiling
// runs (Compiled::profile).
class ProfilingScope {
 public:
  ProfilingScope() noexcept;
  ~ProfilingScope();
  ProfilingScope(const ProfilingScope&) = delete;
  ProfilingScope& operator=(const ProfilingScope&) = delete;

 private:
  bool outer_;
};
bool profiling() noexcept;

}  // namespace internal
}  // namespace compiler

// A compiled function: call it like the function it wraps.
template <typename F>
class Compiled {
 public:
  Compiled(F f, CompileOptions options)
      : f_(std::make_shared<F>(std::move(f))),
        core_(std::make_shared<compiler::internal::Core>(std::move(options), "compiled function")) {}

  template <typename... Args>
  auto operator()(Args&&... args) const {
    using R = std::remove_cvref_t<std::invoke_result_t<F&, Args&&...>>;
    return call<R>(std::forward<Args>(args)...);
  }

  // A call as operator()'s, made a profiling run: each graph runs its steps
  // one by one (not as a CUDA graph), the device waited for around each
  // generated kernel, whose time explain() then gives (its `kernels`).
  template <typename... Args>
  auto profile(Args&&... args) const {
    compiler::internal::ProfilingScope scope;
    return (*this)(std::forward<Args>(args)...);
  }

  CompileStats stats() const { return core_->stats(); }
  // Everything recorded so far.
  ExplainReport explain() const { return core_->explain(); }

 private:
  template <typename R, typename... Args>
  R call(Args&&... args) const {
    compiler::internal::FlatArgs flat;
    (compiler::internal::flatten_arg(args, flat), ...);
    const compiler::internal::Runner run = [&](const TensorList& tensors, std::vector<int64_t>& structure) {
      size_t next = 0;
      // Arguments are rebuilt left to right (braced initialization of a tuple).
      auto rebuilt = std::tuple<decltype(compiler::internal::rebuild_arg(std::forward<Args>(args), tensors,
                                                                       next))...>{
          compiler::internal::rebuild_arg(std::forward<Args>(args), tensors, next)...};
      TensorList out;
      structure.clear();
      if constexpr (std::is_void_v<R>) {
        std::apply(*f_, std::move(rebuilt));  // its writes alone (an optimizer's step)
      } else {
        compiler::internal::flatten_result(std::apply(*f_, std::move(rebuilt)), out, structure);
      }
      return out;
    };
    std::vector<int64_t> structure;
    const TensorList flat_out = core_->call(flat, run, structure);
    if constexpr (!std::is_void_v<R>) {
      size_t next = 0, shape_at = 0;
      return compiler::internal::unflatten_result<R>(flat_out, structure, next, shape_at);
    }
  }

  std::shared_ptr<F> f_;
  std::shared_ptr<compiler::internal::Core> core_;
};

// Compiles a callable of tensors and numbers.
template <typename F>
  requires(!requires(F& f) { f.parameters(); })
Compiled<std::decay_t<F>> compile(F&& f, CompileOptions options = {}) {
  return Compiled<std::decay_t<F>>(std::forward<F>(f), std::move(options));
}

// Compiles a module's forward. The module is referenced, not copied: it must
// outlive the compiled function, and its parameters are read at every call.
template <typename M>
  requires requires(M& m) { m.parameters(); }
auto compile(M& module, CompileOptions options = {}) {
  auto forward = [m = &module](auto&&... args) { return m->forward(std::forward<decltype(args)>(args)...); };
  return Compiled<decltype(forward)>(std::move(forward), std::move(options));
}

// Compiles f (a callable or a module) afresh, calls it once with args, and
// reports what was recorded:
//   std::cout << kiln::explain(model, x).to_string();
template <typename F, typename... Args>
ExplainReport explain(F&& f, Args&&... args) {
  auto compiled = compile(std::forward<F>(f));
  (void)compiled(std::forward<Args>(args)...);
  return compiled.explain();
}

}  // namespace kiln
