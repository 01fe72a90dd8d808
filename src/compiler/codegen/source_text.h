// The pieces of a generated kernel's source that every target writes alike
// (docs/architecture.md, "Generated kernels and their cache"): the C++ type
// of a dtype, each instruction's expression over the shared arithmetic
// (`scalar::`: backends/cpu/scalar_ops.h on the CPU,
// backends/cuda/scalar_ops.cuh on CUDA), and which output stores a value.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "compiler/codegen/pointwise_kernel.h"

namespace kiln::compiler::codegen {

enum class Target : uint8_t { kCpu, kCuda };

// float, double, int64_t, int32_t or bool.
const char* source_type(DType t);

// The expression of instruction i of `body` (not a load), its arguments
// named by `arg_name`. A dropout's random value is the CPU element loop's
// (emit_cpp); CUDA kernels hold no random node.
std::string source_expression(const std::vector<Instr>& body, size_t i,
                              const std::function<std::string(int32_t)>& arg_name, Target target);

// The index of the kernel's output that stores instruction i, else -1.
int32_t stored_output(const PointwiseKernel& k, size_t i);

}  // namespace kiln::compiler::codegen
