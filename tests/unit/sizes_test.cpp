// Sizes that do not fit (docs/tensors.md, "Sizes that do not fit"): element
// and byte counts made from users' numbers are exact or a ShapeError naming
// the op and the sizes, never a wrapped count, a short allocation or a crash.
// The expected limits are written out here: 2^63 - 1 elements, 2^62 bytes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "backends/cpu/cpu_allocator.h"
#include "kiln/kiln.h"
#include "ops/api/backward_ops.h"
#include "ops/dispatch.h"
#include "unit/expect_error.h"

using kiln::testing::expect_error_with;

using namespace kiln;

namespace {

constexpr int64_t k32 = int64_t{1} << 32;
constexpr int64_t k62 = int64_t{1} << 62;
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

// The message of a ShapeError from f, which must throw one.
template <class F>
std::string shape_error(F&& f) {
  try {
    f();
  } catch (const ShapeError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
    return {};
  }
  ADD_FAILURE() << "no exception thrown";
  return {};
}

// A refused size never shows a wrapped number: no negative size where the
// user gave none, no 2^64 - k.
void expect_no_wrapped_number(const std::string& what) {
  EXPECT_EQ(what.find("-9223372036854775"), std::string::npos) << what;
  EXPECT_EQ(what.find("1844674407370955"), std::string::npos) << what;
}

TEST(Sizes, FactoriesRefuseMoreBytesThanATensorCanHold) {
  // 2^62 float32 elements are 2^64 bytes: the allocation used to wrap to 0.
  expect_error_with<ShapeError>([] { empty({k62}); }, {"empty", "[4611686018427387904]", "2^62"});
  expect_error_with<ShapeError>([] { zeros({k62}); }, {"full", "[4611686018427387904]"});
  expect_error_with<ShapeError>([] { ones({int64_t{1} << 60}, {.dtype = kFloat64}); },
                                {"full", "float64", "2^62"});
  expect_error_with<ShapeError>([] { linspace(0, 1, k62); }, {"linspace", "4611686018427387904"});
  expect_error_with<ShapeError>([] { eye(k62, 4); }, {"eye", "[4611686018427387904, 4]"});
  expect_error_with<ShapeError>([] { rand({k62}); }, {"rand", "4611686018427387904"});
  expect_error_with<ShapeError>([] { randn({k32, k32}); }, {"randn", "[4294967296, 4294967296]"});
  expect_error_with<ShapeError>([] { randint(0, 5, {k62}); }, {"randint"});
  // A product past int64: the count used to wrap to 0 (a "tensor" of 2^64
  // elements with no storage).
  expect_error_with<ShapeError>(
      [] {
        zeros({k32, k32});
      },
      {"full", "[4294967296, 4294967296]", "2^63 - 1 elements"});
  expect_error_with<ShapeError>([] { eye(k32, k32); }, {"eye", "2^63 - 1 elements"});
  // A size of zero makes the tensor empty whatever the other sizes, as long
  // as the nonzero ones multiply within int64 (so that its strides do too).
  const Tensor none = zeros({k62, 0, 1});
  EXPECT_EQ(none.numel(), 0);
  EXPECT_EQ(none.sizes(), (Shape{k62, 0, 1}));
  expect_error_with<ShapeError>([] { zeros({k62, 0, 4}); }, {"full", "2^63 - 1 elements"});
}

TEST(Sizes, ARefusedRandomFactoryLeavesTheGeneratorWhereItWas) {
  Generator g(7);
  const Tensor before = rand({4}, {}, &g);
  Generator h(7);
  expect_error_with<ShapeError>([&] { rand({k62}, {}, &h); }, {"rand"});
  expect_error_with<ShapeError>([&] { randn({-1, 2}, {}, &h); }, {"randn", "non-negative"});
  EXPECT_EQ(rand({4}, {}, &h).to_vector<float>(), before.to_vector<float>());
}

TEST(Sizes, ArangeCountsExactlyOverTheWholeIntegerRange) {
  // INT64_MAX elements "succeeded" over no memory; the full range overflowed
  // the count itself.
  expect_error_with<ShapeError>([] { arange(0, kMax); }, {"arange", "int64", "2^62"});
  expect_error_with<ShapeError>([] { arange(std::numeric_limits<int64_t>::min(), kMax); },
                                {"arange", "more than 2^63 - 1 elements"});
  expect_error_with<ShapeError>([] { arange(0.0, 1e300, 1.0); }, {"arange", "1e+300"});
  expect_error_with<ShapeError>([] { arange(0.0, 1.0, 1e-300); }, {"arange"});
  // The exact count at the ends of the range, where the old formula wrapped.
  EXPECT_EQ(arange(kMax - 2, kMax).to_vector<int64_t>(),
            (std::vector<int64_t>{kMax - 2, kMax - 1}));
  EXPECT_EQ(arange(kMax, kMax - 3, -2).to_vector<int64_t>(),
            (std::vector<int64_t>{kMax, kMax - 2}));
  EXPECT_EQ(
      arange(std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::min() + 1).numel(),
      1);
}

TEST(Sizes, ViewsRefuseMoreElementsThanACountCanHold) {
  const Tensor one = ones({1});
  // expand to 2^64 elements then contiguous() gave a tensor with no storage.
  const std::string what = shape_error([&] { one.expand({k32, k32}); });
  EXPECT_NE(what.find("expand"), std::string::npos) << what;
  EXPECT_NE(what.find("[4294967296, 4294967296]"), std::string::npos) << what;
  expect_error_with<ShapeError>(
      [&] {
        one.expand({k62}).unsqueeze(0).expand({4, k62});
      },
      {"expand", "[4, 4611686018427387904]"});
  // A view of 2^62 elements is fine (it holds one float); copying it is not.
  const Tensor wide = one.expand({k62});
  EXPECT_EQ(wide.numel(), k62);
  expect_error_with<ShapeError>([&] { wide.contiguous(); }, {"copy", "2^62"});
  expect_error_with<ShapeError>([&] { (wide + 1.0); }, {"add", "2^62"});
  // view / reshape with sizes whose product wraps, with and without -1.
  expect_error_with<ShapeError>(
      [] {
        zeros({0}).reshape({k32, k32, 1});
      },
      {"reshape", "4294967296"});
  expect_error_with<ShapeError>([] { zeros({0}).view({k32, k32, -1}); }, {"view"});
  expect_error_with<ShapeError>([] { zeros({6}).view({3, k62, -1}); }, {"view"});
  EXPECT_EQ(zeros({0}).view({k62, 0}).sizes(), (Shape{k62, 0}));
}

TEST(Sizes, ShapeRulesThatMakeSizesComputeThemExactly) {
  const Tensor x = ones({2, 2});
  std::vector<std::string> messages;
  messages.push_back(shape_error([&] { repeat(x, {k32, k32}); }));
  messages.push_back(shape_error([&] { repeat(ones({3}), {k62, 3}); }));
  messages.push_back(shape_error([&] { repeat(ones({2}), {k62}); }));
  const Tensor wide = ones({1}).expand({k62});
  messages.push_back(shape_error([&] { cat({wide, wide, wide, wide}); }));
  messages.push_back(shape_error([&] { stack({wide, wide, wide}); }));
  messages.push_back(shape_error([&] { nn::functional::pad(ones({1, 2}), {kMax, 2}); }));
  messages.push_back(shape_error([&] { nn::functional::pad(ones({1, 2}), {k62, k62}); }));
  nn::functional::InterpolateOptions by_size{.size = std::vector<int64_t>{k32, k32}};
  messages.push_back(shape_error([&] {
    nn::functional::interpolate(ones({1, 1, 2, 2}), by_size);
  }));
  nn::functional::InterpolateOptions by_scale{.scale_factor = std::vector<double>{1e300}};
  messages.push_back(shape_error([&] {
    nn::functional::interpolate(ones({1, 1, 2, 2}), by_scale);
  }));
  const Tensor column = ones({1, 1}).expand({k32, 1}), row = ones({1, 1}).expand({1, k32});
  messages.push_back(shape_error([&] { matmul(column, row); }));
  messages.push_back(shape_error([&] { one_hot(zeros({2}, {.dtype = kInt64}), k62); }));
  messages.push_back(shape_error([] {
    conv2d(ones({1, 1, 2, 2}), ones({1, 1, 1, 1}), {}, {.padding = {k62, k62}});
  }));
  messages.push_back(shape_error([] {
    conv2d(ones({1, 1, 2, 2}), ones({1, 1, 2, 2}), {}, {.padding = {1, 1}, .dilation = {k62, 1}});
  }));
  messages.push_back(shape_error([] {
    max_pool2d(ones({1, 1, 4, 4}), {2, 2}, {1, 1}, {0, 0}, {k62, 1});
  }));
  const std::vector<std::string> ops = {"repeat",  "repeat", "repeat",      "cat",         "stack",
                                        "pad",     "pad",    "interpolate", "interpolate", "matmul",
                                        "one_hot", "conv2d", "conv2d",      "max_pool2d"};
  ASSERT_EQ(messages.size(), ops.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    EXPECT_NE(messages[i].find(ops[i]), std::string::npos) << i << ": " << messages[i];
    expect_no_wrapped_number(messages[i]);
  }
}

TEST(Sizes, BlobsAndVectorsWithSizesPastTheCountAreRefused) {
  std::vector<float> data(4);
  expect_error_with<ShapeError>(
      [&] {
        from_blob(data.data(), {k32, k32}, kFloat32);
      },
      {"from_blob"});
  expect_error_with<ShapeError>(
      [&] {
        from_blob(data.data(), {2, 2}, kFloat32, {}, Shape{k62, 1});
      },
      {"from_blob"});
  expect_error_with<ShapeError>(
      [] {
        from_vector(std::vector<float>{}, Shape{k32, k32, 1});
      },
      {"from_vector"});
}

TEST(Sizes, TheAllocatorsRefuseBlocksPastTheLimitInsteadOfRoundingThem) {
  // The CPU allocator's rounding used to wrap SIZE_MAX to a 64-byte block.
  for (const size_t n : {std::numeric_limits<size_t>::max(), (size_t{1} << 62) + 1}) {
    expect_error_with<ShapeError>(
        [&] { backend::CpuAllocator::instance().allocate(n, Device::cpu()); },
        {"cpu allocator", std::to_string(n), "2^62"});
  }
}

}  // namespace

// An empty tensor may have a huge dim beside its 0 (it holds no bytes). A
// kernel that walks that dim while another is empty would run for hours
// (which the test's timeout catches). Each call gives a kiln::Error on both
// the CPU and the reference kernels, or the same values on both.
TEST(Sizes, EmptyInputsWithAHugeDimFinishAtOnce) {
  constexpr int64_t kHuge = int64_t{1} << 40;
  namespace F = nn::functional;
  using Call = std::function<TensorList()>;
  const std::vector<std::pair<std::string, Call>> calls = {
      {"reductions",
       [] {
         const Tensor x = empty({3, kHuge, 0});
         TensorList out;
         for (const Dims& d : {Dims{1, 2}, Dims{}}) {
           for (Tensor y : {sum(x, d), mean(x, d), prod(x, d), var(x, d), norm(x, 2, d),
                            logsumexp(x, d), any(x, d), all(x, d)})
             out.push_back(y);
         }
         out.push_back(argmax(empty({kHuge, 0}), 0));
         return out;
       }},
      {"amax over the empty dim",
       [] {
         return TensorList{amax(empty({2, 0}), {1})};
       }},
      {"adaptive_avg_pool2d of an empty plane",
       [] {
         return TensorList{adaptive_avg_pool2d(empty({1, 1, kHuge, 0}), {2, 2})};
       }},
      {"adaptive_avg_pool2d_backward of an empty gradient",
       [] {
         return TensorList{
             ops::adaptive_avg_pool2d_backward(empty({1, 1, kHuge, 0}), {1, 1, 3, 2})};
       }},
      {"interpolate of an empty plane",
       [] {
         return TensorList{
             F::interpolate(empty({1, 1, kHuge, 0}), {.size = std::vector<int64_t>{2, 2}})};
       }},
      {"interpolate_backward of an empty gradient",
       [] {
         return TensorList{
             ops::interpolate_backward(empty({1, 1, kHuge, 0}), {1, 1, 3, 2}, "nearest", false)};
       }},
      {"conv_backward_weight over an empty batch",
       [] {
         const Tensor x = empty({kHuge, 1, 1, 0});
         return TensorList{ops::conv_backward_weight(empty({kHuge, 1, 1, 0}), x, {1, 1, 1, 1},
                                                     {1, 1}, {0}, {1, 1}, 1)};
       }},
      {"batch_norm over a batch of empty planes",
       [] {
         Tensor rm = zeros({3}), rv = ones({3});
         return TensorList{F::batch_norm(empty({kHuge, 3, 0}), rm, rv, {}, {}, true), rm, rv};
       }},
      {"layer_norm and group_norm of empty rows",
       [] {
         return TensorList{F::layer_norm(empty({kHuge, 0}), {0}),
                           F::group_norm(empty({kHuge, 2, 0}), 1)};
       }},
      {"index, scan and shape ops", [] {
         const Tensor x = empty({kHuge, 0});
         const Tensor i = empty({kHuge, 0}, {.dtype = kInt64});
         return TensorList{index_select(x, 0, zeros({3}, {.dtype = kInt64})),
                           gather(x, 0, i),
                           scatter_add(zeros({3, 0}), 0, i, x),
                           cumsum(x, 0),
                           softmax(x, 0),
                           tril(x),
                           flip(x, {0}),
                           cat({x, x}, 0),
                           matmul(empty({3, 0}), empty({0, 3}))};
       }}};
  for (const auto& [what, call] : calls) {
    SCOPED_TRACE(what);
    TensorList cpu, reference;
    bool cpu_refused = false, reference_refused = false;
    try {
      cpu = call();
    } catch (const Error&) {
      cpu_refused = true;
    }
    try {
      ops::ReferenceModeGuard guard;
      reference = call();
    } catch (const Error&) {
      reference_refused = true;
    }
    ASSERT_EQ(cpu_refused, reference_refused);
    ASSERT_EQ(cpu.size(), reference.size());
    for (size_t k = 0; k < cpu.size(); ++k) {
      ASSERT_EQ(cpu[k].sizes(), reference[k].sizes()) << "output " << k;
      const auto a = cpu[k].to(kFloat64).to_vector<double>();
      const auto b = reference[k].to(kFloat64).to_vector<double>();
      for (size_t e = 0; e < a.size(); ++e)
        EXPECT_TRUE(a[e] == b[e] || (std::isnan(a[e]) && std::isnan(b[e])))
            << "output " << k << " element " << e << ": " << a[e] << " against " << b[e];
    }
  }
  // The values PyTorch gives for the reductions of an empty [3, 2^40, 0].
  const Tensor x = empty({3, kHuge, 0});
  EXPECT_EQ(sum(x, {1, 2}).to_vector<float>(), (std::vector<float>{0, 0, 0}));
  EXPECT_EQ(prod(x, {1, 2}).to_vector<float>(), (std::vector<float>{1, 1, 1}));
  EXPECT_TRUE(std::isnan(mean(x, {1, 2}).to_vector<float>()[2]));
  EXPECT_EQ(
      ops::adaptive_avg_pool2d_backward(empty({1, 1, kHuge, 0}), {1, 1, 3, 2}).to_vector<float>(),
      std::vector<float>(6, 0.0f));
}
