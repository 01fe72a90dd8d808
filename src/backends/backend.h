// The small interface every backend implements (docs/architecture.md, "Backends"): memory,
// copies, synchronization, statistics and one eager kernel per op.
#pragma once

#include <array>
#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string_view>

#include "kiln/error.h"
#include "kiln/tensor.h"
#include "ops/attrs.h"
#include "ops/op_table.h"

namespace kiln::backend {

// One kernel invocation. Outputs are allocated by dispatch with the shapes the
// shape rule gave; inputs already have the dtypes the rule asked for.
struct KernelCall {
  const ops::OpSchema& schema;
  std::span<const Tensor> inputs;
  std::span<Tensor> outputs;
  const ops::Attrs& attrs;
  // An input the backend prepared when an executable was built (a frozen
  // convolution's weight in its primitive's layout: backends/prepared.h); the
  // tensor in its place then holds no bytes. Null for eager calls.
  const void* prepared = nullptr;

  const Tensor& in(size_t i) const { return inputs[i]; }
  Tensor& out(size_t i = 0) const { return outputs[i]; }
};

// A function object so that kernel families can be built from parameterized lambdas.
using KernelFn = std::function<void(const KernelCall&)>;

class KernelTable {
 public:
  void set(ops::OpId op, KernelFn fn) { fns_[static_cast<size_t>(op)] = std::move(fn); }
  const KernelFn& get(ops::OpId op) const noexcept { return fns_[static_cast<size_t>(op)]; }

 private:
  std::array<KernelFn, ops::kNumOps> fns_{};
};

struct MemoryStats {
  size_t allocated_bytes = 0;       // held by live tensors now
  size_t peak_allocated_bytes = 0;  // since the last reset_peak
  size_t num_allocations = 0;       // calls into the system allocator
  size_t reserved_bytes = 0;        // allocated plus cached for reuse
};

// A copy between two allocations of one device, and a write of a 64-bit
// value from the host into device memory (Backend::copy_within).
struct ByteCopy {
  void* dst;
  const void* src;
  size_t nbytes;
};
struct WordWrite {
  uint64_t* dst;
  uint64_t value;
};

// Device work recorded once and replayed whole by later calls (a CUDA graph).
// Memory allocated while recording (or inside allocate_from_pool) comes from
// a pool private to the graph: the graph's replays keep using it, so it goes
// back to the device only when the graph and every tensor allocated from it
// are gone.
class DeviceGraph {
 public:
  virtual ~DeviceGraph() = default;
  // Runs fn with this thread's allocations on the graph's device served from
  // the graph's pool; nothing is recorded.
  virtual void allocate_from_pool(const std::function<void()>& fn) = 0;
  // Records the device work fn queues on the current stream (which it sees
  // as a recording stream, ordered after the work queued so far). Throws
  // kiln::Error with the reason when the work cannot be recorded; a graph
  // records once.
  virtual void record(const std::function<void()>& fn) = 0;
  // Queues the recorded work on the device's current stream.
  virtual void launch() = 0;
  // While record's fn runs: records one kernel that makes these copies
  // (between allocations of the graph's device) and word writes, and
  // returns its slot. A launch may give the slot other addresses and values,
  // with the same counts and sizes. -1 (nothing recorded): the backend
  // records no such kernel, or not that many copies at once; the caller
  // copies around the launch instead.
  virtual int record_copies(std::span<const ByteCopy> copies, std::span<const WordWrite> writes) {
    (void)copies;
    (void)writes;
    return -1;
  }
  // launch(), the copies of these slots set first.
  struct SlotCopies {
    int slot;
    std::span<const ByteCopy> copies;
    std::span<const WordWrite> writes;
  };
  virtual void launch(std::span<const SlotCopies> slots) {
    if (!slots.empty()) throw Error("DeviceGraph: launch with copies of slots it did not record");
    launch();
  }
  // Before anything is allocated from the pool: makes it one block of
  // nbytes, so that work needing at most that much at once takes no more.
  virtual void reserve(size_t nbytes) = 0;
  // The device memory the pool holds, and the most its tensors held at once.
  virtual size_t pool_bytes() const = 0;
  virtual size_t pool_peak_bytes() const = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const noexcept = 0;
  virtual std::shared_ptr<Storage> allocate(size_t nbytes, Device device) = 0;
  // Copies nbytes between two allocations of this backend's device or the host.
  // Without non_blocking the copy is complete on return. With it, a copy that
  // involves a device is queued on the device's current stream and may still
  // run: a copy to the host must be waited for (synchronize) before the host
  // reads it; a copy from the host has read its source on return.
  virtual void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device,
                          size_t nbytes, bool non_blocking) = 0;
  // Copies between allocations of one device of this backend, and writes of
  // 64-bit values from the host into its memory (the values are taken at
  // the call), non-blocking (queued on its current stream). One by one
  // here; a backend may queue them all as one launch.
  using ByteCopy = backend::ByteCopy;
  using WordWrite = backend::WordWrite;
  virtual void copy_within(Device device, std::span<const ByteCopy> copies, std::span<const WordWrite> writes = {}) {
    for (const WordWrite& w : writes) copy_bytes(w.dst, device, &w.value, Device::cpu(), sizeof(uint64_t), false);
    for (const ByteCopy& c : copies) copy_bytes(c.dst, device, c.src, device, c.nbytes, true);
  }
  // Page-locked host memory (a CPU storage) for fast, asynchronous copies.
  virtual std::shared_ptr<Storage> allocate_pinned(size_t nbytes) {
    (void)nbytes;
    throw DeviceError(detail::str_cat("pin_memory: the ", name(), " backend has no pinned memory"));
  }
  // Whether ptr is in page-locked memory this backend allocated.
  virtual bool is_pinned(const void* ptr) const {
    (void)ptr;
    return false;
  }
  virtual void synchronize(Device device) = 0;
  virtual MemoryStats memory_stats(Device device) const = 0;
  virtual void reset_peak_memory_stats(Device device) = 0;
  // Returns cached, unused memory to the system.
  virtual void empty_cache(Device device) = 0;
  // A graph to record device work into; DeviceError for a backend without graphs.
  virtual std::unique_ptr<DeviceGraph> make_graph(Device device) {
    throw DeviceError(detail::str_cat("the ", name(), " backend cannot record graphs (", device, ")"));
  }
  const KernelTable& kernels() const noexcept { return kernels_; }

 protected:
  KernelTable kernels_;
};

// The backend for a device kind; DeviceError when kiln was built without it.
Backend& backend_for(DeviceKind kind);
// The naive kernels (plain loops, double accumulation) the tests use as their oracle.
const KernelTable& reference_kernels();

}  // namespace kiln::backend
