#include "compiler/codegen/generated.h"

#include <cassert>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "backends/cpu/kernel_compiler.h"
#include "backends/cpu/loops.h"
#include "backends/device_codegen.h"
#include "compiler/codegen/cuda_source.h"
#include "compiler/codegen/row_reduction.h"
#include "compiler/dump.h"
#include "core/shape_util.h"
#include "io/atomic_file.h"

namespace kiln::compiler::codegen {

namespace {

// Readable source, written whole or not at all; a directory that cannot be
// made or written is an IOError naming it.
void dump_source(const std::string& source, const std::string& symbol, const char* extension) {
  const char* dir = std::getenv("KILN_DUMP_DIR");
  if (!dir || !*dir) return;
  const std::string name = "kiln_kernels_" + symbol.substr(symbol.rfind('_') + 1) + extension;
  if (KernelSourceCollector* collector = KernelSourceCollector::active()) {
    collector->add(name, source);  // into the graph's folder (compiler/dump.h)
    return;
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  io::AtomicFileWriter file((std::filesystem::path(dir) / name).string(), "KILN_DUMP_DIR");
  file.write(source.data(), source.size());
  file.commit();
}

std::string summary(size_t n, const char* how, double ms) {
  return detail::str_cat(n, n == 1 ? " kernel " : " kernels ", how, " in ",
                         static_cast<int64_t>(ms + 0.5), " ms");
}

}  // namespace

std::optional<BuiltKernels> build_kernels(std::span<const PointwiseKernel> kernels,
                                          std::string& why) {
  BuiltKernels built;
  built.functions.assign(kernels.size(), nullptr);
  built.device_functions.assign(kernels.size(), nullptr);
  std::vector<PointwiseKernel> cpu;
  std::vector<size_t> cpu_at;
  for (size_t i = 0; i < kernels.size(); ++i) {
    if (!kernels[i].device.is_cpu()) continue;
    cpu.push_back(kernels[i]);
    cpu_at.push_back(i);
  }
  std::vector<std::string> parts;
  if (!cpu.empty()) {
    const std::string source = emit_cpp(cpu);
    std::vector<std::string> symbols;
    for (const PointwiseKernel& k : cpu) symbols.push_back(k.symbol);
    dump_source(source, symbols.front(), ".cpp");
    auto loaded = backend::cpu::KernelCompiler::instance().load_all(source, symbols, why);
    if (!loaded) return std::nullopt;
    for (size_t j = 0; j < cpu.size(); ++j)
      built.functions[cpu_at[j]] = reinterpret_cast<PointwiseFn>(loaded->functions[j]);
    built.library = loaded->library;
    built.ms += loaded->ms;
    using Origin = backend::cpu::LoadedKernels::Origin;
    built.compiled = loaded->origin == Origin::kCompiled;
    parts.push_back(summary(cpu.size(),
                            loaded->origin == Origin::kCompiled ? "compiled"
                            : loaded->origin == Origin::kDisk   ? "read from the disk cache"
                                                                : "already loaded",
                            loaded->ms));
  }
  // Each device's kernels: one source, loaded for that device.
  std::vector<std::shared_ptr<void>> libraries;
  for (size_t first = 0; first < kernels.size(); ++first) {
    const Device on = kernels[first].device;
    if (on.is_cpu() || built.device_functions[first]) continue;
    std::vector<PointwiseKernel> device;
    std::vector<size_t> device_at;
    for (size_t i = first; i < kernels.size(); ++i) {
      if (kernels[i].device != on) continue;
      device.push_back(kernels[i]);
      device_at.push_back(i);
    }
    const std::string source = emit_cuda(device);
    std::vector<std::string> symbols;
    for (const PointwiseKernel& k : device) symbols.push_back(k.symbol);
    dump_source(source, symbols.front(), ".cu");
    const backend::DeviceCodegen* codegen = backend::device_codegen(on.kind());
    if (!codegen) {
      why = detail::str_cat(on, "'s backend generates no kernels");
      return std::nullopt;
    }
    auto loaded = codegen->load(source, symbols, on, why);
    if (!loaded) return std::nullopt;
    for (size_t j = 0; j < device.size(); ++j)
      built.device_functions[device_at[j]] = loaded->functions[j];
    libraries.push_back(loaded->library);
    built.ms += loaded->ms;
    using Origin = backend::DeviceKernels::Origin;
    built.compiled = built.compiled || loaded->origin == Origin::kCompiled;
    parts.push_back(
        detail::str_cat(summary(device.size(),
                                loaded->origin == Origin::kCompiled ? "compiled by NVRTC"
                                : loaded->origin == Origin::kDisk   ? "read from the disk cache"
                                                                    : "already loaded",
                                loaded->ms),
                        " (", on, ")"));
  }
  if (!libraries.empty())
    built.device_library =
        std::make_shared<std::vector<std::shared_ptr<void>>>(std::move(libraries));
  for (const std::string& p : parts) built.summary += (built.summary.empty() ? "" : "; ") + p;
  return built;
}

namespace {

// A kernel's operands, outputs first, and its call over outputs of `sizes`.
struct Operands {
  std::vector<Shape> sizes, strides;
  std::vector<size_t> elements;
  std::vector<char*> ptrs;

  void add(const Shape& s, const Shape& st, DType dtype, const void* data) {
    sizes.push_back(s);
    strides.push_back(st);
    elements.push_back(dtype_size(dtype));
    ptrs.push_back(static_cast<char*>(const_cast<void*>(data)));
  }
  void add(const Tensor& t) { add(t.sizes(), t.strides(), t.dtype(), t.data_ptr()); }
  PointwiseCall call(const Shape& out_sizes) const {
    PointwiseCall c;
    c.ptrs = ptrs;
    c.layout = loop_layout<int64_t>(out_sizes, sizes, strides, elements);
    return c;
  }
};

}  // namespace

PointwiseCall pointwise_call(const Shape& sizes, const Shape& strides, DType dtype, void* out,
                             std::span<const Tensor> inputs, const uint64_t* draws) {
  Operands o;
  o.add(sizes, strides, dtype, out);
  for (const Tensor& t : inputs) o.add(t);
  PointwiseCall c = o.call(sizes);
  c.draws = draws;
  return c;
}

void PointwiseCall::run(PointwiseFn fn, int64_t begin, int64_t end, int64_t* index) const {
  fn(ptrs.data(), layout.sizes.data(), layout.strides.data(),
     static_cast<int64_t>(layout.sizes.size()), begin, end, index, draws);
}

void run_pointwise(PointwiseFn fn, const Tensor& out, std::span<const Tensor> inputs,
                   const uint64_t* draws) {
  run_pointwise(fn, std::span<const Tensor>(&out, 1), inputs, draws);
}

void run_pointwise(PointwiseFn fn, std::span<const Tensor> outs, std::span<const Tensor> inputs,
                   const uint64_t* draws) {
  Operands o;
  for (const Tensor& t : outs) o.add(t);
  for (const Tensor& t : inputs) o.add(t);
  PointwiseCall c = o.call(outs[0].sizes());
  c.draws = draws;
  if (c.layout.numel == 0) return;
  backend::cpu::parallel_for(c.layout.numel, backend::cpu::kParallelGrain,
                             [&](int64_t b, int64_t e) {
                               std::vector<int64_t> index(c.layout.sizes.size());
                               c.run(fn, b, e, index.data());
                             });
}

namespace {

// A device kernel's call: outs then inputs over outs[0]'s sizes, a 0-dim
// input on the host as its value in its pointer word
// (PointwiseKernel's KernelOperand::host).
PointwiseCall device_call(std::span<const Tensor> outs, std::span<const Tensor> inputs) {
  Operands o;
  for (const Tensor& t : outs) o.add(t);
  for (const Tensor& t : inputs) o.add(t);
  PointwiseCall c = o.call(outs[0].sizes());
  const Device device = outs[0].device();
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].device() == device) continue;
    char* word = nullptr;
    std::memcpy(&word, inputs[i].data_ptr(), inputs[i].element_size());
    c.ptrs[outs.size() + i] = word;
  }
  return c;
}

}  // namespace

void run_device_pointwise(const void* fn, std::span<const Tensor> outs,
                          std::span<const Tensor> inputs) {
  const PointwiseCall c = device_call(outs, inputs);
  if (c.layout.numel == 0) return;
  const Device device = outs[0].device();
  backend::device_codegen(device.kind())
      ->launch_pointwise(fn, device, c.ptrs, c.layout.sizes, c.layout.strides, c.layout.numel);
}

namespace {

// The rows of a row kernel over its input's sizes.
backend::RowLaunch row_launch(const RowReduction& reduction, const Shape& sizes) {
  backend::RowLaunch rows;
  rows.n = 1;
  for (size_t d = sizes.size() - static_cast<size_t>(reduction.trailing); d < sizes.size(); ++d)
    rows.n *= sizes[d];
  rows.rows = rows.n == 0 ? 0 : shape_numel(sizes) / rows.n;
  if (reduction.op == ops::OpId::layer_norm) rows.eps = reduction.attrs.f(1);
  return rows;
}

}  // namespace

void run_device_rows(const void* fn, const RowReduction& reduction, const Tensor& out,
                     const Tensor& stored, std::span<const Tensor> inputs) {
  const std::span<const Tensor> params = inputs.subspan(reduction.kernel_inputs);
  const auto param = [&](size_t i) {
    return i < params.size() && params[i].defined() ? params[i].data_ptr() : nullptr;
  };
  assert(out.is_contiguous() && (!stored.defined() || stored.is_contiguous()));
  for (const Tensor& p : params) assert(!p.defined() || p.is_contiguous());
  backend::RowLaunch rows = row_launch(reduction, out.sizes());
  rows.weight = param(0);
  rows.bias = param(1);
  std::vector<Tensor> outs{out};
  if (stored.defined()) outs.push_back(stored);
  const PointwiseCall c = device_call(outs, inputs.first(reduction.kernel_inputs));
  const Device device = out.device();
  backend::device_codegen(device.kind())
      ->launch_rows(fn, device, c.ptrs, c.layout.sizes, c.layout.strides, c.layout.numel, rows);
}

std::string describe_launch(const PointwiseKernel& kernel, const RowReduction* reduction,
                            const Shape& sizes) {
  const int64_t numel = shape_numel(sizes);
  if (kernel.device.is_cpu()) {
    if (reduction)
      return detail::str_cat("CPU: ", numel, " elements computed a block of rows at a time into ",
                             "cache, each block reduced there by the library's ",
                             ops::op_schema(reduction->op).name);
    return detail::str_cat(
        "CPU: a loop over ", numel, " elements",
        numel > backend::cpu::kParallelGrain
            ? detail::str_cat(", split across the threads in chunks of at least ",
                              backend::cpu::kParallelGrain)
            : std::string(", on one thread"));
  }
  const backend::DeviceCodegen* codegen = backend::device_codegen(kernel.device.kind());
  if (!codegen || !codegen->describe_launch) return detail::str_cat(kernel.device);
  const bool rows = kernel.rows && reduction;
  const backend::RowLaunch launch = rows ? row_launch(*reduction, sizes) : backend::RowLaunch{};
  return detail::str_cat(kernel.device, ": ",
                         codegen->describe_launch(kernel.device, numel, rows ? &launch : nullptr));
}

}  // namespace kiln::compiler::codegen
