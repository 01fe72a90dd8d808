// Generated pointwise kernels as CUDA C++ (docs/architecture.md, "Generated
// kernels on CUDA"): the kernel IR of codegen/pointwise_kernel.h, the same
// groups the CPU runs, written for NVRTC. Each element computes the group's
// nodes in program order with the CUDA library kernels' own arithmetic
// (backends/cuda/scalar_ops.cuh, embedded in the source), each value
// rounded to its dtype, so results are the library's bit for bit and
// strict mode fuses too.
//
// Sizes are not in the source: one kernel serves every size of a dynamic
// dim. Each kernel is
//   extern "C" __global__ void <symbol>(kiln_pointwise_args<N> a)
// over N operands (outputs first), a struct of 8-byte words passed by value:
//   char* p[N];                    each operand's first element
//   long long stride[kMaxDims][N]; bytes, by dim (outer to inner), then operand
//   long long size[kMaxDims];      the dims, outer to inner (loop_layout's)
//   long long ndim, numel;
// one thread per element, a grid-stride loop over [0, numel).
//
// A kernel with its row reduction (PointwiseKernel::rows: softmax,
// log_softmax or layer_norm over the rows of its result) is
//   extern "C" __global__ void <symbol>(kiln_pointwise_args<N> a,
//                                       kiln_row_args ra)
// its operands the reduction's result, the row elements where it stores
// them, then its inputs, all over the elements of its result; ra holds
// layer_norm's weight and bias (contiguous, or null), the rows and their
// length n, the lanes per row and eps. Lanes compute a row's elements from
// the inputs as they reduce it, in the library kernels' order and with their
// lanes (backends/cuda/row_reduce.cuh, embedded too), so that its results
// are the library's bit for bit as well: the row never goes through memory.
#pragma once

#include <span>
#include <string>

#include "compiler/codegen/pointwise_kernel.h"

namespace kiln::compiler::codegen {

// One translation unit holding the kernels (each of Device CUDA).
std::string emit_cuda(std::span<const PointwiseKernel> kernels);

// Makes kernel (a group's, on a CUDA device) the kernel that also reduces
// its result's rows as node `reduction` does (a row reduction of
// codegen/row_reduction.h, without epilogue), storing them too where
// stores_input: its RowKernel and symbol.
void as_row_kernel(PointwiseKernel& kernel, const Node& reduction, bool stores_input);

}  // namespace kiln::compiler::codegen
