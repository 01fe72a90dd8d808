#include "backends/cpu/onednn_context.h"

#include <cstdlib>

#include "kiln/error.h"

namespace kiln::backend::cpu {
namespace {

struct FreeDeleter {
  void operator()(void* p) const noexcept { std::free(p); }
};

struct Scratchpad {
  std::unique_ptr<void, FreeDeleter> data;
  size_t nbytes = 0;
};

}  // namespace

const dnnl::engine& onednn_engine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::stream& onednn_stream() {
  thread_local dnnl::stream stream(onednn_engine());
  return stream;
}

void* onednn_scratchpad(size_t nbytes) {
  thread_local Scratchpad pad;
  if (nbytes > pad.nbytes) {
    constexpr size_t kAlign = 64;
    const size_t rounded = (nbytes + kAlign - 1) / kAlign * kAlign;
    pad.data.reset(std::aligned_alloc(kAlign, rounded));
    if (!pad.data) {
      pad.nbytes = 0;
      throw Error(detail::str_cat("onednn: out of memory allocating a ", nbytes, "-byte scratchpad"));
    }
    pad.nbytes = rounded;
  }
  return pad.data.get();
}

dnnl::memory reordered_copy(const dnnl::reorder& reorder, const dnnl::memory::desc& from,
                            const void* data, const dnnl::memory::desc& to) {
  const dnnl::engine& engine = onednn_engine();
  dnnl::memory src(from, engine, const_cast<void*>(data));
  dnnl::memory dst(to, engine);
  dnnl::stream& stream = onednn_stream();
  reorder.execute(stream, src, dst);
  stream.wait();
  return dst;
}

dnnl::primitive_attr onednn_default_attr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

}  // namespace kiln::backend::cpu
