// The layouts of the CPU reduction engine and the registration of the reduce,
// scan and softmax kernels.
#include <algorithm>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/reduce_engine.h"

namespace kiln::backend {
namespace {

// The longest row a reduction gathers (a buffer that stays in a core's
// cache); a longer one is copied with the rest of the input.
constexpr int64_t kGatheredRowBytes = int64_t{4} << 20;

struct DimInfo {
  int64_t size, stride, dim;
  bool reduced;
};

// Tries to see x as a dense block in memory where the reduced dims are adjacent
// and the kept dims keep their order: then no copy is needed.
bool strided_reduce_view(const Tensor& x, const std::vector<bool>& is_reduced, bool ordered,
                         ReduceView& v) {
  std::vector<DimInfo> ds;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (x.sizes()[d] != 1) ds.push_back({x.sizes()[d], x.strides()[d], d, is_reduced[d]});
  }
  std::stable_sort(ds.begin(), ds.end(),
                   [](const DimInfo& a, const DimInfo& b) { return a.stride > b.stride; });
  int64_t expected = 1;
  for (size_t k = ds.size(); k-- > 0;) {
    if (ds[k].stride != expected) return false;
    expected *= ds[k].size;
  }
  int64_t last_kept = -1, last_reduced = -1;
  size_t block_begin = ds.size(), block_end = ds.size();
  for (size_t k = 0; k < ds.size(); ++k) {
    int64_t& last = ds[k].reduced ? last_reduced : last_kept;
    if (ds[k].dim < last && (!ds[k].reduced || ordered)) return false;
    last = ds[k].dim;
    if (!ds[k].reduced) continue;
    if (block_begin == ds.size()) block_begin = k;
    else if (block_end != k) return false;  // a second block of reduced dims
    block_end = k + 1;
  }
  v.outer = v.reduced = v.inner = 1;
  for (size_t k = 0; k < ds.size(); ++k) {
    (k < block_begin ? v.outer : k < block_end ? v.reduced : v.inner) *= ds[k].size;
  }
  v.data = static_cast<const char*>(x.data_ptr());
  return true;
}

}  // namespace

ReduceView make_reduce_view(const Tensor& x, const std::vector<int64_t>& dims, bool ordered,
                            bool gather) {
  std::vector<bool> is_reduced(x.dim(), false);
  for (int64_t d : dims) is_reduced[d] = true;
  ReduceView v;
  if (x.numel() == 0) {  // no data to view: only the counts matter
    for (int64_t d = 0; d < x.dim(); ++d) (is_reduced[d] ? v.reduced : v.outer) *= x.sizes()[d];
    return v;
  }
  if (strided_reduce_view(x, is_reduced, ordered, v)) return v;
  // Kept dims first, reduced dims last, copied into that order.
  Shape perm;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (!is_reduced[d]) perm.push_back(d);
  for (int64_t d : dims) perm.push_back(d);
  int64_t reduced = 1;
  for (int64_t d : dims) reduced *= x.sizes()[d];
  if (gather && x.device().is_cpu() &&
      reduced * static_cast<int64_t>(x.element_size()) <= kGatheredRowBytes) {
    // Each row gathered as the engine folds it: dims of size 1 left out.
    for (int64_t d : perm) {
      if (x.sizes()[d] == 1) continue;
      v.gather_sizes.push_back(x.sizes()[d]);
      v.gather_strides.push_back(x.strides()[d]);
    }
    v.data = static_cast<const char*>(x.data_ptr());
    v.outer = x.numel() / reduced;
    v.reduced = reduced;
    v.inner = 1;
    return v;
  }
  v.holder = x.permute(perm).contiguous();
  v.data = static_cast<const char*>(v.holder.data_ptr());
  v.outer = v.reduced = v.inner = 1;
  for (int64_t d = 0; d < x.dim(); ++d) (is_reduced[d] ? v.reduced : v.outer) *= x.sizes()[d];
  return v;
}

ReduceView make_line_view(const Tensor& x, int64_t dim) {
  ReduceView v;
  v.holder = x.contiguous();
  v.data = x.numel() == 0 ? nullptr : static_cast<const char*>(v.holder.data_ptr());
  for (int64_t d = 0; d < x.dim(); ++d) {
    (d < dim ? v.outer : d == dim ? v.reduced : v.inner) *= x.sizes()[d];
  }
  return v;
}

void register_cpu_reduce_kernels(KernelTable& table) {
  cpu::register_cpu_sum_kernels(table);
  cpu::register_cpu_extreme_kernels(table);
  cpu::register_cpu_scan_kernels(table);
  cpu::register_cpu_softmax_kernels(table);
  cpu::register_cpu_sort_kernels(table);
}

}  // namespace kiln::backend
