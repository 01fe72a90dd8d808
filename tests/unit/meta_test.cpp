#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "ops/dispatch.h"

using namespace kiln;

namespace {
Tensor meta(const Shape& s, DType t = kFloat32) {
  return ops::make_tensor(s, t, Device::cpu(), true);
}
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

// A meta tensor mixed with one that has values is a DeviceError naming the op
// and both inputs: the result used to be meta (values silently gone), and a
// meta source written in place copied nothing. Numbers (0-dim) still mix.
TEST(MetaTensor, MixingWithTensorsThatHaveValuesIsAnError) {
  const Tensor m = meta({2, 3}), real = ones({2, 3});
  try {
    (void)(m + real);
    ADD_FAILURE() << "meta + cpu gave a result";
  } catch (const DeviceError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("add"), std::string::npos) << what;
    EXPECT_NE(what.find("input 0 is a meta tensor"), std::string::npos) << what;
    EXPECT_NE(what.find("input 1"), std::string::npos) << what;
  }
  EXPECT_THROW((void)matmul(real, meta({3, 2})), DeviceError);
  Tensor target = zeros({2, 3});
  EXPECT_THROW(target.copy_(m), DeviceError);
  EXPECT_EQ(target.to_vector<float>(), std::vector<float>(6, 0));
  EXPECT_TRUE((m * scalar_tensor(2.0)).is_meta());
  Tensor meta_target = meta({2, 3});
  meta_target.copy_(real);  // a meta tensor takes any writes and stays meta
  EXPECT_TRUE(meta_target.is_meta());
}
