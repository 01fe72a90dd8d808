// CUDA devices: whether this build has the CUDA backend and which devices it
// can use. Every function here works in a build without CUDA (reporting none).
//
//   if (kiln::cuda::is_available()) x = x.to(kiln::Device::cuda());
//   else std::cout << kiln::cuda::unavailable_reason() << "\n";
#pragma once

#include <memory>
#include <string>

namespace kiln::cuda {

// Whether kiln was built with the CUDA backend (-DKILN_CUDA=AUTO|ON).
bool is_built() noexcept;
// Whether the backend is built and at least one device can be used.
bool is_available() noexcept;
// Usable devices: 0 without the backend, a driver or a device.
int device_count() noexcept;
// Why is_available() is false ("" when it is true): no backend in this build,
// or the CUDA runtime's error (no driver, no device).
std::string unavailable_reason();
// Waits for all work queued on the device (cuda:index). DeviceError when the
// device does not exist.
//
// Errors only the device sees (an index value out of range in gather,
// scatter, index_select, embedding, one_hot or nll_loss) do not stop the
// host: the kernel skips the value and the next wait for the device (this
// function, Stream/Event::synchronize(), item(), a blocking copy to the host)
// throws the IndexError naming the op and the value, once. The failed op's
// output is unspecified.
void synchronize(int index = 0);

class Event;

// A queue of device work (a cudaStream_t). Every thread has a current stream
// per device, the device's default stream unless a StreamGuard says otherwise;
// kiln queues copies and allocates memory on the current stream. Copies share
// the stream (a handle). In a build or on a machine without CUDA, making or
// using a stream throws DeviceError.
//
//   kiln::cuda::Stream side = kiln::cuda::Stream::create();
//   { kiln::cuda::StreamGuard on(side); y = x.to(kiln::Device::cuda()); }
//   side.synchronize();
class Stream {
 public:
  // A new stream on cuda:device that does not wait for the default stream.
  static Stream create(int device = 0);
  // The device's default (legacy) stream.
  static Stream default_stream(int device = 0);
  // This thread's current stream on the device.
  static Stream current(int device = 0);
  // Wraps a stream made elsewhere (owner, if any, keeps it alive; without one
  // the caller keeps it alive while kiln uses it).
  Stream(int device, void* handle, std::shared_ptr<void> owner = nullptr)
      : device_(device), handle_(handle), owner_(std::move(owner)) {}

  int device() const noexcept { return device_; }
  void* handle() const noexcept { return handle_; }  // the cudaStream_t
  // Whether all work queued so far has finished.
  bool query() const;
  // Waits on the host for all work queued so far.
  void synchronize() const;
  // Work queued on this stream after the call waits for the event's work.
  void wait(const Event& event) const;

  bool operator==(const Stream& other) const noexcept {
    return device_ == other.device_ && handle_ == other.handle_;
  }

 private:
  int device_;
  void* handle_;
  std::shared_ptr<void> owner_;  // destroys a created stream with its last handle
};

// Makes a stream current on its device for this thread until destroyed.
class StreamGuard {
 public:
  explicit StreamGuard(const Stream& stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Stream previous_, current_;
};

// A marker in a stream's work (a cudaEvent_t): query, wait for, or time the
// work queued before it.
class Event {
 public:
  explicit Event(bool enable_timing = false, int device = 0);
  // Marks the work queued so far on `stream` (by default the current stream
  // of the event's device).
  void record();
  void record(const Stream& stream);
  bool query() const;
  void synchronize() const;
  // Milliseconds from this event to `end`, both recorded with timing enabled
  // and complete.
  float elapsed_ms(const Event& end) const;

  int device() const noexcept { return device_; }
  void* handle() const noexcept { return handle_.get(); }  // the cudaEvent_t

 private:
  int device_;
  bool timing_;
  bool recorded_ = false;
  std::shared_ptr<void> handle_;
};

}  // namespace kiln::cuda
