// CPU kernels of embedding, dropout and nll_loss, and the registration of the
// network-op groups (norm.cpp, attention.cpp, resample.cpp).
#include "backends/cpu/nn.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/loops.h"
#include "backends/cpu/scalar_ops.h"
#include "core/philox.h"

namespace kiln::backend {
namespace cpu {
namespace {

using ops::OpId;

// Embedding indices as int64 values, checked against [0, v) on the calling thread.
template <typename I>
std::vector<int64_t> checked_indices(const Tensor& indices, int64_t v) {
  const Tensor t = indices.contiguous();
  const I* p = t.data<I>();
  std::vector<int64_t> out(p, p + t.numel());
  for (int64_t idx : out) {
    if (idx < 0 || idx >= v) {
      throw IndexError(
          detail::str_cat("embedding: index ", idx, " is out of range for ", v, " embeddings"));
    }
  }
  return out;
}

void embedding(const KernelCall& c) {
  const Tensor weight = c.in(0).contiguous();
  const int64_t v = weight.size(0);
  const auto indices = c.in(1).dtype() == kInt64 ? checked_indices<int64_t>(c.in(1), v)
                                                 : checked_indices<int32_t>(c.in(1), v);
  const size_t row = static_cast<size_t>(weight.size(1)) * weight.element_size();
  const char* pw = static_cast<const char*>(weight.data_ptr());
  char* py = static_cast<char*>(c.out().data_ptr());
  const int64_t n = static_cast<int64_t>(indices.size());
  parallel_for(n, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(weight.size(1), 1)),
               [&](int64_t i0, int64_t i1) {
                 for (int64_t i = i0; i < i1; ++i)
                   std::memcpy(py + i * row, pw + indices[i] * row, row);
               });
}

template <typename T>
void dropout(const KernelCall& c) {
  using C = compute_t<T>;
  const Tensor x = c.in(0).contiguous();
  const double p = c.attrs.f(0);
  const auto seed = static_cast<uint64_t>(c.attrs.i(1));
  const auto offset = static_cast<uint64_t>(c.attrs.i(2));
  const C scale = scalar::dropout_scale<C>(p);
  const uint32_t threshold = scalar::dropout_threshold(p);
  const T* px = x.data<T>();
  T* py = c.out().data<T>();
  // Element i keeps iff philox::uniform_f32(seed, offset + i) >= p
  // (scalar::dropout), its bits made a block of elements at a time.
  parallel_for(x.numel(), kParallelGrain / 4, [&](int64_t i0, int64_t i1) {
    constexpr int64_t kBlock = 256;
    uint32_t bits[kBlock];
    for (int64_t i = i0; i < i1; i += kBlock) {
      const int64_t m = std::min(kBlock, i1 - i);
      philox::u32s(seed, offset + static_cast<uint64_t>(i), m, bits);
      for (int64_t k = 0; k < m; ++k)
        py[i + k] =
            static_cast<T>(scalar::dropout(static_cast<C>(px[i + k]), bits[k], threshold, scale));
    }
  });
}

template <typename T>
void nll_loss(const KernelCall& c) {
  using C = compute_t<T>;
  const Tensor x = c.in(0).contiguous();
  const int64_t classes = x.size(x.dim() == 1 ? 0 : 1);
  const int64_t inner = x.dim() <= 2 ? 1 : x.numel() / std::max<int64_t>(x.size(0) * classes, 1);
  const int64_t ignore = c.attrs.i(0);
  const Tensor target = c.in(1).contiguous();
  const int64_t* pt = target.data<int64_t>();
  const int64_t n = target.numel();
  for (int64_t i = 0; i < n; ++i) {
    if (pt[i] != ignore && (pt[i] < 0 || pt[i] >= classes)) {
      throw IndexError(detail::str_cat("nll_loss: target ", pt[i], " is out of range for ", classes,
                                       " classes"));
    }
  }
  const bool weighted = c.inputs.size() > 2 && c.in(2).defined();
  const Tensor w = weighted ? c.in(2).contiguous() : Tensor();
  const C* pw = weighted ? w.data<C>() : nullptr;
  const T* px = x.data<T>();
  // The loss of target i and its weight (0 for ignored targets).
  auto term = [&](int64_t i, C& weight) -> C {
    const int64_t t = pt[i];
    weight = t == ignore ? C(0) : (pw ? pw[t] : C(1));
    if (t == ignore) return C(0);
    return -weight * static_cast<C>(px[((i / inner) * classes + t) * inner + i % inner]);
  };
  T* py = c.out().data<T>();
  const std::string& reduction = c.attrs.str(1);
  if (reduction == "none") {
    parallel_for(n, kParallelGrain, [&](int64_t i0, int64_t i1) {
      C weight;
      for (int64_t i = i0; i < i1; ++i) py[i] = static_cast<T>(term(i, weight));
    });
    return;
  }
  double total = 0, weight_sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    C weight;
    total += static_cast<double>(term(i, weight));
    weight_sum += static_cast<double>(weight);
  }
  // mean over no counted targets is 0 / 0 = NaN, as PyTorch.
  py[0] = static_cast<T>(reduction == "sum" ? total : total / weight_sum);
}

}  // namespace
}  // namespace cpu

void register_cpu_nn_kernels(KernelTable& t) {
  using ops::OpId;
  cpu::register_cpu_norm_kernels(t);
  cpu::register_cpu_attention_kernels(t);
  cpu::register_cpu_resample_kernels(t);
  cpu::register_cpu_rnn_kernels(t);
  cpu::register_cpu_lstm_cell_kernel(t);
  t.set(OpId::embedding, cpu::embedding);
  t.set(OpId::dropout, [](const KernelCall& c) {
    cpu::visit_floating(c.out().dtype(), [&]<typename T>() { cpu::dropout<T>(c); });
  });
  t.set(OpId::nll_loss, [](const KernelCall& c) {
    cpu::visit_floating(c.out().dtype(), [&]<typename T>() { cpu::nll_loss<T>(c); });
  });
}

}  // namespace kiln::backend
