// Custom ops: a user's own CPU and CUDA kernels as kiln ops (docs/custom_ops.md).
//
// A defined op runs eagerly, records autograd history (its backward is written
// with kiln ops, so it differentiates again), and is one node of a compiled
// graph: traced, sized symbolically, checked and shown by explain(), replayed
// inside reduce-overhead's CUDA graph when it says it is safe there.
//
//   namespace lib = kiln::library;
//   lib::OpDef def;
//   def.name = "mylib::scale";
//   def.inputs = {"x"};
//   def.attrs = {{"factor", lib::AttrType::Float}};
//   def.shape = [](lib::ShapeContext& ctx) { ctx.add_output_like(0); };
//   def.cpu = [](const lib::KernelContext& ctx) { ... ctx.input(0).data_ptr() ... };
//   def.backward = [](const lib::BackwardContext& ctx, const kiln::TensorList& g) {
//     return kiln::TensorList{g[0] * ctx.attr<double>("factor")};
//   };
//   static const lib::Op scale = lib::define_op(std::move(def));
//   kiln::Tensor y = scale.one({x}, {2.0});
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "kiln/tensor.h"

namespace kiln::sym {
class Expr;
}

namespace kiln::library {

// A size as a shape rule sees it: a number in eager calls; in a compiled
// program with dynamic sizes, an expression of the program's size symbols,
// so that one rule serves every size. Arithmetic and comparisons work as on
// int64_t; a comparison whose answer decides the rule's result is kept as a
// guard of the compiled program (it is compiled again where the answer
// changes).
class Size {
 public:
  Size(int64_t value = 0) noexcept : value_(value) {}  // NOLINT(google-explicit-constructor)

  // The number. In a program with dynamic sizes this fixes the size to its
  // present value (the program is compiled again for another): use it only
  // where the rule needs a plain number.
  int64_t value() const;
  bool is_symbolic() const noexcept { return expr_ != nullptr; }

  Size& operator+=(const Size& o) { return *this = *this + o; }
  Size& operator-=(const Size& o) { return *this = *this - o; }
  Size& operator*=(const Size& o) { return *this = *this * o; }
  Size& operator/=(const Size& o) { return *this = *this / o; }

  friend Size operator+(const Size& a, const Size& b);
  friend Size operator-(const Size& a, const Size& b);
  friend Size operator*(const Size& a, const Size& b);
  // C++'s truncating division and remainder; a zero divisor is a ValueError.
  friend Size operator/(const Size& a, const Size& b);
  friend Size operator%(const Size& a, const Size& b);

  friend bool operator==(const Size& a, const Size& b);
  friend bool operator!=(const Size& a, const Size& b) { return !(a == b); }
  friend bool operator<(const Size& a, const Size& b);
  friend bool operator>(const Size& a, const Size& b) { return b < a; }
  friend bool operator<=(const Size& a, const Size& b) { return !(b < a); }
  friend bool operator>=(const Size& a, const Size& b) { return !(a < b); }

 private:
  friend struct SizeAccess;
  int64_t value_ = 0;                      // the number, or the expression's present value
  std::shared_ptr<const sym::Expr> expr_;  // null: the plain number
};
using Sizes = std::vector<Size>;

enum class AttrType : uint8_t { Int, Float, Bool, Ints, Str, DType };
// An attribute's value at a call. A Float attribute also takes an integer.
using AttrValue = std::variant<int64_t, double, bool, std::vector<int64_t>, std::string, DType>;

struct AttrDef {
  std::string name;
  AttrType type = AttrType::Int;
};

struct OpEntry;  // the registered op (internal)

// What the shape rule sees: the inputs' sizes, dtypes and devices (never
// their values) and the attributes. It describes every output with
// add_output, and throws a kiln::Error (ShapeError, DTypeError, ...) naming
// the op for inputs the op does not take.
class ShapeContext {
 public:
  std::string_view op() const noexcept;
  size_t num_inputs() const noexcept;
  int64_t dim(size_t input) const;
  Sizes sizes(size_t input) const;
  Size size(size_t input, int64_t d) const;  // d may be negative
  DType dtype(size_t input) const;
  Device device(size_t input) const;
  template <class T>
  T attr(std::string_view name) const;

  void add_output(const Sizes& sizes, DType dtype, Device device);
  // An output with input's sizes, dtype and device.
  void add_output_like(size_t input);

  ShapeContext(const OpEntry& op, void* ctx, bool symbolic) noexcept
      : op_(op), ctx_(ctx), symbolic_(symbolic) {}

 private:
  const OpEntry& op_;
  void* ctx_;  // the shape rule's context (eager or symbolic sizes)
  bool symbolic_;
};

// What a kernel sees: inputs (contiguous unless OpDef::contiguous_inputs is
// false, with the dtypes the caller gave) and outputs, allocated contiguous
// with the shape rule's sizes, all on device(). A CUDA kernel queues its
// work on stream() and returns without waiting for it.
class KernelContext {
 public:
  std::string_view op() const noexcept;
  size_t num_inputs() const noexcept { return inputs_.size(); }
  size_t num_outputs() const noexcept { return outputs_.size(); }
  const Tensor& input(size_t i) const { return inputs_[i]; }
  Tensor& output(size_t i) const { return outputs_[i]; }
  Device device() const noexcept { return device_; }
  // The cudaStream_t kernels on a CUDA device queue their work on; null on the CPU.
  void* stream() const noexcept { return stream_; }
  template <class T>
  T attr(std::string_view name) const;

  KernelContext(const OpEntry& op, std::span<const Tensor> inputs, std::span<Tensor> outputs,
                const void* attrs, Device device, void* stream) noexcept
      : op_(op),
        inputs_(inputs),
        outputs_(outputs),
        attrs_(attrs),
        device_(device),
        stream_(stream) {}

 private:
  const OpEntry& op_;
  std::span<const Tensor> inputs_;
  std::span<Tensor> outputs_;
  const void* attrs_;
  Device device_;
  void* stream_;
};

// What a backward sees: the forward call's inputs, outputs and attributes.
class BackwardContext {
 public:
  std::string_view op() const noexcept;
  size_t num_inputs() const noexcept { return inputs_.size(); }
  const Tensor& input(size_t i) const { return inputs_[i]; }
  const Tensor& output(size_t i) const { return outputs_[i]; }
  // Whether input i needs a gradient (the backward may leave the others undefined).
  bool needs_grad(size_t i) const { return needs_grad_[i]; }
  template <class T>
  T attr(std::string_view name) const;

  BackwardContext(const OpEntry& op, std::span<const Tensor> inputs,
                  std::span<const Tensor> outputs, const void* attrs,
                  const std::vector<bool>& needs_grad) noexcept
      : op_(op), inputs_(inputs), outputs_(outputs), attrs_(attrs), needs_grad_(needs_grad) {}

 private:
  const OpEntry& op_;
  std::span<const Tensor> inputs_;
  std::span<const Tensor> outputs_;
  const void* attrs_;
  const std::vector<bool>& needs_grad_;
};

using ShapeFn = std::function<void(ShapeContext&)>;
using KernelFn = std::function<void(const KernelContext&)>;
// The gradients of the inputs (one per input, undefined where none), from
// the gradients of the outputs (zeros for an output that received none).
// Written with kiln ops, it is itself differentiable.
using BackwardFn = std::function<TensorList(const BackwardContext&, const TensorList&)>;

struct OpDef {
  std::string name;                 // "namespace::name": letters, digits, '_'
  std::vector<std::string> inputs;  // every call passes one tensor per name
  std::vector<AttrDef> attrs;       // every call passes one value per attribute
  ShapeFn shape;                    // required
  KernelFn cpu;                     // at least one kernel
  KernelFn cuda;
  BackwardFn backward;  // none: differentiating through the op is an error
  // The CUDA kernel queues work on stream() only: no host synchronization,
  // no memory of its own, the same launches at every call. Then
  // reduce-overhead records it into its CUDA graph; otherwise a compiled
  // function containing it runs without one (explain() says why).
  bool cuda_graph_safe = false;
  bool contiguous_inputs = true;  // false: kernels take inputs with any strides
  // Inputs and attributes the shape rule is tried on at definition (only
  // the inputs' sizes, dtypes and devices are read): a rule that throws on
  // them is an error there.
  TensorList example_inputs;
  std::vector<AttrValue> example_attrs;
};

// A defined op: call it like a function.
class Op {
 public:
  TensorList operator()(std::span<const Tensor> inputs,
                        std::span<const AttrValue> attrs = {}) const;
  TensorList operator()(std::initializer_list<Tensor> inputs,
                        std::initializer_list<AttrValue> attrs = {}) const;
  // The first output.
  Tensor one(std::initializer_list<Tensor> inputs,
             std::initializer_list<AttrValue> attrs = {}) const;
  const std::string& name() const noexcept;

  explicit Op(const OpEntry& entry) noexcept : entry_(&entry) {}

 private:
  const OpEntry* entry_;
};

// Registers the op for this process. kiln::Error (naming the op) for a name
// defined already or not of the form "namespace::name", repeated input or
// attribute names, no shape rule, no kernel, or a shape rule that throws on
// the definition's example.
Op define_op(OpDef def);
// The op defined under name; kiln::Error naming it where there is none.
Op find_op(std::string_view name);

}  // namespace kiln::library
