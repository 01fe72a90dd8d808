#include <gtest/gtest.h>

#include "kiln/kiln.h"

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
