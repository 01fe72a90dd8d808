#include "compiler/codegen/generated.h"

#include <cstdlib>
#include <filesystem>

#include "backends/cpu/kernel_compiler.h"
#include "backends/cpu/loops.h"
#include "io/atomic_file.h"

namespace kiln::compiler::codegen {

std::optional<BuiltKernels> build_kernels(std::span<const PointwiseKernel> kernels,
                                          std::string& why) {
  const std::string source = emit_cpp(kernels);
  std::vector<std::string> symbols;
  for (const PointwiseKernel& k : kernels) symbols.push_back(k.symbol);
  if (const char* dir = std::getenv("KILN_DUMP_DIR"); dir && *dir) {
    // Readable source, written whole or not at all; a directory that cannot
    // be made or written is an IOError naming it.
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    const std::string name = "kiln_kernels_" + symbols.front().substr(15) + ".cpp";
    io::AtomicFileWriter file((std::filesystem::path(dir) / name).string(), "KILN_DUMP_DIR");
    file.write(source.data(), source.size());
    file.commit();
  }
  auto loaded = backend::cpu::KernelCompiler::instance().load_all(source, symbols, why);
  if (!loaded) return std::nullopt;
  BuiltKernels built;
  for (void* f : loaded->functions) built.functions.push_back(reinterpret_cast<PointwiseFn>(f));
  built.library = loaded->library;
  built.ms = loaded->ms;
  using Origin = backend::cpu::LoadedKernels::Origin;
  built.compiled = loaded->origin == Origin::kCompiled;
  const char* how = loaded->origin == Origin::kCompiled ? "compiled"
                    : loaded->origin == Origin::kDisk   ? "read from the disk cache"
                                                        : "already loaded";
  built.summary = detail::str_cat(kernels.size(), kernels.size() == 1 ? " kernel " : " kernels ",
                                  how, " in ", static_cast<int64_t>(loaded->ms + 0.5), " ms");
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

}  // namespace kiln::compiler::codegen
