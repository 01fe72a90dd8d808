// Generated kernels for groups of pointwise nodes (docs/architecture.md,
// "Generated kernels and their cache"): the loop-level IR of one group, its
// lowering from graph nodes, and its C++ source.
//
// A kernel computes, for every element of its output, the group's nodes in
// program order on that element: each node's inputs cast as its shape rule
// casts them, its arithmetic that of backends/cpu/scalar_ops.h (the library
// kernels' own), its result rounded to its dtype. The result is therefore
// the nodes' results bit for bit, and strict mode fuses too.
//
// Sizes are not in the kernel: it takes them (and the strides) at run time,
// so one kernel serves every size of a dynamic dim. What it does depend on
// is each operand's dtype and the kind of its innermost stride (contiguous,
// broadcast or other), for which it has a vectorizable loop; a call whose
// strides differ takes the kernel's general loop instead.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "compiler/ir/graph.h"

namespace kiln::compiler::codegen {

enum class Inner : uint8_t { kContiguous, kBroadcast, kStrided };

struct KernelOperand {
  DType dtype = kFloat32;
  Inner inner = Inner::kContiguous;  // as the graph's layout has it
  // A device kernel's 0-dim input held by the host (a number the program
  // wrote, such as the 2 of `x * 2`): passed by value at each launch.
  bool host = false;
};

// One value of the kernel's element loop.
struct Instr {
  enum class Kind : uint8_t { kLoad, kCast, kOp } kind = Kind::kOp;
  ops::OpId op{};             // kOp
  std::vector<int32_t> args;  // earlier instructions
  DType dtype = kFloat32;     // the value's dtype
  int32_t input = -1;         // kLoad: which input
  // kOp: add/sub's factor on the second operand (absent: alpha 1), clamp's
  // bounds (absent: none), as values of the compute type; gelu's form.
  // dropout's p; full's value.
  std::vector<std::optional<double>> constants;
  bool tanh_form = false;
  // kOp dropout: its draw's slot in the kernel's `draws` (its seed and
  // offset at 2 slot and 2 slot + 1).
  int32_t draw = -1;
};

// A device kernel that reduces the rows of its result too, as the step's
// reduction (codegen/row_reduction.h) runs there: the kernel computes each
// row's elements and reduces the row in the library's order
// (codegen/cuda_source.h).
struct RowKernel {
  ops::OpId op{};       // softmax, log_softmax or layer_norm
  bool weight = false;  // layer_norm's
  bool bias = false;
  bool stores_input = false;  // it stores the row's elements too (read after it)
};

struct PointwiseKernel {
  std::vector<KernelOperand> inputs;
  // The values it stores, each of the output's sizes: by output, the
  // instruction stored; the last output is the last instruction, the group's
  // result. (A group whose other values are read after it, or which writes
  // other tensors in place, has more than one.)
  std::vector<KernelOperand> outputs;
  std::vector<int32_t> results;
  std::vector<Instr> body;
  // Its function's name in the source: "kiln_pointwise_<hash of its IR>".
  std::string symbol;
  // The device it runs on: the CPU (emit_cpp) or a CUDA device
  // (codegen/cuda_source.h).
  Device device = Device::cpu();
  // A device kernel with its reduction (its symbol "kiln_rows_<hash>").
  std::optional<RowKernel> rows;
};

// Whether node can be in a generated kernel (a pointwise op of
// float32/float64 arithmetic the generator has, out of place or in place
// without a cast of its result, on the CPU or on a device whose backend
// generates kernels: backends/device_codegen.h); empty when it can, else
// why not. Where an in-place node may go is the schedule's to say.
std::string why_not_generated(const Graph& graph, const Node& node);

// The kernel of a group: `nodes` ascending, the last one's output the
// result, `inputs` the values from outside the group it reads, `stored`
// the values of its nodes it stores before the result (each of the
// result's sizes). A random node's draw is its slot in `draws` (the random
// nodes of the step it is part of, in program order).
// Null, with why, where a node's arguments are not of the dtypes the
// generator has, or a dropout is not of the result's sizes.
std::optional<PointwiseKernel> lower_group(const Graph& graph, std::span<const int32_t> nodes,
                                           std::span<const ValueId> inputs, std::string& why,
                                           std::span<const ValueId> stored = {},
                                           std::span<const int32_t> draws = {});

// One translation unit holding the kernels, each an extern "C" function
//   void <symbol>(char* const* ptrs, const int64_t* sizes,
//                 const int64_t* strides, int64_t ndim,
//                 int64_t begin, int64_t end, int64_t* index,
//                 const uint64_t* draws)
// over elements [begin, end) of outputs of `ndim` dims of `sizes`; ptrs
// are the outputs' then the inputs' first elements, strides in bytes, by
// dim then operand (the outputs first); index is scratch of ndim entries;
// draws holds each random node's seed and offset for this call, by slot.
// An element's position in the outputs' row-major order is its Philox
// counter past the offset, as the library's dropout counts it.
std::string emit_cpp(std::span<const PointwiseKernel> kernels);

// Dims of the output's sizes merged where every operand's strides allow and
// dims of size 1 dropped: at least one dim. Strides in bytes, by dim then
// operand (output first); an input of fewer dims or of size 1 along a dim is
// broadcast (stride 0). Over plain sizes at run time, and over SymInts where
// a kernel is lowered for a dynamic program: the comparisons then record
// the guards under which every size it serves gets the same inner kinds.
template <class I>
struct BasicLoopLayout {
  std::vector<I> sizes;
  std::vector<I> strides;
  I numel = 0;
};
using LoopLayout = BasicLoopLayout<int64_t>;
template <class I>
BasicLoopLayout<I> loop_layout(const std::vector<I>& out_sizes,
                               std::span<const std::vector<I>> sizes,
                               std::span<const std::vector<I>> strides,
                               std::span<const size_t> element_sizes);
// The inner-stride kind of each operand in a layout.
template <class I>
Inner inner_of(const BasicLoopLayout<I>& layout, size_t operand, size_t element_size);

}  // namespace kiln::compiler::codegen
