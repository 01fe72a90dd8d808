#include "backends/cpu/loops.h"

#include <cassert>

namespace kiln::backend::cpu {

ElementwiseIter::ElementwiseIter(const Tensor& out, std::span<const Tensor> inputs) {
  ntensors_ = static_cast<int>(inputs.size()) + 1;
  assert(ntensors_ <= kMaxOperands);
  const Shape& shape = out.sizes();
  const int nd = static_cast<int>(shape.size());
  numel_ = out.numel();

  std::vector<std::array<int64_t, kMaxOperands>> strides(nd);
  auto add_operand = [&](int k, const Tensor& t) {
    base_[k] = static_cast<char*>(t.data_ptr());
    const int64_t es = static_cast<int64_t>(t.element_size());
    const int offset = nd - static_cast<int>(t.dim());
    assert(offset >= 0);
    for (int d = 0; d < nd; ++d) {
      // A dim of one element never steps, nor does one of none (there is no
      // element at all): their strides, which may be anything, are not read.
      const bool present = d >= offset && t.sizes()[d - offset] > 1;
      strides[d][k] = present ? t.strides()[d - offset] * es : 0;
    }
  };
  add_operand(0, out);
  for (size_t i = 0; i < inputs.size(); ++i) add_operand(static_cast<int>(i) + 1, inputs[i]);

  if (numel_ == 0) {  // nothing to visit (and the other sizes may multiply past int64)
    sizes_.assign(1, 0);
    strides_.assign(1, {});
    return;
  }
  // Drop size-1 dims and merge a dim into its inner neighbour when every operand
  // steps through both as one.
  for (int d = 0; d < nd; ++d) {
    if (shape[d] == 1) continue;
    if (!sizes_.empty()) {
      auto& inner = strides[d];
      auto& prev = strides_.back();
      bool mergeable = true;
      for (int k = 0; k < ntensors_; ++k) mergeable = mergeable && prev[k] == inner[k] * shape[d];
      if (mergeable) {
        sizes_.back() *= shape[d];
        prev = inner;
        continue;
      }
    }
    sizes_.push_back(shape[d]);
    strides_.push_back(strides[d]);
  }
  if (sizes_.empty()) {
    sizes_.push_back(1);
    strides_.push_back({});
  }
}

}  // namespace kiln::backend::cpu
