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

std::vector<std::vector<int64_t>> blocked_offsets(const dnnl::memory::desc& desc) {
  const dnnl_memory_desc_t& d = desc.data;
  if (d.format_kind != dnnl_blocked || d.extra.flags != 0) return {};
  for (int k = 0; k < d.ndims; ++k)
    if (d.padded_offsets[k] != 0) return {};
  const dnnl_blocking_desc_t& b = d.format_desc.blocking;
  std::vector<std::vector<int64_t>> tables(static_cast<size_t>(d.ndims));
  for (int dim = 0; dim < d.ndims; ++dim) {
    // The dim's inner blocks, innermost last: index x's offset is its outer
    // block times the dim's stride, plus, for each inner block k of the dim,
    // its digit ((x / the dim's blocks after k) % block k) times the size of
    // all inner blocks after k.
    int64_t outer = 1;
    for (int k = 0; k < b.inner_nblks; ++k)
      if (b.inner_idxs[k] == dim) outer *= b.inner_blks[k];
    std::vector<int64_t>& t = tables[static_cast<size_t>(dim)];
    t.resize(static_cast<size_t>(d.dims[dim]));
    for (int64_t x = 0; x < d.dims[dim]; ++x) {
      int64_t offset = x / outer * b.strides[dim];
      int64_t after = 1, below = 1;  // inner blocks after k: all dims, this dim
      for (int k = b.inner_nblks - 1; k >= 0; --k) {
        if (b.inner_idxs[k] == dim) {
          offset += x / below % b.inner_blks[k] * after;
          below *= b.inner_blks[k];
        }
        after *= b.inner_blks[k];
      }
      t[static_cast<size_t>(x)] = offset;
    }
  }
  return tables;
}

dnnl::primitive_attr onednn_default_attr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

}  // namespace kiln::backend::cpu
