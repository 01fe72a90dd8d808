// Reductions, cumsum and softmax, with PyTorch's semantics.
//
//   auto x = kiln::randn({4, 5});
//   auto rows = kiln::sum(x, {1});                        // shape [4]
//   auto m = kiln::mean(x, {0, 1}, /*keepdim=*/true);     // shape [1, 1]
//   auto [values, indices] = kiln::max(x, 1);             // per-row max and its position
//   auto sd = kiln::stddev(x, {}, /*correction=*/0);      // population std of all elements
//   auto p = kiln::softmax(x, -1);
//
// An empty `dims` reduces over every dim; keepdim keeps reduced dims as size 1.
// Sums, products and cumsum of integer or bool tensors give int64 unless a dtype
// is given; `dtype` casts the input before reducing. max/min/arg* of zero
// elements throw IndexError; NaN counts as the largest and the smallest value.
// The standard deviation is named `stddev`: a function kiln::std would read as
// the std namespace in code inside namespace kiln.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "kiln/tensor.h"

namespace kiln {

using Dims = std::vector<int64_t>;

Tensor sum(const Tensor& x);
Tensor sum(const Tensor& x, const Dims& dims, bool keepdim = false,
           std::optional<DType> dtype = std::nullopt);
// Floating inputs, or a floating dtype to cast to; the mean of nothing is NaN.
Tensor mean(const Tensor& x);
Tensor mean(const Tensor& x, const Dims& dims, bool keepdim = false,
            std::optional<DType> dtype = std::nullopt);
Tensor prod(const Tensor& x, const Dims& dims = {}, bool keepdim = false,
            std::optional<DType> dtype = std::nullopt);

// The largest / smallest values, in x's dtype.
Tensor amax(const Tensor& x, const Dims& dims = {}, bool keepdim = false);
Tensor amin(const Tensor& x, const Dims& dims = {}, bool keepdim = false);
Tensor max(const Tensor& x);  // amax over all elements
Tensor min(const Tensor& x);

// The values along dim and their int64 positions (the first of equal ones).
struct ValuesIndices {
  Tensor values, indices;
};
ValuesIndices max(const Tensor& x, int64_t dim, bool keepdim = false);
ValuesIndices min(const Tensor& x, int64_t dim, bool keepdim = false);
// Without dim, the position in the flattened tensor.
Tensor argmax(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);
Tensor argmin(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);

// Floating inputs; divides by max(0, N - correction) (1: unbiased, 0: population).
Tensor var(const Tensor& x, const Dims& dims = {}, double correction = 1, bool keepdim = false);
Tensor stddev(const Tensor& x, const Dims& dims = {}, double correction = 1,
              bool keepdim = false);
// The vector p-norm of floating inputs: p = 2, 1, 0 (count of nonzeros), any other
// p, and +-infinity (max / min of |x|).
Tensor norm(const Tensor& x, double p = 2, const Dims& dims = {}, bool keepdim = false);
// log(sum(exp(x))) computed without overflow; integers are promoted to float32.
Tensor logsumexp(const Tensor& x, const Dims& dims, bool keepdim = false);

// Whether any / all elements are nonzero; any dtype in, bool out.
Tensor any(const Tensor& x, const Dims& dims = {}, bool keepdim = false);
Tensor all(const Tensor& x, const Dims& dims = {}, bool keepdim = false);

Tensor cumsum(const Tensor& x, int64_t dim, std::optional<DType> dtype = std::nullopt);
// The running product along dim (integers and bool give int64 unless a dtype
// is given), composed of log2(n) products of shifted halves, so that its
// gradient is exact where x has zeros.
Tensor cumprod(const Tensor& x, int64_t dim, std::optional<DType> dtype = std::nullopt);

// The values along dim in ascending (descending) order and the indices they
// came from, NaN above every number. The sort is always stable: equal values
// keep their order (`stable` is PyTorch's argument, kept for ports).
ValuesIndices sort(const Tensor& x, int64_t dim = -1, bool descending = false, bool stable = false);
// sort's indices.
Tensor argsort(const Tensor& x, int64_t dim = -1, bool descending = false, bool stable = false);
// The k largest (smallest) values along dim, in order, and their indices; of
// equal values the first ones. Results are always sorted (`sorted` is
// PyTorch's argument, kept for ports).
ValuesIndices topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true,
                   bool sorted = true);
// Over one dim of a floating tensor; a row of all -inf gives NaN, as PyTorch.
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);

}  // namespace kiln
