// Generated kernels at run time (docs/architecture.md, "Generated kernels and
// their cache"): an executable's kernels built as one source by the CPU's
// kernel compiler (backends/cpu/kernel_compiler.h), and one kernel's call
// over tensors.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "compiler/codegen/pointwise_kernel.h"

namespace kiln::compiler::codegen {

using PointwiseFn = void (*)(char* const* ptrs, const int64_t* sizes, const int64_t* strides,
                             int64_t ndim, int64_t begin, int64_t end, int64_t* index,
                             const uint64_t* draws);

struct BuiltKernels {
  // By kernel: a CPU kernel's function, else null.
  std::vector<PointwiseFn> functions;
  std::shared_ptr<void> library;  // keeps them loaded
  // By kernel: a device kernel's (backends/device_codegen.h), else null.
  std::vector<const void*> device_functions;
  std::shared_ptr<void> device_library;
  // "2 kernels compiled in 412 ms" / "... from the disk cache" / "... loaded".
  std::string summary;
  bool compiled = false;  // this build ran the compiler
  double ms = 0;
};

// The kernels' functions, each for its device (the CPU's from one C++
// source, a device's from one source of its own); null, with why (no
// compiler, a build error), when they cannot be had. The sources go to
// $KILN_DUMP_DIR when set.
std::optional<BuiltKernels> build_kernels(std::span<const PointwiseKernel> kernels,
                                          std::string& why);

// A kernel's call over an output of `sizes` and `strides` (each input
// broadcast to those sizes): the loop's layout and the operands' first
// elements, the output's first (its data, which a caller may move), and
// its random nodes' seeds and offsets (emit_cpp's `draws`).
struct PointwiseCall {
  LoopLayout layout;
  std::vector<char*> ptrs;
  const uint64_t* draws = nullptr;

  // Elements [begin, end) of the output; index is scratch of layout's dims.
  void run(PointwiseFn fn, int64_t begin, int64_t end, int64_t* index) const;
};
PointwiseCall pointwise_call(const Shape& sizes, const Shape& strides, DType dtype, void* out,
                             std::span<const Tensor> inputs, const uint64_t* draws = nullptr);

// Runs fn over out = the group of `inputs` (each broadcast to out's sizes),
// split across the CPU's threads when large.
void run_pointwise(PointwiseFn fn, const Tensor& out, std::span<const Tensor> inputs,
                   const uint64_t* draws = nullptr);
// The same over a kernel of several outputs, all of outs[0]'s sizes.
void run_pointwise(PointwiseFn fn, std::span<const Tensor> outs, std::span<const Tensor> inputs,
                   const uint64_t* draws = nullptr);

// Runs a device kernel over outs (all of outs[0]'s sizes, on its device) =
// the group of `inputs` (each broadcast to those sizes), on the device's
// current stream.
void run_device_pointwise(const void* fn, std::span<const Tensor> outs,
                          std::span<const Tensor> inputs);

// Runs a device row kernel (PointwiseKernel::rows) of a step's `reduction`:
// out (contiguous) = the reduction of the rows its kernel computes from
// inputs[0, reduction.kernel_inputs) (each broadcast to out's sizes), the
// reduction's own inputs (layer_norm's weight and bias, contiguous or
// undefined) following; `stored`, when defined (contiguous), gets the rows
// too.
struct RowReduction;
void run_device_rows(const void* fn, const RowReduction& reduction, const Tensor& out,
                     const Tensor& stored, std::span<const Tensor> inputs);

// How a step's generated kernel runs over `sizes` (its result's; with a
// reduction, the reduction's input's), for explain(): "CUDA: 3 blocks of
// 256 threads: 24 rows of 768 elements, 32 lanes a row".
std::string describe_launch(const PointwiseKernel& kernel, const RowReduction* reduction,
                            const Shape& sizes);

}  // namespace kiln::compiler::codegen
