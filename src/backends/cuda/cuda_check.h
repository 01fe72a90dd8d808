// Turning CUDA runtime errors into kiln::Error.
#pragma once

#include <cuda_runtime_api.h>

#include <map>
#include <memory>
#include <mutex>

#include "kiln/error.h"

namespace kiln::backend::cuda {

// Throws Error("<what>: <CUDA error name>: <description>") unless status is cudaSuccess.
inline void check(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  cudaGetLastError();  // clears the sticky state of a non-fatal error
  throw Error(detail::str_cat("cuda: ", what, ": ", cudaGetErrorName(status), ": ",
                              cudaGetErrorString(status)));
}

// Makes device `index` current on this thread for the guard's lifetime.
class DeviceGuard {
 public:
  explicit DeviceGuard(int index) {
    check(cudaGetDevice(&previous_), "cudaGetDevice");
    if (previous_ != index) check(cudaSetDevice(index), "cudaSetDevice");
  }
  ~DeviceGuard() {
    int current = previous_;
    if (cudaGetDevice(&current) == cudaSuccess && current != previous_) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

// One State per device, made by init(state) on first use with the device
// current, and never destroyed: library handles in it must outlive static
// destructors.
template <typename State, typename Init>
State& per_device_state(int device, Init init) {
  static std::mutex mutex;
  static std::map<int, State*> states;
  std::lock_guard<std::mutex> lock(mutex);
  State*& s = states[device];
  if (!s) {
    auto made = std::make_unique<State>();
    DeviceGuard guard(device);
    init(*made);
    s = made.release();
  }
  return *s;
}

}  // namespace kiln::backend::cuda
