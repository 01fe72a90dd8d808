#include "backends/cuda/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>

#include "backends/cuda/cuda_allocator.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/device_errors.h"
#include "backends/cuda/host_allocator.h"
#include "backends/cuda/kernel_compiler.h"
#include "kiln/cuda.h"
#include "ops/custom.h"
#include "ops/debug.h"

namespace kiln::backend::cuda {
namespace {

struct RuntimeState {
  int count = 0;
  std::string reason;
};

// Queried once: the runtime's answer does not change within a process.
const RuntimeState& runtime_state() {
  static const RuntimeState state = [] {
    RuntimeState s;
    const cudaError_t status = cudaGetDeviceCount(&s.count);
    if (status != cudaSuccess) {
      cudaGetLastError();
      s.count = 0;
      s.reason = detail::str_cat("the CUDA runtime found no usable device (", cudaGetErrorName(status),
                                 ": ", cudaGetErrorString(status), ")");
    } else if (s.count == 0) {
      s.reason = "the CUDA runtime found no device";
    }
    return s;
  }();
  return state;
}

}  // namespace

int device_count() noexcept { return runtime_state().count; }

double time_device_ms(int device, const std::function<bool()>& run) {
  constexpr int kRuns = 3;
  if (!run()) return std::numeric_limits<double>::infinity();
  kiln::cuda::Event start(true, device), end(true, device);
  std::array<float, kRuns> ms{};
  for (float& m : ms) {
    start.record();
    if (!run()) return std::numeric_limits<double>::infinity();
    end.record();
    end.synchronize();
    m = start.elapsed_ms(end);
  }
  std::sort(ms.begin(), ms.end());
  return ms[kRuns / 2];
}

const std::string& device_name(int device) {
  static std::mutex mutex;
  static std::map<int, std::string> names;
  std::lock_guard lock(mutex);
  auto it = names.find(device);
  if (it == names.end()) {
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
    it = names.emplace(device, detail::str_cat(prop.name, " sm_", prop.major, prop.minor)).first;
  }
  return it->second;
}

std::string unavailable_reason() { return runtime_state().reason; }

void check_device(Device device, const char* what) {
  const int count = device_count();
  if (count == 0) throw DeviceError(detail::str_cat(what, ": ", device, " is not available: ", unavailable_reason()));
  if (device.index() < 0 || device.index() >= count) {
    throw DeviceError(detail::str_cat(what, ": ", device, " does not exist (", count,
                                      count == 1 ? " CUDA device)" : " CUDA devices)"));
  }
}

CudaBackend::CudaBackend() {
  register_cuda_unary_kernels(kernels_);
  register_cuda_binary_kernels(kernels_);
  register_cuda_misc_pointwise_kernels(kernels_);
  register_cuda_factory_kernels(kernels_);
  register_cuda_reduce_kernels(kernels_);
  register_cuda_softmax_kernels(kernels_);
  register_cuda_sort_kernels(kernels_);
  kernels_.set(ops::OpId::custom, ops::run_custom_kernel);
  kernels_.set(ops::OpId::debug_tensor, ops::run_debug_tensor);
  register_cuda_shape_kernels(kernels_);
  register_cuda_matmul_kernels(kernels_);
  register_cuda_norm_kernels(kernels_);
  register_cuda_pool_kernels(kernels_);
  register_cuda_resample_kernels(kernels_);
  register_cuda_composite_kernels(kernels_);
  register_cuda_codegen();
#ifdef KILN_WITH_CUDNN
  register_cuda_conv_kernels(kernels_);
  register_cuda_cudnn_rnn_kernels(kernels_);  // replaces the composite lstm_sequence
#endif
}

CudaBackend& cuda_backend() {
  static CudaBackend* backend = new CudaBackend();  // never destroyed, as the allocators
  return *backend;
}

std::shared_ptr<Storage> CudaBackend::allocate(size_t nbytes, Device device) {
  check_device(device, "allocate");
  const int index = device.index();
  // Blocks are reused by later allocations on the same stream only, which
  // are ordered after every use of the block on that stream.
  if (const std::shared_ptr<CudaAllocator>* pool = routed_pool(index)) {
    void* ptr = (*pool)->allocate(nbytes, current_stream_handle(index));
    return std::make_shared<Storage>(ptr, nbytes, device, [keep = *pool](void* p) { keep->free(p); });
  }
  void* ptr = CudaAllocator::for_device(index).allocate(nbytes, current_stream_handle(index));
  return std::make_shared<Storage>(ptr, nbytes, device,
                                   [index](void* p) { CudaAllocator::for_device(index).free(p); });
}

void CudaBackend::copy_bytes(void* dst, Device dst_device, const void* src, Device src_device,
                             size_t nbytes, bool non_blocking) {
  if (nbytes == 0) return;
  const Device on = dst_device.is_cuda() ? dst_device : src_device;
  check_device(on, "copy");
  DeviceGuard guard(on.index());
  // Queued on the current stream, after the work that produced the source.
  const auto stream = static_cast<cudaStream_t>(current_stream_handle(on.index()));
  HostAllocator& host = HostAllocator::instance();
  const void* from = src;
  if (src_device.is_cpu() && non_blocking && !host.contains(src)) {
    // From pageable memory: staged through a pinned buffer, so that the copy
    // runs asynchronously and the source may change as soon as this returns.
    void* staging = host.allocate(nbytes);
    std::memcpy(staging, src, nbytes);
    from = staging;
    const cudaError_t status = cudaMemcpyAsync(dst, from, nbytes, cudaMemcpyDefault, stream);
    host.record_stream(staging, on.index(), stream);
    host.free(staging);  // reused once the copy has finished
    check(status, "cudaMemcpyAsync");
    return;
  }
  check(cudaMemcpyAsync(dst, from, nbytes, cudaMemcpyDefault, stream), "cudaMemcpyAsync");
  if (!non_blocking) {  // complete on return: no pinned block stays in use
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    raise_device_errors();
    return;
  }
  if (src_device.is_cpu()) host.record_stream(src, on.index(), stream);
  if (dst_device.is_cpu()) host.record_stream(dst, on.index(), stream);
}

std::shared_ptr<Storage> CudaBackend::allocate_pinned(size_t nbytes) {
  if (device_count() == 0) {
    throw DeviceError(detail::str_cat("pin_memory: no CUDA device: ", unavailable_reason()));
  }
  void* p = HostAllocator::instance().allocate(nbytes);
  return std::make_shared<Storage>(p, nbytes, Device::cpu(),
                                   [](void* q) { HostAllocator::instance().free(q); });
}

bool CudaBackend::is_pinned(const void* ptr) const {
  return ptr != nullptr && HostAllocator::instance().contains(ptr);
}

void CudaBackend::synchronize(Device device) {
  check_device(device, "synchronize");
  DeviceGuard guard(device.index());
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  raise_device_errors();
}

MemoryStats CudaBackend::memory_stats(Device device) const {
  check_device(device, "memory_stats");
  return CudaAllocator::for_device(device.index()).stats();
}

void CudaBackend::reset_peak_memory_stats(Device device) {
  check_device(device, "reset_peak_memory_stats");
  CudaAllocator::for_device(device.index()).reset_peak();
}

void CudaBackend::empty_cache(Device device) {
  check_device(device, "empty_cache");
  CudaAllocator::for_device(device.index()).empty_cache();
  HostAllocator::instance().empty_cache();
}

}  // namespace kiln::backend::cuda
