#include "compiler/codegen/pointwise_kernel.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>

#include "backends/cpu/scalar_ops.h"
#include "backends/device_codegen.h"
#include "backends/kernel_cache.h"
#include "compiler/codegen/source_text.h"
#include "core/shape_util.h"
#include "ops/dispatch.h"

namespace kiln::compiler::codegen {

extern const std::string_view kCodegenPrelude;  // cmake/codegen_prelude.cmake

namespace {

using ops::OpId;

// kTest: a float's property as bool (isnan, isinf); kLogical: bools (or
// floats, nonzero true) to bool.
enum class Form : uint8_t {
  kNone,
  kUnary,
  kBinary,
  kCompare,
  kWhere,
  kClamp,
  kCast,
  kMaskedFill,
  kTest,
  kLogical,
  kFull,
  kDropout
};

Form form_of(OpId op) {
  switch (op) {
    case OpId::neg:
    case OpId::abs:
    case OpId::exp:
    case OpId::log:
    case OpId::log1p:
    case OpId::expm1:
    case OpId::sqrt:
    case OpId::rsqrt:
    case OpId::reciprocal:
    case OpId::square:
    case OpId::sin:
    case OpId::cos:
    case OpId::tanh:
    case OpId::sigmoid:
    case OpId::relu:
    case OpId::gelu:
    case OpId::silu:
    case OpId::leaky_relu:
    case OpId::hardtanh:
    case OpId::elu:
    case OpId::softplus:
    case OpId::hardsigmoid:
    case OpId::hardswish:
    case OpId::mish:
    case OpId::erf:
    case OpId::sign:
    case OpId::floor:
    case OpId::ceil:
    case OpId::round:
      return Form::kUnary;
    case OpId::add:
    case OpId::sub:
    case OpId::mul:
    case OpId::div:
    case OpId::pow:
    case OpId::maximum:
    case OpId::minimum:
    case OpId::remainder:
      return Form::kBinary;
    case OpId::masked_fill:
      return Form::kMaskedFill;
    case OpId::isnan:
    case OpId::isinf:
      return Form::kTest;
    case OpId::logical_not:
    case OpId::logical_and:
    case OpId::logical_or:
    case OpId::logical_xor:
      return Form::kLogical;
    case OpId::eq:
    case OpId::ne:
    case OpId::lt:
    case OpId::le:
    case OpId::gt:
    case OpId::ge:
      return Form::kCompare;
    case OpId::where:
      return Form::kWhere;
    case OpId::clamp:
      return Form::kClamp;
    case OpId::copy:
      return Form::kCast;
    case OpId::full:
      return Form::kFull;
    case OpId::dropout:
      return Form::kDropout;
    default:
      return Form::kNone;
  }
}

bool floating(DType t) { return t == kFloat32 || t == kFloat64; }
// Integers are read to be cast (x * 2 holds the 2 as int64), never computed on.
bool loadable(DType t) { return floating(t) || t == kBool || t == kInt64 || t == kInt32; }

const char* c_type(DType t) {
  if (t == kFloat32) return "float";
  if (t == kFloat64) return "double";
  if (t == kInt64) return "int64_t";
  if (t == kInt32) return "int32_t";
  return "bool";
}

const char* compare_operator(OpId op) {
  switch (op) {
    case OpId::eq:
      return "==";
    case OpId::ne:
      return "!=";
    case OpId::lt:
      return "<";
    case OpId::le:
      return "<=";
    case OpId::gt:
      return ">";
    default:
      return ">=";
  }
}

// A value of the compute type `t` as an expression of exactly that value:
// NaN and infinities as the target's source has them (NVRTC's has no
// <limits>: their bits).
std::string literal(double v, DType t, Target target) {
  const std::string type = c_type(t);
  if ((std::isnan(v) || std::isinf(v)) && target == Target::kCuda) {
    const bool f32 = t == kFloat32;
    const char* bits = std::isnan(v) ? (f32 ? "0x7fc00000" : "0x7ff8000000000000LL")
                                     : (f32 ? "0x7f800000" : "0x7ff0000000000000LL");
    return detail::str_cat(std::signbit(v) ? "-" : "",
                           f32 ? "__int_as_float(" : "__longlong_as_double(", bits, ")");
  }
  if (std::isnan(v))
    return detail::str_cat(std::signbit(v) ? "-" : "", "std::numeric_limits<", type,
                           ">::quiet_NaN()");
  if (std::isinf(v))
    return detail::str_cat(v < 0 ? "-" : "", "std::numeric_limits<", type, ">::infinity()");
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a", v);
  return detail::str_cat("static_cast<", type, ">(", buf, ")");
}

// A scalar attribute as the compute type t rounds it (the library kernels' Scalar::to).
double as_compute(const Scalar& s, DType t) {
  return t == kFloat32 ? static_cast<double>(s.to<float>()) : s.to<double>();
}

std::string cast_expression(const std::string& v, DType to) {
  if (to == kBool) return detail::str_cat("(", v, " != 0)");
  return detail::str_cat("static_cast<", c_type(to), ">(", v, ")");
}

std::string value_name(int32_t v) { return detail::str_cat("v", v); }

// The library dropout's threshold on a Philox value's top 24 bits and its
// scale in the compute type t (scalar::dropout), as literals.
std::string dropout_constants(double p, DType t) {
  namespace scalar = backend::cpu::scalar;
  const double scale = t == kFloat32 ? static_cast<double>(scalar::dropout_scale<float>(p))
                                     : scalar::dropout_scale<double>(p);
  return detail::str_cat(scalar::dropout_threshold(p), "u, ", literal(scale, t, Target::kCpu));
}

// A dropout's Philox value at an element of the element loop (position
// pos + i), by its draw's seed and offset.
std::string element_bits(const Instr& in) {
  return detail::str_cat("philox::u32(r[", 2 * in.draw, "], r[", 2 * in.draw + 1,
                         "] + static_cast<uint64_t>(pos + i))");
}

// The expression of instruction i (not a load), its arguments named by
// `arg_name`, a dropout's random value by `bits`.
std::string expression(const std::vector<Instr>& body, size_t i,
                       const std::function<std::string(int32_t)>& arg_name, Target target,
                       const std::function<std::string(const Instr&)>& bits) {
  const Instr& in = body[i];
  const auto literal = [target](double v, DType t) { return codegen::literal(v, t, target); };
  auto arg = [&](size_t k) { return arg_name(in.args[k]); };
  if (in.kind == Instr::Kind::kCast || form_of(in.op) == Form::kCast)
    return cast_expression(arg(0), in.dtype);
  const std::string name(ops::op_schema(in.op).name);
  switch (form_of(in.op)) {
    case Form::kUnary: {
      if (in.op == OpId::gelu)
        return detail::str_cat("scalar::gelu_", in.tanh_form ? "tanh" : "erf", "(", arg(0), ")");
      // An activation's attributes follow its argument (leaky_relu's slope...).
      std::string call = detail::str_cat("scalar::", name, "(", arg(0));
      for (const std::optional<double>& c : in.constants)
        call += detail::str_cat(", ", literal(*c, in.dtype));
      return call + ")";
    }
    case Form::kBinary:
      if ((in.op == OpId::add || in.op == OpId::sub) && in.constants[0])
        return detail::str_cat("scalar::add_scaled(", arg(0), ", ", arg(1), ", ",
                               literal(*in.constants[0], in.dtype), ")");
      return detail::str_cat("scalar::", name, "(", arg(0), ", ", arg(1), ")");
    case Form::kCompare:
      return detail::str_cat("(", arg(0), " ", compare_operator(in.op), " ", arg(1), ")");
    case Form::kWhere:
      return detail::str_cat("(", arg(0), " ? ", arg(1), " : ", arg(2), ")");
    case Form::kMaskedFill:  // the library's m ? v : x
      return detail::str_cat("(", arg(1), " ? ", literal(*in.constants[0], in.dtype), " : ", arg(0),
                             ")");
    case Form::kTest:
      if (in.op == OpId::isnan) return detail::str_cat("(", arg(0), " != ", arg(0), ")");
      return detail::str_cat(target == Target::kCuda ? "scalar::isinf(" : "std::isinf(", arg(0),
                             ")");
    case Form::kLogical: {
      const std::string a = detail::str_cat("(", arg(0), " != 0)");
      if (in.op == OpId::logical_not) return detail::str_cat("!", a);
      const std::string b = detail::str_cat("(", arg(1), " != 0)");
      const char* op = in.op == OpId::logical_and  ? " && "
                       : in.op == OpId::logical_or ? " || "
                                                   : " != ";
      return detail::str_cat("(", a, op, b, ")");
    }
    case Form::kFull:
      return literal(*in.constants[0], in.dtype);
    case Form::kDropout:
      if (target == Target::kCuda) throw Error("compiler: codegen: dropout has no CUDA form");
      return detail::str_cat("scalar::dropout(", arg(0), ", ", bits(in), ", ",
                             dropout_constants(*in.constants[0], in.dtype), ")");
    case Form::kClamp: {
      const double inf = std::numeric_limits<double>::infinity();
      return detail::str_cat("scalar::clamp(", arg(0), ", ",
                             literal(in.constants[0].value_or(-inf), in.dtype), ", ",
                             literal(in.constants[1].value_or(inf), in.dtype), ")");
    }
    default:
      throw Error(detail::str_cat("compiler: codegen: no expression for ", name));
  }
}

// The index of the output that stores instruction i, else -1.
int32_t output_of(const PointwiseKernel& k, size_t i) {
  const auto at = std::find(k.results.begin(), k.results.end(), static_cast<int32_t>(i));
  return at == k.results.end() ? -1 : static_cast<int32_t>(at - k.results.begin());
}

// The element loop's body: loads (through `load(k)`), values, the stores
// (operand j is output j, at element i).
std::string element_body(const PointwiseKernel& k, const std::string& indent,
                         const std::function<std::string(size_t)>& load) {
  std::string s;
  for (size_t i = 0; i < k.body.size(); ++i) {
    const Instr& in = k.body[i];
    const std::string value = in.kind == Instr::Kind::kLoad
                                  ? load(static_cast<size_t>(in.input))
                                  : expression(k.body, i, value_name, Target::kCpu, element_bits);
    s += detail::str_cat(indent, "const ", c_type(in.dtype), " v", i, " = ", value, ";\n");
    if (const int32_t j = output_of(k, i); j >= 0)
      s += detail::str_cat(indent, "*reinterpret_cast<", c_type(in.dtype), "*>(p[", j, "] + i * s[",
                           j, "]) = v", i, ";\n");
  }
  return s;
}

// The fast loop, where every operand's innermost stride is as the graph's
// layout has it: the elements in blocks of kBlock, and in each block every
// instruction one loop of its own over a buffer on the stack, as the
// library kernels run one op per loop. Each loop stays small enough to
// vectorize with no register spills (one loop for a whole chain of exp,
// erfc and tanh polynomials ran slower than the library's separate passes),
// and the values between them stay in the L1 cache instead of memory.
// Values of broadcast operands alone are computed once. Operand j < outputs
// is output j; input i is operand outputs + i.
std::string blocked_loop(const PointwiseKernel& k, const std::function<bool(size_t, Inner)>& is) {
  const size_t last = k.body.size() - 1;
  const size_t outputs = k.outputs.size();
  std::vector<bool> uniform(k.body.size(), false);
  for (size_t i = 0; i < k.body.size(); ++i) {
    const Instr& in = k.body[i];
    if (in.kind == Instr::Kind::kLoad) {
      uniform[i] = is(outputs + static_cast<size_t>(in.input), Inner::kBroadcast);
    } else {
      uniform[i] = output_of(k, i) < 0 && in.draw < 0;
      for (int32_t a : in.args) uniform[i] = uniform[i] && uniform[static_cast<size_t>(a)];
    }
  }
  // A value inside the block loop: a load, a uniform value or a buffer.
  auto at = [&](int32_t v) -> std::string {
    const Instr& in = k.body[static_cast<size_t>(v)];
    if (uniform[static_cast<size_t>(v)]) return detail::str_cat("v", v);
    if (in.kind == Instr::Kind::kLoad) {
      const size_t op = outputs + static_cast<size_t>(in.input);
      if (is(op, Inner::kContiguous)) return detail::str_cat("a", in.input, "[i0 + i]");
      return detail::str_cat("*reinterpret_cast<const ", c_type(in.dtype), "*>(p[", op,
                             "] + (i0 + i) * s[", op, "])");
    }
    return detail::str_cat("v", v, "[i]");
  };
  auto store = [&](int32_t j) {
    if (is(static_cast<size_t>(j), Inner::kContiguous)) return detail::str_cat("o", j, "[i0 + i]");
    return detail::str_cat("*reinterpret_cast<", c_type(k.outputs[static_cast<size_t>(j)].dtype),
                           "*>(p[", j, "] + (i0 + i) * s[", j, "])");
  };
  std::string s;
  for (size_t i = 0; i < k.body.size(); ++i) {
    if (!uniform[i]) continue;
    const Instr& in = k.body[i];
    const std::string value =
        in.kind == Instr::Kind::kLoad
            ? detail::str_cat("*reinterpret_cast<const ", c_type(in.dtype), "*>(p[",
                              outputs + static_cast<size_t>(in.input), "])")
            : expression(k.body, i, value_name, Target::kCpu, element_bits);
    s += detail::str_cat("    const ", c_type(in.dtype), " v", i, " = ", value, ";\n");
  }
  s += "    constexpr int64_t kBlock = 256;\n";
  s += "    for (int64_t i0 = 0; i0 < n; i0 += kBlock) {\n";
  s += "      const int64_t m = n - i0 < kBlock ? n - i0 : kBlock;\n";
  for (size_t i = 0; i < last; ++i)
    if (!uniform[i] && k.body[i].kind != Instr::Kind::kLoad)
      s += detail::str_cat("      ", c_type(k.body[i].dtype), " v", i, "[kBlock];\n");
  // A dropout's Philox values for the block's elements, made together.
  const auto block_bits = [](const Instr& in) { return detail::str_cat("b", in.draw, "[i]"); };
  for (size_t i = 0; i < k.body.size(); ++i) {
    if (uniform[i] || k.body[i].kind == Instr::Kind::kLoad) continue;
    const int32_t draw = k.body[i].draw;
    if (draw >= 0)
      s += detail::str_cat("      uint32_t b", draw, "[kBlock];\n      philox::u32s(r[", 2 * draw,
                           "], r[", 2 * draw + 1, "] + static_cast<uint64_t>(pos + i0), m, b", draw,
                           ");\n");
    const std::string value = expression(k.body, i, at, Target::kCpu, block_bits);
    const int32_t j = output_of(k, i);
    const std::string target = i != last ? detail::str_cat("v", i, "[i]") : store(j);
    s += detail::str_cat("      for (int64_t i = 0; i < m; ++i) ", target, " = ", value, ";\n");
    // A value stored before the result: from its buffer, while in cache.
    if (i != last && j >= 0)
      s += detail::str_cat("      for (int64_t i = 0; i < m; ++i) ", store(j), " = v", i, "[i];\n");
  }
  s += "    }\n";
  return s;
}

}  // namespace

const char* source_type(DType t) { return c_type(t); }

std::string source_expression(const std::vector<Instr>& body, size_t i,
                              const std::function<std::string(int32_t)>& arg_name, Target target) {
  return expression(body, i, arg_name, target, element_bits);
}

int32_t stored_output(const PointwiseKernel& k, size_t i) { return output_of(k, i); }

std::string why_not_generated(const Graph& g, const Node& n) {
  const std::string name(ops::op_schema(n.op).name);
  if (form_of(n.op) == Form::kNone) return detail::str_cat(name, " has no generated form");
  if (n.outputs.size() != 1) return detail::str_cat(name, " has ", n.outputs.size(), " outputs");
  const Value& out = g.value(n.outputs[0]);
  const Form form = form_of(n.op);
  if (!out.device.is_cpu()) {
    if (!backend::device_codegen(out.device.kind()))
      return detail::str_cat(name, " runs on ", out.device, ", which has no generated kernels");
    // Its seed is read on the device there (CUDA graphs replay new draws).
    if (form == Form::kDropout)
      return detail::str_cat(name, " on ", out.device, " draws its numbers apart");
    if (static_cast<int>(out.sizes.size()) > backend::DeviceCodegen::kMaxDims)
      return detail::str_cat(name, " makes ", out.sizes.size(), " dims (generated on ", out.device,
                             ": ", backend::DeviceCodegen::kMaxDims, ")");
    // Numbers the program wrote (0-dim, on the host) are passed by value.
    for (ValueId in : n.inputs)
      if (in != kNoValue && g.value(in).device != out.device &&
          !(g.value(in).device.is_cpu() && g.value(in).sizes.empty()))
        return detail::str_cat(name, " reads a value on ", g.value(in).device);
  }
  const bool makes_bool = form == Form::kCompare || form == Form::kCast || form == Form::kTest ||
                          form == Form::kLogical;
  if (!(floating(out.dtype) || (out.dtype == kBool && makes_bool)))
    return detail::str_cat(name, " makes ", out.dtype, " (generated: float32, float64)");
  for (ValueId in : n.inputs) {
    if (in == kNoValue) continue;
    const DType t = g.value(in).dtype;
    if (!loadable(t)) return detail::str_cat(name, " reads ", t, " (generated: float32, float64)");
  }
  if (form == Form::kCompare && !floating(g.value(n.inputs[0]).dtype) &&
      !floating(g.value(n.inputs[1]).dtype))
    return detail::str_cat(name, " compares bool values");
  if (form == Form::kTest && !floating(g.value(n.inputs[0]).dtype))
    return detail::str_cat(name, " of ", g.value(n.inputs[0]).dtype, " values");
  if (form == Form::kLogical)
    for (ValueId in : n.inputs)
      if (g.value(in).dtype != kBool && !floating(g.value(in).dtype))
        return detail::str_cat(name, " reads ", g.value(in).dtype, " (generated: bool, floats)");
  if (!contiguous_layout(out.sizes, out.strides))
    return detail::str_cat(name, " makes a non-contiguous result");
  if (n.inplace()) {
    // Written back as computed: no cast to the target's dtype in between.
    TensorList metas;
    for (ValueId id : n.inputs) metas.push_back(g.meta_hint(id));  // dtypes and casts
    const DType computed = ops::infer(n.op, metas, n.attrs).outputs[0].dtype;
    if (computed != out.dtype)
      return detail::str_cat(name, "_ computes ", computed, " and casts it to ", out.dtype);
  }
  return "";
}

std::optional<PointwiseKernel> lower_group(const Graph& g, std::span<const int32_t> nodes,
                                           std::span<const ValueId> inputs, std::string& why,
                                           std::span<const ValueId> stored,
                                           std::span<const int32_t> draws) {
  PointwiseKernel k;
  const ValueId result = g.nodes()[static_cast<size_t>(nodes.back())].outputs[0];
  const Value& rv = g.value(result);
  std::vector<ValueId> outputs(stored.begin(), stored.end());
  outputs.push_back(result);
  // A device kernel takes its operands in its launch's arguments.
  if (!rv.device.is_cpu() &&
      outputs.size() + inputs.size() > static_cast<size_t>(backend::DeviceCodegen::kMaxOperands)) {
    why = detail::str_cat("a kernel on ", rv.device, " of ", outputs.size() + inputs.size(),
                          " operands (at most ", backend::DeviceCodegen::kMaxOperands, ")");
    return std::nullopt;
  }
  std::vector<SymShape> sizes, strides;
  std::vector<size_t> elements;
  for (ValueId id : outputs) {
    const Value& v = g.value(id);
    sizes.push_back(v.sizes);
    strides.push_back(v.strides);
    elements.push_back(dtype_size(v.dtype));
  }
  std::vector<int32_t> instr_of(g.values().size(), -1);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Value& v = g.value(inputs[i]);
    sizes.push_back(v.sizes);
    strides.push_back(v.strides);
    elements.push_back(dtype_size(v.dtype));
    Instr load;
    load.kind = Instr::Kind::kLoad;
    load.input = static_cast<int32_t>(i);
    load.dtype = v.dtype;
    instr_of[static_cast<size_t>(inputs[i])] = static_cast<int32_t>(k.body.size());
    k.body.push_back(load);
  }
  const BasicLoopLayout<SymInt> layout = loop_layout<SymInt>(rv.sizes, sizes, strides, elements);
  for (size_t j = 0; j < outputs.size(); ++j)
    k.outputs.push_back({g.value(outputs[j]).dtype, inner_of(layout, j, elements[j])});
  for (size_t i = 0; i < inputs.size(); ++i) {
    const size_t op = outputs.size() + i;
    const Value& v = g.value(inputs[i]);
    k.inputs.push_back({v.dtype, inner_of(layout, op, elements[op]), v.device != rv.device});
  }

  for (int32_t index : nodes) {
    const Node& n = g.nodes()[static_cast<size_t>(index)];
    TensorList metas;
    for (ValueId id : n.inputs) metas.push_back(g.meta_hint(id));  // dtypes and casts
    const ops::Inferred inferred = ops::infer(n.op, metas, n.attrs);
    Instr op;
    op.op = n.op;
    op.dtype = g.value(n.outputs[0]).dtype;
    for (size_t a = 0; a < n.inputs.size(); ++a) {
      int32_t arg = instr_of[static_cast<size_t>(n.inputs[a])];
      const std::optional<DType> cast =
          a < inferred.input_casts.size() ? inferred.input_casts[a] : std::nullopt;
      if (cast && *cast != k.body[static_cast<size_t>(arg)].dtype) {
        Instr c;
        c.kind = Instr::Kind::kCast;
        c.dtype = *cast;
        c.args = {arg};
        arg = static_cast<int32_t>(k.body.size());
        k.body.push_back(c);
      }
      op.args.push_back(arg);
    }
    const ops::Attrs& attrs = inferred.attrs;
    if (n.op == OpId::add || n.op == OpId::sub) {
      const double alpha = attrs.scalar(0).to_double();
      if (alpha == 1.0) {
        op.constants = {std::nullopt};
      } else {
        const double sign = n.op == OpId::add ? 1.0 : -1.0;
        const double factor = sign * alpha;
        op.constants = {op.dtype == kFloat32 ? static_cast<double>(static_cast<float>(factor))
                                             : factor};
      }
    } else if (n.op == OpId::clamp) {
      for (size_t b = 0; b < 2; ++b)
        op.constants.push_back(attrs.has(b)
                                   ? std::optional<double>(as_compute(attrs.scalar(b), op.dtype))
                                   : std::nullopt);
    } else if (n.op == OpId::gelu) {
      op.tanh_form = attrs.str(0) == "tanh";
    } else if (n.op == OpId::leaky_relu || n.op == OpId::hardtanh || n.op == OpId::elu ||
               n.op == OpId::softplus) {
      // Its float attributes, as the library's kernels take them: C(value).
      const size_t count = n.op == OpId::hardtanh || n.op == OpId::softplus ? 2 : 1;
      for (size_t a = 0; a < count; ++a)
        op.constants.push_back(op.dtype == kFloat32
                                   ? static_cast<double>(static_cast<float>(attrs.f(a)))
                                   : attrs.f(a));
    } else if (n.op == OpId::masked_fill) {
      op.constants = {as_compute(attrs.scalar(0), op.dtype)};  // the library's to<T>()
    } else if (n.op == OpId::full) {
      op.constants = {as_compute(attrs.scalar(1), op.dtype)};
    } else if (n.op == OpId::dropout) {
      // Its counters are the result's positions: of the result's sizes only.
      if (g.value(n.outputs[0]).sizes != rv.sizes) {
        why = detail::str_cat("dropout (node ", index, ") of ", g.value(n.outputs[0]).sizes,
                              " is broadcast to ", rv.sizes);
        return std::nullopt;
      }
      op.constants = {attrs.f(0)};
      const auto at = std::find(draws.begin(), draws.end(), index);
      if (at == draws.end())
        throw Error(detail::str_cat("compiler: codegen: dropout (node ", index,
                                    ") is not among its step's draws"));
      op.draw = static_cast<int32_t>(at - draws.begin());
    }
    // The arguments as the library kernel gets them (after its casts).
    const Form form = form_of(n.op);
    for (size_t a = 0; a < op.args.size(); ++a) {
      const DType t = k.body[static_cast<size_t>(op.args[a])].dtype;
      const DType want = form == Form::kCompare ? k.body[static_cast<size_t>(op.args[0])].dtype
                         : form == Form::kWhere && a == 0      ? kBool
                         : form == Form::kMaskedFill && a == 1 ? kBool
                         : form == Form::kCast || form == Form::kTest || form == Form::kLogical
                             ? t
                             : op.dtype;
      if (t != want || (form == Form::kCompare && !floating(t))) {
        why = detail::str_cat(ops::op_schema(n.op).name, " (node ", index, ") computes on ", t,
                              " where the generator has ", want);
        return std::nullopt;
      }
    }
    instr_of[static_cast<size_t>(n.outputs[0])] = static_cast<int32_t>(k.body.size());
    k.body.push_back(std::move(op));
  }
  for (ValueId v : stored) k.results.push_back(instr_of[static_cast<size_t>(v)]);
  k.results.push_back(static_cast<int32_t>(k.body.size() - 1));
  // The name: a hash of what the source depends on.
  std::string key;
  for (const KernelOperand& o : k.inputs)
    key += detail::str_cat("in ", o.dtype, " ", static_cast<int>(o.inner), o.host ? " host" : "",
                           "\n");
  for (size_t j = 0; j < k.outputs.size(); ++j) {
    const KernelOperand& o = k.outputs[j];
    key += detail::str_cat("out ", o.dtype, " ", static_cast<int>(o.inner), "\n");
    if (j + 1 < k.outputs.size()) key += detail::str_cat("stores v", k.results[j], "\n");
  }
  for (size_t i = 0; i < k.body.size(); ++i)
    if (k.body[i].kind != Instr::Kind::kLoad)
      key += expression(k.body, i, value_name, Target::kCpu, element_bits) + "\n";
  k.device = rv.device;
  if (k.device.is_cuda()) key += "on cuda\n";
  k.symbol = "kiln_pointwise_" + backend::hex_hash(key);
  return k;
}

std::string emit_cpp(std::span<const PointwiseKernel> kernels) {
  std::string s =
      "// Generated by kiln (docs/architecture.md, \"Generated kernels and their cache\").\n"
      "#include <algorithm>\n#include <cstdint>\n#include <limits>\n\n";
  s += kCodegenPrelude;
  s += "namespace kiln::backend::cpu {\n";
  for (const PointwiseKernel& k : kernels) {
    const size_t outputs = k.outputs.size();
    const size_t n_ops = k.inputs.size() + outputs;
    auto operand = [&](size_t op) -> const KernelOperand& {
      return op < outputs ? k.outputs[op] : k.inputs[op - outputs];
    };
    auto inner_size = [&](size_t op) -> std::string {
      if (operand(op).inner == Inner::kBroadcast) return "0";
      return detail::str_cat(dtype_size(operand(op).dtype));
    };
    auto is = [&](size_t op, Inner kind) { return operand(op).inner == kind; };
    s += detail::str_cat("\n// ", k.inputs.size(), " inputs, ", k.body.size(), " values, ", outputs,
                         outputs == 1 ? " output\n" : " outputs\n");
    s += detail::str_cat(
        "[[gnu::always_inline]] inline void ", k.symbol,
        "_run(char* const* p, const int64_t* s, int64_t n, int64_t pos, const uint64_t* r) {\n");
    // The loop the graph's layout has: contiguous and broadcast operands
    // with strides the compiler knows, so that it vectorizes.
    std::string cond;
    for (size_t op = 0; op < n_ops; ++op) {
      if (is(op, Inner::kStrided)) continue;
      if (!cond.empty()) cond += " && ";
      cond += detail::str_cat("s[", op, "] == ", inner_size(op));
    }
    if (!cond.empty()) {
      s += detail::str_cat("  if (", cond, ") {\n");
      for (size_t j = 0; j < outputs; ++j) {
        const std::string t = c_type(k.outputs[j].dtype);
        if (is(j, Inner::kContiguous))
          s += detail::str_cat("    ", t, "* __restrict o", j, " = reinterpret_cast<", t, "*>(p[",
                               j, "]);\n");
      }
      for (size_t i = 0; i < k.inputs.size(); ++i) {
        const std::string t = c_type(k.inputs[i].dtype);
        if (is(outputs + i, Inner::kContiguous))
          s += detail::str_cat("    const ", t, "* __restrict a", i, " = reinterpret_cast<const ",
                               t, "*>(p[", outputs + i, "]);\n");
      }
      s += blocked_loop(k, is);
      s += "    return;\n  }\n";
    }
    // Any strides.
    s += "  for (int64_t i = 0; i < n; ++i) {\n";
    s += element_body(k, "    ", [&](size_t i) {
      const std::string t = c_type(k.inputs[i].dtype);
      return detail::str_cat("*reinterpret_cast<const ", t, "*>(p[", outputs + i, "] + i * s[",
                             outputs + i, "])");
    });
    s += "  }\n}\n";
    s += detail::str_cat(
        "extern \"C\" void ", k.symbol,
        "(char* const* ptrs, const int64_t* sizes, const int64_t* strides, int64_t ndim,\n"
        "    int64_t begin, int64_t end, int64_t* index, const uint64_t* draws) {\n"
        "  constexpr int64_t kOperands = ",
        n_ops,
        ";\n"
        "  int64_t rem = begin;\n"
        "  for (int64_t d = ndim - 1; d >= 0; --d) {\n"
        "    index[d] = rem % sizes[d];\n"
        "    rem /= sizes[d];\n"
        "  }\n"
        "  const int64_t* inner = strides + (ndim - 1) * kOperands;\n"
        "  char* p[kOperands];\n"
        "  for (int64_t pos = begin; pos < end;) {\n"
        "    for (int64_t k = 0; k < kOperands; ++k) {\n"
        "      char* q = ptrs[k];\n"
        "      for (int64_t d = 0; d < ndim; ++d) q += index[d] * strides[d * kOperands + k];\n"
        "      p[k] = q;\n"
        "    }\n"
        "    const int64_t n = std::min(sizes[ndim - 1] - index[ndim - 1], end - pos);\n    ",
        k.symbol,
        "_run(p, inner, n, pos, draws);\n"
        "    pos += n;\n"
        "    index[ndim - 1] += n;\n"
        "    for (int64_t d = ndim - 1; d > 0 && index[d] == sizes[d]; --d) {\n"
        "      index[d] = 0;\n"
        "      ++index[d - 1];\n"
        "    }\n"
        "  }\n"
        "}\n");
  }
  s += "\n}  // namespace kiln::backend::cpu\n";
  return s;
}

template <class I>
BasicLoopLayout<I> loop_layout(const std::vector<I>& out_sizes,
                               std::span<const std::vector<I>> sizes,
                               std::span<const std::vector<I>> strides,
                               std::span<const size_t> element_sizes) {
  const size_t ops = sizes.size();
  const size_t rank = out_sizes.size();
  BasicLoopLayout<I> l;
  l.numel = 1;
  for (const I& s : out_sizes) l.numel *= s;
  // Dims outer to inner, each with its operands' byte strides; size-1 dims dropped.
  std::vector<I> dim_sizes;
  std::vector<std::vector<I>> dim_strides;
  for (size_t d = 0; d < rank; ++d) {
    if (out_sizes[d] == I(1)) continue;
    std::vector<I> st(ops, I(0));
    for (size_t k = 0; k < ops; ++k) {
      const size_t r = sizes[k].size();
      if (d + r < rank) continue;  // a dim the operand does not have
      const size_t j = d + r - rank;
      if (sizes[k][j] != I(1)) st[k] = strides[k][j] * I(static_cast<int64_t>(element_sizes[k]));
    }
    if (!dim_sizes.empty()) {
      bool merge = true;
      for (size_t k = 0; k < ops && merge; ++k)
        merge = dim_strides.back()[k] == st[k] * out_sizes[d];
      if (merge) {
        dim_sizes.back() *= out_sizes[d];
        dim_strides.back() = st;
        continue;
      }
    }
    dim_sizes.push_back(out_sizes[d]);
    dim_strides.push_back(std::move(st));
  }
  if (dim_sizes.empty()) {
    // One element: any stride reads it; the element sizes keep the kernel's
    // contiguous loop (one kernel for every size of a dynamic dim).
    dim_sizes.push_back(I(1));
    std::vector<I> st;
    for (size_t e : element_sizes) st.push_back(I(static_cast<int64_t>(e)));
    dim_strides.push_back(std::move(st));
  }
  l.sizes = dim_sizes;
  for (const auto& st : dim_strides) l.strides.insert(l.strides.end(), st.begin(), st.end());
  return l;
}

template <class I>
Inner inner_of(const BasicLoopLayout<I>& layout, size_t operand, size_t element_size) {
  const size_t ops = layout.strides.size() / layout.sizes.size();
  const I& s = layout.strides[(layout.sizes.size() - 1) * ops + operand];
  if (s == I(static_cast<int64_t>(element_size))) return Inner::kContiguous;
  if (s == I(0)) return Inner::kBroadcast;
  return Inner::kStrided;
}

template BasicLoopLayout<int64_t> loop_layout(const Shape&, std::span<const Shape>,
                                              std::span<const Shape>, std::span<const size_t>);
template BasicLoopLayout<SymInt> loop_layout(const SymShape&, std::span<const SymShape>,
                                             std::span<const SymShape>, std::span<const size_t>);
template Inner inner_of(const BasicLoopLayout<int64_t>&, size_t, size_t);
template Inner inner_of(const BasicLoopLayout<SymInt>&, size_t, size_t);

}  // namespace kiln::compiler::codegen
