// Shape, view and indexing ops: values computed by hand (after PyTorch's
// documented behaviour) and every error path of their rules and kernels.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "ops/dispatch.h"
#include "unit/expect_error.h"

using kiln::testing::expect_error;
using kiln::testing::expect_error_with;

using namespace kiln;

namespace {

using I64 = std::vector<int64_t>;

Tensor ints(const I64& values, const Shape& shape) { return from_vector<int64_t>(values, shape); }
Tensor ints(const I64& values) { return from_vector<int64_t>(values); }
Tensor floats(const std::vector<float>& values, const Shape& shape) {
  return from_vector<float>(values, shape);
}
Tensor meta(const Shape& shape, DType dtype = kFloat32) {
  return ops::make_tensor(shape, dtype, Device::cpu(), /*meta=*/true);
}

// Data-dependent checks live in the kernels: run them on both backends.
template <typename F>
void on_cpu_and_reference(F&& f) {
  for (bool reference : {false, true}) {
    SCOPED_TRACE(reference ? "reference kernels" : "cpu kernels");
    std::optional<ops::ReferenceModeGuard> guard;
    if (reference) guard.emplace();
    f();
  }
}

}  // namespace

// --- cat and stack --------------------------------------------------------------------

// narrow's bounds: an error naming the start, length and size, also where
// start + length overflows int64 (the check itself used to overflow).
TEST(Narrow, RejectsBoundsPastTheDimWithoutOverflow) {
  const Tensor x = arange(0, 4);
  EXPECT_EQ(narrow(x, 0, 1, 3).to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(narrow(x, 0, -2, 2).to_vector<int64_t>(), (std::vector<int64_t>{2, 3}));
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  expect_error_with<IndexError>([&] { narrow(x, 0, kMax, 2); },
                                {"narrow", "start 9223372036854775807", "length 2", "size 4"});
  expect_error_with<IndexError>([&] { narrow(x, 0, -1, kMax); }, {"narrow", "size 4"});
  expect_error_with<IndexError>([&] { narrow(x, 0, 3, 2); }, {"narrow", "start 3", "length 2"});
  expect_error_with<IndexError>([&] { narrow(x, 0, 5, 0); }, {"narrow", "start 5"});
}

// A fill value the dtype cannot hold is a ValueError naming the op, the value
// and the dtype, as PyTorch; NaN and inf stay allowed in floating types and a
// fractional value truncates into an integer type.
TEST(FillValue, ThatOverflowsTheDtypeIsRefused) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  expect_error_with<ValueError>([] { full({2}, 1000, {.dtype = kInt8}); },
                                {"full", "1000", "int8", "overflow"});
  expect_error_with<ValueError>([] { full({2}, -1, {.dtype = kUInt8}); }, {"full", "-1", "uint8"});
  expect_error_with<ValueError>([&] { full({2}, nan, {.dtype = kInt32}); }, {"full", "int32"});
  expect_error_with<ValueError>([&] { full({2}, inf, {.dtype = kInt64}); }, {"full", "int64"});
  expect_error_with<ValueError>([] { full({2}, 1e39, {.dtype = kFloat32}); }, {"full", "float32"});
  expect_error_with<ValueError>([] { full({2}, 70000.0, {.dtype = kFloat16}); },
                                {"full", "float16"});
  Tensor small = zeros({3}, {.dtype = kInt8});
  expect_error_with<ValueError>([&] { small.fill_(1000); }, {"fill", "1000", "int8"});
  EXPECT_EQ(small.to_vector<int8_t>(), (std::vector<int8_t>{0, 0, 0}));  // untouched
  expect_error_with<ValueError>([&] { full_like(small, 300); }, {"full_like", "300", "int8"});
  const Tensor x = zeros({4});
  expect_error_with<ValueError>([&] { full({x.sym_size(0)}, 128, {.dtype = kInt8}); },
                                {"128", "int8"});
  // What fits: the ends of the range, truncation, NaN and inf in floats.
  EXPECT_EQ(full({2}, -128, {.dtype = kInt8}).to_vector<int8_t>(),
            (std::vector<int8_t>{-128, -128}));
  EXPECT_EQ(full({1}, 2.7, {.dtype = kInt64}).item<int64_t>(), 2);
  EXPECT_EQ(full({1}, std::numeric_limits<int64_t>::min(), {.dtype = kInt64}).item<int64_t>(),
            std::numeric_limits<int64_t>::min());
  EXPECT_TRUE(std::isnan(full({1}, nan, {.dtype = kFloat16}).to(kFloat32).item<float>()));
  EXPECT_TRUE(std::isinf(full({1}, -inf, {.dtype = kBFloat16}).to(kFloat32).item<float>()));
  EXPECT_EQ(full({1}, 65504.0, {.dtype = kFloat16}).to(kFloat32).item<float>(), 65504.f);
  EXPECT_EQ(full({1}, 1e300, {.dtype = kFloat64}).item<double>(), 1e300);
  EXPECT_TRUE(full({1}, 7, {.dtype = kBool}).item<bool>());
  small.fill_(-128);
  EXPECT_EQ(small.to_vector<int8_t>(), (std::vector<int8_t>{-128, -128, -128}));
}

TEST(Cat, JoinsAlongEitherDim) {
  auto a = ints({1, 2, 3, 4}, {2, 2});
  auto b = ints({5, 6}, {1, 2});
  EXPECT_EQ(cat({a, b}).to_vector<int64_t>(), (I64{1, 2, 3, 4, 5, 6}));
  auto c = cat({a, b.t()}, 1);
  EXPECT_EQ(c.sizes(), (Shape{2, 3}));
  EXPECT_EQ(c.to_vector<int64_t>(), (I64{1, 2, 5, 3, 4, 6}));
  EXPECT_EQ(cat({a, a.t()}, -1).to_vector<int64_t>(), (I64{1, 2, 1, 3, 3, 4, 2, 4}));
}

TEST(Cat, SkipsOneDimEmptyTensorsOfAnyRank) {
  auto a = floats({1, 2, 3, 4, 5, 6}, {2, 3});
  auto c = cat({zeros({0}), a, zeros({0})}, 1);
  EXPECT_EQ(c.sizes(), (Shape{2, 3}));
  EXPECT_EQ(c.to_vector<float>(), a.to_vector<float>());
  EXPECT_EQ(cat({zeros({0}), zeros({0})}).sizes(), (Shape{0}));
}

TEST(Cat, PromotesToTheResultType) {
  auto c = cat({ints({1, 2}), floats({0.5f}, {1}), from_vector<bool>({true})});
  EXPECT_EQ(c.dtype(), kFloat32);
  EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{1, 2, 0.5f, 1}));
  EXPECT_EQ(cat({from_vector<uint8_t>({200}), from_vector<int8_t>({-1})}).dtype(), kInt16);
}

TEST(Cat, RunsOnMetaTensors) {
  auto c = cat({meta({2, 3}), meta({2, 5}, kFloat64)}, 1);
  EXPECT_TRUE(c.is_meta());
  EXPECT_EQ(c.sizes(), (Shape{2, 8}));
  EXPECT_EQ(c.dtype(), kFloat64);
}

TEST(Cat, RejectsBadInputs) {
  expect_error_with<ValueError>([] { cat({}); }, {"cat", "non-empty"});
  expect_error_with<ShapeError>([] { cat({zeros({2, 3}), zeros({4})}); }, {"cat", "[2, 3]", "[4]"});
  expect_error_with<ShapeError>(
      [] {
        cat({zeros({2, 3}), zeros({3, 4})}, 1);
      },
      {"cat", "[2, 3]", "[3, 4]"});
  expect_error_with<ShapeError>([] { cat({zeros({}), zeros({})}); }, {"cat", "0-dim"});
  expect_error_with<IndexError>([] { cat({zeros({2, 3})}, 2); }, {"cat", "dim 2"});
  expect_error_with<ValueError>([] { cat({zeros({2}), Tensor()}); }, {"cat", "undefined"});
}

TEST(Stack, InsertsANewDim) {
  auto a = ints({1, 2, 3}), b = ints({4, 5, 6});
  EXPECT_EQ(stack({a, b}).sizes(), (Shape{2, 3}));
  EXPECT_EQ(stack({a, b}).to_vector<int64_t>(), (I64{1, 2, 3, 4, 5, 6}));
  auto s = stack({a, b}, -1);
  EXPECT_EQ(s.sizes(), (Shape{3, 2}));
  EXPECT_EQ(s.to_vector<int64_t>(), (I64{1, 4, 2, 5, 3, 6}));
  EXPECT_EQ(stack({scalar_tensor(1.5), scalar_tensor(2)}).to_vector<float>(),
            (std::vector<float>{1.5f, 2.f}));
}

TEST(Stack, RejectsBadInputs) {
  expect_error_with<ValueError>([] { stack({}); }, {"stack", "non-empty"});
  expect_error_with<ShapeError>(
      [] {
        stack({zeros({2, 3}), zeros({3, 2})});
      },
      {"stack", "[2, 3]", "[3, 2]"});
  expect_error_with<IndexError>([] { stack({zeros({2}), zeros({2})}, 3); }, {"stack", "dim 3"});
}

// --- split and chunk -------------------------------------------------------------------

TEST(Split, BySizeGivesViewsWithASmallerLast) {
  auto x = arange(14).view({7, 2});
  auto parts = split(x, 3);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0].sizes(), (Shape{3, 2}));
  EXPECT_EQ(parts[2].sizes(), (Shape{1, 2}));
  EXPECT_EQ(parts[2].to_vector<int64_t>(), (I64{12, 13}));
  EXPECT_TRUE(parts[1].shares_storage(x));
  EXPECT_EQ(split(zeros({0, 2}), 3).size(), 1u);
  EXPECT_EQ(split(zeros({0, 2}), 0).size(), 1u);
}

TEST(Split, BySizesFollowsTheList) {
  auto x = arange(6);
  auto parts = split(x, I64{1, 0, 5});
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[1].numel(), 0);
  EXPECT_EQ(parts[2].to_vector<int64_t>(), (I64{1, 2, 3, 4, 5}));
}

TEST(Split, RejectsBadSizes) {
  expect_error_with<ShapeError>(
      [] {
        split(arange(6), I64{2, 3});
      },
      {"split", "[2, 3]", "sum to 5"});
  expect_error_with<ValueError>([] { split(arange(6), I64{7, -1}); }, {"split", "non-negative"});
  expect_error_with<ValueError>([] { split(arange(6), 0); }, {"split", "split_size"});
  expect_error_with<ValueError>([] { split(arange(6), -2); }, {"split", "-2"});
  expect_error_with<ShapeError>([] { split(scalar_tensor(1), 1); }, {"split", "0-dim"});
  expect_error_with<IndexError>([] { split(arange(6), 2, 1); }, {"split", "dim 1"});
}

TEST(Chunk, MayReturnFewerChunksAsTorch) {
  // torch.chunk: pieces of ceil(n / chunks).
  auto five = chunk(arange(5), 4);
  ASSERT_EQ(five.size(), 3u);
  EXPECT_EQ(five[2].to_vector<int64_t>(), (I64{4}));
  EXPECT_EQ(chunk(arange(6), 4).size(), 3u);
  EXPECT_EQ(chunk(arange(6), 3).size(), 3u);
  EXPECT_EQ(chunk(arange(2), 5).size(), 2u);
  auto cols = chunk(arange(6).view({2, 3}), 2, 1);
  ASSERT_EQ(cols.size(), 2u);
  EXPECT_EQ(cols[0].to_vector<int64_t>(), (I64{0, 1, 3, 4}));
  EXPECT_EQ(chunk(zeros({0}), 3).size(), 3u);  // an empty dim still gives chunks pieces
}

TEST(Chunk, RejectsBadArguments) {
  expect_error_with<ValueError>([] { chunk(arange(4), 0); }, {"chunk", "positive"});
  expect_error_with<ShapeError>([] { chunk(scalar_tensor(1), 2); }, {"chunk", "0-dim"});
  expect_error_with<IndexError>([] { chunk(arange(4), 2, -2); }, {"chunk", "dim -2"});
}

// --- index_select, gather, scatter --------------------------------------------------

TEST(IndexSelect, PicksSlicesInIndexOrder) {
  auto x = arange(12).view({3, 4});
  on_cpu_and_reference([&] {
    EXPECT_EQ(index_select(x, 0, ints({2, 0, 2})).to_vector<int64_t>(),
              (I64{8, 9, 10, 11, 0, 1, 2, 3, 8, 9, 10, 11}));
    auto cols = index_select(x, 1, from_vector<int32_t>({3, 1}));
    EXPECT_EQ(cols.sizes(), (Shape{3, 2}));
    EXPECT_EQ(cols.to_vector<int64_t>(), (I64{3, 1, 7, 5, 11, 9}));
    EXPECT_EQ(index_select(x, 0, ints({})).sizes(), (Shape{0, 4}));
  });
}

TEST(IndexSelect, RejectsBadIndices) {
  auto x = zeros({3, 4});
  on_cpu_and_reference([&] {
    expect_error_with<IndexError>(
        [&] {
          index_select(x, 0, ints({0, -1}));
        },
        {"index_select", "index -1", "size 3"});
    expect_error_with<IndexError>([&] { index_select(x, 1, from_vector<int32_t>({4})); },
                                  {"index_select", "index 4", "size 4"});
  });
  expect_error_with<DTypeError>([&] { index_select(x, 0, floats({0}, {1})); },
                                {"index_select", "float32"});
  expect_error_with<ShapeError>(
      [&] {
        index_select(x, 0, ints({0, 1}, {1, 2}));
      },
      {"index_select", "[1, 2]"});
  expect_error_with<IndexError>([&] { index_select(x, 2, ints({0})); }, {"index_select", "dim 2"});
  expect_error_with<ShapeError>(
      [&] {
        index_select(scalar_tensor(1), 0, ints({0, 0}));
      },
      {"index_select", "0-dim"});
}

TEST(Gather, FollowsTheDocumentedFormula) {
  // torch.gather(t, 1, [[0, 0], [1, 0]]) with t = [[1, 2], [3, 4]] is [[1, 1], [4, 3]].
  auto t = ints({1, 2, 3, 4}, {2, 2});
  on_cpu_and_reference([&] {
    EXPECT_EQ(gather(t, 1, ints({0, 0, 1, 0}, {2, 2})).to_vector<int64_t>(), (I64{1, 1, 4, 3}));
    EXPECT_EQ(gather(t, 0, ints({1, 0}, {1, 2})).to_vector<int64_t>(), (I64{3, 2}));
    // The index may be smaller than the input in every dim.
    EXPECT_EQ(gather(arange(12).view({3, 4}), 1, ints({3}, {1, 1})).to_vector<int64_t>(), (I64{3}));
  });
}

TEST(Gather, RejectsBadIndices) {
  auto x = zeros({3, 4});
  on_cpu_and_reference([&] {
    expect_error_with<IndexError>(
        [&] {
          gather(x, 1, ints({0, 4}, {1, 2}));
        },
        {"gather", "index 4", "size 4"});
    expect_error_with<IndexError>(
        [&] {
          gather(x, 0, ints({-1}, {1, 1}));
        },
        {"gather", "index -1", "size 3"});
  });
  expect_error_with<ShapeError>([&] { gather(x, 0, ints({0, 1})); }, {"gather", "[2]", "[3, 4]"});
  expect_error_with<ShapeError>(
      [&] {
        gather(x, 0, zeros({2, 5}, {.dtype = kInt64}));
      },
      {"gather", "[2, 5]", "dim 1"});
  expect_error_with<DTypeError>(
      [&] {
        gather(x, 0, zeros({1, 1}, {.dtype = kInt32}));
      },
      {"gather", "int32"});
  expect_error_with<IndexError>(
      [&] {
        gather(x, -3, zeros({1, 1}, {.dtype = kInt64}));
      },
      {"gather", "dim -3"});
}

TEST(Scatter, WritesSourceValuesAtIndex) {
  auto x = zeros({3, 4}, {.dtype = kInt64});
  auto src = arange(1, 9).view({2, 4});
  on_cpu_and_reference([&] {
    // out[index[i][j]][j] = src[i][j] along dim 0.
    auto out = scatter(x, 0, ints({0, 1, 2, 0, 2, 0}, {2, 3}), src);
    EXPECT_EQ(out.to_vector<int64_t>(), (I64{5, 0, 7, 0, 0, 2, 0, 0, 0, 6, 3, 0}));
    auto rows = scatter(x, 1, ints({3, 0}, {2, 1}), src);
    EXPECT_EQ(rows.to_vector<int64_t>(), (I64{0, 0, 0, 1, 5, 0, 0, 0, 0, 0, 0, 0}));
    EXPECT_EQ(x.to_vector<int64_t>(), I64(12, 0));  // out of place
  });
}

TEST(Scatter, LastDuplicateInIndexOrderWins) {
  on_cpu_and_reference([&] {
    auto out = scatter(zeros({2}), 0, ints({1, 0, 1, 1}), floats({1, 2, 3, 4}, {4}));
    EXPECT_EQ(out.to_vector<float>(), (std::vector<float>{2, 4}));
  });
}

TEST(Scatter, InPlaceWritesSelfAndBumpsItsVersion) {
  on_cpu_and_reference([&] {
    auto x = zeros({2, 3});
    const auto v0 = x.version();
    scatter_(x, 1, ints({2, 0}, {2, 1}), floats({7, 8}, {2, 1}));
    EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{0, 0, 7, 8, 0, 0}));
    EXPECT_GT(x.version(), v0);
    auto column = x.select(1, 1);  // a strided view
    scatter_(column, 0, ints({1}), floats({5}, {1}));
    EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{0, 0, 7, 8, 5, 0}));
  });
}

TEST(Scatter, RejectsBadIndicesBeforeWritingAnything) {
  on_cpu_and_reference([&] {
    auto x = ones({2, 3});
    expect_error_with<IndexError>(
        [&] {
          scatter_(x, 0, ints({0, 2}, {1, 2}), zeros({1, 2}));
        },
        {"scatter", "index 2", "size 2"});
    EXPECT_EQ(x.to_vector<float>(), std::vector<float>(6, 1.f));
  });
  auto x = zeros({2, 3});
  expect_error_with<DTypeError>(
      [&] {
        scatter(x, 0, ints({0}, {1, 1}), zeros({1, 1}, {.dtype = kFloat64}));
      },
      {"scatter", "float64"});
  expect_error_with<ShapeError>(
      [&] {
        scatter(x, 0, ints({0, 0}, {1, 2}), zeros({1, 1}));
      },
      {"scatter", "src"});
  expect_error_with<ShapeError>(
      [&] {
        scatter(x, 0, ints({0, 0, 0, 0}, {1, 4}), zeros({1, 4}));
      },
      {"scatter", "[1, 4]", "dim 1"});
  expect_error_with<ShapeError>([&] { scatter(x, 0, ints({0}), zeros({1})); },
                                {"scatter", "[1]", "[2, 3]"});
  expect_error_with<DTypeError>(
      [&] {
        scatter(x, 0, zeros({1, 1}), zeros({1, 1}));
      },
      {"scatter", "int64"});
}

// --- repeat and flip ---------------------------------------------------------------

TEST(Repeat, TilesAndAddsLeadingDims) {
  auto x = ints({1, 2});
  on_cpu_and_reference([&] {
    auto r = repeat(x, {2, 2});
    EXPECT_EQ(r.sizes(), (Shape{2, 4}));
    EXPECT_EQ(r.to_vector<int64_t>(), (I64{1, 2, 1, 2, 1, 2, 1, 2}));
    auto m = repeat(ints({1, 2, 3, 4}, {2, 2}), {1, 2});
    EXPECT_EQ(m.to_vector<int64_t>(), (I64{1, 2, 1, 2, 3, 4, 3, 4}));
    EXPECT_EQ(repeat(x, {3, 0}).sizes(), (Shape{3, 0}));
  });
}

TEST(Repeat, RejectsBadRepeats) {
  expect_error_with<ShapeError>([] { repeat(zeros({2, 3}), {2}); }, {"repeat", "[2]", "[2, 3]"});
  expect_error_with<ValueError>([] { repeat(zeros({2}), {-1}); }, {"repeat", "[-1]"});
}

TEST(Flip, ReversesTheGivenDims) {
  auto x = ints({1, 2, 3, 4, 5, 6}, {2, 3});
  on_cpu_and_reference([&] {
    EXPECT_EQ(flip(x, {0}).to_vector<int64_t>(), (I64{4, 5, 6, 1, 2, 3}));
    EXPECT_EQ(flip(x, {-1}).to_vector<int64_t>(), (I64{3, 2, 1, 6, 5, 4}));
    EXPECT_EQ(flip(x, {0, 1}).to_vector<int64_t>(), (I64{6, 5, 4, 3, 2, 1}));
    EXPECT_EQ(flip(x, {}).to_vector<int64_t>(), x.to_vector<int64_t>());
  });
  EXPECT_FALSE(flip(x, {}).shares_storage(x));
}

TEST(Flip, RejectsBadDims) {
  expect_error_with<IndexError>([] { flip(zeros({2, 3}), {0, -2}); }, {"flip", "more than once"});
  expect_error_with<IndexError>([] { flip(zeros({2, 3}), {2}); }, {"flip", "dim 2"});
}

// --- tril, triu, one_hot --------------------------------------------------------------

TEST(Tril, KeepsTheLowerTriangleOfTheLastTwoDims) {
  auto x = ones({2, 3, 3}, {.dtype = kInt64});
  on_cpu_and_reference([&] {
    EXPECT_EQ(tril(x).select(0, 1).to_vector<int64_t>(), (I64{1, 0, 0, 1, 1, 0, 1, 1, 1}));
    EXPECT_EQ(tril(x, 1).select(0, 0).to_vector<int64_t>(), (I64{1, 1, 0, 1, 1, 1, 1, 1, 1}));
    EXPECT_EQ(tril(x, -1).select(0, 0).to_vector<int64_t>(), (I64{0, 0, 0, 1, 0, 0, 1, 1, 0}));
    EXPECT_EQ(triu(x).select(0, 0).to_vector<int64_t>(), (I64{1, 1, 1, 0, 1, 1, 0, 0, 1}));
    EXPECT_EQ(triu(ones({2, 4}, {.dtype = kBool}), 2).to_vector<bool>(),
              (std::vector<bool>{false, false, true, true, false, false, false, true}));
  });
}

TEST(Tril, InPlaceWritesSelf) {
  on_cpu_and_reference([&] {
    auto x = ones({2, 2});
    tril_(x);
    EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{1, 0, 1, 1}));
    auto y = ones({3, 2});
    auto yt = y.t();
    triu_(yt, 1);
    EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{0, 0, 1, 0, 1, 1}));
  });
}

TEST(Tril, RejectsFewerThanTwoDims) {
  expect_error_with<ShapeError>([] { tril(zeros({3})); }, {"tril", "[3]"});
  expect_error_with<ShapeError>([] { triu(zeros({})); }, {"triu", "[]"});
  auto v = zeros({4});
  expect_error_with<ShapeError>([&] { triu_(v); }, {"triu", "[4]"});
}

TEST(OneHot, MakesInt64RowsAndInfersTheClassCount) {
  on_cpu_and_reference([&] {
    auto h = one_hot(ints({0, 2, 1}));
    EXPECT_EQ(h.dtype(), kInt64);
    EXPECT_EQ(h.sizes(), (Shape{3, 3}));
    EXPECT_EQ(h.to_vector<int64_t>(), (I64{1, 0, 0, 0, 0, 1, 0, 1, 0}));
    EXPECT_EQ(one_hot(ints({1, 0}, {2, 1}), 4).sizes(), (Shape{2, 1, 4}));
    EXPECT_EQ(one_hot(ints({}), 5).sizes(), (Shape{0, 5}));
  });
}

TEST(OneHot, RejectsBadClasses) {
  on_cpu_and_reference([&] {
    expect_error_with<IndexError>(
        [] {
          one_hot(ints({0, 3}), 3);
        },
        {"one_hot", "3", "num_classes 3"});
    expect_error_with<IndexError>(
        [] {
          one_hot(ints({-2, 1}), 3);
        },
        {"one_hot", "-2", "non-negative"});
    expect_error_with<IndexError>([] { one_hot(ints({-2, -1})); }, {"one_hot", "-2"});
  });
  expect_error_with<ValueError>([] { one_hot(ints({})); }, {"one_hot", "empty"});
  expect_error_with<ValueError>([] { one_hot(ints({1}), -2); }, {"one_hot", "-2"});
  expect_error_with<ValueError>([] { one_hot(meta({3}, kInt64)); }, {"one_hot", "meta"});
  expect_error_with<DTypeError>([] { one_hot(from_vector<int32_t>({1})); }, {"one_hot", "int32"});
  EXPECT_EQ(one_hot(meta({3}, kInt64), 4).sizes(), (Shape{3, 4}));
}

// --- view ops ----------------------------------------------------------------------

TEST(Views, ShareStorageWithTheExpectedStridesAndOffset) {
  auto x = arange(24).view({2, 3, 4});
  auto p = x.permute({2, 0, 1});
  EXPECT_TRUE(p.shares_storage(x));
  EXPECT_EQ(p.strides(), (Shape{1, 12, 4}));
  auto s = x.slice(2, 1, std::nullopt, 2);
  EXPECT_EQ(s.strides(), (Shape{12, 4, 2}));
  EXPECT_EQ(s.storage_offset(), 1);
  EXPECT_EQ(s.to_vector<int64_t>(), (I64{1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23}));
  EXPECT_EQ(x.select(1, -1).to_vector<int64_t>(), (I64{8, 9, 10, 11, 20, 21, 22, 23}));
  EXPECT_EQ(x.expand({2, 2, 3, 4}).strides(), (Shape{0, 12, 4, 1}));
  EXPECT_EQ(x.unsqueeze(1).sizes(), (Shape{2, 1, 3, 4}));
  EXPECT_EQ(x.view({6, -1}).sizes(), (Shape{6, 4}));
  EXPECT_EQ(zeros({1, 3, 1}).squeeze().sizes(), (Shape{3}));
}

TEST(Views, WritesThroughAViewReachTheBase) {
  auto x = zeros({3, 4}, {.dtype = kInt64});
  x.t().select(0, 2).fill_(5);
  x.slice(0, 0, 1).view({2, 2}).select(1, 1).fill_(7);
  EXPECT_EQ(x.to_vector<int64_t>(), (I64{0, 7, 5, 7, 0, 0, 5, 0, 0, 0, 5, 0}));
}

TEST(Views, RejectBadArguments) {
  auto x = zeros({2, 3});
  expect_error_with<ShapeError>([&] { x.view({4, 2}); }, {"view", "[4, 2]"});
  expect_error_with<ShapeError>([&] { x.view({-1, -1}); }, {"view", "-1"});
  expect_error_with<ShapeError>([&] { x.t().view({6}); }, {"view", "reshape"});
  expect_error_with<ShapeError>([&] { x.permute({0}); }, {"permute", "[0]"});
  expect_error_with<IndexError>([&] { x.permute({1, -1}); }, {"permute", "repeats"});
  expect_error_with<IndexError>([&] { x.squeeze(2); }, {"squeeze", "dim 2"});
  expect_error_with<IndexError>([&] { x.unsqueeze(3); }, {"unsqueeze", "dim 3"});
  expect_error_with<ShapeError>([&] { x.expand({3}); }, {"expand", "[3]"});
  expect_error_with<ShapeError>([&] { x.expand({2, 4}); }, {"expand", "[2, 4]"});
  expect_error_with<ShapeError>([&] { x.expand({-1, 2, 3}); }, {"expand", "-1"});
  expect_error_with<IndexError>([&] { scalar_tensor(1).slice(0, 0, 1); }, {"slice", "0-dim"});
  expect_error_with<ValueError>([&] { x.slice(1, 0, 2, 0); }, {"slice", "step"});
  expect_error_with<IndexError>([&] { x.select(1, 3); }, {"select", "index 3", "size 3"});
  expect_error_with<IndexError>([&] { scalar_tensor(1).select(0, 0); }, {"select", "0-dim"});
  expect_error_with<IndexError>([&] { x.flatten(1, 0); }, {"flatten", "start_dim 1", "end_dim 0"});
  expect_error_with<IndexError>([&] { x.flatten(0, 2); }, {"flatten", "dim 2"});
  expect_error_with<ShapeError>(
      [&] {
        x.unflatten(1, {2, 2});
      },
      {"unflatten", "[2, 2]", "dim 1", "size 3"});
  expect_error_with<ShapeError>([&] { x.unflatten(1, {-1, -1}); }, {"unflatten", "dim 1"});
  expect_error_with<ShapeError>([&] { x.unflatten(0, {}); }, {"unflatten", "empty"});
  expect_error_with<IndexError>([&] { x.unflatten(2, {3}); }, {"unflatten", "dim 2"});
  expect_error_with<IndexError>([&] { scalar_tensor(1).unflatten(0, {1}); },
                                {"unflatten", "0-dim"});
}

// flatten is a view where the merged dims' strides allow it and a copy
// elsewhere (as reshape); unflatten is always a view.
TEST(Views, FlattenAndUnflatten) {
  const auto equal = [](const Tensor& a, const Tensor& b) {
    return a.sizes() == b.sizes() && a.to_vector<int64_t>() == b.to_vector<int64_t>();
  };
  const Tensor x = arange(24).view({2, 3, 4});
  const Tensor f = x.flatten(1);
  EXPECT_EQ(f.sizes(), (Shape{2, 12}));
  EXPECT_TRUE(f.shares_storage(x));
  EXPECT_EQ(x.flatten().sizes(), (Shape{24}));
  EXPECT_EQ(x.flatten(0, 1).sizes(), (Shape{6, 4}));
  EXPECT_EQ(scalar_tensor(5).flatten().sizes(), (Shape{1}));
  const Tensor t = x.transpose(0, 2);  // [4, 3, 2], strides [1, 4, 12]
  const Tensor copied = t.flatten(1);
  EXPECT_FALSE(copied.shares_storage(x));
  EXPECT_TRUE(equal(copied, t.contiguous().view({4, 6})));
  // Dims 0 and 1 of a slice along dim 2 still merge as a view.
  const Tensor sliced = x.slice(2, 1, 3);
  EXPECT_TRUE(sliced.flatten(0, 1).shares_storage(x));
  EXPECT_TRUE(equal(sliced.flatten(0, 1), sliced.contiguous().view({6, 2})));
  EXPECT_TRUE(t.flatten(1, 1).shares_storage(x));

  const Tensor u = x.unflatten(-1, {2, -1});
  EXPECT_EQ(u.sizes(), (Shape{2, 3, 2, 2}));
  EXPECT_EQ(u.strides(), (Shape{12, 4, 2, 1}));
  EXPECT_TRUE(equal(u, x.view({2, 3, 2, 2})));
  const Tensor ut = t.unflatten(0, {2, 2});  // strided: the parts step over dim 0's stride
  EXPECT_EQ(ut.strides(), (Shape{2, 1, 4, 12}));
  EXPECT_TRUE(equal(ut, t.contiguous().view({2, 2, 3, 2})));
  EXPECT_TRUE(equal(ut.flatten(0, 1), t));
  EXPECT_EQ(zeros({0, 6}).unflatten(1, {3, 2}).sizes(), (Shape{0, 3, 2}));
}

// --- canonical attributes --------------------------------------------------------------

namespace {

struct RuleCall {
  ops::OpId op;
  std::vector<Tensor> inputs;
  ops::Attrs attrs;
};

// Runs op's shape rule on attrs in place and returns the output shapes.
std::vector<Shape> run_rule(const RuleCall& call, ops::Attrs& attrs) {
  const auto& schema = ops::op_schema(call.op);
  ops::ShapeCtx ctx{schema, call.inputs, attrs, {}, {}};
  schema.shape_rule(ctx);
  std::vector<Shape> shapes;
  for (const auto& m : ctx.outputs) shapes.push_back(m.sizes);
  return shapes;
}

}  // namespace

TEST(ShapeRules, CanonicalizeAttributesSoThatARerunChangesNothing) {
  using ops::OpId;
  const auto i64 = kInt64;
  const std::vector<RuleCall> calls = {
      {OpId::cat, {meta({2, 3}), meta({2, 4})}, {int64_t{-1}}},
      {OpId::cat, {meta({0}), meta({0})}, {int64_t{-1}}},
      {OpId::stack, {meta({2, 3}), meta({2, 3})}, {int64_t{-1}}},
      {OpId::index_select, {meta({4, 5}), meta({3}, i64)}, {int64_t{-1}}},
      {OpId::gather, {meta({4, 5}), meta({2, 5}, i64)}, {int64_t{-2}}},
      {OpId::scatter, {meta({4, 5}), meta({2, 5}, i64), meta({2, 5})}, {int64_t{-1}}},
      {OpId::repeat, {meta({2, 3})}, {Shape{4, 2, 1}}},
      {OpId::flip, {meta({2, 3, 4})}, {Shape{-1, 0}}},
      {OpId::flip, {meta({2, 3})}, {Shape{}}},
      {OpId::tril, {meta({3, 3})}, {int64_t{-5}}},
      {OpId::one_hot, {meta({3}, i64)}, {int64_t{7}}},
      {OpId::view, {meta({2, 3})}, {Shape{-1, 2}}},
      {OpId::permute, {meta({2, 3, 4})}, {Shape{-1, 0, -2}}},
      {OpId::unsqueeze, {meta({2, 3})}, {int64_t{-1}}},
      {OpId::flatten, {meta({2, 3, 4})}, {int64_t{-2}, int64_t{-1}}},
      {OpId::flatten, {meta({})}, {int64_t{0}, int64_t{-1}}},
      {OpId::unflatten, {meta({2, 12})}, {int64_t{-1}, Shape{3, -1}}},
      {OpId::squeeze, {meta({2, 3})}, {Shape{}}},
      {OpId::squeeze, {meta({2, 1, 3, 1})}, {Shape{}}},
      {OpId::squeeze, {meta({2, 1})}, {Shape{-1}}},
      {OpId::expand, {meta({3, 1})}, {Shape{2, -1, 4}}},
      {OpId::slice, {meta({9})}, {int64_t{-1}, int64_t{-20}, int64_t{100}, int64_t{2}}},
      {OpId::slice, {meta({10})}, {int64_t{0}, int64_t{0}, int64_t{10}, INT64_MAX}},
      {OpId::select, {meta({2, 5})}, {int64_t{-1}, int64_t{-2}}},
  };
  for (const auto& call : calls) {
    SCOPED_TRACE(ops::op_schema(call.op).name);
    ops::Attrs once = call.attrs;
    const auto shapes = run_rule(call, once);
    ops::Attrs twice = once;
    EXPECT_EQ(run_rule(call, twice), shapes);
    EXPECT_TRUE(twice == once);
  }
}

TEST(ViewRules, RejectNegativeExpandSizesAndSliceWithHugeSteps) {
  EXPECT_THROW(zeros({1}).expand({-2}), ShapeError);
  EXPECT_EQ(arange(10).slice(0, 0, 10, INT64_MAX).sizes(), (Shape{1}));
}

// --- the compositions ported models reach for ------------------------------------------

TEST(Compositions, RollUnbindAndRepeatInterleaveMatchPyTorch) {
  const Tensor x = ints({0, 1, 2, 3, 4, 5}, {2, 3});
  // torch.roll(x, 1, 1) = [[2, 0, 1], [5, 3, 4]]; roll(x, -1) over the flattened x.
  EXPECT_EQ(roll(x, {1}, {1}).to_vector<int64_t>(), (I64{2, 0, 1, 5, 3, 4}));
  EXPECT_EQ(roll(x, {-1}).to_vector<int64_t>(), (I64{1, 2, 3, 4, 5, 0}));
  EXPECT_EQ(roll(x, {1, 4}, {0, 1}).to_vector<int64_t>(), (I64{5, 3, 4, 2, 0, 1}));
  EXPECT_EQ(roll(x, {3}, {1}).to_vector<int64_t>(), x.to_vector<int64_t>());
  EXPECT_EQ(roll(x, {-1}).sizes(), (Shape{2, 3}));
  expect_error_with<ValueError>([&] { roll(x, {1, 2}); }, {"roll", "[1, 2]"});
  expect_error_with<ValueError>([&] { roll(x, {1}, {0, 1}); }, {"roll", "same length"});
  const std::vector<Tensor> rows = x.unbind(0), columns = unbind(x, 1);
  ASSERT_EQ(rows.size(), 2u);
  ASSERT_EQ(columns.size(), 3u);
  EXPECT_EQ(rows[1].to_vector<int64_t>(), (I64{3, 4, 5}));
  EXPECT_EQ(columns[2].to_vector<int64_t>(), (I64{2, 5}));
  EXPECT_EQ(repeat_interleave(ints({1, 2}), 2).to_vector<int64_t>(), (I64{1, 1, 2, 2}));
  EXPECT_EQ(repeat_interleave(x, 2, 0).sizes(), (Shape{4, 3}));
  EXPECT_EQ(repeat_interleave(x, 2, -1).to_vector<int64_t>(),
            (I64{0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5}));
  EXPECT_EQ(repeat_interleave(x, 0, 1).sizes(), (Shape{2, 0}));
  expect_error_with<ValueError>([&] { repeat_interleave(x, -1, 0); }, {"repeat_interleave", "-1"});
  // Gradients flow through the views and the concatenation.
  Tensor w = floats({1, 2, 3}, {3}).requires_grad_();
  (roll(w, {1}) * floats({1, 10, 100}, {3})).sum().backward();
  EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{10, 100, 1}));
}

TEST(Compositions, OuterBaddbmmClampBoundsAndTensorMethods) {
  const Tensor a = floats({1, 2}, {2}), b = floats({3, 4, 5}, {3});
  EXPECT_EQ(outer(a, b).to_vector<float>(), (std::vector<float>{3, 4, 5, 6, 8, 10}));
  expect_error_with<ShapeError>([&] { outer(a.reshape({1, 2}), b); }, {"outer", "[1, 2]"});
  const Tensor b1 = floats({1, 2, 3, 4}, {1, 2, 2}), b2 = floats({1, 0, 0, 1}, {1, 2, 2});
  const Tensor self = floats({10, 20, 30, 40}, {1, 2, 2});
  EXPECT_EQ(baddbmm(self, b1, b2, 0.5, 2).to_vector<float>(), (std::vector<float>{7, 14, 21, 28}));
  const Tensor nan = full({1, 2, 2}, std::numeric_limits<double>::quiet_NaN());
  EXPECT_EQ(baddbmm(nan, b1, b2, 0).to_vector<float>(), (std::vector<float>{1, 2, 3, 4}));
  const Tensor x = floats({-2, 0.5, 3}, {3});
  EXPECT_EQ(clamp_min(x, 0).to_vector<float>(), (std::vector<float>{0, 0.5, 3}));
  EXPECT_EQ(x.clamp_max(1).to_vector<float>(), (std::vector<float>{-2, 0.5, 1}));
  EXPECT_EQ(x.gelu().to_vector<float>(), gelu(x).to_vector<float>());
  const auto [values, indices] = ints({3, 9, 4, 1}, {2, 2}).max(1);
  EXPECT_EQ(values.to_vector<int64_t>(), (I64{9, 4}));
  EXPECT_EQ(indices.to_vector<int64_t>(), (I64{1, 0}));
  EXPECT_EQ(ints({3, 9, 4, 1}, {2, 2}).min(0, true).values.sizes(), (Shape{1, 2}));
  EXPECT_EQ(ints({0, 1, 2, 3, 4}).chunk(2).size(), 2u);
  Tensor target = zeros({3});
  target.scatter_(0, ints({2, 0}), floats({7, 8}, {2}));
  EXPECT_EQ(target.to_vector<float>(), (std::vector<float>{8, 0, 7}));
}
