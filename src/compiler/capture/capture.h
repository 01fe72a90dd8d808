// Capture: while a Tracer is active on a thread, every op the thread runs
// through dispatch is recorded into a Graph instead of running (docs/architecture.md, "Capture").
// The traced program sees meta tensors (proxies): shapes, dtypes, devices and
// strides exactly as eager would give them, and no data.
//
//   compiler::Tracer tracer;
//   Tensor x = tracer.input(real_x);             // a proxy for argument 0
//   Tensor y = (x * 2).relu().sum(1);             // recorded, nothing runs
//   compiler::Trace trace = tracer.finish({y});   // the graph and what it captured
//
// A real tensor the program reads without receiving it (a module's weight, a
// tensor of a closure) becomes a captured value, bound by reference at every
// replay; a number the program wrote (the 2 above) becomes a constant. A
// random op (dropout, randn) keeps the generator it drew from: the replay
// draws from it anew, and tracing itself draws nothing.
//
// replay() runs a trace's nodes in order on real tensors, through the same
// kernels eager mode uses: the reference executable, equal to eager bitwise.
#pragma once

#include <functional>
#include <limits>
#include <optional>
#include <source_location>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>

#include "compiler/ir/graph.h"
#include "ops/attrs.h"
#include "ops/op_table.h"
#include "ops/random.h"
#include "ops/tracing.h"

namespace kiln::compiler {

// Thrown when the traced program reads tensor values on the host (item(),
// to_vector(), data()): what the values are is not known while tracing.
class DataDependentRead : public Error {
 public:
  using Error::Error;
};

struct Trace {
  Graph graph;
  // The real tensors behind graph.captured(), by slot: the replay binds these
  // very tensors (so it sees updates made to them in place).
  TensorList captured;
};

// A read of a proxy's values on the host, which ends the graph being traced
// (a graph break): ops/tracing.h.
using ops::HostRead;

// A host number a trace depends on besides the call's arguments (an
// optimizer's learning rate): a graph traced with `value` serves a call only
// while read() still gives it.
struct HostGuard {
  std::string what;
  std::function<double()> read;
  double value = 0;
  // What the number belongs to (a module's state): a trace notes it once.
  const void* source = nullptr;
  bool flag = false;  // a true/false value (a module's training flag), printed so
  // "was true, now false", "was 0.1, now 0.01".
  std::string changed(double now) const;
};

// A gradient the traced program left in a real tensor's grad() (backward()
// or an optimizer's zero_grad inside the function): after each run, owner's
// grad becomes the graph's output `output` (-1: none).
struct GradWrite {
  Tensor owner;
  int32_t output = -1;
};

// A graph that ended at a graph break: its outputs are every value the
// program still holds, so that whatever it does next can start from them.
struct Cut {
  Trace trace;
  std::vector<int32_t> sources;  // graph input i is the call's tensor sources[i] (Tracer::sources)
  size_t read = 0;               // the output the program read
  HostRead how;
  std::string description;  // HostRead::describe
  std::vector<HostGuard> host_guards;
};

// A read of a proxy's layout by the traced program (Tensor::sizes(),
// size(d), strides(), numel(), is_contiguous(), storage_offset()) and what
// it gave. The program's ops and attributes depend on its arguments' layouts
// only through such reads (and shape rules, which run again), so a graph
// made again for other sizes (retrace) is the program's graph for them
// wherever every read gives the same.
// A comparison of a size with a number (Tensor::size_is) is a read too,
// of the comparison's outcome only (observed is {0} or {1}): the program
// is the same for every size that compares the same.
struct LayoutRead {
  ValueId value = kNoValue;
  LayoutField field = LayoutField::kSizes;
  int64_t dim = -1;  // of kSize and kStride
  Shape observed;
  std::source_location where;
  std::optional<SizeCmp> cmp;  // a comparison of size(dim) with `bound`
  int64_t bound = 0;
  // A comparison with size(other_dim) of value `other` (then `bound` is that
  // size as traced).
  ValueId other = kNoValue;
  int64_t other_dim = -1;
  // "size(1) of %0 at bert.cpp:40, which gave 16"; "size(1) of %0 > 512 at bert.cpp:303, which gave
  // false"
  std::string describe() const;
};
// What `read` gives on a value laid out as `v` (and, for a comparison of two
// sizes, its other value laid out as `other`).
Shape observe(const Value& v, LayoutField field, int64_t dim);
Shape observe(const Value& v, const LayoutRead& read, const Value* other = nullptr);
// A read's value as the program saw it: a shape, one number, or true/false.
std::string shown(LayoutField field, const Shape& observed);
std::string shown(const LayoutRead& read, const Shape& observed);

class Tracer final : public ops::TraceRecorder {
 public:
  // Active on this thread until destroyed; tracers do not nest.
  Tracer();
  ~Tracer();
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  // The tracer active on this thread, or null. While an op is being recorded
  // (its shape rule runs on proxies) none is active.
  static Tracer* active() noexcept { return dynamic_cast<Tracer*>(ops::TraceRecorder::active()); }

  // A proxy for the next argument of the traced function. Arguments that
  // view one storage (x and x.t()) get proxies that view one meta storage.
  Tensor input(const Tensor& real);

  // Graph breaks that resume. When the program reads a proxy's values on the
  // host, the graph recorded so far is cut there (Cut) and handed to the
  // handler, which runs it on the call's real tensors and returns its
  // outputs' real values; the read is answered from them and tracing goes on
  // in a new graph, whose inputs are the earlier graphs' outputs the program
  // goes on to use. Without a handler a read throws DataDependentRead.
  using BreakHandler = std::function<TensorList(Cut cut)>;
  void on_break(BreakHandler handler) { on_break_ = std::move(handler); }
  // The real tensor behind a proxy the program reads (HostRead), by a cut.
  Tensor materialize(const Tensor& proxy, const HostRead& read) override;
  // The call's tensors a graph's inputs may come from: the arguments, then
  // each cut graph's outputs in order. The graph being traced reads
  // sources()[i] as input i.
  const std::vector<int32_t>& sources() const noexcept { return sources_; }

  // Training steps. A real leaf tensor that requires grad (a parameter, an
  // argument) gets a proxy that requires grad too, whose gradient goes to the
  // real tensor's accumulator: backward() inside the function runs the
  // autograd engine on proxies, which records the backward ops, and leaves a
  // proxy in the real tensor's grad() for the rest of the function (an
  // optimizer's step) to read. finish() puts every grad() back as it was and
  // lists the changes (grad_writes), which each run applies for real.
  void note_backward() noexcept override { ran_backward_ = true; }
  bool ran_backward() const noexcept { return ran_backward_; }
  const std::vector<GradWrite>& grad_writes() const noexcept { return grad_writes_; }
  // A real tensor's grad() as it was when the trace first saw the tensor.
  Tensor grad_at_start(const Tensor& real) const;
  // Called before the program sets a real tensor's grad() (zero_grad()):
  // notes the gradient the trace found there.
  void note_grad_owner(const Tensor& real) override;
  // `alias` (a detach() of a proxy) stands for the same value as `proxy`.
  void alias(const Tensor& proxy, const Tensor& alias) override;
  // A host number the graph being traced depends on (HostGuard). With a
  // source, a second guard of the same source in the graph is not added.
  void add_host_guard(std::string what, std::function<double()> read, const void* source = nullptr,
                      bool flag = false) override;
  // The host guards of the graph being traced, handed over.
  std::vector<HostGuard> take_host_guards() { return std::exchange(host_guards_, {}); }
  // Ends the trace with these results (proxies, or real tensors the program
  // returned untouched) and hands the graph over.
  Trace finish(const TensorList& outputs);

  // Called by Tensor's layout accessors on a proxy (TensorImpl::watched).
  void note_layout_read(const TensorImpl& impl, LayoutField field, int64_t dim,
                        const std::source_location& where) override;
  void note_size_compare(const TensorImpl& impl, int64_t dim, SizeCmp cmp, int64_t bound,
                         bool result, const std::source_location& where) override;
  void note_size_relation(const TensorImpl& impl, int64_t dim, SizeCmp cmp, const TensorImpl& other,
                          int64_t other_dim, bool result,
                          const std::source_location& where) override;
  // The program's reads of its proxies' layouts, each (value, field, dim)
  // once; `unmapped_read`: it read the layout of a proxy the trace cannot
  // name (one of a graph cut earlier), whose reads are not listed.
  const std::vector<LayoutRead>& layout_reads() const noexcept { return layout_reads_; }
  bool unmapped_read() const noexcept { return unmapped_read_; }

  // Called by dispatch for every op while this tracer is active.
  TensorList record(ops::OpId op, std::span<const Tensor> inputs, ops::Attrs attrs) override;
  void record_inplace(ops::OpId op, Tensor& self, std::span<const Tensor> inputs,
                      ops::Attrs attrs) override;
  // Called by ops::draw_philox: notes the draw for the random op recorded
  // next, which draws anew at each replay; the generator does not advance.
  ops::PhiloxDraw note_random_draw(Generator* generator, int64_t count) override;

 private:
  // The value a tensor stands for, making captured values and constants of
  // real tensors seen for the first time.
  ValueId value_of(const Tensor& t);
  // The values and proxies of an op's inputs (kNoValue and undefined for absent ones).
  void map_inputs(std::span<const Tensor> inputs, std::vector<ValueId>& ids, TensorList& proxies);
  // The proxy (meta tensor) of a value.
  const Tensor& proxy_of(ValueId id) const { return proxies_.at(static_cast<size_t>(id)); }
  ValueId bind(const Tensor& proxy, ValueId id);
  Tensor make_proxy(const Tensor& real, int32_t storage);
  int32_t storage_of_real(const Tensor& real) const;
  void take_random_draw(ops::OpId op, int32_t node);

  // The value whose data a meta tensor the tracer never saw is (kNoValue: none).
  ValueId same_data(const Tensor& t) const;
  // Gives a proxy of a real leaf that requires grad the real tensor's accumulator.
  void link_gradient(const Tensor& real, const Tensor& proxy);

  Trace trace_;
  BreakHandler on_break_;
  bool ran_backward_ = false;
  std::vector<std::pair<Tensor, Tensor>> grad_owners_;  // real leaf, its grad() when first seen
  std::vector<std::shared_ptr<void>> accumulators_;     // kept alive while tracing
  std::vector<GradWrite> grad_writes_;
  std::vector<HostGuard> host_guards_;
  std::vector<int32_t> sources_;  // of the graph being traced
  TensorList env_;                // the call's tensors: arguments, then cut graphs' outputs
  std::unordered_map<const TensorImpl*, int32_t>
      carried_;         // a proxy from a cut graph -> its tensor in env_
  TensorList retired_;  // proxies of cut graphs, alive so their addresses stay unique
  TensorList aliases_;  // detach()es of proxies (alias())
  std::unordered_map<const TensorImpl*, ValueId> values_;      // proxy or real tensor -> value
  std::unordered_map<const Storage*, int32_t> real_storages_;  // storages of inputs and captures
  std::unordered_map<int32_t, std::shared_ptr<Storage>>
      meta_storages_;            // graph storage -> its meta storage
  std::vector<Tensor> proxies_;  // by value id; also keeps every recorded impl alive
  TensorList keep_;              // real tensors seen, alive so their addresses stay unique
  std::vector<LayoutRead> layout_reads_;
  std::vector<uint64_t> layout_read_keys_;  // (value, field, dim) of each, sorted
  bool unmapped_read_ = false;
  Generator* pending_generator_ = nullptr;
  int64_t pending_count_ = -1;
  int64_t draws_ = 0;  // random draws noted so far
};

// The trace the program would give for `inputs` of other layouts (new
// sizes of dynamic dims), made without running it: each node again, in
// order, with its attributes, its shape rule run on the new layouts. Null,
// with the reason in `why`, where the program's reads (LayoutRead) would
// give other values, a shape rule rejects the new layouts, the inputs alias
// otherwise than traced, or a captured tensor's layout changed. A random
// node draws as many numbers as its new result has elements.
std::optional<Trace> retrace(const Trace& traced, std::span<const LayoutRead> reads,
                             const TensorList& inputs, std::string& why);

// Called after each node of a run with the node's index and its results
// (for an in-place node, its target), for CompileOptions::check.
using NodeObserver = std::function<void(size_t node, std::span<const Tensor> outputs)>;

// Runs the trace on real inputs of the traced layouts (sizes, strides,
// dtypes, devices; kiln::Error naming the first that differs) and returns
// its outputs. Captured tensors are read as they are now; in-place nodes
// write inputs and captured tensors as the program did.
TensorList replay(const Trace& trace, const TensorList& inputs, const NodeObserver& observe = {});

// The environment of a run over a trace: a tensor per value, with the
// inputs, captured tensors and constants bound (the rest undefined): the
// graph's constants, or `constants` by slot where given (an executable's).
std::vector<Tensor> bind_sources(const Trace& trace, const TensorList& inputs,
                                 std::span<const Tensor> constants = {});
// While tracing, a random op's draw is this seed and, as its offset, the
// number of the draw in the trace (Tracer::note_random_draw). A random node
// that did not draw but has them (dropout's backward, which recomputes its
// forward's mask from the forward's attributes) uses that draw of the call.
constexpr int64_t kTracedDrawSeed = std::numeric_limits<int64_t>::min() + 0x6b696c6e;

// A device graph's recording of its random ops: per generator (null: the
// default one), the device memory its kernels read the seed and base offset
// from at each replay (ops::recorded_philox), and the counter values the
// recorded draws take, from 0 (rounded to even, as Generator::advance).
struct PhiloxRecording {
  struct Slot {
    Generator* generator = nullptr;
    const uint64_t* words = nullptr;
    uint64_t drawn = 0;
  };
  std::vector<Slot> slots;
};

// The draws of one call of a graph, by their number in the trace.
struct CallDraws {
  std::vector<ops::PhiloxDraw> draws;
  std::vector<bool> made;
  std::vector<size_t> slot;              // under a recording: each draw's slot
  PhiloxRecording* recording = nullptr;  // set while recording a device graph
};

// A node's attributes for one call: `base` itself, or for a random node a
// copy in `scratch` with a fresh draw from its generator (kept in `draws`),
// or with the draw of this call it reuses. Under a recording, a draw takes
// the next counter values of its generator's slot instead (the generator
// does not advance), and `*words` is set to the slot's device memory.
const ops::Attrs& call_attrs(const Node& n, const ops::Attrs& base, ops::Attrs& scratch,
                             CallDraws& draws, const uint64_t** words = nullptr);
// A random node's seed and offset for one call, as call_attrs makes them,
// for a generated kernel that reads them from the host (not under a
// recording).
ops::PhiloxDraw call_draw(const Node& n, ops::Attrs& scratch, CallDraws& draws);

// Suspends the thread's tracer (ops run eagerly) while alive (ops/tracing.h).
using TracerPause = ops::TracePause;

}  // namespace kiln::compiler
