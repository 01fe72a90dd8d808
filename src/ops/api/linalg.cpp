// The public matrix products and Tensor::matmul.
#include "kiln/ops/linalg.h"

#include "kiln/ops/pointwise.h"
#include "kiln/ops/shape.h"

#include "ops/dispatch.h"

namespace kiln {

using ops::dispatch1;
using ops::OpId;

Tensor matmul(const Tensor& a, const Tensor& b) { return dispatch1(OpId::matmul, {a, b}); }

Tensor bmm(const Tensor& a, const Tensor& b) { return dispatch1(OpId::bmm, {a, b}); }

Tensor addmm(const Tensor& self, const Tensor& mat1, const Tensor& mat2, Scalar beta,
             Scalar alpha) {
  return dispatch1(OpId::addmm, {self, mat1, mat2}, {beta, alpha});
}

Tensor baddbmm(const Tensor& self, const Tensor& batch1, const Tensor& batch2, Scalar beta,
               Scalar alpha) {
  Tensor product = bmm(batch1, batch2);
  if (alpha.to_double() != 1) product = product * alpha;
  if (beta.to_double() == 0)  // self only lends its shape: NaNs in it do not propagate
    return product.expand(broadcast_shapes(self.sizes(), product.sizes(), "baddbmm")).clone();
  return beta.to_double() == 1 ? self + product : self * beta + product;
}

Tensor outer(const Tensor& a, const Tensor& b) {
  if (a.dim() != 1 || b.dim() != 1)
    throw ShapeError(
        detail::str_cat("outer: a and b must be 1-D, got shapes ", a.sizes(), " and ", b.sizes()));
  return a.unsqueeze(1) * b.unsqueeze(0);
}

Tensor linear(const Tensor& input, const Tensor& weight, const Tensor& bias) {
  return dispatch1(OpId::linear, {input, weight, bias});
}

Tensor Tensor::matmul(const Tensor& other) const { return kiln::matmul(*this, other); }

}  // namespace kiln
