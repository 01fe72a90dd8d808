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

PointwiseCall pointwise_call(const Shape& sizes, const Shape& strides, DType dtype, void* out,
                             std::span<const Tensor> inputs) {
  std::vector<Shape> all_sizes{sizes}, all_strides{strides};
  std::vector<size_t> elements{dtype_size(dtype)};
  PointwiseCall c;
  c.ptrs.push_back(static_cast<char*>(out));
  for (const Tensor& t : inputs) {
    all_sizes.push_back(t.sizes());
    all_strides.push_back(t.strides());
    elements.push_back(dtype_size(t.dtype()));
    c.ptrs.push_back(static_cast<char*>(const_cast<void*>(t.data_ptr())));
  }
  c.layout = loop_layout(sizes, all_sizes, all_strides, elements);
  return c;
}

void PointwiseCall::run(PointwiseFn fn, int64_t begin, int64_t end, int64_t* index) const {
  fn(ptrs.data(), layout.sizes.data(), layout.strides.data(),
     static_cast<int64_t>(layout.sizes.size()), begin, end, index);
}

void run_pointwise(PointwiseFn fn, const Tensor& out, std::span<const Tensor> inputs) {
  run_pointwise(fn, std::span<const Tensor>(&out, 1), inputs);
}

void run_pointwise(PointwiseFn fn, std::span<const Tensor> outs, std::span<const Tensor> inputs) {
  std::vector<Shape> sizes, strides;
  std::vector<size_t> elements;
  PointwiseCall c;
  const auto add = [&](const Tensor& t) {
    sizes.push_back(t.sizes());
    strides.push_back(t.strides());
    elements.push_back(dtype_size(t.dtype()));
    c.ptrs.push_back(static_cast<char*>(const_cast<void*>(t.data_ptr())));
  };
  for (const Tensor& t : outs) add(t);
  for (const Tensor& t : inputs) add(t);
  c.layout = loop_layout(outs[0].sizes(), sizes, strides, elements);
  if (c.layout.numel == 0) return;
  backend::cpu::parallel_for(c.layout.numel, backend::cpu::kParallelGrain,
                             [&](int64_t b, int64_t e) {
                               std::vector<int64_t> index(c.layout.sizes.size());
                               c.run(fn, b, e, index.data());
                             });
}

}  // namespace kiln::compiler::codegen
