// The CUDA backend's runtime: device queries, host-device copies and the
// caching allocator. Without a usable device (a build without CUDA, or no
// driver or GPU) the Cuda tests skip and say why; CudaInfo runs everywhere.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <sstream>
#include <thread>

#include "backends/backend.h"
#include "kiln/kiln.h"
#include "ops/dispatch.h"
#include "unit/expect_error.h"

namespace kiln {
namespace {

using kiln::testing::expect_error;

TEST(CudaInfo, Tf32PolicyGuardRestoresThePolicy) {
  const Tf32Policy before = allow_tf32();
  {
    Tf32PolicyGuard guard({.matmul = !before.matmul, .conv = !before.conv});
    EXPECT_EQ(allow_tf32().matmul, !before.matmul);
    EXPECT_EQ(allow_tf32().conv, !before.conv);
  }
  EXPECT_EQ(allow_tf32().matmul, before.matmul);
  EXPECT_EQ(allow_tf32().conv, before.conv);
}

TEST(CudaInfo, ReportsDevicesOrWhyThereAreNone) {
  if (cuda::is_available()) {
    EXPECT_TRUE(cuda::is_built());
    EXPECT_GT(cuda::device_count(), 0);
    EXPECT_EQ(cuda::unavailable_reason(), "");
    return;
  }
  EXPECT_EQ(cuda::device_count(), 0);
  EXPECT_FALSE(cuda::unavailable_reason().empty());
  // A build without the backend says so; a build with it names the device.
  const char* missing = cuda::is_built() ? "cuda:0" : "no CUDA backend";
  expect_error<DeviceError>([] { ones({2}).to(Device::cuda()); }, missing);
  expect_error<DeviceError>([] { cuda::synchronize(); }, "cuda:0");
  expect_error<DeviceError>([] { memory_stats(Device::cuda()); }, missing);
  expect_error<DeviceError>([] { cuda::Stream::create(); }, "Stream::create");
  expect_error<DeviceError>([] { cuda::Event event; }, "Event");
  expect_error<DeviceError>([] { ones({2}).pin_memory(); },
                            cuda::is_built() ? "pin_memory" : "no CUDA backend");
  EXPECT_FALSE(ones({2}).is_pinned());
}

// Same shape and values within float32 rounding.
bool close(const Tensor& a, const Tensor& b) {
  if (a.sizes() != b.sizes()) return false;
  const auto x = a.to_vector<double>(), y = b.to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i)
    if (!(std::abs(x[i] - y[i]) <= 1e-5 * (1 + std::abs(y[i])))) return false;
  return true;
}

// Every op of the table has a CUDA kernel (convolutions need cuDNN at build
// time). Runs without a device: it reads the kernel table.
TEST(CudaInfo, EveryOpHasACudaKernel) {
  if (!cuda::is_built()) GTEST_SKIP() << "built without CUDA";
  const auto& table = backend::backend_for(DeviceKind::CUDA).kernels();
  std::vector<std::string> missing;
  for (const auto& s : ops::all_op_schemas()) {
    if (s.has_flag(ops::kView) || table.get(s.id)) continue;
    const std::string name(s.name);
#ifndef KILN_WITH_CUDNN
    if (name.rfind("conv", 0) == 0) continue;  // built without cuDNN, as CMake reported
#endif
    missing.push_back(name);
  }
  std::string list;
  for (const auto& m : missing) list += " " + m;
  EXPECT_TRUE(missing.empty()) << "ops without a CUDA kernel:" << list;
}

class Cuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device: " << cuda::unavailable_reason();
    empty_cache(kDevice);
  }
  static constexpr Device kDevice = Device::cuda(0);
};

TEST_F(Cuda, CopiesRoundTripThroughTheDevice) {
  for (DType t : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt64, kInt32, kBool}) {
    const Tensor x = arange(-500, 500).to(t);
    const Tensor d = x.to(kDevice);
    EXPECT_EQ(d.device(), kDevice);
    EXPECT_EQ(d.dtype(), t);
    EXPECT_EQ(d.sizes(), x.sizes());
    EXPECT_EQ(d.to(Device::cpu()).to_vector<double>(), x.to_vector<double>()) << t;
  }
  // A non-contiguous host tensor is gathered first; item() and to_vector() copy back.
  const Tensor m = arange(0, 12).view({3, 4}).t();
  EXPECT_EQ(m.to(kDevice).to_vector<int64_t>(), m.contiguous().to_vector<int64_t>());
  EXPECT_EQ(full({1}, 2.5).to(kDevice).item<double>(), 2.5);
  EXPECT_EQ(empty({0}).to(kDevice).numel(), 0);
  std::ostringstream printed;
  printed << arange(0, 6).view({2, 3}).to(kDevice);
  EXPECT_NE(printed.str().find("[[0, 1, 2],"), std::string::npos) << printed.str();
  EXPECT_NE(printed.str().find("device='cuda:0'"), std::string::npos) << printed.str();
}

// copy_within: many copies in one launch, of any size and alignment (a
// compiled function's CUDA graph takes its arguments in and its results out
// with it).
TEST_F(Cuda, CopiesWithinTheDeviceInOneLaunch) {
  auto& be = backend::backend_for(kDevice.kind());
  const Tensor src = randint(0, 256, {int64_t{1} << 21}).to(kUInt8).to(kDevice);
  Tensor dst = zeros({int64_t{1} << 21}, {.dtype = kUInt8}).to(kDevice);
  auto* s = static_cast<const char*>(src.data_ptr());
  auto* d = static_cast<char*>(dst.data_ptr());
  // (source offset, destination offset, bytes): aligned and not, empty, and
  // more than one launch takes (16).
  std::vector<std::array<size_t, 3>> jobs = {{0, 0, 1 << 20}, {1, 1048577, 15}, {16, 1048600, 16}, {3, 1048700, 17},
                                             {5, 1048800, 0}, {64, 1049000, 100003}};
  for (size_t k = 0; k < 20; ++k) jobs.push_back({1200000 + k * 37, 1300000 + k * 64, 33 + k});
  std::vector<backend::Backend::ByteCopy> copies;
  for (const auto& [from, to, n] : jobs) copies.push_back({d + to, s + from, n});
  be.copy_within(kDevice, copies);
  const std::vector<int64_t> a = src.to(Device::cpu()).to_vector<int64_t>(),
                             b = dst.to(Device::cpu()).to_vector<int64_t>();
  std::vector<int64_t> want(b.size(), 0);
  for (const auto& [from, to, n] : jobs)
    for (size_t i = 0; i < n; ++i) want[to + i] = a[from + i];
  EXPECT_EQ(b, want);
}

TEST_F(Cuda, RejectsDevicesThatDoNotExistAndOpsWithoutKernels) {
  const int missing = cuda::device_count();
  expect_error<DeviceError>([&] { ones({1}).to(Device::cuda(missing)); },
                            detail::str_cat("cuda:", missing, " does not exist"));
  const Tensor d = ones({4}).to(kDevice);
  expect_error<DeviceError>([&] { add(d, ones({4})); }, "expected all tensors on one device");
}

// The elementwise engine: broadcasting, strided and unaligned views, CPU
// scalars joining device tensors, dims that do not merge, and more than 2^31
// elements (split into 32-bit launches). The CPU backend is the oracle.
TEST_F(Cuda, ElementwiseMatchesTheCpuOnAnyLayout) {
  Generator g(5);
  const Tensor a = randn({3, 1, 5}, {}, &g), b = randn({5, 4}, {}, &g).t();
  const Tensor da = a.to(kDevice), db = b.to(kDevice);
  EXPECT_TRUE(close(add(da, db, 2.0).to(Device::cpu()), add(a, b, 2.0)));
  // Unaligned: a view that starts one element in; a strided view.
  const Tensor base = randn({1001}, {}, &g);
  const Tensor d_base = base.to(kDevice);
  const Tensor u = d_base.slice(0, 1, std::nullopt), s = d_base.slice(0, 0, std::nullopt, 3);
  EXPECT_TRUE(close(exp(u).to(Device::cpu()), exp(base.slice(0, 1, std::nullopt))));
  EXPECT_TRUE(close((s * s).to(Device::cpu()), base.slice(0, 0, std::nullopt, 3).square()));
  // CPU scalars, first or second, and C++ numbers.
  const Tensor two = full({}, 2.0);
  EXPECT_TRUE(close((two * da).to(Device::cpu()), a * 2.0));
  EXPECT_TRUE(close((da - two).to(Device::cpu()), a - 2.0));
  EXPECT_TRUE(close((da / 4).to(Device::cpu()), a / 4));
  // Six dims permuted so that none merge.
  const Tensor p = randn({2, 3, 2, 3, 2, 3}, {}, &g);
  const Tensor q = p.permute({5, 3, 1, 4, 2, 0});
  EXPECT_TRUE(close(relu(q.to(kDevice)).to(Device::cpu()), relu(q)));
  EXPECT_TRUE(close(q.to(kDevice).contiguous().to(Device::cpu()), q.contiguous()));
  EXPECT_EQ(p.to(kDevice).permute({5, 3, 1, 4, 2, 0}).to(Device::cpu()).to_vector<float>(),
            q.contiguous().to_vector<float>());
  // Casts through the device, 16-bit floats included.
  for (DType t : {kFloat16, kBFloat16, kFloat64, kInt32, kBool}) {
    EXPECT_EQ(da.to(t).to(Device::cpu()).to_vector<double>(), a.to(t).to_vector<double>()) << t;
  }
}

// cuBLASLt products against the CPU: transposed and strided operands,
// broadcast batches, linear's bias epilogue, addmm's scaling, empty sums.
TEST_F(Cuda, MatrixProductsMatchTheCpu) {
  Generator g(11);
  auto check = [&](const Tensor& expected, const Tensor& actual, double tol) {
    ASSERT_EQ(actual.device(), kDevice);
    const auto e = expected.to_vector<double>(), a = actual.to(Device::cpu()).to_vector<double>();
    ASSERT_EQ(e.size(), a.size());
    for (size_t i = 0; i < e.size(); ++i) ASSERT_NEAR(a[i], e[i], tol * (1 + std::abs(e[i]))) << i;
  };
  const Tensor a = randn({5, 33, 17}, {}, &g), b = randn({17, 9}, {}, &g),
               bt = randn({9, 17}, {}, &g).t();
  check(matmul(a, b), matmul(a.to(kDevice), b.to(kDevice)), 1e-5);
  check(matmul(a, bt), matmul(a.to(kDevice), bt.to(kDevice)), 1e-5);  // a transposed operand
  const Tensor batch_b = randn({3, 1, 17, 4}, {}, &g);                // broadcast against a's batch
  check(matmul(a, batch_b), matmul(a.to(kDevice), batch_b.to(kDevice)), 1e-5);
  const Tensor v = randn({17}, {}, &g);
  check(matmul(a, v), matmul(a.to(kDevice), v.to(kDevice)), 1e-5);
  check(matmul(v, b), matmul(v.to(kDevice), b.to(kDevice)), 1e-5);
  const Tensor x = randn({2, 7, 17}, {}, &g), w = randn({6, 17}, {}, &g), bias = randn({6}, {}, &g);
  check(linear(x, w, bias), linear(x.to(kDevice), w.to(kDevice), bias.to(kDevice)), 1e-5);
  const Tensor self = randn({33, 9}, {}, &g), m1 = randn({33, 17}, {}, &g);
  check(addmm(self, m1, b, 0.5, 2.0),
        addmm(self.to(kDevice), m1.to(kDevice), b.to(kDevice), 0.5, 2.0), 1e-5);
  const Tensor row = randn({9}, {}, &g);
  check(addmm(row, m1, b), addmm(row.to(kDevice), m1.to(kDevice), b.to(kDevice)), 1e-5);
  for (DType t : {kFloat16, kBFloat16, kFloat64}) {
    check(matmul(a.to(t), b.to(t)).to(kFloat32),
          matmul(a.to(t).to(kDevice), b.to(t).to(kDevice)).to(kFloat32),
          t == kFloat64 ? 1e-12 : 2e-2);
  }
  const Tensor e1 = empty({4, 0}), e2 = empty({0, 3});
  check(zeros({4, 3}), matmul(e1.to(kDevice), e2.to(kDevice)), 0);
}

// linear of 1 to 8 rows runs the warp-per-feature kernel, 9 rows cuBLASLt:
// both against the CPU, with and without bias, every floating dtype, widths
// around the warp size.
TEST_F(Cuda, FewRowsLinearMatchesTheCpu) {
  Generator g(12);
  for (DType t : {kFloat32, kFloat64, kBFloat16}) {
    for (int64_t rows : {1, 3, 8, 9}) {
      for (int64_t k : {1, 31, 600}) {
        const int64_t n = k == 31 ? 32 : 100;
        const Tensor x = randn({rows, k}, {}, &g).to(t), w = randn({n, k}, {}, &g).to(t),
                     b = randn({n}, {}, &g).to(t);
        const double tol = t == kFloat64 ? 1e-12 : t == kFloat32 ? 1e-5 : 3e-2;
        for (bool with_bias : {true, false}) {
          SCOPED_TRACE(detail::str_cat(t, " rows=", rows, " k=", k, " bias=", with_bias));
          const Tensor bias = with_bias ? b : Tensor();
          const auto e = linear(x.to(kFloat64), w.to(kFloat64), with_bias ? b.to(kFloat64) : Tensor())
                             .to_vector<double>();
          const Tensor d = linear(x.to(kDevice), w.to(kDevice), with_bias ? b.to(kDevice) : Tensor());
          ASSERT_EQ(d.dtype(), t);
          const auto a = d.to(Device::cpu()).to(kFloat64).to_vector<double>();
          ASSERT_EQ(a.size(), e.size());
          const double scale = std::sqrt(static_cast<double>(k));
          for (size_t i = 0; i < e.size(); ++i) ASSERT_NEAR(a[i], e[i], tol * (scale + std::abs(e[i]))) << i;
        }
      }
    }
  }
  const Tensor v = randn({40}, {}, &g), w = randn({64, 40}, {}, &g);  // an unbatched input
  const auto e = linear(v, w).to_vector<double>();
  const auto a = linear(v.to(kDevice), w.to(kDevice)).to(Device::cpu()).to_vector<double>();
  for (size_t i = 0; i < e.size(); ++i) ASSERT_NEAR(a[i], e[i], 1e-4) << i;
}

// cuDNN convolutions against the CPU (exact float32 math): strides, dilation,
// groups, "same" padding (asymmetric), conv1d, and both gradients.
TEST_F(Cuda, ConvolutionsAndTheirGradientsMatchTheCpu) {
  const Tf32Policy saved = allow_tf32();
  set_allow_tf32({.matmul = false, .conv = false});
  Generator g(3);
  auto near = [&](const Tensor& expected, const Tensor& actual) {
    const auto e = expected.to_vector<double>(), a = actual.to(Device::cpu()).to_vector<double>();
    ASSERT_EQ(e.size(), a.size());
    for (size_t i = 0; i < e.size(); ++i) ASSERT_NEAR(a[i], e[i], 1e-4 * (1 + std::abs(e[i]))) << i;
  };
  struct Case {
    Shape x, w;
    Conv2dOptions o;
  };
  const std::vector<Case> cases = {
      {{2, 4, 9, 11}, {6, 4, 3, 3}, {.stride = {2, 1}, .padding = {1, 1}}},
      {{1, 6, 8, 8}, {6, 2, 3, 3}, {.padding = {2, 2}, .dilation = {2, 2}, .groups = 3}},
      {{2, 3, 7, 6}, {5, 3, 4, 2}, {.padding_mode = "same"}},  // even kernels: asymmetric padding
  };
  for (const Case& k : cases) {
    const Tensor x = randn(k.x, {}, &g), w = randn(k.w, {}, &g), b = randn({k.w[0]}, {}, &g);
    const Tensor dx = x.to(kDevice).requires_grad_(), dw = w.to(kDevice).requires_grad_();
    const Tensor cx = x.clone().requires_grad_(), cw = w.clone().requires_grad_();
    const Tensor y = conv2d(cx, cw, b, k.o), dy = conv2d(dx, dw, b.to(kDevice), k.o);
    near(y.detach(), dy.detach());
    const Tensor gy = randn(y.sizes(), {}, &g);
    y.backward(gy);
    dy.backward(gy.to(kDevice));
    near(cx.grad(), dx.grad());
    near(cw.grad(), dw.grad());
  }
  const Tensor x1 = randn({2, 3, 20}, {}, &g), w1 = randn({4, 3, 5}, {}, &g);
  near(conv1d(x1, w1, Tensor(), {.stride = {2}, .padding = {2}}),
       conv1d(x1.to(kDevice), w1.to(kDevice), Tensor(), {.stride = {2}, .padding = {2}}));
  set_allow_tf32(saved);
}

// Reductions whose dims are not adjacent go through a permuted copy; the sum
// that reduces a broadcast gradient to its input's shape is one of them.
TEST_F(Cuda, ReductionsOverSeparatedDimsMatchTheCpu) {
  Generator g(8);
  const Tensor x = randn({3, 5, 6}, {.dtype = kFloat64}, &g);
  const Tensor d = x.to(kDevice);
  for (const Shape& dims : {Shape{0, 2}, Shape{0}, Shape{2}, Shape{0, 1, 2}}) {
    const auto e = sum(x, dims, true).to_vector<double>();
    const auto a = sum(d, dims, true).to(Device::cpu()).to_vector<double>();
    ASSERT_EQ(e.size(), a.size());
    for (size_t i = 0; i < e.size(); ++i) EXPECT_NEAR(a[i], e[i], 1e-12) << dims.size() << " dims, element " << i;
  }
  // The same sum inside backward: an additive mask [5, 1] broadcast over keys.
  const Tensor m = randn({5, 1}, {.dtype = kFloat64}, &g);
  const Tensor cm = m.clone().requires_grad_(), dm = m.to(kDevice).requires_grad_();
  const Tensor w = randn({3, 5, 6}, {.dtype = kFloat64}, &g);
  sum((x + cm) * (x + cm) * w).backward();
  sum((d + dm) * (d + dm) * w.to(kDevice)).backward();
  const auto ge = cm.grad().to_vector<double>(), ga = dm.grad().to(Device::cpu()).to_vector<double>();
  for (size_t i = 0; i < ge.size(); ++i) EXPECT_NEAR(ga[i], ge[i], 1e-10) << i;
}

// float32 products are exact float32 math unless TF32 is allowed for matmul.
TEST_F(Cuda, Tf32PolicyChangesFloat32Products) {
  const Tf32Policy saved = allow_tf32();
  EXPECT_FALSE(saved.matmul);
  EXPECT_TRUE(saved.conv);
  const float fine = 1.0f + 1.0f / 4096;  // needs 12 mantissa bits; TF32 keeps 10
  const Tensor a = full({64, 64}, fine, {.dtype = kFloat32, .device = kDevice}),
               b = ones({64, 64}, {.dtype = kFloat32, .device = kDevice});
  EXPECT_EQ(matmul(a, b).to(Device::cpu()).to_vector<float>()[0], 64 * fine);
  float tf32 = 0;
  {
    Tf32PolicyGuard fast({.matmul = true});
    tf32 = matmul(a, b).to(Device::cpu()).to_vector<float>()[0];
  }
  EXPECT_TRUE(allow_tf32().conv);  // restored by the guard
  EXPECT_FALSE(allow_tf32().matmul);
  EXPECT_NE(tf32, 64 * fine);
  EXPECT_EQ(matmul(a, b).to(Device::cpu()).to_vector<float>()[0], 64 * fine);
}

TEST_F(Cuda, ElementwiseSplitsLaunchesPast32BitIndices) {
  const int64_t n = (int64_t{1} << 31) + 1000;
  Tensor x = full({n}, 3, {.dtype = kUInt8, .device = kDevice});
  Tensor y = x + 1;  // 2^31 + 1000 elements: two launches
  for (int64_t i : {int64_t{0}, (int64_t{1} << 31) - 1, int64_t{1} << 31, n - 1}) {
    EXPECT_EQ(y.slice(0, i, i + 1).to(Device::cpu()).item<int64_t>(), 4) << i;
  }
  // A 2-d view whose rows are split: every other column of a wide tensor.
  const Tensor wide = full({2, n}, 7, {.dtype = kUInt8, .device = kDevice});
  const Tensor cols = wide.slice(1, 0, std::nullopt, 2);
  Tensor z = cols * 2;
  EXPECT_EQ(
      z.slice(0, 1, 2).slice(1, z.size(1) - 1, std::nullopt).to(Device::cpu()).item<int64_t>(), 14);
}

TEST_F(Cuda, AllocatorReusesFreedBlocksOfAStream) {
  const MemoryStats before = memory_stats(kDevice);
  { Tensor a = empty({1 << 20}).to(kDevice); }  // 4 MiB: the large pool
  const MemoryStats after_one = memory_stats(kDevice);
  EXPECT_EQ(after_one.num_allocations, before.num_allocations + 1);
  EXPECT_EQ(after_one.allocated_bytes, before.allocated_bytes);
  EXPECT_GE(after_one.reserved_bytes, before.reserved_bytes + (4u << 20));
  { Tensor b = empty({1 << 20}).to(kDevice); }
  EXPECT_EQ(memory_stats(kDevice).num_allocations, after_one.num_allocations);
}

TEST_F(Cuda, SmallBlocksShareSegmentsAndMergeWhenFreed) {
  const size_t mallocs = memory_stats(kDevice).num_allocations;
  std::vector<Tensor> blocks;
  for (int i = 0; i < 8; ++i) blocks.push_back(empty({64 * 1024}).to(kDevice));  // 256 KiB each
  EXPECT_EQ(memory_stats(kDevice).num_allocations, mallocs + 1);  // one 2 MiB segment
  EXPECT_EQ(memory_stats(kDevice).allocated_bytes, size_t{8} * 256 * 1024);
  blocks.clear();
  // The eight freed blocks merged back into the whole segment: 1 MiB fits in it.
  Tensor big = empty({256 * 1024}).to(kDevice);
  EXPECT_EQ(memory_stats(kDevice).num_allocations, mallocs + 1);
  big = Tensor();
  empty_cache(kDevice);
  EXPECT_EQ(memory_stats(kDevice).reserved_bytes, size_t{0});
  EXPECT_EQ(memory_stats(kDevice).allocated_bytes, size_t{0});
}

TEST_F(Cuda, PeakFollowsAllocationsAndResets) {
  reset_peak_memory_stats(kDevice);
  const size_t base = memory_stats(kDevice).allocated_bytes;
  {
    Tensor a = empty({1 << 18}).to(kDevice);  // 1 MiB
    Tensor b = empty({1 << 18}).to(kDevice);
    EXPECT_EQ(memory_stats(kDevice).peak_allocated_bytes, base + (2u << 20));
  }
  EXPECT_EQ(memory_stats(kDevice).peak_allocated_bytes, base + (2u << 20));
  reset_peak_memory_stats(kDevice);
  EXPECT_EQ(memory_stats(kDevice).peak_allocated_bytes, base);
}

TEST_F(Cuda, OutOfMemoryNamesTheRequestAndLeavesTheDeviceUsable) {
  const Tensor keep = ones({16}).to(kDevice);
  const int64_t too_many = int64_t{1} << 40;  // 4 TiB of float32
  try {
    ops::make_tensor({too_many}, kFloat32, kDevice);
    FAIL() << "a 4 TiB allocation succeeded";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("out of memory"), std::string::npos) << what;
    EXPECT_NE(what.find(std::to_string(too_many * 4)), std::string::npos) << what;
    EXPECT_NE(what.find("held by tensors"), std::string::npos) << what;
  }
  EXPECT_EQ(keep.to(Device::cpu()).to_vector<float>(), std::vector<float>(16, 1.f));
  cuda::synchronize();
}

TEST_F(Cuda, CurrentStreamIsTheDefaultUntilAGuardChangesIt) {
  const cuda::Stream main_stream = cuda::Stream::default_stream();
  EXPECT_EQ(main_stream.handle(), nullptr);
  EXPECT_EQ(cuda::Stream::current(), main_stream);
  const cuda::Stream side = cuda::Stream::create();
  EXPECT_NE(side.handle(), nullptr);
  EXPECT_EQ(side.device(), 0);
  {
    cuda::StreamGuard on_side(side);
    EXPECT_EQ(cuda::Stream::current(), side);
    std::thread([&] { EXPECT_EQ(cuda::Stream::current(), main_stream); }).join();  // per thread
    {
      cuda::StreamGuard back(main_stream);
      EXPECT_EQ(cuda::Stream::current(), main_stream);
    }
    EXPECT_EQ(cuda::Stream::current(), side);
  }
  EXPECT_EQ(cuda::Stream::current(), main_stream);
  expect_error<DeviceError>([] { cuda::Stream::create(cuda::device_count()); }, "does not exist");
}

TEST_F(Cuda, CopiesRunOnTheCurrentStreamAndEventsTimeThem) {
  const Tensor host = arange(0, 1 << 24).to(kFloat32);  // 64 MiB
  const cuda::Stream side = cuda::Stream::create();
  cuda::Event start(true), end(true);
  Tensor on_device;
  {
    cuda::StreamGuard on_side(side);
    start.record();
    on_device = host.to(kDevice);
    end.record();
  }
  end.synchronize();
  EXPECT_TRUE(end.query());
  EXPECT_TRUE(side.query());
  EXPECT_GT(start.elapsed_ms(end), 0.f);
  EXPECT_EQ((on_device.to(Device::cpu()) - host).abs().max().item<float>(), 0.f);
  expect_error<ValueError>(
      [] {
        cuda::Event a, b;
        a.elapsed_ms(b);
      },
      "enable_timing");
  expect_error<ValueError>(
      [] {
        cuda::Event a(true), b(true);
        a.elapsed_ms(b);
      },
      "recorded");
}

TEST_F(Cuda, AnotherStreamWaitsForAnEvent) {
  const cuda::Stream producer = cuda::Stream::create(), consumer = cuda::Stream::create();
  cuda::Event done;
  Tensor on_device;
  {
    cuda::StreamGuard on(producer);
    on_device = arange(0, 1 << 20).to(kDevice);
    done.record();
  }
  consumer.wait(done);
  consumer.synchronize();
  EXPECT_TRUE(done.query());
  EXPECT_TRUE(producer.query());
}

TEST_F(Cuda, FreedBlocksAreReusedOnlyOnTheirStream) {
  const cuda::Stream side = cuda::Stream::create();
  const size_t start = memory_stats(kDevice).num_allocations;
  { Tensor a = empty({1 << 20}).to(kDevice); }  // 4 MiB, cached for the default stream
  EXPECT_EQ(memory_stats(kDevice).num_allocations, start + 1);
  {
    cuda::StreamGuard on(side);
    { Tensor b = empty({1 << 20}).to(kDevice); }  // not the default stream's block
    EXPECT_EQ(memory_stats(kDevice).num_allocations, start + 2);
    { Tensor c = empty({1 << 20}).to(kDevice); }  // its own block again
    EXPECT_EQ(memory_stats(kDevice).num_allocations, start + 2);
  }
  { Tensor d = empty({1 << 20}).to(kDevice); }
  EXPECT_EQ(memory_stats(kDevice).num_allocations, start + 2);
  side.synchronize();
}

TEST_F(Cuda, PinnedTensorsHoldTheirValuesAndCopyAsynchronously) {
  const Tensor x = arange(0, 1 << 16).to(kFloat32);
  EXPECT_FALSE(x.is_pinned());
  const Tensor p = x.pin_memory();
  EXPECT_TRUE(p.is_pinned());
  EXPECT_EQ(p.device(), Device::cpu());
  EXPECT_EQ(p.pin_memory().impl_ptr(), p.impl_ptr());  // already pinned
  EXPECT_EQ(p.to_vector<float>(), x.to_vector<float>());
  EXPECT_TRUE(arange(0, 12).view({3, 4}).t().pin_memory().is_contiguous());
  expect_error<DeviceError>([&] { x.to(kDevice).pin_memory(); }, "pin_memory");
  // Both copies are queued on the current stream; the host reads the result
  // after synchronize().
  const Tensor d = p.to(kDevice, /*non_blocking=*/true);
  const Tensor back = (d * 2).to(Device::cpu(), /*non_blocking=*/true);
  EXPECT_TRUE(back.is_pinned());
  cuda::synchronize();
  EXPECT_EQ(back.to_vector<float>(), (x * 2).to_vector<float>());
}

TEST_F(Cuda, NonBlockingCopiesFromPageableMemoryMayReuseTheSource) {
  Tensor x = arange(0, 1 << 20).to(kFloat32);  // 4 MiB, pageable
  const Tensor expected = x.clone();
  std::vector<Tensor> on_device;
  for (int i = 0; i < 4; ++i) {
    on_device.push_back(x.to(kDevice, /*non_blocking=*/true));
    x.add_(1);  // the staged copy has read the source already
  }
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(on_device[static_cast<size_t>(i)].to(Device::cpu()).to_vector<float>(),
              (expected + i).to_vector<float>())
        << i;
  }
}

TEST_F(Cuda, CopiesBetweenDevicesAreDifferentiable) {
  const Tensor x = arange(0, 6).to(kFloat64).view({2, 3}).requires_grad_();
  const Tensor on_device = x.to(kDevice);
  EXPECT_TRUE(on_device.requires_grad());
  EXPECT_EQ(on_device.grad_fn()->name(), "DeviceCopyBackward");
  const Tensor y = (on_device * on_device).sum().to(Device::cpu());
  y.backward();
  ASSERT_TRUE(x.grad().defined());
  EXPECT_EQ(x.grad().device(), Device::cpu());
  EXPECT_EQ(x.grad().to_vector<double>(), (x.detach() * 2).to_vector<double>());
  // From a device leaf to the host and back.
  const Tensor w = ones({3}, {.dtype = kFloat32, .device = kDevice}).requires_grad_();
  (w.to(Device::cpu(), /*non_blocking=*/true) * 3).sum().backward();
  EXPECT_EQ(w.grad().device(), kDevice);
  EXPECT_EQ(w.grad().to(Device::cpu()).to_vector<float>(), std::vector<float>(3, 3.0f));
  NoGradGuard no_grad;
  EXPECT_FALSE(x.to(kDevice).requires_grad());
}

// Index values out of range are found by the kernels without waiting: the op
// returns, and the next wait for the device throws once, naming the op and
// the value. The device stays usable.
TEST_F(Cuda, BadIndexValuesSurfaceAtTheNextSynchronization) {
  namespace F = nn::functional;
  using kiln::testing::expect_error_with;
  const Tensor table = arange(0, 12).to(kFloat32).view({4, 3}).to(kDevice);
  const auto ids = [&](std::vector<int64_t> v) {
    const auto n = static_cast<int64_t>(v.size());
    return from_vector<int64_t>(v, Shape{n}).to(kDevice);
  };
  const Tensor bad_ids = ids({1, 7, 2});
  Tensor rows;
  EXPECT_NO_THROW(rows = F::embedding(bad_ids, table));  // queued, not checked on the host
  expect_error_with<IndexError>([&] { (void)rows.sum().item<float>(); },
                                {"embedding", "index 7", "4 embeddings"});
  EXPECT_NO_THROW(cuda::synchronize());  // reported once
  // Each op names itself and the value, at each kind of wait.
  Tensor out = index_select(table, 0, ids({0, -1}));
  expect_error_with<IndexError>([&] { cuda::synchronize(); }, {"index_select", "index -1", "size 4"});
  out = gather(table, 1, ids({0, 3}).view({2, 1}).expand({2, 1}));
  expect_error_with<IndexError>([&] { (void)out.to(Device::cpu()); }, {"gather", "index 3", "dim 1"});
  out = scatter_add(table, 0, ids({9}).view({1, 1}), ones({1, 1}, {.dtype = kFloat32, .device = kDevice}));
  expect_error_with<IndexError>([&] { cuda::Stream::current().synchronize(); }, {"scatter_add", "index 9"});
  out = one_hot(ids({2, 5}), 4);
  cuda::Event done;
  done.record();
  expect_error_with<IndexError>([&] { done.synchronize(); }, {"one_hot", "class value 5", "num_classes 4"});
  out = F::nll_loss(zeros({2, 3}, {.dtype = kFloat32, .device = kDevice}), ids({0, 3}));
  expect_error_with<IndexError>([&] { (void)out.item<float>(); }, {"nll_loss", "target 3", "3 classes"});
  // With rows of no width, the values are still checked.
  out = F::embedding(bad_ids, zeros({4, 0}, {.dtype = kFloat32, .device = kDevice}));
  expect_error_with<IndexError>([&] { cuda::synchronize(); }, {"embedding", "index 7"});
  // Good values after an error give the right answer.
  EXPECT_EQ(F::embedding(ids({3, 0}), table).to(Device::cpu()).to_vector<float>(),
            (std::vector<float>{9, 10, 11, 0, 1, 2}));
  EXPECT_EQ(one_hot(ids({1}), 3).to(Device::cpu()).to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 0}));
}

}  // namespace
}  // namespace kiln
