// Error paths of the reduction shape rules, and PyTorch's documented semantics
// checked against hand-computed values (the reference kernels could share a
// misunderstanding with the CPU kernels; these cannot).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "kiln/kiln.h"
#include "kiln/ops/reduce.h"
#include "ops/dispatch.h"
#include "unit/expect_error.h"

using kiln::testing::expect_error;
using kiln::testing::expect_error_with;

using namespace kiln;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr float kInfF = std::numeric_limits<float>::infinity();

Tensor floats(std::vector<float> v, Shape shape) { return from_vector<float>(v, shape); }

}  // namespace

// --- errors -------------------------------------------------------------------

TEST(ReduceErrors, SumRejectsOutOfRangeAndRepeatedDims) {
  auto x = zeros({2, 3});
  EXPECT_THROW(sum(x, {2}), IndexError);
  expect_error<IndexError>([&] { sum(x, {2}); }, "sum");
  expect_error<IndexError>([&] { sum(x, {0, -2}); }, "sum", "more than once");
  expect_error<IndexError>([&] { prod(x, {-3}); }, "prod");
  expect_error<IndexError>([&] { any(x, {5}); }, "any");
  expect_error<IndexError>([&] { cumsum(x, 2); }, "cumsum");
  expect_error<IndexError>([&] { softmax(x, -3); }, "softmax");
  expect_error<IndexError>([&] { max(x, 2); }, "max_dim");
  expect_error<IndexError>([&] { argmin(x, -3); }, "argmin");
}

TEST(ReduceErrors, MeanRejectsIntegersWithoutAFloatingDtype) {
  auto x = zeros({4}, {.dtype = kInt32});
  expect_error<DTypeError>([&] { mean(x); }, "mean", "int32");
  expect_error<DTypeError>([&] { mean(x, {0}, false, kInt64); }, "mean", "int64");
  EXPECT_EQ(mean(x, {0}, false, kFloat64).dtype(), kFloat64);
}

TEST(ReduceErrors, FloatOnlyOpsRejectIntegerInputs) {
  auto x = zeros({3, 2}, {.dtype = kInt64});
  expect_error<DTypeError>([&] { var(x); }, "var", "int64");
  expect_error<DTypeError>([&] { stddev(x); }, "std", "int64");
  expect_error<DTypeError>([&] { norm(x); }, "norm", "int64");
  expect_error<DTypeError>([&] { softmax(x, 0); }, "softmax", "int64");
  expect_error<DTypeError>([&] { log_softmax(zeros({2}, {.dtype = kBool}), 0); }, "log_softmax",
                           "bool");
}

TEST(ReduceErrors, ReductionsWithoutIdentityRejectZeroElements) {
  auto x = zeros({2, 0});
  expect_error<IndexError>([&] { amax(x, {1}); }, "amax", "[2, 0]");
  expect_error<IndexError>([&] { amin(x); }, "amin", "[2, 0]");
  expect_error<IndexError>([&] { max(x); }, "amax");
  expect_error<IndexError>([&] { max(x, 1); }, "max_dim", "[2, 0]");
  expect_error<IndexError>([&] { min(x, -1); }, "min_dim", "[2, 0]");
  expect_error<IndexError>([&] { argmax(x); }, "argmax", "[2, 0]");
  expect_error<IndexError>([&] { argmin(x, 1); }, "argmin", "[2, 0]");
  expect_error<IndexError>([&] { norm(x, kInf, {1}); }, "norm", "[2, 0]");
  // Reducing a non-empty dim of an empty tensor is fine: the result is empty.
  EXPECT_EQ(amax(x, {0}).sizes(), (Shape{0}));
  EXPECT_EQ(max(x, 0).indices.sizes(), (Shape{0}));
}

TEST(ReduceErrors, NanParametersAreRejected) {
  auto x = zeros({3});
  expect_error<ValueError>([&] { var(x, {}, kNan); }, "var", "correction");
  expect_error<ValueError>([&] { norm(x, kNan); }, "norm", "p");
}

// --- shapes and dtypes --------------------------------------------------------

TEST(ReduceShapes, KeepdimAndEmptyDimsFollowPyTorch) {
  auto x = zeros({2, 3, 4});
  EXPECT_EQ(sum(x, {1}).sizes(), (Shape{2, 4}));
  EXPECT_EQ(sum(x, {-1, 0}, true).sizes(), (Shape{1, 3, 1}));
  EXPECT_EQ(sum(x, {}).sizes(), (Shape{}));
  EXPECT_EQ(sum(x, {}, true).sizes(), (Shape{1, 1, 1}));
  EXPECT_EQ(argmax(x, std::nullopt, true).sizes(), (Shape{1, 1, 1}));
  EXPECT_EQ(argmax(x).sizes(), (Shape{}));
  auto [v, i] = max(x, 1, true);
  EXPECT_EQ(v.sizes(), (Shape{2, 1, 4}));
  EXPECT_EQ(i.dtype(), kInt64);
  EXPECT_EQ(cumsum(x, -1).sizes(), x.sizes());
  // A 0-dim tensor reduces over dim 0 / -1 to itself.
  auto s = scalar_tensor(2.5);
  EXPECT_EQ(sum(s, {0}).sizes(), (Shape{}));
  EXPECT_EQ(max(s, -1).indices.item<int64_t>(), 0);
  EXPECT_EQ(softmax(s, 0).item<float>(), 1.f);
}

TEST(ReduceShapes, IntegerSumsProductsAndScansGiveInt64) {
  auto x = from_vector<int8_t>({100, 100, 100});
  EXPECT_EQ(sum(x).dtype(), kInt64);
  EXPECT_EQ(sum(x).item<int64_t>(), 300);
  EXPECT_EQ(prod(x).item<int64_t>(), 1000000);
  EXPECT_EQ(cumsum(x, 0).to_vector<int64_t>(), (std::vector<int64_t>{100, 200, 300}));
  auto b = from_vector<bool>({true, false, true, true});
  EXPECT_EQ(sum(b).dtype(), kInt64);
  EXPECT_EQ(sum(b).item<int64_t>(), 3);
  EXPECT_EQ(amax(b).dtype(), kBool);
  EXPECT_EQ(any(zeros({2}, {.dtype = kInt32})).dtype(), kBool);
  EXPECT_EQ(logsumexp(from_vector<int32_t>({0, 0}), {0}).dtype(), kFloat32);
}

TEST(ReduceShapes, DtypeArgumentCastsTheInputFirst) {
  auto x = floats({1.5f, 2.5f, -0.5f}, {3});
  auto s = sum(x, {}, false, kInt64);  // 1 + 2 + 0, as torch.sum(x, dtype=torch.int64)
  EXPECT_EQ(s.dtype(), kInt64);
  EXPECT_EQ(s.item<int64_t>(), 3);
  EXPECT_EQ(sum(x, {}, false, kFloat64).dtype(), kFloat64);
  EXPECT_EQ(cumsum(x, 0, kInt32).to_vector<int32_t>(), (std::vector<int32_t>{1, 3, 3}));
}

TEST(ReduceShapes, MetaTensorsRunOnlyTheShapeRule) {
  Tensor x = ops::make_tensor({5, 7}, kFloat16, Device::cpu(), /*meta=*/true);
  auto s = sum(x, {0}, true, kFloat32);
  EXPECT_TRUE(s.is_meta());
  EXPECT_EQ(s.sizes(), (Shape{1, 7}));
  EXPECT_EQ(s.dtype(), kFloat32);
  auto [v, i] = min(x, 1);
  EXPECT_TRUE(i.is_meta());
  EXPECT_EQ(i.sizes(), (Shape{5}));
}

TEST(ReduceShapes, RulesCanonicalizeAttributesSoThatARerunChangesNothing) {
  Tensor x = ops::make_tensor({2, 3, 4}, kFloat32, Device::cpu(), /*meta=*/true);
  const ops::OpSchema& schema = ops::op_schema(ops::OpId::sum);
  ops::Attrs attrs{Dims{-1, 0}, false, std::monostate{}};
  ops::ShapeCtx first{schema, std::span<const Tensor>(&x, 1), attrs, {}, {}};
  schema.shape_rule(first);
  EXPECT_EQ(attrs.ints(0), (Dims{0, 2}));
  const ops::Attrs canonical = attrs;
  ops::ShapeCtx second{schema, std::span<const Tensor>(&x, 1), attrs, {}, {}};
  schema.shape_rule(second);
  EXPECT_EQ(attrs, canonical);
  EXPECT_EQ(second.outputs[0].sizes, first.outputs[0].sizes);
  ops::Attrs all_dims{Dims{}, true, std::monostate{}};
  ops::ShapeCtx third{schema, std::span<const Tensor>(&x, 1), all_dims, {}, {}};
  schema.shape_rule(third);
  EXPECT_EQ(all_dims.ints(0), (Dims{0, 1, 2}));
}

// --- values -------------------------------------------------------------------

TEST(ReduceValues, EmptyReductionsGiveTheIdentity) {
  auto x = zeros({3, 0});
  EXPECT_EQ(sum(x, {1}).to_vector<float>(), (std::vector<float>{0, 0, 0}));
  EXPECT_EQ(prod(x, {1}).to_vector<float>(), (std::vector<float>{1, 1, 1}));
  EXPECT_TRUE(std::isnan(mean(x).item<float>()));
  EXPECT_TRUE(all(x).item<bool>());
  EXPECT_FALSE(any(x).item<bool>());
  EXPECT_EQ(logsumexp(x, {1}).to_vector<float>()[0], -kInf);
  EXPECT_EQ(norm(x, 2, {1}).to_vector<float>()[0], 0.f);
}

TEST(ReduceValues, MaxAlongDimReturnsValuesAndTheFirstIndexOfTies) {
  auto x = floats({1, 3, 3, 2, 2, 0}, {2, 3});
  auto [values, indices] = max(x, 1);
  EXPECT_EQ(values.to_vector<float>(), (std::vector<float>{3, 2}));
  EXPECT_EQ(indices.to_vector<int64_t>(), (std::vector<int64_t>{1, 0}));
  auto [lo, at] = min(x, 0);
  EXPECT_EQ(lo.to_vector<float>(), (std::vector<float>{1, 2, 0}));
  EXPECT_EQ(at.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 1}));
  EXPECT_EQ(argmax(x, 0).to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 0}));
}

TEST(ReduceValues, NanIsBothTheMaximumAndTheMinimum) {
  auto x = floats({1, NAN, 3, NAN, -2}, {5});
  EXPECT_EQ(argmax(x).item<int64_t>(), 1);
  EXPECT_EQ(argmin(x).item<int64_t>(), 1);
  EXPECT_TRUE(std::isnan(amax(x).item<float>()));
  EXPECT_TRUE(std::isnan(min(x).item<float>()));
  auto [v, i] = max(x.view({5, 1}), 0);
  EXPECT_TRUE(std::isnan(v.item<float>()));
  EXPECT_EQ(i.item<int64_t>(), 1);
}

TEST(ReduceValues, ArgmaxWithoutDimIndexesTheFlattenedTensor) {
  auto x = floats({1, 5, 7, 2, 7, 0}, {2, 3});
  EXPECT_EQ(argmax(x).item<int64_t>(), 2);
  EXPECT_EQ(argmin(x).item<int64_t>(), 5);
  EXPECT_EQ(argmax(x.t()).item<int64_t>(), 3);  // [[1, 2], [5, 7], [7, 0]]: first 7 at 3
}

TEST(ReduceValues, VarianceUsesTheCorrection) {
  auto x = floats({1, 2, 3, 4}, {4});
  EXPECT_NEAR(var(x).item<double>(), 5.0 / 3.0, 1e-6);
  EXPECT_NEAR(var(x, {}, 0).item<double>(), 1.25, 1e-6);
  EXPECT_NEAR(stddev(x, {0}, 0).item<double>(), std::sqrt(1.25), 1e-6);
  EXPECT_TRUE(std::isnan(var(floats({5}, {1})).item<float>()));  // 0 / 0
  EXPECT_EQ(var(floats({5}, {1}), {}, 0).item<float>(), 0.f);
  EXPECT_EQ(var(floats({1, 2}, {2}), {}, 2).item<float>(), kInf);  // 0.5 / max(0, 0)
}

TEST(ReduceValues, NormsOfEveryKind) {
  auto x = floats({3, -4, 0}, {3});
  EXPECT_FLOAT_EQ(norm(x).item<float>(), 5);
  EXPECT_FLOAT_EQ(norm(x, 1).item<float>(), 7);
  EXPECT_FLOAT_EQ(norm(x, 0).item<float>(), 2);
  EXPECT_FLOAT_EQ(norm(x, kInf).item<float>(), 4);
  EXPECT_FLOAT_EQ(norm(x, -kInf).item<float>(), 0);
  EXPECT_FLOAT_EQ(norm(x, 3).item<float>(), std::cbrt(91.f));
  EXPECT_FLOAT_EQ(norm(x, 0.5).item<float>(), std::pow(std::sqrt(3.f) + 2.f, 2.f));
}

TEST(ReduceValues, LogsumexpIsStableAndAllNegInfGivesNegInf) {
  auto x = floats({1000, 1000, -kInfF, -kInfF}, {2, 2});
  auto r = logsumexp(x, {1}).to_vector<float>();
  EXPECT_NEAR(r[0], 1000 + std::log(2.0), 1e-3);
  EXPECT_EQ(r[1], -kInf);
  EXPECT_EQ(logsumexp(floats({kInfF, 1}, {2}), {0}).item<float>(), kInf);
}

TEST(ReduceValues, SoftmaxRowsSumToOneAndAllNegInfGivesNan) {
  auto x = floats({1, 2, 3, -kInfF, -kInfF, -kInfF, 1000, 0, -kInfF}, {3, 3});
  auto s = softmax(x, 1).to_vector<float>();
  const double e = std::exp(1.0);
  EXPECT_NEAR(s[0], 1 / (1 + e + e * e), 1e-6);
  EXPECT_NEAR(s[0] + s[1] + s[2], 1, 1e-6);
  for (int i = 3; i < 6; ++i) EXPECT_TRUE(std::isnan(s[i]));
  EXPECT_EQ(s[6], 1.f);
  EXPECT_EQ(s[8], 0.f);
  auto l = log_softmax(x, 1).to_vector<float>();
  EXPECT_NEAR(l[2], -std::log(1 + 1 / e + 1 / (e * e)), 1e-6);
  EXPECT_TRUE(std::isnan(l[4]));
  EXPECT_EQ(l[8], -kInf);
}

TEST(ReduceValues, SoftmaxRejectsNothingFloatingAndKeepsTheDtype) {
  auto x = floats({0, 0}, {2}).to(kBFloat16);
  auto s = softmax(x, 0);
  EXPECT_EQ(s.dtype(), kBFloat16);
  EXPECT_EQ(s.to_vector<float>(), (std::vector<float>{0.5f, 0.5f}));
}

TEST(ReduceValues, Float32SumsAreAccurate) {
  // 2^24 + 1 is not a float: a single float accumulator would stop at 2^24.
  auto x = ones({1 << 25});
  EXPECT_EQ(sum(x).item<float>(), 33554432.f);
  EXPECT_EQ(sum(x.view({1 << 12, 1 << 13}), {0}).to_vector<float>()[5], 4096.f);
  auto tenth = full({1000000}, 0.1);
  // Within 1e-5 relative (the float32 consistency bound is NMSE 1e-10); one
  // running float sum would be about 1% off.
  EXPECT_NEAR(sum(tenth).item<double>(), 100000.0, 1.0);
  EXPECT_NEAR(mean(tenth.view({1000, 1000}), {0}).to_vector<float>()[7], 0.1, 1e-7);
}

TEST(ReduceValues, Float32ProductsDoNotOverflowInPartialProducts) {
  // 1e30 * 1e30 overflows float, but the whole product is 1e30 * 1e30 * 1e-30 * 1e-30 = 1.
  std::vector<float> v(64, 1.f);
  for (int i = 0; i < 64; i += 32) v[i] = 1e30f;
  for (int i = 1; i < 64; i += 32) v[i] = 1e-30f;
  EXPECT_NEAR(prod(from_vector<float>(v)).item<double>(), 1.0, 1e-5);
}

TEST(ReduceValues, TensorMethodsCallTheReductions) {
  auto x = floats({1, 4, 2, 3}, {2, 2});
  EXPECT_EQ(x.sum().item<float>(), 10.f);
  EXPECT_EQ(x.sum({0}).to_vector<float>(), (std::vector<float>{3, 7}));
  EXPECT_EQ(x.mean().item<float>(), 2.5f);
  EXPECT_EQ(x.mean({1}, true).sizes(), (Shape{2, 1}));
  EXPECT_EQ(x.max().item<float>(), 4.f);
  EXPECT_EQ(x.min().item<float>(), 1.f);
  EXPECT_EQ(x.argmax(1).to_vector<int64_t>(), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(x.argmin().item<int64_t>(), 0);
  EXPECT_NEAR(x.softmax(0).to_vector<float>()[0], 1 / (1 + std::exp(1.0)), 1e-6);
  EXPECT_NEAR(x.log_softmax(-1).to_vector<float>()[1], -std::log(1 + std::exp(-3.0)), 1e-6);
}

TEST(ReduceValues, AnyAndAllTreatNonzeroAndNanAsTrue) {
  auto x = floats({0, NAN, 0, 0, 2, 3}, {2, 3});
  EXPECT_EQ(any(x, {1}).to_vector<bool>(), (std::vector<bool>{true, true}));
  EXPECT_EQ(all(x, {0}).to_vector<bool>(), (std::vector<bool>{false, true, false}));
  EXPECT_EQ(all(x.narrow(1, 1, 2), {0}).to_vector<bool>(), (std::vector<bool>{true, false}));
}

// Reduced dims apart in memory ([0, 2, 3] of [N, C, H, W]): each row is
// gathered into a buffer as the engine folds it, where it was the whole
// input copied permuted. The values and their order are the copy's, so the
// results equal a reduction of the permuted copy itself bit for bit: for
// every reduction that gathers, with offset, transposed and broadcast
// inputs, rows split into segments (fewer rows than threads), rows too
// long to gather, and more dims than the gather's index keeps inline.
TEST(ReduceValues, RowsOfDimsApartAreGatheredAsTheCopyWouldHoldThem) {
  struct Case {
    Shape sizes;
    std::vector<int64_t> dims;
    int threads;
  };
  const std::vector<Case> cases = {{{4, 6, 9, 7}, {0, 2, 3}, 2},
                                   {{3, 5, 4}, {0, 2}, 2},
                                   {{2, 3, 500, 41}, {0, 2}, 4},
                                   {{6, 1, 2, 7}, {0, 3}, 4},
                                   {{64, 3, 300, 8}, {0, 2, 3}, 4},
                                   {{8, 2, 4096, 40}, {0, 2, 3}, 2},
                                   {{2, 2, 2, 2, 2, 2, 2, 2, 2, 3}, {0, 2, 4, 6, 8}, 2}};
  const int before = get_num_threads();
  Generator gen(3);
  for (const Case& c : cases) {
    set_num_threads(c.threads);
    for (const DType dtype : {kFloat32, kFloat64, kBFloat16}) {
      // Contiguous, at an offset, and every other element of its last dim.
      const Tensor base = randn(c.sizes, {}, &gen).to(dtype);
      int64_t numel = 1;
      for (int64_t n : c.sizes) numel *= n;
      Shape wider = c.sizes;
      wider.back() *= 2;
      const Tensor inputs[] = {
          base, randn({numel + 3}, {}, &gen).to(dtype).narrow(0, 3, numel).view(c.sizes),
          randn(wider, {}, &gen).to(dtype).slice(-1, 0, std::nullopt, 2)};
      for (const Tensor& x : inputs) {
        SCOPED_TRACE(detail::str_cat(c.sizes, " ", dtype, " contiguous ", x.is_contiguous()));
        Shape perm;
        for (int64_t d = 0; d < x.dim(); ++d)
          if (std::find(c.dims.begin(), c.dims.end(), d) == c.dims.end()) perm.push_back(d);
        const auto kept = static_cast<int64_t>(perm.size());
        perm.insert(perm.end(), c.dims.begin(), c.dims.end());
        const Tensor copy = x.permute(perm).contiguous();
        std::vector<int64_t> trailing;
        for (int64_t d = kept; d < x.dim(); ++d) trailing.push_back(d);
        const auto same = [](const Tensor& a, const Tensor& b) {
          return a.sizes() == b.sizes() && a.to(kFloat64).view({-1}).to_vector<double>() ==
                                               b.to(kFloat64).view({-1}).to_vector<double>();
        };
        EXPECT_TRUE(same(sum(x, c.dims), sum(copy, trailing)));
        EXPECT_TRUE(same(mean(x, c.dims), mean(copy, trailing)));
        EXPECT_TRUE(same(prod(x * 0.01 + 1.0, c.dims), prod(copy * 0.01 + 1.0, trailing)));
        EXPECT_TRUE(same(amax(x, c.dims), amax(copy, trailing)));
        EXPECT_TRUE(same(amin(x, c.dims), amin(copy, trailing)));
        EXPECT_TRUE(same(norm(x, 2.0, c.dims), norm(copy, 2.0, trailing)));
        EXPECT_TRUE(same(norm(x, 3.0, c.dims), norm(copy, 3.0, trailing)));
        EXPECT_TRUE(same(logsumexp(x, c.dims), logsumexp(copy, trailing)));
        EXPECT_TRUE(same(var(x + 10.0, c.dims), var(copy + 10.0, trailing)));
        EXPECT_TRUE(same(stddev(x, c.dims, 0.0), stddev(copy, trailing, 0.0)));
        EXPECT_TRUE(same(any(x > 2.5, c.dims), any(copy > 2.5, trailing)));
        EXPECT_TRUE(same(all(x > -2.5, c.dims), all(copy > -2.5, trailing)));
      }
    }
  }
  set_num_threads(before);
  // Integers too, and the float sum against a double oracle.
  const Tensor i = randint(-50, 50, {5, 3, 6, 2}, {}, &gen);
  EXPECT_EQ(sum(i, {0, 2}).view({-1}).to_vector<int64_t>(),
            sum(i.permute({1, 3, 0, 2}).contiguous(), {2, 3}).view({-1}).to_vector<int64_t>());
  const Tensor f = randn({4, 6, 9, 7}, {}, &gen);
  const std::vector<double> got = sum(f, {0, 2, 3}).to(kFloat64).to_vector<double>();
  const std::vector<double> want = sum(f.to(kFloat64), {0, 2, 3}).to_vector<double>();
  for (size_t k = 0; k < got.size(); ++k) EXPECT_NEAR(got[k], want[k], 1e-4) << k;
}

// --- sort and topk ------------------------------------------------------------

TEST(Orders, SortTopkAndArgsortFollowPyTorch) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor x = from_vector<double>({1, nan, 2, -0.0, 0, 2});
  auto [v, i] = x.sort(0, /*descending=*/true);
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 5, 0, 3, 4}));
  EXPECT_TRUE(std::isnan(v.to_vector<double>()[0]));
  EXPECT_EQ(x.argsort().to_vector<int64_t>(), (std::vector<int64_t>{3, 4, 0, 2, 5, 1}));
  auto [t, j] = x.topk(3);
  EXPECT_EQ(j.to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 5}));
  auto [s, k] = x.topk(2, 0, /*largest=*/false);
  EXPECT_EQ(s.to_vector<double>(), (std::vector<double>{0, 0}));
  EXPECT_EQ(k.to_vector<int64_t>(), (std::vector<int64_t>{3, 4}));
  // A 0-dim tensor is its own order, and its own top value for k 0 or 1.
  EXPECT_EQ(topk(scalar_tensor(3.0), 0).values.item<float>(), 3.0f);
  EXPECT_EQ(sort(scalar_tensor(3.0)).indices.item<int64_t>(), 0);
}

TEST(Orders, GradientsGoToWhereTheValuesCameFrom) {
  Tensor x = from_vector<double>({3, 1, 2, 5, 4, 0}, Shape{2, 3}).requires_grad_();
  auto [v, i] = topk(x, 2, 1);
  (v * from_vector<double>({10, 20, 30, 40}, Shape{2, 2})).sum().backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{10, 0, 20, 30, 40, 0}));
}

TEST(Orders, RejectBadKAndDims) {
  Tensor x = zeros({2, 3});
  expect_error_with<IndexError>([&] { topk(x, 4); }, {"topk", "4", "[2, 3]"});
  expect_error_with<IndexError>([&] { topk(x, -1); }, {"topk", "-1"});
  expect_error_with<IndexError>([&] { topk(scalar_tensor(1.0), 2); }, {"topk", "2"});
  expect_error<IndexError>([&] { sort(x, 2); }, "sort");
  expect_error<IndexError>([&] { argsort(x, -3); }, "sort");
}
