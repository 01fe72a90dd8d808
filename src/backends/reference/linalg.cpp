// Reference kernels of the matrix products: the textbook triple loop in double,
// reading operands through their strides, broadcasting batch dims by index.
#include "backends/reference/ref_util.h"
#include "backends/reference/reference.h"
#include "core/shape_util.h"

namespace kiln::backend {
namespace {

using ops::OpId;

// out[b..., i, j] = alpha * sum_k a[b..., i, k] * b[b..., k, j] + beta * add[b..., i, j].
// a, b and add broadcast over the batch dims (right-aligned, size-1 dims read index 0);
// out is viewed with the full batch shape. add is skipped when undefined or beta is 0.
void product(const Tensor& out, const Tensor& a, const Tensor& b, double alpha, double beta,
             const Tensor& add) {
  const int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  const Shape batch_a(a.sizes().begin(), a.sizes().end() - 2);
  const Shape batch_b(b.sizes().begin(), b.sizes().end() - 2);
  Shape full = broadcast_pair(batch_a, batch_b, "matmul");
  full.push_back(m);
  full.push_back(n);
  const Tensor o = out.view(full);
  ref::for_each_index(full, [&](const std::vector<int64_t>& idx) {
    std::vector<int64_t> ia = idx, ib = idx;
    const size_t r = idx.size() - 2, c = idx.size() - 1;
    double sum = 0;
    for (int64_t p = 0; p < k; ++p) {
      ia[c] = p;
      ib[r] = p;
      sum += ref::read<double>(a, ref::offset_of(a, ia)) * ref::read<double>(b, ref::offset_of(b, ib));
    }
    double value = alpha * sum;
    if (add.defined() && beta != 0) value += beta * ref::read<double>(add, ref::offset_of(add, idx));
    ref::write(o, ref::offset_of(o, idx), value);
  });
}

void matmul_kernel(const KernelCall& c) {
  // 1-D operands become a row (left) or a column (right); out's shape drops them again.
  const Tensor a = c.in(0).dim() == 1 ? c.in(0).unsqueeze(0) : c.in(0);
  const Tensor b = c.in(1).dim() == 1 ? c.in(1).unsqueeze(1) : c.in(1);
  product(c.out(), a, b, 1, 0, Tensor());
}

}  // namespace

void register_reference_linalg_kernels(KernelTable& t) {
  t.set(OpId::matmul, matmul_kernel);
  t.set(OpId::bmm, [](const KernelCall& c) { product(c.out(), c.in(0), c.in(1), 1, 0, Tensor()); });
  t.set(OpId::addmm, [](const KernelCall& c) {
    product(c.out(), c.in(1), c.in(2), c.attrs.scalar(1).to_double(),
            c.attrs.scalar(0).to_double(), c.in(0));
  });
  t.set(OpId::linear, [](const KernelCall& c) {
    const Tensor& x = c.in(0);
    const Tensor a = x.dim() == 1 ? x.unsqueeze(0) : x;
    const Tensor bias = c.inputs.size() > 2 ? c.in(2) : Tensor();
    product(c.out(), a, c.in(1).t(), 1, 1, bias);
  });
}

}  // namespace kiln::backend
