#include "kiln/cuda.h"

#include "kiln/error.h"

#ifdef KILN_WITH_CUDA
#include "backends/cuda/cuda_backend.h"
#endif

namespace kiln::cuda {

#ifdef KILN_WITH_CUDA
bool is_built() noexcept { return true; }
int device_count() noexcept { return backend::cuda::device_count(); }
std::string unavailable_reason() { return backend::cuda::unavailable_reason(); }
void synchronize(int index) { backend::cuda::cuda_backend().synchronize(Device::cuda(index)); }
#else
bool is_built() noexcept { return false; }
int device_count() noexcept { return 0; }
std::string unavailable_reason() { return "this build of kiln has no CUDA backend (configure with -DKILN_CUDA=ON)"; }
void synchronize(int index) {
  throw DeviceError(detail::str_cat("synchronize: cuda:", index, " is not available: ", unavailable_reason()));
}

namespace {
[[noreturn]] void no_cuda(const char* what) {
  throw DeviceError(detail::str_cat(what, ": ", unavailable_reason()));
}
}  // namespace

Stream Stream::create(int) { no_cuda("Stream::create"); }
Stream Stream::default_stream(int) { no_cuda("Stream::default_stream"); }
Stream Stream::current(int) { no_cuda("Stream::current"); }
bool Stream::query() const { no_cuda("Stream::query"); }
void Stream::synchronize() const { no_cuda("Stream::synchronize"); }
void Stream::wait(const Event&) const { no_cuda("Stream::wait"); }
StreamGuard::StreamGuard(const Stream& stream) : previous_(stream), current_(stream) {
  no_cuda("StreamGuard");
}
StreamGuard::~StreamGuard() = default;
Event::Event(bool, int) : device_(0), timing_(false) { no_cuda("Event"); }
void Event::record() { no_cuda("Event::record"); }
void Event::record(const Stream&) { no_cuda("Event::record"); }
bool Event::query() const { no_cuda("Event::query"); }
void Event::synchronize() const { no_cuda("Event::synchronize"); }
float Event::elapsed_ms(const Event&) const { no_cuda("Event::elapsed_ms"); }
#endif

bool is_available() noexcept { return device_count() > 0; }

}  // namespace kiln::cuda
