// Streams and events (kiln/cuda.h), and each thread's current stream per device.
#include <cuda_runtime_api.h>

#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/device_errors.h"
#include "kiln/cuda.h"

namespace kiln::backend::cuda {

namespace {
// This thread's current streams, by device; absent: the default stream.
std::vector<kiln::cuda::Stream>& current_streams() {
  thread_local std::vector<kiln::cuda::Stream> streams;
  return streams;
}
}  // namespace

void* current_stream_handle(int device) {
  const auto& streams = current_streams();
  return device < static_cast<int>(streams.size()) ? streams[device].handle() : nullptr;
}

}  // namespace kiln::backend::cuda

namespace kiln::cuda {
namespace {

// true for cudaSuccess, false for cudaErrorNotReady (work still queued).
bool finished(cudaError_t status, const char* what) {
  if (status == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  backend::cuda::check(status, what);
  return true;
}

}  // namespace

using backend::cuda::check;
using backend::cuda::check_device;
using backend::cuda::DeviceGuard;

Stream Stream::create(int device) {
  check_device(Device::cuda(device), "Stream::create");
  DeviceGuard guard(device);
  cudaStream_t stream = nullptr;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  std::shared_ptr<void> owner(stream, [](void* s) { cudaStreamDestroy(static_cast<cudaStream_t>(s)); });
  return Stream(device, stream, std::move(owner));
}

Stream Stream::default_stream(int device) {
  check_device(Device::cuda(device), "Stream::default_stream");
  return Stream(device, nullptr);
}

Stream Stream::current(int device) {
  check_device(Device::cuda(device), "Stream::current");
  const auto& streams = backend::cuda::current_streams();
  return device < static_cast<int>(streams.size()) ? streams[device] : Stream(device, nullptr);
}

bool Stream::query() const {
  DeviceGuard guard(device_);
  return finished(cudaStreamQuery(static_cast<cudaStream_t>(handle_)), "cudaStreamQuery");
}

void Stream::synchronize() const {
  DeviceGuard guard(device_);
  check(cudaStreamSynchronize(static_cast<cudaStream_t>(handle_)), "cudaStreamSynchronize");
  backend::cuda::raise_device_errors();
}

void Stream::wait(const Event& event) const {
  DeviceGuard guard(device_);
  check(cudaStreamWaitEvent(static_cast<cudaStream_t>(handle_),
                            static_cast<cudaEvent_t>(event.handle()), 0),
        "cudaStreamWaitEvent");
}

StreamGuard::StreamGuard(const Stream& stream)
    : previous_(Stream::current(stream.device())), current_(stream) {
  auto& streams = backend::cuda::current_streams();
  while (static_cast<int>(streams.size()) <= stream.device()) {
    streams.emplace_back(static_cast<int>(streams.size()), nullptr);
  }
  streams[stream.device()] = current_;
}

StreamGuard::~StreamGuard() { backend::cuda::current_streams()[previous_.device()] = previous_; }

Event::Event(bool enable_timing, int device) : device_(device), timing_(enable_timing) {
  check_device(Device::cuda(device), "Event");
  DeviceGuard guard(device);
  cudaEvent_t event = nullptr;
  check(cudaEventCreateWithFlags(&event, enable_timing ? cudaEventDefault : cudaEventDisableTiming),
        "cudaEventCreateWithFlags");
  handle_.reset(event, [](void* e) { cudaEventDestroy(static_cast<cudaEvent_t>(e)); });
}

void Event::record() { record(Stream::current(device_)); }

void Event::record(const Stream& stream) {
  if (stream.device() != device_) {
    throw DeviceError(detail::str_cat("Event::record: the event is on cuda:", device_,
                                      ", the stream on cuda:", stream.device()));
  }
  DeviceGuard guard(device_);
  check(cudaEventRecord(static_cast<cudaEvent_t>(handle()), static_cast<cudaStream_t>(stream.handle())),
        "cudaEventRecord");
  recorded_ = true;
}

bool Event::query() const {
  DeviceGuard guard(device_);
  return finished(cudaEventQuery(static_cast<cudaEvent_t>(handle())), "cudaEventQuery");
}

void Event::synchronize() const {
  DeviceGuard guard(device_);
  check(cudaEventSynchronize(static_cast<cudaEvent_t>(handle())), "cudaEventSynchronize");
  backend::cuda::raise_device_errors();
}

float Event::elapsed_ms(const Event& end) const {
  if (!timing_ || !end.timing_) {
    throw ValueError("Event::elapsed_ms: both events need enable_timing = true");
  }
  if (!recorded_ || !end.recorded_) {
    throw ValueError("Event::elapsed_ms: both events must be recorded first");
  }
  DeviceGuard guard(device_);
  float ms = 0;
  check(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(handle()), static_cast<cudaEvent_t>(end.handle())),
        "cudaEventElapsedTime");
  return ms;
}

}  // namespace kiln::cuda
