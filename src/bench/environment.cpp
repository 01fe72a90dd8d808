// kiln::bench::Environment::current: where a report's figures are measured.
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <fstream>
#include <thread>

#include <oneapi/dnnl/dnnl.h>

#include "kiln/bench.h"
#include "kiln/cuda.h"
#include "kiln/runtime.h"

#if KILN_WITH_CUDA
#include <cuda_runtime.h>
#endif
#if KILN_WITH_CUDNN
#include <cudnn.h>
#endif

namespace kiln::bench {
namespace {

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "unknown";
}

std::string utc_now() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// "12.4" from CUDA's 12040.
[[maybe_unused]] std::string cuda_version(int v) {
  return kiln::detail::str_cat(v / 1000, ".", (v % 1000) / 10);
}

}  // namespace

Environment Environment::current() {
  Environment e;
  e.kiln_version = version_string();
  const size_t commit = e.kiln_version.find("(commit ");
  if (commit != std::string::npos) {
    e.commit = e.kiln_version.substr(commit + 8, e.kiln_version.size() - commit - 9);
  }
  e.date = utc_now();
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) == 0) e.host = host;
  e.cpu = cpu_model();
  e.cpu_cores = static_cast<int64_t>(std::thread::hardware_concurrency());
  e.threads = get_num_threads();
  const dnnl_version_t* dnnl = dnnl_version();
  e.onednn = kiln::detail::str_cat(dnnl->major, ".", dnnl->minor, ".", dnnl->patch);
  const Tf32Policy tf32 = allow_tf32();
  e.precision = kiln::detail::str_cat("TF32 matmul ", tf32.matmul ? "on" : "off", ", conv ",
                                      tf32.conv ? "on" : "off");
#if KILN_WITH_CUDA
  if (cuda::is_available()) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) e.gpu = prop.name;
    int v = 0;
    if (cudaDriverGetVersion(&v) == cudaSuccess) e.driver = cuda_version(v);
    if (cudaRuntimeGetVersion(&v) == cudaSuccess) e.cuda = cuda_version(v);
#if KILN_WITH_CUDNN
    const size_t cudnn = cudnnGetVersion();
    e.cudnn = kiln::detail::str_cat(cudnn / 10000, ".", (cudnn % 10000) / 100, ".", cudnn % 100);
#endif
  }
#endif
  return e;
}

}  // namespace kiln::bench
