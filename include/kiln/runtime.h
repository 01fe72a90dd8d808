// Process-wide runtime settings and statistics.
//
//   kiln::set_num_threads(4);
//   auto stats = kiln::memory_stats(kiln::Device::cpu());
//   std::cout << stats.peak_allocated_bytes << "\n";
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "kiln/device.h"

namespace kiln {

// Threads used by CPU kernels (OpenMP and oneDNN).
void set_num_threads(int n);
int get_num_threads();

struct MemoryStats {
  size_t allocated_bytes = 0;
  size_t peak_allocated_bytes = 0;
  size_t num_allocations = 0;  // blocks taken from the system
  size_t reserved_bytes = 0;   // allocated plus cached for reuse
};
MemoryStats memory_stats(Device device);
void reset_peak_memory_stats(Device device);
// Returns memory cached for reuse to the system: on the CPU, the weight
// copies kept for inference too (oneDNN's layouts, transposed weights), which
// the next call makes again.
void empty_cache(Device device);

// TF32 tensor-core math for float32 on CUDA devices: 10 mantissa bits in the
// products, float32 accumulation. PyTorch's defaults: off for matmul, linear
// and addmm; on for convolutions.
//   kiln::set_allow_tf32({.matmul = true});
struct Tf32Policy {
  bool matmul = false;
  bool conv = true;
};
void set_allow_tf32(Tf32Policy policy);
Tf32Policy allow_tf32();

// Sets a TF32 policy for its lifetime, then restores the one before:
//   { kiln::Tf32PolicyGuard exact({.matmul = false, .conv = false}); ... }
class Tf32PolicyGuard {
 public:
  explicit Tf32PolicyGuard(Tf32Policy policy) : saved_(allow_tf32()) { set_allow_tf32(policy); }
  ~Tf32PolicyGuard() { set_allow_tf32(saved_); }
  Tf32PolicyGuard(const Tf32PolicyGuard&) = delete;
  Tf32PolicyGuard& operator=(const Tf32PolicyGuard&) = delete;

 private:
  Tf32Policy saved_;
};

// Kernels kiln has run from the host, all threads together, since the process
// began: each op kernel an eager op or a compiled step calls (one may launch
// several device kernels inside cuDNN or cuBLASLt), and each CUDA-graph
// launch. kiln::bench reports launches per call from it.
int64_t kernel_launches();

// "kiln 0.1.0 (commit abc1234)".
std::string version_string();

}  // namespace kiln
