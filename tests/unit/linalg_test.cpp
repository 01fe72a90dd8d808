// Semantics and error paths of matmul, bmm, addmm and linear.
#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "kiln/kiln.h"
#include "kiln/ops/linalg.h"
#include "backends/cpu/weight_cache.h"
#include "unit/expect_error.h"

using kiln::testing::expect_error;
using kiln::testing::expect_error_with;

namespace kiln {
namespace {

Tensor values(std::vector<float> v, Shape shape) { return from_vector(v, shape); }

TEST(Matmul, DotOfTwoVectorsIsZeroDim) {
  Tensor d = matmul(values({1, 2, 3}, {3}), values({4, 5, 6}, {3}));
  EXPECT_EQ(d.dim(), 0);
  EXPECT_FLOAT_EQ(d.item<float>(), 32.f);
}

TEST(Matmul, MultipliesMatricesByHand) {
  Tensor c = matmul(values({1, 2, 3, 4, 5, 6}, {2, 3}), values({7, 8, 9, 10, 11, 12}, {3, 2}));
  EXPECT_EQ(c.sizes(), (Shape{2, 2}));
  EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{58, 64, 139, 154}));
}

TEST(Matmul, VectorOperandsLoseTheirAddedDim) {
  Tensor m = values({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor left = matmul(values({1, 1}, {2}), m);
  EXPECT_EQ(left.sizes(), (Shape{3}));
  EXPECT_EQ(left.to_vector<float>(), (std::vector<float>{5, 7, 9}));
  Tensor right = matmul(m, values({1, 0, -1}, {3}));
  EXPECT_EQ(right.sizes(), (Shape{2}));
  EXPECT_EQ(right.to_vector<float>(), (std::vector<float>{-2, -2}));
}

TEST(Matmul, BroadcastsBatchDims) {
  Tensor a = ones({2, 1, 3, 4});
  Tensor b = ones({5, 4, 6});
  Tensor c = matmul(a, b);
  EXPECT_EQ(c.sizes(), (Shape{2, 5, 3, 6}));
  for (float v : c.to_vector<float>()) EXPECT_EQ(v, 4.f);
}

// linear reads its weight transposed; from 16 rows it goes through oneDNN's
// matmul primitive, below through sgemm: both agree with float64.
TEST(Linear, TransposedWeightPathsAgreeWithFloat64) {
  manual_seed(3);
  for (const int64_t rows : {1, 7, 16, 40, 300}) {
    const Tensor x = randn({rows, 72}), w = randn({33, 72}), b = randn({33});
    const Tensor want = linear(x.to(kFloat64), w.to(kFloat64), b.to(kFloat64));
    const double err = (linear(x, w, b).to(kFloat64) - want).abs().max().item<double>();
    EXPECT_LT(err, 1e-4 * want.abs().max().item<double>()) << rows << " rows";
    const double err_nobias = (linear(x, w).to(kFloat64) - (want - b.to(kFloat64))).abs().max().item<double>();
    EXPECT_LT(err_nobias, 1e-4 * want.abs().max().item<double>()) << rows << " rows, no bias";
  }
}

// Without gradient recording, linear multiplies by a copy of the weight in the
// layout oneDNN's matmul prefers, kept in the weight cache: the cache must
// follow in-place changes of the weight and hold one bounded copy per weight.
TEST(Linear, InferenceSeesInPlaceChangesOfACachedWeight) {
  backend::cpu::clear_weight_cache();
  manual_seed(4);
  Tensor x = randn({32, 300}), w = randn({256, 300}), b = randn({256});
  NoGradGuard no_grad;
  const Tensor want = matmul(x.to(kFloat64), w.to(kFloat64).t()) + b.to(kFloat64);
  const double scale = want.abs().max().item<double>();
  EXPECT_LT((linear(x, w, b).to(kFloat64) - want).abs().max().item<double>(), 1e-4 * scale);
  const size_t one_copy = backend::cpu::weight_cache_bytes();
  EXPECT_GE(one_copy, size_t{256 * 300 * 4});  // the copy, perhaps padded to the layout's blocks
  EXPECT_LT(one_copy, size_t{2 * 256 * 300 * 4});
  w.mul_(-2);  // bumps the version: the next call copies the new values
  const Tensor want2 = matmul(x.to(kFloat64), w.to(kFloat64).t()) + b.to(kFloat64);
  EXPECT_LT((linear(x, w, b).to(kFloat64) - want2).abs().max().item<double>(), 2e-4 * scale);
  EXPECT_EQ(backend::cpu::weight_cache_bytes(), one_copy);
  w = randn({256, 300});  // the old weight is gone; a new one takes its place
  const Tensor want3 = matmul(x.to(kFloat64), w.to(kFloat64).t()) + b.to(kFloat64);
  EXPECT_LT((linear(x, w, b).to(kFloat64) - want3).abs().max().item<double>(), 1e-4 * scale);
  EXPECT_EQ(backend::cpu::weight_cache_bytes(), one_copy);
  // Rows of a 3-d input, and no bias.
  const Tensor x3 = randn({2, 20, 300});
  const Tensor want4 = matmul(x3.to(kFloat64), w.to(kFloat64).t());
  EXPECT_LT((linear(x3, w).to(kFloat64) - want4).abs().max().item<double>(),
            1e-4 * want4.abs().max().item<double>());
  backend::cpu::clear_weight_cache();
  EXPECT_EQ(backend::cpu::weight_cache_bytes(), size_t{0});
  // empty_cache gives the copies back too (the next call makes them again).
  (void)linear(x, w, b);
  EXPECT_EQ(backend::cpu::weight_cache_bytes(), one_copy);
  empty_cache(Device::cpu());
  EXPECT_EQ(backend::cpu::weight_cache_bytes(), size_t{0});
}

// Under 16 rows, inference multiplies by a cached contiguous W^T with sgemm
// (the fast path for a short input: docs/benchmarks.md, "Size thresholds of
// the CPU backend"). Each row count agrees with float64, the cache holds the
// one copy for every count, and an in-place change of the weight is seen.
TEST(Linear, InferenceUnder16RowsUsesOneCachedTransposedWeight) {
  backend::cpu::clear_weight_cache();
  manual_seed(5);
  Tensor w = randn({256, 300});
  const Tensor b = randn({256});
  NoGradGuard no_grad;
  for (const int64_t rows : {1, 2, 8, 15}) {
    const Tensor x = randn({rows, 300});
    const Tensor want = matmul(x.to(kFloat64), w.to(kFloat64).t()) + b.to(kFloat64);
    EXPECT_LT((linear(x, w, b).to(kFloat64) - want).abs().max().item<double>(),
              1e-4 * want.abs().max().item<double>())
        << rows << " rows";
    EXPECT_EQ(backend::cpu::weight_cache_bytes(), size_t{256 * 300 * 4}) << rows << " rows";
  }
  const Tensor x = randn({300, 9}).t();  // rows that are not contiguous
  w.mul_(0.5f);
  const Tensor want = matmul(x.to(kFloat64), w.to(kFloat64).t());
  EXPECT_LT((linear(x, w).to(kFloat64) - want).abs().max().item<double>(),
            1e-4 * want.abs().max().item<double>());
  EXPECT_EQ(backend::cpu::weight_cache_bytes(), size_t{256 * 300 * 4});
  backend::cpu::clear_weight_cache();
}

TEST(Matmul, TensorMethodMatchesFreeFunction) {
  Tensor a = randn({3, 4}), b = randn({4, 2});
  EXPECT_EQ(a.matmul(b).to_vector<float>(), matmul(a, b).to_vector<float>());
}

TEST(Matmul, ReadsTransposedOperandsInPlace) {
  Tensor a = randn({6, 5}), b = randn({7, 6});
  Tensor expected = matmul(a.t().contiguous(), b.t().contiguous());
  Tensor actual = matmul(a.t(), b.t());
  auto e = expected.to_vector<float>(), g = actual.to_vector<float>();
  ASSERT_EQ(e.size(), g.size());
  for (size_t i = 0; i < e.size(); ++i) EXPECT_NEAR(e[i], g[i], 1e-5);
}

TEST(Matmul, RejectsZeroDimOperands) {
  expect_error<ShapeError>([] { matmul(scalar_tensor(2.0), ones({2})); }, "matmul");
}

TEST(Matmul, RejectsMismatchedInnerDimsNamingBothShapes) {
  expect_error<ShapeError>([] { matmul(ones({2, 3}), ones({4, 5})); }, "matmul", "[2, 3] @ [4, 5]");
}

TEST(Matmul, RejectsBatchDimsThatDoNotBroadcast) {
  expect_error<ShapeError>([] { matmul(ones({2, 3, 4}), ones({3, 4, 5})); }, "matmul");
}

TEST(Matmul, RejectsMixedDtypes) {
  expect_error<DTypeError>(
      [] {
        matmul(ones({2, 2}), ones({2, 2}, {.dtype = kFloat64}));
      },
      "matmul");
}

TEST(Matmul, RejectsIntegerInputs) {
  expect_error<DTypeError>(
      [] {
        matmul(ones({2, 2}, {.dtype = kInt32}), ones({2, 2}, {.dtype = kInt32}));
      },
      "matmul");
}

TEST(Matmul, IsSafeToCallFromManyThreads) {
  // float32 runs sgemm, the 16-bit types oneDNN's cached primitives, float64 our kernel.
  for (DType t : {kFloat32, kBFloat16, kFloat16, kFloat64}) {
    Tensor a = randn({64, 48}).to(t), b = randn({48, 32}).to(t);
    const auto expected = matmul(a, b).to_vector<double>();
    std::vector<int> ok(8, 0);
    std::vector<std::thread> threads;
    for (int i = 0; i < 8; ++i) {
      threads.emplace_back([&, i] {
        bool same = true;
        for (int r = 0; r < 20; ++r) same = same && matmul(a, b).to_vector<double>() == expected;
        // A second shape per thread makes the threads build primitives concurrently.
        same = same && matmul(a.narrow(0, 0, i + 1), b).size(0) == i + 1;
        ok[i] = same;
      });
    }
    for (auto& th : threads) th.join();
    for (int v : ok) EXPECT_TRUE(v) << t;
  }
}

TEST(Bmm, MultipliesEachBatch) {
  Tensor a = values({1, 2, 3, 4}, {2, 1, 2});
  Tensor b = values({1, 1, 2, 2}, {2, 2, 1});
  EXPECT_EQ(bmm(a, b).to_vector<float>(), (std::vector<float>{3, 14}));
}

TEST(Bmm, RejectsOperandsThatAreNot3D) {
  expect_error<ShapeError>([] { bmm(ones({2, 3}), ones({1, 3, 2})); }, "bmm", "[2, 3]");
}

TEST(Bmm, RejectsDifferentBatchSizes) {
  expect_error<ShapeError>([] { bmm(ones({2, 3, 4}), ones({3, 4, 5})); }, "bmm");
}

TEST(Bmm, RejectsMismatchedInnerDims) {
  expect_error<ShapeError>([] { bmm(ones({2, 3, 4}), ones({2, 5, 5})); }, "bmm");
}

TEST(Addmm, ScalesProductAndSelf) {
  Tensor self = values({10, 20}, {2});
  Tensor m1 = values({1, 2, 3, 4}, {2, 2});
  Tensor m2 = values({1, 0, 0, 1}, {2, 2});
  // 0.5 * [10, 20] + 2 * [[1, 2], [3, 4]]
  EXPECT_EQ(addmm(self, m1, m2, 0.5, 2).to_vector<float>(), (std::vector<float>{7, 14, 11, 18}));
}

TEST(Addmm, IgnoresSelfWhenBetaIsZero) {
  Tensor self = full({2, 2}, std::nan(""));
  Tensor r = addmm(self, eye(2), eye(2), 0, 1);
  EXPECT_EQ(r.to_vector<float>(), (std::vector<float>{1, 0, 0, 1}));
}

TEST(Addmm, RejectsSelfThatDoesNotBroadcast) {
  expect_error<ShapeError>([] { addmm(ones({3}), ones({2, 2}), ones({2, 2})); }, "addmm");
}

TEST(Addmm, RejectsNonMatrixOperands) {
  expect_error<ShapeError>([] { addmm(ones({2}), ones({2}), ones({2, 2})); }, "addmm");
}

TEST(Addmm, RejectsSelfOfAnotherDtype) {
  expect_error<DTypeError>(
      [] {
        addmm(ones({2}, {.dtype = kFloat64}), ones({2, 2}), ones({2, 2}));
      },
      "addmm");
}

TEST(Linear, MultipliesByTransposedWeightAndAddsBias) {
  Tensor x = values({1, 2, 3}, {1, 3});
  Tensor w = values({1, 0, 0, 0, 1, 1}, {2, 3});
  Tensor b = values({10, 20}, {2});
  Tensor y = linear(x, w, b);
  EXPECT_EQ(y.sizes(), (Shape{1, 2}));
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{11, 25}));
  EXPECT_EQ(linear(x, w).to_vector<float>(), (std::vector<float>{1, 5}));
}

TEST(Linear, KeepsLeadingDims) {
  EXPECT_EQ(linear(ones({2, 3, 4}), ones({5, 4})).sizes(), (Shape{2, 3, 5}));
  EXPECT_EQ(linear(ones({4}), ones({5, 4})).sizes(), (Shape{5}));
}

TEST(Linear, RejectsFeatureMismatch) {
  expect_error<ShapeError>([] { linear(ones({2, 3}), ones({4, 5})); }, "linear", "[4, 5]");
}

TEST(Linear, RejectsBiasOfWrongShape) {
  expect_error<ShapeError>([] { linear(ones({2, 3}), ones({4, 3}), ones({3})); }, "linear");
}

TEST(Linear, RejectsWeightThatIsNot2D) {
  expect_error<ShapeError>([] { linear(ones({2, 3}), ones({3})); }, "linear");
}

TEST(Linear, RejectsBiasOfAnotherDtype) {
  expect_error<DTypeError>(
      [] {
        linear(ones({2, 3}), ones({4, 3}), ones({4}, {.dtype = kFloat64}));
      },
      "linear");
}

TEST(Linear, RejectsIntegerInputs) {
  expect_error<DTypeError>(
      [] {
        linear(ones({2, 3}, {.dtype = kInt64}), ones({4, 3}, {.dtype = kInt64}));
      },
      "linear");
}

}  // namespace
}  // namespace kiln
