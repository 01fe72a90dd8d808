// Matrix products, with PyTorch's semantics and broadcasting.
//
//   auto y = kiln::matmul(x, w);                 // [8, 16] @ [16, 4] -> [8, 4]
//   auto d = kiln::matmul(v, v);                 // 1-D @ 1-D -> 0-dim dot product
//   auto b = kiln::matmul(batch, w);             // [2, 8, 16] @ [16, 4] -> [2, 8, 4]
//   auto z = kiln::addmm(bias, x, w, 1.0, 0.5);  // bias + 0.5 * (x @ w)
//   auto h = kiln::linear(x, weight, bias);      // x @ weight^T + bias
//
// Both operands must have the same floating dtype (float32, float64, float16 or
// bfloat16); anything else throws DTypeError, a shape mismatch ShapeError.
#pragma once

#include <string_view>
#include <vector>

#include "kiln/tensor.h"

namespace kiln {

// 1-D operands gain a dim for the product (prepended for a, appended for b)
// that is removed after; dims before the last two broadcast.
Tensor matmul(const Tensor& a, const Tensor& b);
// [B, M, K] @ [B, K, N] -> [B, M, N], no broadcasting.
Tensor bmm(const Tensor& a, const Tensor& b);
// beta * self + alpha * (mat1 @ mat2); self broadcasts to [M, N]. With beta = 0,
// self is ignored (NaNs in it do not propagate).
Tensor addmm(const Tensor& self, const Tensor& mat1, const Tensor& mat2, Scalar beta = 1,
             Scalar alpha = 1);
// beta * self + alpha * bmm(batch1, batch2); self broadcasts to [B, M, N].
// With beta = 0, self is ignored (NaNs in it do not propagate).
Tensor baddbmm(const Tensor& self, const Tensor& batch1, const Tensor& batch2, Scalar beta = 1,
               Scalar alpha = 1);
// Einstein summation, as torch.einsum: "ij,jk->ik", "bhqd,bhkd->bhqk",
// "ii->i" (a diagonal), "...ij->...ji", or without "->" the labels used once
// in alphabetical order. Floating operands (the products are matmuls).
Tensor einsum(std::string_view equation, const std::vector<Tensor>& operands);
// a [M] and b [N] -> [M, N], a[i] * b[j].
Tensor outer(const Tensor& a, const Tensor& b);
// input [..., in] @ weight[out, in]^T (+ bias [out]) -> [..., out].
Tensor linear(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor());

}  // namespace kiln
