// CUDA devices: whether this build has the CUDA backend and which devices it
// can use. Every function here works in a build without CUDA (reporting none).
//
//   if (kiln::cuda::is_available()) x = x.to(kiln::Device::cuda());
//   else std::cout << kiln::cuda::unavailable_reason() << "\n";
#pragma once

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
void synchronize(int index = 0);

}  // namespace kiln::cuda
