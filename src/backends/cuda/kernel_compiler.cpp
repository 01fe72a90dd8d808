#include "backends/cuda/kernel_compiler.h"

#include <cuda_runtime.h>
#include <nvrtc.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/row_group.h"
#include "backends/device_codegen.h"
#include "backends/kernel_cache.h"
#include "kiln/error.h"
#include "kiln/runtime.h"

namespace kiln::backend::cuda {
namespace fs = std::filesystem;
namespace {

std::string nvrtc_error(nvrtcResult r) { return nvrtcGetErrorString(r); }

// The device's architecture as NVRTC names a cubin's: sm_90.
std::string architecture(int device) {
  int major = 0, minor = 0;
  check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device),
        "cudaDeviceGetAttribute");
  check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device),
        "cudaDeviceGetAttribute");
  return detail::str_cat("sm_", major, minor);
}

int multiprocessors(int device) {
  static std::mutex mutex;
  static std::map<int, int> known;
  std::lock_guard lock(mutex);
  auto it = known.find(device);
  if (it == known.end()) {
    int n = 0;
    check(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device),
          "cudaDeviceGetAttribute");
    it = known.emplace(device, std::max(n, 1)).first;
  }
  return it->second;
}

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Compiled libraries of this process, by key; sources NVRTC refused.
class Loader {
 public:
  static Loader& instance() {
    static Loader* loader = new Loader();  // never destroyed: libraries outlive static teardown
    return *loader;
  }

  std::optional<DeviceKernels> load(const std::string& source, std::span<const std::string> symbols,
                                    Device device, std::string& why) {
    const auto start = std::chrono::steady_clock::now();
    check_device(device, "generated kernels");
    DeviceGuard guard(device.index());
    const std::string arch = architecture(device.index());
    int driver = 0;
    cudaDriverGetVersion(&driver);
    std::string key = detail::str_cat("nvrtc ", nvrtc_version(), "\narch ", arch, "\ndriver ",
                                      driver, "\noptions");
    for (const std::string& o : nvrtc_options(arch)) key += " " + o;
    key += detail::str_cat("\n", version_string(), "\nsource\n", source);

    std::lock_guard lock(mutex_);
    DeviceKernels loaded;
    if (auto it = failures_.find(key); it != failures_.end()) {
      why = it->second + "\n(the same source failed earlier in this process; not built again)";
      return std::nullopt;
    }
    std::shared_ptr<void> library;
    if (auto it = libraries_.find(key); it != libraries_.end()) {
      library = it->second;
      loaded.origin = DeviceKernels::Origin::kMemory;
    } else {
      bool hit = false, refused = false;
      const auto path = cache_.get(
          key, "kernels.cubin",
          [&](const fs::path& product) -> std::string {
            std::string log;
            const std::optional<std::string> cubin = nvrtc_compile(source, arch, log);
            if (!cubin) {
              refused = true;
              return log;
            }
            std::ofstream out(product, std::ios::binary);
            out.write(cubin->data(), static_cast<std::streamsize>(cubin->size()));
            out.close();
            return out ? "" : "could not write " + product.string();
          },
          why, &hit);
      if (!path) {
        if (refused) failures_.emplace(key, why);
        return std::nullopt;
      }
      loaded.origin = hit ? DeviceKernels::Origin::kDisk : DeviceKernels::Origin::kCompiled;
      const std::string cubin = read_bytes(*path);
      // A cubin built outside the cache (its directory was not writable) is
      // not needed on disk once read.
      std::error_code ec;
      if (path->parent_path().parent_path() != cache_.dir())
        fs::remove_all(path->parent_path(), ec);
      cudaLibrary_t handle = nullptr;
      const cudaError_t status =
          cudaLibraryLoadData(&handle, cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0);
      if (status != cudaSuccess) {
        cudaGetLastError();
        why = detail::str_cat("the compiled kernels (", path->string(),
                              ") do not load: ", cudaGetErrorString(status));
        return std::nullopt;
      }
      // Unloaded when the last executable holding it goes; the runtime's
      // own teardown at exit may have unloaded it first, so errors are moot.
      library = std::shared_ptr<void>(handle, [](void* h) {
        cudaLibraryUnload(static_cast<cudaLibrary_t>(h));
        cudaGetLastError();
      });
      libraries_.emplace(key, library);
    }
    for (const std::string& symbol : symbols) {
      cudaKernel_t kernel = nullptr;
      if (cudaLibraryGetKernel(&kernel, static_cast<cudaLibrary_t>(library.get()),
                               symbol.c_str()) != cudaSuccess) {
        cudaGetLastError();
        why = "the compiled kernels have no function " + symbol;
        return std::nullopt;
      }
      loaded.functions.push_back(reinterpret_cast<const void*>(kernel));
    }
    loaded.library = std::move(library);
    loaded.ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    return loaded;
  }

 private:
  Loader() : cache_(KernelCache::default_dir(), KernelCache::default_max_bytes()) {}

  KernelCache cache_;
  std::mutex mutex_;
  std::unordered_map<std::string, std::shared_ptr<void>> libraries_;
  std::unordered_map<std::string, std::string> failures_;
};

std::optional<DeviceKernels> load(const std::string& source, std::span<const std::string> symbols,
                                  Device device, std::string& why) {
  return Loader::instance().load(source, symbols, device, why);
}

// kiln_pointwise_args<n> (compiler/codegen/cuda_source.h), word by word.
using PointwiseWords =
    std::array<int64_t, DeviceCodegen::kMaxOperands*(DeviceCodegen::kMaxDims + 1) +
                            DeviceCodegen::kMaxDims + 2>;

PointwiseWords pointwise_words(std::span<char* const> ptrs, std::span<const int64_t> sizes,
                               std::span<const int64_t> strides, int64_t numel) {
  constexpr size_t kDims = DeviceCodegen::kMaxDims;
  const size_t n = ptrs.size(), ndim = sizes.size();
  if (n > DeviceCodegen::kMaxOperands || ndim > kDims || strides.size() != ndim * n)
    throw Error(detail::str_cat("generated kernels: a call of ", n, " operands over ", ndim,
                                " dims (at most ", DeviceCodegen::kMaxOperands, " and ", kDims,
                                ")"));
  PointwiseWords words{};
  for (size_t k = 0; k < n; ++k) std::memcpy(&words[k], &ptrs[k], sizeof(char*));
  for (size_t d = 0; d < ndim; ++d)
    for (size_t k = 0; k < n; ++k) words[n + d * n + k] = strides[d * n + k];
  const size_t size_at = n + kDims * n;
  for (size_t d = 0; d < ndim; ++d) words[size_at + d] = sizes[d];
  words[size_at + kDims] = static_cast<int64_t>(ndim);
  words[size_at + kDims + 1] = numel;
  return words;
}

void launch(const void* function, Device device, int64_t blocks, int64_t threads, void** args) {
  const int index = device.index();
  DeviceGuard guard(index);
  check(cudaLaunchKernel(function, dim3(static_cast<unsigned>(blocks)),
                         dim3(static_cast<unsigned>(threads)), args, 0,
                         static_cast<cudaStream_t>(current_stream_handle(index))),
        "generated kernel launch");
}

// A pointwise kernel's grid: a thread per element, up to 32 blocks a
// multiprocessor, which then loop over the rest.
constexpr int64_t kPointwiseThreads = 256;
int64_t pointwise_blocks(Device device, int64_t numel) {
  return std::min<int64_t>((numel + kPointwiseThreads - 1) / kPointwiseThreads,
                           int64_t{32} * multiprocessors(device.index()));
}

void launch_pointwise(const void* function, Device device, std::span<char* const> ptrs,
                      std::span<const int64_t> sizes, std::span<const int64_t> strides,
                      int64_t numel) {
  PointwiseWords words = pointwise_words(ptrs, sizes, strides, numel);
  if (numel == 0) return;
  void* args[] = {words.data()};
  launch(function, device, pointwise_blocks(device, numel), kPointwiseThreads, args);
}

// kiln_row_args (compiler/codegen/cuda_source.h).
struct RowArgs {
  const void* weight;
  const void* bias;
  int64_t rows, n, group;
  double eps;
};

int64_t row_blocks(const RowLaunch& rows) {
  const int64_t rows_per_block = kRowThreads / row_group(rows.n);
  return (rows.rows + rows_per_block - 1) / rows_per_block;
}

void launch_rows(const void* function, Device device, std::span<char* const> ptrs,
                 std::span<const int64_t> sizes, std::span<const int64_t> strides, int64_t numel,
                 const RowLaunch& rows) {
  static_assert(DeviceCodegen::kRowThreads == kRowThreads);
  PointwiseWords words = pointwise_words(ptrs, sizes, strides, numel);
  if (rows.rows == 0 || rows.n == 0) return;
  // The library's lanes per row (row_group.h): the same order of reduction.
  RowArgs row_args{rows.weight, rows.bias, rows.rows, rows.n, row_group(rows.n), rows.eps};
  void* args[] = {words.data(), &row_args};
  launch(function, device, row_blocks(rows), kRowThreads, args);
}

std::string describe_launch(Device device, int64_t numel, const RowLaunch* rows) {
  if (!rows)
    return detail::str_cat(pointwise_blocks(device, numel), " blocks of ", kPointwiseThreads,
                           " threads over ", numel,
                           " elements (at most 32 blocks a multiprocessor, "
                           "each thread looping over the rest)");
  const int group = row_group(rows->n);
  return detail::str_cat(row_blocks(*rows), " blocks of ", kRowThreads, " threads: ", rows->rows,
                         " rows of ", rows->n, " elements, ", group, " lanes a row");
}

}  // namespace

std::vector<std::string> nvrtc_options(const std::string& arch) {
  return {"--gpu-architecture=" + arch, "--fmad=false", "-std=c++17"};
}

std::string nvrtc_version() {
  int major = 0, minor = 0;
  nvrtcVersion(&major, &minor);
  return detail::str_cat(major, ".", minor);
}

std::optional<std::string> nvrtc_compile(const std::string& source, const std::string& arch,
                                         std::string& why) {
  nvrtcProgram program = nullptr;
  if (const nvrtcResult r =
          nvrtcCreateProgram(&program, source.c_str(), "kiln_kernels.cu", 0, nullptr, nullptr);
      r != NVRTC_SUCCESS) {
    why = "NVRTC: " + nvrtc_error(r);
    return std::nullopt;
  }
  const std::unique_ptr<nvrtcProgram, void (*)(nvrtcProgram*)> owner(
      &program, [](nvrtcProgram* p) { nvrtcDestroyProgram(p); });
  const std::vector<std::string> options = nvrtc_options(arch);
  std::vector<const char*> argv;
  for (const std::string& o : options) argv.push_back(o.c_str());
  const nvrtcResult compiled =
      nvrtcCompileProgram(program, static_cast<int>(argv.size()), argv.data());
  if (compiled != NVRTC_SUCCESS) {
    size_t size = 0;
    nvrtcGetProgramLogSize(program, &size);
    std::string log(size, '\0');
    if (size > 0) nvrtcGetProgramLog(program, log.data());
    if (log.size() > 4000) log = log.substr(0, 4000) + "\n...";
    why = detail::str_cat("NVRTC refused the source (", nvrtc_error(compiled), "):\n", log);
    return std::nullopt;
  }
  const bool cubin = arch.rfind("sm_", 0) == 0;
  size_t size = 0;
  std::string out;
  if (cubin) {
    nvrtcGetCUBINSize(program, &size);
    out.resize(size);
    nvrtcGetCUBIN(program, out.data());
  } else {
    nvrtcGetPTXSize(program, &size);
    out.resize(size);
    nvrtcGetPTX(program, out.data());
  }
  return out;
}

void register_cuda_codegen() {
  DeviceCodegen codegen;
  codegen.load = load;
  codegen.launch_pointwise = launch_pointwise;
  codegen.launch_rows = launch_rows;
  codegen.describe_launch = describe_launch;
  register_device_codegen(DeviceKind::CUDA, codegen);
}

}  // namespace kiln::backend::cuda
