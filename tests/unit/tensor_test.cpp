#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "core/philox.h"
#include "kiln/kiln.h"
#include "ops/dispatch.h"

using namespace kiln;

TEST(Tensor, FactoriesHaveShapeDtypeAndValues) {
  auto z = zeros({2, 3});
  EXPECT_EQ(z.sizes(), (Shape{2, 3}));
  EXPECT_EQ(z.dtype(), kFloat32);
  EXPECT_EQ(z.to_vector<float>(), std::vector<float>(6, 0.f));
  auto a = arange(5);
  EXPECT_EQ(a.dtype(), kInt64);
  EXPECT_EQ(a.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  auto f = full({2}, 2.5, {.dtype = kFloat64});
  EXPECT_EQ(f.to_vector<double>(), (std::vector<double>{2.5, 2.5}));
}

TEST(Tensor, ArithmeticBroadcastsAndPromotes) {
  auto x = from_vector<int32_t>({1, 2, 3, 4}, Shape{2, 2});
  auto y = x * 2;
  EXPECT_EQ(y.dtype(), kInt32);
  EXPECT_EQ(y.to_vector<int32_t>(), (std::vector<int32_t>{2, 4, 6, 8}));
  auto z = x * 0.5;
  EXPECT_EQ(z.dtype(), kFloat32);
  EXPECT_EQ(z.to_vector<float>(), (std::vector<float>{0.5f, 1.f, 1.5f, 2.f}));
  auto row = from_vector<float>({10, 20});
  auto s = x + row;
  EXPECT_EQ(s.to_vector<float>(), (std::vector<float>{11, 22, 13, 24}));
}

TEST(Tensor, ViewsShareStorageAndBumpVersion) {
  auto x = zeros({3, 4});
  auto v0 = x.version();
  auto row = x.index({1, Slice(1, 3)});
  EXPECT_TRUE(row.shares_storage(x));
  EXPECT_EQ(row.sizes(), (Shape{2}));
  row.fill_(7);
  EXPECT_GT(x.version(), v0);
  EXPECT_EQ(x.to_vector<float>()[5], 7.f);
  EXPECT_EQ(x.to_vector<float>()[4], 0.f);
}

TEST(Tensor, PrintsLikePyTorch) {
  EXPECT_EQ(to_string(from_vector<float>({1.f, 2.5f, -3.f})), "tensor([ 1.0000,  2.5000, -3.0000])");
  EXPECT_EQ(to_string(arange(4).view({2, 2})), "tensor([[0, 1],\n        [2, 3]])");
  EXPECT_EQ(to_string(from_vector<float>({1.f, 2.f})), "tensor([1., 2.])");
  EXPECT_EQ(to_string(from_vector<double>({0.5})), "tensor([0.5000], dtype=float64)");
  EXPECT_EQ(to_string(full({2}, true)), "tensor([True, True])");
  EXPECT_EQ(to_string(zeros({0, 3})), "tensor([], size=[0, 3])");
  EXPECT_EQ(to_string(scalar_tensor(3)), "tensor(3)");
  EXPECT_EQ(to_string(from_vector<float>({1e-5f, 1.f})), "tensor([1.0000e-05, 1.0000e+00])");
  EXPECT_EQ(to_string(arange(2, {.dtype = kInt32}).view({1, 1, 2})), "tensor([[[0, 1]]], dtype=int32)");
  const std::string big = to_string(arange(2000));
  EXPECT_EQ(big, "tensor([   0,    1,    2,  ..., 1997, 1998, 1999])");
}

TEST(Tensor, IndexingFollowsPythonSlices) {
  auto x = arange(24).view({2, 3, 4});
  EXPECT_EQ(x.index({1, 2, 3}).item<int64_t>(), 23);
  EXPECT_EQ(x.index({Slice(), -1, Slice(std::nullopt, std::nullopt, 2)}).to_vector<int64_t>(),
            (std::vector<int64_t>{8, 10, 20, 22}));
  EXPECT_EQ(x.index({Ellipsis, 0}).sizes(), (Shape{2, 3}));
  EXPECT_EQ(x.index({None, 0}).sizes(), (Shape{1, 3, 4}));
  EXPECT_EQ(x.index({Slice(-1)}).sizes(), (Shape{1, 3, 4}));
  EXPECT_EQ(x[1][0].to_vector<int64_t>(), (std::vector<int64_t>{12, 13, 14, 15}));
  EXPECT_THROW(x.index({0, 0, 0, 0}), IndexError);
  EXPECT_THROW(x.index({5}), IndexError);
  EXPECT_THROW(x.index({Ellipsis, Ellipsis}), IndexError);
  EXPECT_THROW(x.index({Slice(0, 2, 0)}), ValueError);
}

TEST(Tensor, ItemAndToVectorConvert) {
  EXPECT_EQ(full({}, 2.75).item<int>(), 2);
  EXPECT_EQ(full({1, 1}, 7).item<double>(), 7.0);
  EXPECT_THROW(ones({2}).item<float>(), ShapeError);
  EXPECT_THROW(Tensor().numel(), Error);
  auto h = from_vector<float>({1.5f, -2.f}).to(kBFloat16);
  EXPECT_EQ(h.to_vector<double>(), (std::vector<double>{1.5, -2.0}));
  EXPECT_EQ(ones({2, 3}).t().contiguous().to_vector<float>(), std::vector<float>(6, 1.f));
  EXPECT_THROW(ones({2}).data<int32_t>(), DTypeError);
}

TEST(Tensor, FromBlobWrapsAndCallsDeleterWhenLastViewDies) {
  std::vector<float> buffer = {1, 2, 3, 4, 5, 6};
  int deleted = 0;
  {
    Tensor t = from_blob(buffer.data(), {2, 3}, kFloat32, [&](void*) { ++deleted; });
    Tensor col = t.index({Slice(), 1});
    t = Tensor();
    EXPECT_EQ(col.to_vector<float>(), (std::vector<float>{2, 5}));
    col.fill_(0);
    EXPECT_EQ(deleted, 0);
  }
  EXPECT_EQ(deleted, 1);
  EXPECT_EQ(buffer[1], 0.f);
  EXPECT_THROW(from_vector<float>({1, 2, 3}, Shape{2, 2}), ShapeError);
}

TEST(Tensor, AnyNumberOfDims) {
  Shape shape(9, 2);
  auto x = ones(shape);
  auto y = (x + x).permute({8, 7, 6, 5, 4, 3, 2, 1, 0}).contiguous();
  EXPECT_EQ(y.numel(), 512);
  EXPECT_EQ(y.to_vector<float>(), std::vector<float>(512, 2.f));
}

TEST(Tensor, ReshapeCopiesOnlyWhenItMust) {
  auto x = arange(6).view({2, 3});
  EXPECT_TRUE(x.reshape({3, 2}).shares_storage(x));
  auto t = x.t();
  EXPECT_THROW(t.view({6}), ShapeError);
  auto r = t.reshape({6});
  EXPECT_FALSE(r.shares_storage(x));
  EXPECT_EQ(r.to_vector<int64_t>(), (std::vector<int64_t>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(x.flatten().sizes(), (Shape{6}));
  EXPECT_EQ(x.view({-1, 1, 2}).sizes(), (Shape{3, 1, 2}));
}

// The stream's values in bulk (the dropout kernels' u32s) are its values one
// by one (u32), at any start: aligned or not, and where the indices wrap
// past 2^64 - 1 to 0.
TEST(Random, PhiloxValuesInBulkAreTheValuesOneByOne) {
  for (uint64_t first :
       {uint64_t{0}, uint64_t{3}, uint64_t{1} << 40, ~uint64_t{0} - 100, ~uint64_t{0}}) {
    std::vector<uint32_t> bulk(300);
    philox::u32s(7, first, static_cast<int64_t>(bulk.size()), bulk.data());
    for (size_t i = 0; i < bulk.size(); ++i)
      ASSERT_EQ(bulk[i], philox::u32(7, first + i)) << "first " << first << " value " << i;
  }
}

// Philox 4x32-10 against the published known answers (Salmon et al., SC 2011):
// counter 0 under key 0. kiln's counters fill the low 64 bits.
TEST(Random, PhiloxMatchesThePublishedKnownAnswer) {
  const philox::Block b = philox::block(0, 0);
  EXPECT_EQ(b.v[0], 0x6627e8d5u);
  EXPECT_EQ(b.v[1], 0xe169c58du);
  EXPECT_EQ(b.v[2], 0xbc57ac4cu);
  EXPECT_EQ(b.v[3], 0x9b00dbd8u);
  // rand's float32 values are the top 24 bits of those words over 2^24, on
  // the CPU and the reference kernels alike.
  const std::vector<uint32_t> words = {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u};
  std::vector<float> expected;
  for (uint32_t w : words) expected.push_back(static_cast<float>(w >> 8) / 16777216.0f);
  for (bool reference : {false, true}) {
    std::optional<ops::ReferenceModeGuard> guard;
    if (reference) guard.emplace();
    Generator g(0);
    EXPECT_EQ(rand({4}, {}, &g).to_vector<float>(), expected) << "reference: " << reference;
  }
}

TEST(Random, SeededStreamsRepeatAndDifferAcrossSeeds) {
  manual_seed(3);
  auto a = randn({1000});
  auto b = rand({10});
  manual_seed(3);
  EXPECT_EQ(randn({1000}).to_vector<float>(), a.to_vector<float>());
  EXPECT_EQ(rand({10}).to_vector<float>(), b.to_vector<float>());
  manual_seed(4);
  EXPECT_NE(randn({1000}).to_vector<float>(), a.to_vector<float>());
  auto v = a.to_vector<float>();
  double mean = 0, sq = 0;
  for (float f : v) mean += f, sq += double(f) * f;
  mean /= v.size();
  EXPECT_NEAR(mean, 0.0, 0.1);
  EXPECT_NEAR(sq / v.size() - mean * mean, 1.0, 0.15);
  auto r = randint(3, 7, {500}).to_vector<int64_t>();
  EXPECT_EQ(*std::min_element(r.begin(), r.end()), 3);
  EXPECT_EQ(*std::max_element(r.begin(), r.end()), 6);
  EXPECT_THROW(randint(3, 3, {2}), ValueError);
  EXPECT_THROW(rand({2}, {.dtype = kInt32}), DTypeError);
  EXPECT_THROW(arange(0, 5, 0), ValueError);
  EXPECT_THROW(arange(5, 0, 1), ValueError);
  EXPECT_THROW(zeros({-1}), ShapeError);
}
