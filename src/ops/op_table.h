// The op table: every op of kiln, declared once in defs/*.def. Dispatch, the
// reference kernels, the backends, the tests' coverage check (and later
// autograd and the compiler) all read it.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <type_traits>
#include <vector>

#include "core/symbolic.h"
#include "kiln/tensor.h"
#include "ops/attrs.h"
#include "ops/sym_tensor.h"

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
  // Run for what they do on the host (print, check): no pass removes,
  // merges or folds them, and a compiled graph runs them at every call.
  kSideEffect = 1u << 5,
};

// What a shape rule produces for one output: sizes of type Sizes (Shape in
// eager mode, SymShape in the compiler's symbolic mode).
template <class Sizes, class Int>
struct BasicTensorMeta {
  Sizes sizes;
  DType dtype = kFloat32;
  Device device;
  // View ops only: the strides and offset of the view into the first input's storage.
  Sizes strides;
  Int offset = 0;
};
using TensorMeta = BasicTensorMeta<Shape, int64_t>;
using SymTensorMeta = BasicTensorMeta<SymShape, SymInt>;

struct OpSchema;

template <class T>
struct ShapeTypes;
template <>
struct ShapeTypes<Tensor> {
  using Int = int64_t;
  using Sizes = Shape;
  using Meta = TensorMeta;
};
template <>
struct ShapeTypes<SymTensor> {
  using Int = SymInt;
  using Sizes = SymShape;
  using Meta = SymTensorMeta;
};

// The shape rule's view of a call: the inputs (often meta), attributes it may
// canonicalize, and the outputs it must describe. Shape rules are templates
// over the context: ShapeCtx (Tensors, int64_t sizes) in eager mode and
// tracing, SymShapeCtx (SymTensors, SymInt sizes) for the compiler's
// symbolic shapes, so each is written once (core/symbolic.h).
template <class T>
struct BasicShapeCtx {
  using TensorType = T;
  using Int = typename ShapeTypes<T>::Int;
  using Sizes = typename ShapeTypes<T>::Sizes;
  using Meta = typename ShapeTypes<T>::Meta;

  const OpSchema& schema;
  std::span<const T> inputs;
  Attrs& attrs;
  std::vector<Meta> outputs;
  // The dtype each input is converted to before the kernel runs (nullopt: as it is).
  std::vector<std::optional<DType>> input_casts;

  std::string_view name() const noexcept;
  const T& input(size_t i) const { return inputs[i]; }
  bool has_input(size_t i) const { return i < inputs.size() && inputs[i].defined(); }
  // The device all defined inputs share; DeviceError naming the op when they differ.
  Device common_device() const;
  void cast_input(size_t i, DType t) {
    if (input_casts.size() < inputs.size()) input_casts.resize(inputs.size());
    if (inputs[i].defined() && inputs[i].dtype() != t) input_casts[i] = t;
  }
  // Describes the next output (a new contiguous tensor).
  void add_output(Sizes sizes, DType dtype, Device device) {
    outputs.push_back(Meta{std::move(sizes), dtype, device, {}, 0});
  }
};
using ShapeCtx = BasicShapeCtx<Tensor>;
using SymShapeCtx = BasicShapeCtx<SymTensor>;

using ShapeRule = void (*)(ShapeCtx&);
using SymShapeRule = void (*)(SymShapeCtx&);

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
  SymShapeRule sym_shape_rule;  // the same rule on symbolic sizes

  bool has_flag(OpFlags f) const noexcept { return (flags & f) != 0; }
  size_t min_inputs() const noexcept;
  bool variadic() const noexcept { return !inputs.empty() && inputs[0].variadic; }
};

// The schema's rule for context Ctx (ShapeCtx or SymShapeCtx).
template <class Ctx>
auto shape_rule_of(const OpSchema& schema) {
  if constexpr (std::is_same_v<Ctx, ShapeCtx>) {
    return schema.shape_rule;
  } else {
    return schema.sym_shape_rule;
  }
}

const OpSchema& op_schema(OpId id);
std::span<const OpSchema> all_op_schemas();
std::optional<OpId> find_op(std::string_view name);

// Shape rules, defined in shape_rules/ and instantiated there for both
// contexts (KILN_SHAPE_RULES).
#define KILN_OP(name, inputs, attrs, outputs, rule, flags) \
  template <class Ctx>                                     \
  void rule(Ctx&);
#include "ops/defs/all.def"
#undef KILN_OP

#define KILN_SHAPE_RULE_INSTANCES(rule) \
  template void rule(ShapeCtx&);        \
  template void rule(SymShapeCtx&);

}  // namespace kiln::ops
