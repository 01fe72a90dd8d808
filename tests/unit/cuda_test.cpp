// The CUDA backend's runtime: device queries, host-device copies and the
// caching allocator. Without a usable device (a build without CUDA, or no
// driver or GPU) the Cuda tests skip and say why; CudaInfo runs everywhere.
#include <gtest/gtest.h>

#include <sstream>
#include <thread>

#include "kiln/kiln.h"
#include "ops/dispatch.h"
#include "unit/expect_error.h"

namespace kiln {
namespace {

using kiln::testing::expect_error;

TEST(CudaInfo, ReportsDevicesOrWhyThereAreNone) {
  if (cuda::is_available()) {
    EXPECT_TRUE(cuda::is_built());
    EXPECT_GT(cuda::device_count(), 0);
    EXPECT_EQ(cuda::unavailable_reason(), "");
    return;
  }
  EXPECT_EQ(cuda::device_count(), 0);
  EXPECT_FALSE(cuda::unavailable_reason().empty());
  expect_error<DeviceError>([] { ones({2}).to(Device::cuda()); }, "cuda:0");
  expect_error<DeviceError>([] { cuda::synchronize(); }, "cuda:0");
  expect_error<DeviceError>([] { memory_stats(Device::cuda()); }, "cuda:0");
  expect_error<DeviceError>([] { cuda::Stream::create(); }, "Stream::create");
  expect_error<DeviceError>([] { cuda::Event event; }, "Event");
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

TEST_F(Cuda, RejectsDevicesThatDoNotExistAndOpsWithoutKernels) {
  const int missing = cuda::device_count();
  expect_error<DeviceError>([&] { ones({1}).to(Device::cuda(missing)); },
                            detail::str_cat("cuda:", missing, " does not exist"));
  const Tensor d = ones({4}).to(kDevice);
  expect_error<Error>([&] { exp(d); }, "exp: no kernel for device cuda:0");
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
  expect_error<ValueError>([] { cuda::Event a, b; a.elapsed_ms(b); }, "enable_timing");
  expect_error<ValueError>([] { cuda::Event a(true), b(true); a.elapsed_ms(b); }, "recorded");
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

}  // namespace
}  // namespace kiln
