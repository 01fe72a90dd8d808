// Generated kernels on a device (docs/architecture.md, "Generated kernels on
// CUDA"): the compiler decides the groups and writes their source for the
// device (compiler/codegen/cuda_source.h); the device's backend compiles it,
// keeps the binary in the content-addressed disk cache
// (backends/kernel_cache.h), loads it and launches its kernels on the
// device's current stream, so that a CUDA graph records them as any other.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kiln/device.h"

namespace kiln::backend {

// The kernels of one source, loaded.
struct DeviceKernels {
  std::vector<const void*> functions;  // by symbol asked for
  std::shared_ptr<void> library;       // keeps them loaded
  enum class Origin : uint8_t { kCompiled, kDisk, kMemory } origin = Origin::kCompiled;
  double ms = 0;  // the time load took (compiling included)
};

struct RowLaunch {
  const void* weight = nullptr;
  const void* bias = nullptr;
  int64_t rows = 0, n = 0;
  double eps = 0;
};

struct DeviceCodegen {
  // The functions `symbols` of `source` for `device`: from a library this
  // process loaded, from the disk cache, or compiled now. Null, with `why`,
  // when they cannot be had (the compiler refused the source, no device).
  std::optional<DeviceKernels> (*load)(const std::string& source,
                                       std::span<const std::string> symbols, Device device,
                                       std::string& why) = nullptr;
  // Launches a pointwise kernel (the signature of compiler/codegen/
  // cuda_source.h) over `numel` elements of dims `sizes` (outer to inner, at
  // most kMaxDims), strides in bytes by dim then operand, the operands'
  // first elements `ptrs` (outputs first).
  void (*launch_pointwise)(const void* function, Device device, std::span<char* const> ptrs,
                           std::span<const int64_t> sizes, std::span<const int64_t> strides,
                           int64_t numel) = nullptr;
  // Launches a row kernel (cuda_source.h's kernels with `rows`): its
  // pointwise operands as launch_pointwise's, over the rows' elements; the
  // weight and bias (layer_norm's, or null), `rows` rows of `n` elements.
  void (*launch_rows)(const void* function, Device device, std::span<char* const> ptrs,
                      std::span<const int64_t> sizes, std::span<const int64_t> strides,
                      int64_t numel, const RowLaunch& rows) = nullptr;
  // How a launch over `numel` elements runs (rows: launch_rows's), for
  // explain(): its blocks and threads.
  std::string (*describe_launch)(Device device, int64_t numel, const RowLaunch* rows) = nullptr;
  static constexpr int kMaxDims = 8;
  static constexpr int kRowThreads = 256;  // a row kernel's block
  static constexpr int kMaxOperands = 24;
};

// Backends register theirs when they start; null for a device kind without.
void register_device_codegen(DeviceKind device, DeviceCodegen codegen);
const DeviceCodegen* device_codegen(DeviceKind device);

}  // namespace kiln::backend
