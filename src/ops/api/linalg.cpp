// The public matrix products and Tensor::matmul.
#include "kiln/ops/linalg.h"

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

Tensor linear(const Tensor& input, const Tensor& weight, const Tensor& bias) {
  return dispatch1(OpId::linear, {input, weight, bias});
}

Tensor Tensor::matmul(const Tensor& other) const { return kiln::matmul(*this, other); }

}  // namespace kiln
