// Generated CUDA kernels (docs/architecture.md, "Generated kernels on CUDA"):
// source compiled by NVRTC (the toolkit's runtime compiler, in process) to a
// cubin for the device's architecture, kept in the content-addressed disk
// cache (backends/kernel_cache.h) so that a second process compiling the
// same kernels compiles nothing, loaded with the runtime's library API
// (cudaLibraryLoadData: no context of its own, usable on every device) and
// launched on the device's current stream, where a CUDA graph records it.
//
// A cache entry's key holds the source, NVRTC's version and options, the
// architecture, the driver's version and kiln's. A source NVRTC refuses is
// not compiled again by the same process; the caller runs the library
// kernels instead.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace kiln::backend::cuda {

// NVRTC's options for kiln's kernels, for an architecture such as sm_90 (a
// cubin) or compute_90 (PTX): no FMA contraction (--fmad=false), as the
// library's pointwise kernels are compiled (scalar_ops.cuh).
std::vector<std::string> nvrtc_options(const std::string& arch);

// NVRTC's version ("13.0").
std::string nvrtc_version();

// The source compiled for `arch`: the cubin (sm_XX) or the PTX (compute_XX).
// Null, with NVRTC's log in `why`, when it refuses the source. Needs no GPU.
std::optional<std::string> nvrtc_compile(const std::string& source, const std::string& arch,
                                         std::string& why);

// Registers the CUDA backend's DeviceCodegen (backends/device_codegen.h).
void register_cuda_codegen();

}  // namespace kiln::backend::cuda
