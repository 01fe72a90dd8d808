// The elementwise engine of the CPU backend: walks an output and its inputs
// (broadcast, any strides) as 1-D runs, coalescing dims so that contiguous
// tensors become one run, split across OpenMP threads when large enough.
#pragma once

#include <omp.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <span>
#include <tuple>
#include <utility>
#include <vector>

#include "kiln/tensor.h"

namespace kiln::backend::cpu {

// Below this many elements a loop stays on the calling thread.
inline constexpr int64_t kParallelGrain = 32768;

// Runs body(begin, end) over [0, n) in parallel chunks of at least grain.
template <typename F>
void parallel_for(int64_t n, int64_t grain, F&& body) {
  if (n <= 0) return;
  if (n <= grain || omp_in_parallel() || omp_get_max_threads() == 1) {
    body(int64_t{0}, n);
    return;
  }
  const int64_t max_chunks = (n + grain - 1) / grain;
  // Always the full team, the surplus threads idle: with a num_threads clause
  // that changed from one region to the next (as oneDNN's regions use the full
  // team), libgomp's thread pool made small ops in a model far slower than
  // alone (16-core Xeon: a BERT layer_norm 540 us between GEMMs, 12 us alone;
  // 18 us in the model with the full team).
#pragma omp parallel
  {
    const int64_t threads = std::min<int64_t>(omp_get_num_threads(), max_chunks);
    const int64_t tid = omp_get_thread_num();
    const int64_t chunk = (n + threads - 1) / threads;
    const int64_t begin = tid * chunk;
    const int64_t end = std::min(n, begin + chunk);
    if (tid < threads && begin < end) body(begin, end);
  }
}

class ElementwiseIter {
 public:
  static constexpr int kMaxOperands = 4;

  // The output first, then the inputs, each broadcast to the output's shape.
  ElementwiseIter(const Tensor& out, std::span<const Tensor> inputs);

  int64_t numel() const noexcept { return numel_; }
  int ntensors() const noexcept { return ntensors_; }

  // loop(char** ptrs, const int64_t* byte_strides, int64_t n) for each 1-D run in [begin, end).
  template <typename Loop>
  void for_range(int64_t begin, int64_t end, Loop&& loop) const {
    const int nd = static_cast<int>(sizes_.size());
    std::vector<int64_t> idx(nd);
    int64_t rem = begin;
    for (int d = nd - 1; d >= 0; --d) {
      idx[d] = rem % sizes_[d];
      rem /= sizes_[d];
    }
    std::array<char*, kMaxOperands> ptrs{};
    std::array<int64_t, kMaxOperands> inner{};
    for (int k = 0; k < ntensors_; ++k) inner[k] = strides_[nd - 1][k];
    int64_t pos = begin;
    while (pos < end) {
      for (int k = 0; k < ntensors_; ++k) {
        char* p = base_[k];
        for (int d = 0; d < nd; ++d) p += idx[d] * strides_[d][k];
        ptrs[k] = p;
      }
      const int64_t n = std::min(sizes_[nd - 1] - idx[nd - 1], end - pos);
      loop(ptrs.data(), inner.data(), n);
      pos += n;
      idx[nd - 1] += n;
      for (int d = nd - 1; d > 0 && idx[d] == sizes_[d]; --d) {
        idx[d] = 0;
        ++idx[d - 1];
      }
    }
  }

  template <typename Loop>
  void for_each(Loop&& loop, int64_t grain = kParallelGrain) const {
    parallel_for(numel_, grain, [&](int64_t b, int64_t e) { for_range(b, e, loop); });
  }

 private:
  int ntensors_ = 0;
  int64_t numel_ = 0;
  std::vector<int64_t> sizes_;                                // outer to inner, coalesced
  std::vector<std::array<int64_t, kMaxOperands>> strides_;  // bytes, per dim and operand
  std::array<char*, kMaxOperands> base_{};
};

// Applies f to every element: out = f(in...). Contiguous and broadcast-scalar
// runs get plain loops the compiler vectorizes.
template <typename Out, typename... In, typename F>
void map_elements(const ElementwiseIter& it, F f, int64_t grain = kParallelGrain) {
  constexpr int N = sizeof...(In);
  it.for_each(
      [&](char** p, const int64_t* s, int64_t n) {
        Out* o = reinterpret_cast<Out*>(p[0]);
        bool contiguous = s[0] == sizeof(Out);
        int k = 1;
        ((contiguous = contiguous && s[k++] == sizeof(In)), ...);
        if (contiguous) {
          [&]<size_t... I>(std::index_sequence<I...>) {
            auto in = std::make_tuple(reinterpret_cast<const In*>(p[I + 1])...);
            (void)in;  // unused when there are no inputs (fill)
            for (int64_t i = 0; i < n; ++i) o[i] = f(std::get<I>(in)[i]...);
          }(std::make_index_sequence<N>{});
          return;
        }
        if constexpr (N == 2) {  // tensor (op) broadcast scalar, the common mixed case
          using A = std::tuple_element_t<0, std::tuple<In...>>;
          using B = std::tuple_element_t<1, std::tuple<In...>>;
          if (s[0] == sizeof(Out) && s[1] == sizeof(A) && s[2] == 0) {
            const A* a = reinterpret_cast<const A*>(p[1]);
            const B b = *reinterpret_cast<const B*>(p[2]);
            for (int64_t i = 0; i < n; ++i) o[i] = f(a[i], b);
            return;
          }
          if (s[0] == sizeof(Out) && s[1] == 0 && s[2] == sizeof(B)) {
            const A a = *reinterpret_cast<const A*>(p[1]);
            const B* b = reinterpret_cast<const B*>(p[2]);
            for (int64_t i = 0; i < n; ++i) o[i] = f(a, b[i]);
            return;
          }
        }
        [&]<size_t... I>(std::index_sequence<I...>) {
          for (int64_t i = 0; i < n; ++i) {
            *reinterpret_cast<Out*>(p[0] + i * s[0]) =
                f(*reinterpret_cast<const In*>(p[I + 1] + i * s[I + 1])...);
          }
        }(std::make_index_sequence<N>{});
      },
      grain);
}

}  // namespace kiln::backend::cpu
