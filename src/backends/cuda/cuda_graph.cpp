// CUDA graphs (DeviceGraph): device work recorded by stream capture on a
// stream of its own, with the memory it allocates taken from a private pool,
// and replayed by one cudaGraphLaunch.
#include <cuda_runtime_api.h>

#include <vector>

#include "backends/cuda/copy_kernel.h"
#include "backends/cuda/cuda_allocator.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_check.h"
#include "kiln/cuda.h"

namespace kiln::backend::cuda {
namespace {

struct PoolRoute {
  int device = -1;
  const std::shared_ptr<CudaAllocator>* pool = nullptr;
};

thread_local PoolRoute t_route;

// Routes this thread's allocations on a device to a pool while alive.
class RouteGuard {
 public:
  RouteGuard(int device, const std::shared_ptr<CudaAllocator>& pool) : previous_(t_route) {
    t_route = {device, &pool};
  }
  ~RouteGuard() { t_route = previous_; }
  RouteGuard(const RouteGuard&) = delete;
  RouteGuard& operator=(const RouteGuard&) = delete;

 private:
  PoolRoute previous_;
};

class CudaGraph final : public DeviceGraph {
 public:
  explicit CudaGraph(int device) : device_(device), pool_(CudaAllocator::make_private(device)) {}
  ~CudaGraph() override {
    if (exec_) cudaGraphExecDestroy(exec_);
    if (graph_) cudaGraphDestroy(graph_);
  }

  void allocate_from_pool(const std::function<void()>& fn) override {
    RouteGuard route(device_, pool_);
    fn();
  }

  void record(const std::function<void()>& fn) override {
    if (exec_) throw Error(detail::str_cat("cuda graph on cuda:", device_, ": already recorded"));
    DeviceGuard device(device_);
    // Capture needs a stream other than the legacy default one; it starts
    // after the work queued so far on the caller's stream.
    const kiln::cuda::Stream caller = kiln::cuda::Stream::current(device_);
    const kiln::cuda::Stream recording = kiln::cuda::Stream::create(device_);
    kiln::cuda::Event ready(false, device_);
    ready.record(caller);
    recording.wait(ready);
    const auto stream = static_cast<cudaStream_t>(recording.handle());
    std::string failure;
    cudaGraph_t graph = nullptr;
    {
      kiln::cuda::StreamGuard on(recording);
      RouteGuard route(device_, pool_);
      check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
      try {
        fn();
      } catch (const std::exception& e) {
        failure = e.what();
      }
      const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
      if (ended != cudaSuccess && failure.empty()) {
        failure = detail::str_cat("cudaStreamEndCapture: ", cudaGetErrorName(ended), ": ", cudaGetErrorString(ended));
      }
      cudaGetLastError();
    }
    if (failure.empty()) {
      const cudaError_t made = cudaGraphInstantiate(&exec_, graph, 0);
      if (made != cudaSuccess) {
        exec_ = nullptr;
        failure = detail::str_cat("cudaGraphInstantiate: ", cudaGetErrorName(made), ": ", cudaGetErrorString(made));
        cudaGetLastError();
      }
    }
    // Kept: its copy kernels' nodes name them in the instantiated graph.
    graph_ = graph;
    if (!failure.empty()) {
      copy_nodes_.clear();
      throw Error(failure);
    }
    // Uploaded now, so that the first launch does not pay for it.
    check(cudaGraphUpload(exec_, static_cast<cudaStream_t>(caller.handle())), "cudaGraphUpload");
  }

  void reserve(size_t nbytes) override { pool_->reserve(nbytes); }
  size_t pool_bytes() const override { return pool_->stats().reserved_bytes; }
  size_t pool_peak_bytes() const override { return pool_->stats().peak_allocated_bytes; }

  void launch() override {
    if (!exec_) throw Error(detail::str_cat("cuda graph on cuda:", device_, ": launched before it was recorded"));
    DeviceGuard device(device_);
    check(cudaGraphLaunch(exec_, static_cast<cudaStream_t>(current_stream_handle(device_))), "cudaGraphLaunch");
  }

  int record_copies(std::span<const ByteCopy> copies, std::span<const WordWrite> writes) override {
    const auto stream = static_cast<cudaStream_t>(current_stream_handle(device_));
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    check(cudaStreamIsCapturing(stream, &status), "cudaStreamIsCapturing");
    if (status != cudaStreamCaptureStatusActive) {
      throw Error(
          detail::str_cat("cuda graph on cuda:", device_, ": record_copies outside its recording"));
    }
    if (!launch_copy_kernel(stream, copies, writes)) return -1;
    // The kernel just recorded is what the stream's next work depends on.
    const cudaGraphNode_t* deps = nullptr;
    size_t count = 0;
    check(cudaStreamGetCaptureInfo(stream, &status, nullptr, nullptr, &deps, nullptr, &count),
          "cudaStreamGetCaptureInfo");
    if (count != 1) {
      throw Error(detail::str_cat("cuda graph on cuda:", device_,
                                  ": the recorded copy kernel is not the stream's last work (",
                                  count, " nodes)"));
    }
    copy_nodes_.push_back(deps[0]);
    return static_cast<int>(copy_nodes_.size()) - 1;
  }

  void launch(std::span<const SlotCopies> slots) override {
    if (!exec_)
      throw Error(
          detail::str_cat("cuda graph on cuda:", device_, ": launched before it was recorded"));
    for (const SlotCopies& s : slots) {
      if (s.slot < 0 || static_cast<size_t>(s.slot) >= copy_nodes_.size()) {
        throw Error(detail::str_cat("cuda graph on cuda:", device_, ": no copy kernel ", s.slot));
      }
      set_copy_kernel(exec_, copy_nodes_[static_cast<size_t>(s.slot)], s.copies, s.writes);
    }
    launch();
  }

 private:
  int device_;
  std::shared_ptr<CudaAllocator> pool_;  // tensors allocated from it hold it too
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
  std::vector<cudaGraphNode_t> copy_nodes_;  // by slot (record_copies)
};

}  // namespace

const std::shared_ptr<CudaAllocator>* routed_pool(int device) noexcept {
  return t_route.pool && t_route.device == device ? t_route.pool : nullptr;
}

std::unique_ptr<DeviceGraph> CudaBackend::make_graph(Device device) {
  check_device(device, "make_graph");
  return std::make_unique<CudaGraph>(device.index());
}

}  // namespace kiln::backend::cuda
