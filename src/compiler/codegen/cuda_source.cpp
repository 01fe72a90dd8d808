#include "compiler/codegen/cuda_source.h"

#include "backends/cuda_preview.h"
#include "backends/device_codegen.h"
#include "backends/kernel_cache.h"
#include "compiler/codegen/source_text.h"
#include "ops/dispatch.h"

namespace kiln::compiler::codegen {

extern const std::string_view kCudaCodegenPrelude;  // cmake/codegen_prelude.cmake

namespace {

constexpr int kDims = backend::DeviceCodegen::kMaxDims;

// Statements setting q[k] (declared here), for operands [first, n_ops), to
// their element `index` of the loop: the dims unrolled, innermost first, so
// that the arguments are read at fixed offsets (no copy to local memory).
// Where every index fits 32 bits (nearly always) and `narrow`, the divisions
// are 32-bit ones, several times cheaper on the device than 64-bit ones.
std::string element_addresses(size_t first, size_t n_ops, const std::string& indent, bool narrow,
                              const std::string& index = "e", const std::string& q = "q") {
  std::string s =
      detail::str_cat(indent, "char* ", q, "[", n_ops, "];\n", indent, "#pragma unroll\n", indent,
                      "for (int k = ", first, "; k < ", n_ops, "; ++k) ", q, "[k] = a.p[k];\n");
  const auto walk = [&](const char* type, const std::string& in) {
    std::string w =
        detail::str_cat(in, type, " rem = static_cast<", type, ">(", index, ");\n", in,
                        "#pragma unroll\n", in, "for (int d = ", kDims - 1, "; d >= 0; --d) {\n");
    w += detail::str_cat(in, "  if (d >= a.ndim) continue;\n", in, "  const ", type,
                         " size = static_cast<", type, ">(a.size[d]);\n", in, "  const ", type,
                         " i = d == 0 ? rem : rem % size;\n", in,
                         "  rem = d == 0 ? 0 : rem / size;\n", in, "#pragma unroll\n", in,
                         "  for (int k = ", first, "; k < ", n_ops, "; ++k) ", q,
                         "[k] += static_cast<long long>(i) * a.stride[d][k];\n", in, "}\n");
    return w;
  };
  if (!narrow) return s + walk("long long", indent);
  s += detail::str_cat(indent, "if (a.numel <= 0xffffffffLL) {\n",
                       walk("unsigned int", indent + "  "), indent, "} else {\n",
                       walk("long long", indent + "  "), indent, "}\n");
  return s;
}

// Statements computing the kernel's values v0, v1... of the element; inputs
// are operands from `first_input` on, and, where `store` (a pointwise
// kernel), its outputs are stored through q[0...].
std::string element_values(const PointwiseKernel& k, size_t first_input, bool store,
                           const std::string& indent) {
  std::string s;
  for (size_t i = 0; i < k.body.size(); ++i) {
    const Instr& in = k.body[i];
    const char* type = source_type(in.dtype);
    const size_t op = first_input + static_cast<size_t>(in.input);
    const bool host = in.kind == Instr::Kind::kLoad && k.inputs[static_cast<size_t>(in.input)].host;
    const std::string value =
        host ? detail::str_cat("kiln_bits<", type, ">(a.p[", op, "])")
        : in.kind == Instr::Kind::kLoad
            ? detail::str_cat("*reinterpret_cast<const ", type, "*>(q[", op, "])")
            : source_expression(
                  k.body, i, [](int32_t v) { return detail::str_cat("v", v); }, Target::kCuda);
    s += detail::str_cat(indent, "const ", type, " v", i, " = ", value, ";\n");
    if (const int32_t j = store ? stored_output(k, i) : -1; j >= 0)
      s += detail::str_cat(indent, "*reinterpret_cast<", type, "*>(q[", j, "]) = v", i, ";\n");
  }
  return s;
}

void emit_pointwise(std::string& s, const PointwiseKernel& k) {
  const size_t outputs = k.outputs.size();
  const size_t n_ops = outputs + k.inputs.size();
  s += detail::str_cat("extern \"C\" __global__ void __launch_bounds__(256) ", k.symbol,
                       "(const kiln_pointwise_args<", n_ops, "> a) {\n");
  s += "  const long long step = static_cast<long long>(gridDim.x) * blockDim.x;\n";
  s += "  for (long long e = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;\n"
       "       e < a.numel; e += step) {\n";
  // The 32-bit divisions are a preview until they have run on a GPU
  // (backends/cuda_preview.h); row kernels are one as a whole.
  s += element_addresses(0, n_ops, "    ", backend::cuda_preview_off("").empty());
  s += element_values(k, outputs, true, "    ");
  s += "  }\n}\n";
}

// Operands: the reduction's result, the stored elements (stores_input), then
// the inputs; both of the first are contiguous, as the rows are.
void emit_rows(std::string& s, const PointwiseKernel& k) {
  const RowKernel& rk = *k.rows;
  const size_t outputs = rk.stores_input ? 2 : 1;
  const size_t n_ops = outputs + k.inputs.size();
  const char* type = source_type(k.outputs.back().dtype);
  s += detail::str_cat("extern \"C\" __global__ void __launch_bounds__(",
                       backend::DeviceCodegen::kRowThreads, ") ", k.symbol,
                       "(const kiln_pointwise_args<", n_ops, "> a, const kiln_row_args ra) {\n");
  s += "  const int group = static_cast<int>(ra.group);\n"
       "  const long long row =\n"
       "      static_cast<long long>(blockIdx.x) * (blockDim.x / group) + threadIdx.x / group;\n"
       "  const bool valid = row < ra.rows;\n"
       "  const long long first = (valid ? row : 0) * ra.n;\n";
  s += detail::str_cat("  ", type, "* const y = reinterpret_cast<", type, "*>(a.p[0]) + first;\n");
  // The inputs' addresses of the row's first element, once per row. Where
  // the innermost dim is a whole number of rows (softmax or layer_norm over
  // the last dim, or rows that collapse into it), element r of the row is r
  // innermost steps further; else each element walks the dims.
  s += element_addresses(outputs, n_ops, "  ", true, "first", "row0");
  s += "  const int inner = static_cast<int>(a.ndim) - 1;\n"
       "  const bool along_inner = inner >= 0 && ra.n > 0 && a.size[inner] % ra.n == 0;\n";
  s += detail::str_cat("  const auto load = [&](long long r, bool first_pass) -> ", type, " {\n");
  s += detail::str_cat("    const long long e = first + r;\n    char* q[", n_ops, "];\n",
                       "    if (along_inner) {\n      #pragma unroll\n      for (int k = ", outputs,
                       "; k < ", n_ops, "; ++k) q[k] = row0[k] + r * a.stride[inner][k];\n",
                       "    } else {\n");
  s += element_addresses(outputs, n_ops, "      ", true, "e", "qe");
  s += detail::str_cat("      #pragma unroll\n      for (int k = ", outputs, "; k < ", n_ops,
                       "; ++k) q[k] = qe[k];\n    }\n");
  s += element_values(k, outputs, false, "    ");
  const size_t last = k.body.size() - 1;
  if (rk.stores_input)
    s += detail::str_cat("    if (first_pass) reinterpret_cast<", type, "*>(a.p[1])[e] = v", last,
                         ";\n");
  s += detail::str_cat("    return v", last, ";\n  };\n");
  s += detail::str_cat("  const auto store = [&](long long r, ", type, " v) { y[r] = v; };\n");
  s += "  const int lane = static_cast<int>(threadIdx.x % group);\n";
  if (rk.op == ops::OpId::layer_norm) {
    const auto param = [&](bool present, const char* word, const char* absent) {
      return present ? detail::str_cat("reinterpret_cast<const ", type, "*>(ra.", word, ")[r]")
                     : detail::str_cat(type, "(", absent, ")");
    };
    s += detail::str_cat("  normalize_row<", type, ">(load, store, [&](long long r, ", type,
                         "* scale, ", type,
                         "* shift) {\n    *scale = ", param(rk.weight, "weight", "1"),
                         ";\n    *shift = ", param(rk.bias, "bias", "0"),
                         ";\n  }, ra.n, lane, group, valid, ra.eps);\n");
  } else {
    s += detail::str_cat("  softmax_row<", type, ", ",
                         rk.op == ops::OpId::log_softmax ? "true" : "false",
                         ">(load, store, ra.n, lane, group, valid);\n");
  }
  s += "}\n";
}

}  // namespace

void as_row_kernel(PointwiseKernel& kernel, const Node& reduction, bool stores_input) {
  const auto has = [&](size_t i) {
    return reduction.inputs.size() > i && reduction.inputs[i] != kNoValue;
  };
  kernel.rows = RowKernel{reduction.op, has(1), has(2), stores_input};
  kernel.symbol =
      "kiln_rows_" + backend::hex_hash(detail::str_cat(
                         kernel.symbol, " ", ops::op_schema(reduction.op).name, " weight ", has(1),
                         " bias ", has(2), " stores ", stores_input));
}

std::string emit_cuda(std::span<const PointwiseKernel> kernels) {
  std::string s = detail::str_cat(
      "// Generated by kiln (docs/architecture.md, \"Generated kernels on CUDA\").\n"
      "typedef long long int64_t;\ntypedef int int32_t;\n"
      "typedef unsigned int uint32_t;\ntypedef unsigned long long uint64_t;\n\n",
      kCudaCodegenPrelude,
      "\ntemplate <int N>\nstruct kiln_pointwise_args {\n  char* p[N];\n  long long stride[", kDims,
      "][N];\n  long long size[", kDims,
      "];\n  long long ndim, numel;\n};\n\n"
      "struct kiln_row_args {\n  const char* weight;\n  const char* bias;\n"
      "  long long rows, n, group;\n  double eps;\n};\n\n"
      "// A number passed by value in an operand's pointer word.\n"
      "template <typename T>\n"
      "__device__ __forceinline__ T kiln_bits(const char* word) {\n"
      "  union {\n    const char* p;\n    T v;\n  } u;\n  u.p = word;\n  return u.v;\n}\n\n"
      "namespace kiln::backend::cuda {\n");
  for (const PointwiseKernel& k : kernels) {
    const size_t outputs = k.outputs.size();
    s += detail::str_cat(
        "\n// ", k.inputs.size(), " inputs, ", k.body.size(), " values, ",
        k.rows ? detail::str_cat("rows reduced by ", ops::op_schema(k.rows->op).name, "\n")
               : detail::str_cat(outputs, outputs == 1 ? " output\n" : " outputs\n"));
    if (k.rows)
      emit_rows(s, k);
    else
      emit_pointwise(s, k);
  }
  s += "\n}  // namespace kiln::backend::cuda\n";
  return s;
}

}  // namespace kiln::compiler::codegen
