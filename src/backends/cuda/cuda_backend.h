// The CUDA backend: device memory through the caching allocator, copies
// between host and device, synchronization and memory statistics. Ops get
// their CUDA kernels here as they are written; an op without one fails with a
// kiln::Error naming it and the device.
#pragma once

#include <string>

#include "backends/backend.h"

namespace kiln::backend::cuda {

class CudaBackend final : public Backend {
 public:
  CudaBackend();
  std::string_view name() const noexcept override { return "cuda"; }
  std::shared_ptr<Storage> allocate(size_t nbytes, Device device) override;
  // One kernel launch for all the copies (a cudaMemcpyAsync costs the host
  // more than a launch).
  void copy_within(Device device, std::span<const ByteCopy> copies, std::span<const WordWrite> writes = {}) override;
  void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes,
                  bool non_blocking) override;
  std::shared_ptr<Storage> allocate_pinned(size_t nbytes) override;
  bool is_pinned(const void* ptr) const override;
  void synchronize(Device device) override;
  MemoryStats memory_stats(Device device) const override;
  void reset_peak_memory_stats(Device device) override;
  void empty_cache(Device device) override;
  std::unique_ptr<DeviceGraph> make_graph(Device device) override;
};

CudaBackend& cuda_backend();

// Usable devices (0 when the runtime has no driver or device), and the
// runtime's reason when there are none.
int device_count() noexcept;
std::string unavailable_reason();

// Autotuning: the median milliseconds of `run` (which queues device work on
// the current stream and returns false when it cannot) over a few timed runs
// after one untimed; infinity when a run fails.
double time_device_ms(int device, const std::function<bool()>& run);

// The device's name and compute capability ("NVIDIA H200 sm_90"), for keys
// of the autotune cache.
const std::string& device_name(int device);

// This thread's current stream on the device (a cudaStream_t; null: the default stream).
void* current_stream_handle(int device);

class CudaAllocator;
// The private pool of the graph this thread is recording or filling on
// `device` (cuda_graph.cpp), or null: allocations come from the device's allocator.
const std::shared_ptr<CudaAllocator>* routed_pool(int device) noexcept;

// DeviceError unless `device` is a CUDA device this process can use.
void check_device(Device device, const char* what);

}  // namespace kiln::backend::cuda
