// The op table: every op of kiln, declared once in defs/*.def. Dispatch, the
// reference kernels, the backends, the tests' coverage check (and later
// autograd and the compiler) all read it.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "kiln/tensor.h"
#include "ops/attrs.h"

namespace kiln::ops {

enum class OpId : uint16_t {
#define KILN_OP(name, inputs, attrs, outputs, rule, flags) name,
#include "ops/defs/all.def"
#undef KILN_OP
};
inline constexpr int kNumOps = 0
#define KILN_OP(name, inputs, attrs, outputs, rule, flags) +1
#include "ops/defs/all.def"
#undef KILN_OP
    ;

enum OpFlags : uint32_t {
  kNone = 0,
  kInplace = 1u << 0,  // the first input may also be the output
  kView = 1u << 1,     // the output views the first input's storage
  kRandom = 1u << 2,   // seed and offset attributes feed a counter-based generator
  // Elementwise over broadcast inputs: kernels write any strided output, the
  // compiler may fuse it into a loop with its neighbours.
  kPointwise = 1u << 3,
  // No derivative: the outputs are integers or bools, or do not depend on the
  // inputs' values. Every other op has a backward rule (src/autograd/derivatives.def).
  kNoGrad = 1u << 4,
};

// What a shape rule produces for one output.
struct TensorMeta {
  Shape sizes;
  DType dtype = kFloat32;
  Device device;
  // View ops only: the strides and offset of the view into the first input's storage.
  Shape strides;
  int64_t offset = 0;
};

struct OpSchema;

// The shape rule's view of a call: the inputs (often meta), attributes it may
// canonicalize, and the outputs it must describe.
struct ShapeCtx {
  const OpSchema& schema;
  std::span<const Tensor> inputs;
  Attrs& attrs;
  std::vector<TensorMeta> outputs;
  // The dtype each input is converted to before the kernel runs (nullopt: as it is).
  std::vector<std::optional<DType>> input_casts;

  std::string_view name() const noexcept;
  const Tensor& input(size_t i) const { return inputs[i]; }
  bool has_input(size_t i) const { return i < inputs.size() && inputs[i].defined(); }
  // The device all defined inputs share; DeviceError naming the op when they differ.
  Device common_device() const;
  void cast_input(size_t i, DType t);
  // Describes the next output (a new contiguous tensor).
  void add_output(Shape sizes, DType dtype, Device device) {
    outputs.push_back(TensorMeta{std::move(sizes), dtype, device, {}, 0});
  }
};

using ShapeRule = void (*)(ShapeCtx&);

enum class AttrType : uint8_t { Int, Float, Bool, Ints, DType, Device, Scalar, Str };

struct AttrSpec {
  std::string_view name;
  AttrType type;
  bool optional;
};

struct InputSpec {
  std::string_view name;
  bool optional;
  bool variadic;
};

struct OpSchema {
  OpId id;
  std::string_view name;
  std::vector<InputSpec> inputs;
  std::vector<AttrSpec> attrs;
  int num_outputs;
  ShapeRule shape_rule;
  uint32_t flags;

  bool has_flag(OpFlags f) const noexcept { return (flags & f) != 0; }
  size_t min_inputs() const noexcept;
  bool variadic() const noexcept { return !inputs.empty() && inputs[0].variadic; }
};

const OpSchema& op_schema(OpId id);
std::span<const OpSchema> all_op_schemas();
std::optional<OpId> find_op(std::string_view name);

// Shape rules, defined in shape_rules/.
#define KILN_OP(name, inputs, attrs, outputs, rule, flags) void rule(ShapeCtx&);
#include "ops/defs/all.def"
#undef KILN_OP

}  // namespace kiln::ops
