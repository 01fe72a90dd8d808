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
#endif

bool is_available() noexcept { return device_count() > 0; }

}  // namespace kiln::cuda
