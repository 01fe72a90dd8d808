// Host side of the CUDA elementwise engine: coalescing, 32-bit chunks, the
// choice of kernel.
#include <algorithm>
#include <cassert>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/elementwise.cuh"

namespace kiln::backend::cuda {
namespace {

constexpr int64_t kMaxIndex = (int64_t{1} << 31) - 1;

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

LaunchPlan plan_for(const Geometry& g) {
  LaunchPlan p;
  const int64_t n = g.numel();
  assert(n <= kMaxIndex);
  p.n = static_cast<uint32_t>(n);
  p.grid = static_cast<unsigned>((n + kBlockThreads * kItemsPerThread - 1) /
                                 (kBlockThreads * kItemsPerThread));
  p.ops.ndim = g.ndim;
  p.ops.imm_mask = g.imm_mask;
  for (int k = 0; k < g.ntensors; ++k) {
    p.ops.ptr[k] = g.ptr[k];
    p.ops.imm[k] = g.imm[k];
  }
  for (int d = 0; d < g.ndim; ++d) {
    p.ops.size[d] = IntDivider(static_cast<uint32_t>(g.sizes[d]));
    for (int k = 0; k < g.ntensors; ++k) p.ops.stride[d][k] = g.strides[d][k];
  }
  p.linear = g.ndim <= 1;
  if (p.linear) {
    bool vec = true;
    for (int k = 0; k < g.ntensors; ++k) {
      if (g.imm_mask & (1u << k)) continue;
      vec = vec && (g.ndim == 0 || g.strides[0][k] == 1) && aligned16(g.ptr[k]);
    }
    p.ops.vectorize = vec;
  }
  return p;
}

// Splits g along its outermost dims until every piece has fewer than 2^31
// elements and dims below 2^31.
void split(const Geometry& g, void (*launch)(const LaunchPlan&, void*), void* ctx) {
  if (g.numel() <= kMaxIndex) {
    launch(plan_for(g), ctx);
    return;
  }
  const int outer = g.ndim - 1;
  const int64_t inner = g.numel() / g.sizes[outer];
  if (inner > kMaxIndex || g.sizes[outer] > kMaxIndex) {
    // Chunks of the outer dim, or single slices when the inner part is large.
    const int64_t step = std::max<int64_t>(1, kMaxIndex / std::max<int64_t>(inner, 1));
    for (int64_t begin = 0; begin < g.sizes[outer]; begin += step) {
      Geometry piece = g;
      const int64_t len = std::min(step, g.sizes[outer] - begin);
      for (int k = 0; k < g.ntensors; ++k)
        if (!(g.imm_mask & (1u << k))) piece.ptr[k] += begin * g.strides[outer][k] * g.elsize[k];
      piece.sizes[outer] = len;
      if (len == 1 && outer > 0) piece.ndim = outer;  // drop the dim: a slice
      split(piece, launch, ctx);
    }
    return;
  }
  const int64_t step = kMaxIndex / inner;
  for (int64_t begin = 0; begin < g.sizes[outer]; begin += step) {
    Geometry piece = g;
    for (int k = 0; k < g.ntensors; ++k)
      if (!(g.imm_mask & (1u << k))) piece.ptr[k] += begin * g.strides[outer][k] * g.elsize[k];
    piece.sizes[outer] = std::min(step, g.sizes[outer] - begin);
    launch(plan_for(piece), ctx);
  }
}

}  // namespace

Geometry make_geometry(const Tensor& out, std::span<const Tensor> inputs) {
  Geometry g;
  g.ntensors = static_cast<int>(inputs.size()) + 1;
  if (g.ntensors > kMaxOperands) {
    throw Error(detail::str_cat("cuda elementwise: ", inputs.size(), " inputs, at most ",
                                kMaxOperands - 1));
  }
  const Shape& shape = out.sizes();
  const int nd = static_cast<int>(shape.size());
  // Strides in elements per operand, outermost dim first as in the tensor.
  std::vector<std::array<int64_t, kMaxOperands>> strides(nd);
  auto add = [&](int k, const Tensor& t) {
    g.elsize[k] = static_cast<int64_t>(t.element_size());
    if (t.device().is_cpu()) {
      if (t.numel() != 1) {
        throw DeviceError(detail::str_cat("cuda elementwise: a CPU input of shape ", t.sizes(),
                                          " joins tensors on ", out.device(),
                                          "; only CPU scalars can"));
      }
      std::memcpy(&g.imm[k], t.data_ptr(), t.element_size());
      g.imm_mask |= 1u << k;
      return;
    }
    g.ptr[k] = static_cast<char*>(t.data_ptr());
    const int offset = nd - static_cast<int>(t.dim());
    for (int d = 0; d < nd; ++d) {
      const bool present = d >= offset && t.sizes()[d - offset] != 1;
      strides[d][k] = present ? t.strides()[d - offset] : 0;
    }
  };
  add(0, out);
  for (size_t i = 0; i < inputs.size(); ++i) add(static_cast<int>(i) + 1, inputs[i]);

  // Drop size-1 dims; merge a dim into its inner neighbour when every operand
  // steps through both as one. Collected outermost first, then reversed.
  std::vector<int64_t> sizes;
  std::vector<std::array<int64_t, kMaxOperands>> kept;
  for (int d = 0; d < nd; ++d) {
    if (shape[d] == 1) continue;
    if (!sizes.empty()) {
      auto& prev = kept.back();
      bool mergeable = true;
      for (int k = 0; k < g.ntensors; ++k)
        mergeable = mergeable && prev[k] == strides[d][k] * shape[d];
      if (mergeable) {
        sizes.back() *= shape[d];
        prev = strides[d];
        continue;
      }
    }
    sizes.push_back(shape[d]);
    kept.push_back(strides[d]);
  }
  if (static_cast<int>(sizes.size()) > kMaxDims) {
    throw Error(detail::str_cat("cuda elementwise: ", sizes.size(),
                                " dims that cannot be merged, at most ", kMaxDims,
                                "; make the inputs contiguous first"));
  }
  g.ndim = static_cast<int>(sizes.size());
  for (int d = 0; d < g.ndim; ++d) {
    g.sizes[d] = sizes[g.ndim - 1 - d];
    for (int k = 0; k < g.ntensors; ++k) g.strides[d][k] = kept[g.ndim - 1 - d][k];
  }
  return g;
}

void for_each_chunk(const Geometry& g, void (*launch)(const LaunchPlan&, void*), void* ctx) {
  split(g, launch, ctx);
}

cudaStream_t stream_for(const Tensor& out) {
  return static_cast<cudaStream_t>(current_stream_handle(out.device().index()));
}

void check_launch(const char* what) { check(cudaGetLastError(), what); }

}  // namespace kiln::backend::cuda
