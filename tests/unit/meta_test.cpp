#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "ops/dispatch.h"

using namespace kiln;

namespace {
Tensor meta(const Shape& s, DType t = kFloat32) { return ops::make_tensor(s, t, Device::cpu(), true); }
}  // namespace

TEST(MetaTensor, OpsRunOnlyTheirShapeRule) {
  auto a = meta({4, 1, 3});
  auto b = meta({5, 1}, kInt32);
  auto c = a * b + 1;
  EXPECT_TRUE(c.is_meta());
  EXPECT_EQ(c.sizes(), (Shape{4, 5, 3}));
  EXPECT_EQ(c.dtype(), kFloat32);
  EXPECT_THROW(c.data_ptr(), DeviceError);
  auto v = c.permute({2, 0, 1}).index({Slice(1), 0});
  EXPECT_TRUE(v.is_meta());
  EXPECT_EQ(v.sizes(), (Shape{2, 5}));
}

TEST(MetaTensor, ShapeErrorsAreRaisedWithoutData) {
  EXPECT_THROW(meta({2, 3}) + meta({4}), ShapeError);
  EXPECT_THROW(meta({2, 3}).view({5}), ShapeError);
}

TEST(MetaTensor, InPlaceOpsCheckAndBumpVersion) {
  auto a = meta({2, 3});
  const auto v = a.version();
  a.add_(meta({3}));
  EXPECT_GT(a.version(), v);
  EXPECT_THROW(a.add_(meta({4, 2, 3})), ShapeError);
}
