#include "backends/cuda/device_errors.h"

#include <cuda_runtime_api.h>

#include <atomic>
#include <mutex>

#include "backends/cuda/cuda_check.h"
#include "kiln/kiln.h"

namespace kiln::backend::cuda {
namespace {

std::mutex& record_mutex() {
  static std::mutex m;
  return m;
}

std::atomic<DeviceErrorRecord*> host_record{nullptr};  // mapped, portable; never freed

std::string message_of(const DeviceErrorRecord& r) {
  switch (static_cast<DeviceErrorOp>(r.op)) {
    case DeviceErrorOp::kGather:
    case DeviceErrorOp::kScatter:
    case DeviceErrorOp::kScatterAdd:
    case DeviceErrorOp::kIndexSelect: {
      const char* op = r.op == static_cast<int32_t>(DeviceErrorOp::kGather)       ? "gather"
                       : r.op == static_cast<int32_t>(DeviceErrorOp::kScatter)    ? "scatter"
                       : r.op == static_cast<int32_t>(DeviceErrorOp::kScatterAdd) ? "scatter_add"
                                                                                 : "index_select";
      return detail::str_cat(op, ": index ", r.value, " is out of range for dim ", r.dim, " of size ",
                             r.bound);
    }
    case DeviceErrorOp::kEmbedding:
      return detail::str_cat("embedding: index ", r.value, " is out of range for ", r.bound,
                             " embeddings");
    case DeviceErrorOp::kOneHot:
      if (r.value < 0)
        return detail::str_cat("one_hot: class values must be non-negative, got ", r.value);
      return detail::str_cat("one_hot: class value ", r.value, " is out of range for num_classes ",
                             r.bound);
    case DeviceErrorOp::kNllLoss:
      return detail::str_cat("nll_loss: target ", r.value, " is out of range for ", r.bound,
                             " classes");
  }
  return detail::str_cat("a CUDA kernel reported error ", r.op, " (value ", r.value, ")");
}

}  // namespace

DeviceErrorRecord* device_error_record() {
  if (DeviceErrorRecord* r = host_record.load(std::memory_order_acquire)) return r;
  std::lock_guard lock(record_mutex());
  if (DeviceErrorRecord* r = host_record.load(std::memory_order_relaxed)) return r;
  void* p = nullptr;
  check(cudaHostAlloc(&p, sizeof(DeviceErrorRecord), cudaHostAllocMapped | cudaHostAllocPortable),
        "cudaHostAlloc");
  *static_cast<DeviceErrorRecord*>(p) = DeviceErrorRecord{};
  // Unified addressing: the host address of mapped memory is also the devices'.
  host_record.store(static_cast<DeviceErrorRecord*>(p), std::memory_order_release);
  return static_cast<DeviceErrorRecord*>(p);
}

void raise_device_errors() {
  DeviceErrorRecord* r = host_record.load(std::memory_order_acquire);
  if (r == nullptr) return;
  std::atomic_ref<uint32_t> state(r->state);
  if (state.load(std::memory_order_acquire) != 2) return;  // none, or one still being written
  DeviceErrorRecord copy{};
  {
    std::lock_guard lock(record_mutex());
    if (state.load(std::memory_order_acquire) != 2) return;  // raised by another thread
    copy = *r;
    r->op = 0;
    r->value = r->bound = r->dim = 0;
    state.store(0, std::memory_order_release);
  }
  throw IndexError(message_of(copy));
}

}  // namespace kiln::backend::cuda
