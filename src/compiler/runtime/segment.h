// The graphs of a compiled function (kiln::compile's cache, compile.cpp): a
// guard key's entry holds a tree of segments, one graph each. A trace that
// breaks at host reads (graph breaks) cuts the function into segments; each
// ends at a read, and the next is chosen by the bytes read. A segment runs
// its planned executable, its CUDA graph, or a replay through dispatch.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "compiler/capture/capture.h"
#include "compiler/dump.h"
#include "compiler/ir/symbolic_shapes.h"
#include "compiler/runtime/device_graph.h"
#include "compiler/runtime/executable.h"
#include "compiler/runtime/program.h"
#include "kiln/compile.h"
#include "nn/module_state.h"

namespace kiln::compiler {

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
    if (!(t.sizes() == sizes && t.strides() == strides && t.dtype() == dtype &&
          t.device() == device && t.requires_grad() == requires_grad))
      return false;
    if (!requires_grad) return true;
    const Tensor g = t.grad();
    return g.defined() == has_grad && (grad == nullptr || g.impl_ptr().get() == grad);
  }
};

// `grad`: the tensor's gradient as the trace found it; `captured`: the
// graph's captured tensors.
LayoutGuard layout_of(const Tensor& t, const Tensor& grad, const TensorList& captured);

// A captured tensor that a live module's registered slot held when traced
// (a parameter or buffer): while the module lives, a slot given another
// tensor (net.fc.weight = w) makes the graph stale.
struct SlotGuard {
  size_t captured = 0;  // its index among the trace's captured tensors
  nn::internal::SlotRef ref;
};
std::vector<SlotGuard> slot_guards(const TensorList& captured);
// Why the slots no longer hold the captured tensors (empty while they do).
std::string slots_changed(const std::vector<SlotGuard>& slots, const TensorList& captured);
// Why a host guard fails (empty while they all hold).
std::string host_guards_changed(const std::vector<HostGuard>& guards);

// What a new trace must match to reuse a kept graph: the traced graph's
// structure (compiler::structural_hash), its captured tensors and the
// generators its random nodes draw from.
struct TraceSignature {
  uint64_t hash = 0;
  std::vector<const TensorImpl*> captured;
  std::vector<const Generator*> generators;
  bool operator==(const TraceSignature&) const = default;
};
TraceSignature signature_of(const Trace& traced);

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
  std::vector<SlotGuard> slots;  // the captured tensors that modules' slots held
  TraceSignature signature;      // of the graph as traced, before the passes
  int32_t read = -1;             // the output the program read on the host; -1: the last graph
  bool guarded = true;  // the read can be guarded (else calls with this key run eagerly afterwards)
  std::string read_description;
  std::vector<int64_t> structure;  // the last graph's: the results' nesting
  // A training step: the function ran backward() (its graph holds the backward
  // ops and runs as an executable, recording no autograd), and the last
  // graph's gradient outputs, which follow its results.
  bool ran_backward = false;
  std::vector<GradWrite> grad_writes;
  std::vector<HostGuard> host_guards;
  std::unordered_map<std::string, Link> next;  // by the bytes read (under Impl::mutex)
  int64_t order = 0;                           // the graph's number in its function, from 1
  // KILN_DUMP_DIR: what the graph's folder gets beside the graph (written
  // when it is lowered, then let go).
  std::shared_ptr<GraphDump> dump;
  int64_t resumes = 0;  // the number of the graph whose read it follows (0: a first graph)
  int64_t instance_of =
      0;  // compiled for new sizes of dynamic dims: the graph whose program it repeats
  bool retraced = false;  // made from instance_of's trace by retrace, the function not called
  bool bound = false;     // of those, bound from its program for all sizes (runtime/program.h)
  std::string symbols;    // checked against symbolic shapes: the symbols' values ("s0 = 9")
  double trace_ms = 0, verify_ms = 0, passes_ms = 0, lower_ms = 0, record_ms = 0, autotune_ms = 0;
  size_t traced_nodes = 0;
  // Mode::ReduceOverhead: the executable recorded as one device graph, or
  // why it is not (obstacles found before recording, or the recording's failure).
  mutable std::mutex graph_mutex;
  std::shared_ptr<GraphedExecutable> graphed;
  std::vector<std::string> graph_obstacles;
  // The latest profiling run's times (Compiled::profile): by step, the
  // milliseconds of its generated kernel, -1 for other steps (under graph_mutex).
  std::vector<double> kernel_ms;

  size_t outputs() const { return trace->graph.outputs().size(); }
  // Why this graph no longer serves calls (a captured tensor's guard, a
  // module's slot, or a host guard fails); empty while it does. `by_host`:
  // set when only a host guard fails (a module's training flag): the graph
  // may serve again when the flag goes back, so it is kept.
  std::string stale(bool* by_host = nullptr) const;
};

// The keys that differ only in the sizes of dynamic dims (CompileOptions::
// dynamic): one program, compiled per size. Each size has its own Entry,
// guarded exactly; graphs whose program (program_hash) the family already
// has are instances, not recompiles.
struct Family {
  std::unordered_map<uint64_t, int64_t>
      programs;  // program_hash -> the first graph compiled with it
  // The latest traces of the family that made one graph (no graph break, no
  // backward() and no random draws), as traced, with the layout reads the
  // program made: new sizes are made from one (retrace) without calling the
  // function, wherever its reads give the same values. Newest first.
  struct Generic {
    std::shared_ptr<const Trace> traced;
    std::vector<LayoutRead> reads;
    std::vector<int64_t> structure;
    int64_t order = 0;  // the graph whose program it is
    // Its shapes as expressions of the dynamic dims, and the guards for
    // which sizes it is the program's graph: a new size is checked against
    // them before its graph is made (null where they could not be made).
    std::optional<SymbolicShapes> shapes;
    // What the trace depended on besides its arguments: the host numbers it
    // read (training flags), and the modules' slots its captured tensors
    // were in. A new size is made from it only while they are as traced.
    std::vector<HostGuard> host_guards;
    std::vector<SlotGuard> slots;
    // Its program for all sizes that its guards admit (runtime/program.h),
    // made at its first new size; null where it could not be made, with why.
    mutable std::mutex program_mutex;
    mutable bool program_tried = false;
    mutable std::shared_ptr<const SymbolicProgram> program;
    mutable std::string program_why;
    // KILN_DUMP_DIR: the program's passes and kernels, for the dump of the
    // graph whose call made it (taken by that graph).
    mutable std::shared_ptr<GraphDump> program_dump;
  };
  static constexpr size_t kMaxGenerics = 4;
  std::vector<std::shared_ptr<const Generic>> generics;
};

struct Entry {
  std::vector<int64_t> key;
  std::vector<int64_t> shapeless;  // the key with every size and stride left out
  std::vector<Shape> sizes;        // each tensor argument's
  std::shared_ptr<Family> family;  // when some of its tensor arguments' dims are dynamic
  std::vector<std::pair<std::string, std::string>> described;  // (guard, value), for logs
  uint64_t last_used = 0;  // the cache's count of lookups at its last use (under Impl::mutex)
  // The first graph (under Impl::mutex); none: calls with this key run
  // eagerly (a graph break that cannot resume, or the recompile limit).
  std::shared_ptr<Segment> root;
  // First graphs kept for other values of their host guards (a module in
  // the other training mode), latest first: a call whose root is stale
  // takes the one whose guards hold.
  std::vector<std::shared_ptr<Segment>> other_roots;
  static constexpr size_t kMaxOtherRoots = 7;
};

double ms_since(std::chrono::steady_clock::time_point start);

// Records the segment's executable as a device graph for arguments laid out
// as `tensors` (the executable has just run on them); a failure becomes the
// reason the segment has none.
void record_graph(Segment& seg, const TensorList& tensors, const std::string& name);

// A segment's call: its device graph, its executable, or where autograd
// must record, a replay through dispatch. graph_calls counts device graph launches.
TensorList run_segment(Segment& seg, const TensorList& tensors, const std::string& name,
                       int64_t& graph_calls);

// A segment's first call: it makes the libraries' plans and handles (under
// MaxAutotune, by timing their candidates); then, under ReduceOverhead and
// MaxAutotune, the same work is recorded as a device graph for later calls.
TensorList first_run(Segment& seg, const TensorList& tensors, const CompileOptions& options,
                     int64_t& graph_calls);

// A training step's last graph: its gradient outputs go to their tensors'
// grad(), and the results are what is left.
void apply_grad_writes(const Segment& seg, TensorList& outs);

// The tensors a segment reads, from the call's tensors.
TensorList gather(const TensorList& env, const std::vector<int32_t>& sources);

// The bytes of a tensor the program read: what a graph break is guarded on.
std::string read_key(const Tensor& t);
// The values read, printed (for logs and explain()).
std::string read_value_text(const Tensor& t);

}  // namespace kiln::compiler
