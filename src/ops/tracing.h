// The interface through which the layers below the compiler report to a
// running trace (docs/architecture.md, "Capture"): dispatch records ops,
// Tensor notes the program's reads of layouts and of values on the host,
// autograd and the optimizers note gradients and host numbers. The
// compiler's Tracer (compiler/capture/capture.h) implements it, so that core, ops,
// autograd, nn and optim never include the compiler.
#pragma once

#include <functional>
#include <source_location>
#include <span>
#include <string>

#include "kiln/tensor.h"
#include "ops/attrs.h"
#include "ops/op_table.h"
#include "ops/random.h"

namespace kiln::ops {

// A read of a proxy's values on the host, which ends the graph being traced
// (a graph break).
struct HostRead {
  std::string what;  // "item()", "to_vector()", "data()"
  std::source_location where;
  bool known_where = false;  // where is the program's call
  // The values read decide what the program does next, and can be guarded
  // (item(), to_vector()). A read through a pointer cannot: the program may
  // read or write any element, in ways a trace does not see.
  bool guardable = true;
  // "the function reads the values of a float32[] tensor on the host (item() at f.cpp:12)"
  std::string describe(const Tensor& proxy) const;
};

// The size an op's output takes from its input's values (nonzero's count):
// count's value, read on the host. In a trace the read is a graph break
// that names `op` and the program's line `where`.
int64_t read_data_dependent_size(const Tensor& count, const std::string& op,
                                 std::source_location where);

class TraceRecorder {
 public:
  // The recorder active on this thread, or null (none while an op is being
  // recorded, or while a TracePause is alive).
  static TraceRecorder* active() noexcept;

  // Called by dispatch for every op while this recorder is active.
  virtual TensorList record(OpId op, std::span<const Tensor> inputs, Attrs attrs) = 0;
  virtual void record_inplace(OpId op, Tensor& self, std::span<const Tensor> inputs,
                              Attrs attrs) = 0;
  // Called by draw_philox: the draw of the random op recorded next.
  virtual PhiloxDraw note_random_draw(Generator* generator, int64_t count) = 0;
  // The real tensor behind a proxy whose values the program reads.
  virtual Tensor materialize(const Tensor& proxy, const HostRead& read) = 0;
  // Called by Tensor's layout accessors on a proxy (TensorImpl::watched).
  virtual void note_layout_read(const TensorImpl& impl, LayoutField field, int64_t dim,
                                const std::source_location& where) = 0;
  virtual void note_size_compare(const TensorImpl& impl, int64_t dim, SizeCmp cmp, int64_t bound,
                                 bool result, const std::source_location& where) = 0;
  virtual void note_size_relation(const TensorImpl& impl, int64_t dim, SizeCmp cmp,
                                  const TensorImpl& other, int64_t other_dim, bool result,
                                  const std::source_location& where) = 0;
  // Autograd: backward() ran on proxies; a real tensor's grad() is about to
  // be set; `alias` (a detach() of a proxy) stands for the proxy's value.
  virtual void note_backward() noexcept = 0;
  virtual void note_grad_owner(const Tensor& real) = 0;
  virtual void alias(const Tensor& proxy, const Tensor& alias) = 0;
  // A host number the graph being traced depends on (an optimizer's
  // learning rate, a module's training flag).
  virtual void add_host_guard(std::string what, std::function<double()> read,
                              const void* source = nullptr, bool flag = false) = 0;

 protected:
  TraceRecorder() = default;
  virtual ~TraceRecorder() = default;
  TraceRecorder(const TraceRecorder&) = delete;
  TraceRecorder& operator=(const TraceRecorder&) = delete;
  // Makes this the thread's recorder (kiln::Error when one is already), and
  // gives the previous one back.
  void activate();
  void deactivate() noexcept;

 private:
  TraceRecorder* previous_ = nullptr;
  friend class TracePause;
};

// Suspends the thread's recorder (ops run eagerly) while alive.
class TracePause {
 public:
  TracePause() noexcept;
  ~TracePause();
  TracePause(const TracePause&) = delete;
  TracePause& operator=(const TracePause&) = delete;
  // Whether a recorder is paused on this thread: the ops running are the
  // recorder's own, on proxies (meta) beside the real constants it captured.
  static bool pausing_a_tracer() noexcept;

 private:
  TraceRecorder* paused_;
};

}  // namespace kiln::ops
