// Errors that only the device can see, such as an index value out of range,
// reported without waiting for the device. A kernel that finds one records it
// in host-mapped memory and skips the element; the first synchronization with
// the host afterwards (kiln::cuda::synchronize(), Stream/Event::synchronize(),
// item(), a blocking copy to the host) raises it as a kiln::IndexError naming
// the op and the values, once. The outputs of the failed op are unspecified;
// nothing past the tensors' memory is read or written.
//
// One record serves every device and stream; it holds the first error until a
// synchronization raises it, later ones are dropped.
#pragma once

#include <cstdint>

namespace kiln::backend::cuda {

enum class DeviceErrorOp : int32_t {
  kGather = 1,
  kScatter,
  kScatterAdd,
  kIndexSelect,
  kEmbedding,
  kOneHot,
  kNllLoss,
};

struct DeviceErrorRecord {
  uint32_t state;  // 0 free, 1 being written, 2 complete
  int32_t op;      // a DeviceErrorOp
  int64_t value;   // the offending value
  int64_t bound;   // the size it must stay below
  int64_t dim;     // the indexed dim, where there is one
};

// The record as kernels address it (allocated on first use; needs a device).
DeviceErrorRecord* device_error_record();

// Throws the recorded error, if a complete one is there, and clears it.
// Called after every host synchronization.
void raise_device_errors();

#ifdef __CUDACC__
__device__ inline void report_device_error(DeviceErrorRecord* record, DeviceErrorOp op, int64_t value,
                                           int64_t bound, int64_t dim = -1) {
  if (atomicCAS(&record->state, 0u, 1u) != 0u) return;  // an earlier error is kept
  record->op = static_cast<int32_t>(op);
  record->value = value;
  record->bound = bound;
  record->dim = dim;
  __threadfence_system();
  atomicExch(&record->state, 2u);
}
#endif

}  // namespace kiln::backend::cuda
