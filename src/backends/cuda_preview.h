// CUDA fusions whose tests have not run on a GPU yet (CI has none): generated
// row reductions and 32-bit index arithmetic in generated pointwise kernels
// (compiler/codegen/cuda_source.h), and cuDNN's fused convolution through
// its graph API (backends/cuda/conv.cpp). They stay off, and CUDA programs run
// as before, unless KILN_CUDA_PREVIEW=1 is set; the GPU tests set it. Each
// goes on by default once its tests have passed on a GPU.
#pragma once

#include <cstdlib>
#include <string>
#include <string_view>

namespace kiln::backend {

// Empty where the preview is on; else why `what` is off.
inline std::string cuda_preview_off(std::string_view what) {
  const char* on = std::getenv("KILN_CUDA_PREVIEW");
  if (on && std::string_view(on) == "1") return "";
  return std::string(what) +
         " stays off until its tests have run on a GPU (KILN_CUDA_PREVIEW=1 turns it on)";
}

}  // namespace kiln::backend
