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

void run_pointwise(PointwiseFn fn, const Tensor& out, std::span<const Tensor> inputs) {
  std::vector<Shape> sizes{out.sizes()}, strides{out.strides()};
  std::vector<size_t> elements{dtype_size(out.dtype())};
  std::vector<char*> ptrs{static_cast<char*>(out.data_ptr())};
  for (const Tensor& t : inputs) {
    sizes.push_back(t.sizes());
    strides.push_back(t.strides());
    elements.push_back(dtype_size(t.dtype()));
    ptrs.push_back(static_cast<char*>(const_cast<void*>(t.data_ptr())));
  }
  const LoopLayout l = loop_layout(out.sizes(), sizes, strides, elements);
  if (l.numel == 0) return;
  const auto ndim = static_cast<int64_t>(l.sizes.size());
  backend::cpu::parallel_for(l.numel, backend::cpu::kParallelGrain, [&](int64_t b, int64_t e) {
    std::vector<int64_t> index(l.sizes.size());
    fn(ptrs.data(), l.sizes.data(), l.strides.data(), ndim, b, e, index.data());
  });
}

}  // namespace kiln::compiler::codegen
