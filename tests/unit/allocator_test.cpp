#include <gtest/gtest.h>

#include "backends/cpu/cpu_backend.h"
#include "kiln/kiln.h"

using namespace kiln;

TEST(CpuAllocator, CountsLiveBytesAndPeak) {
  const auto cpu = Device::cpu();
  const size_t before = memory_stats(cpu).allocated_bytes;
  reset_peak_memory_stats(cpu);
  {
    Tensor a = empty({1000});
    EXPECT_EQ(memory_stats(cpu).allocated_bytes, before + 4000);
    Tensor b = empty({500}, {.dtype = kFloat64});
    EXPECT_EQ(memory_stats(cpu).peak_allocated_bytes, before + 8000);
  }
  EXPECT_EQ(memory_stats(cpu).allocated_bytes, before);
  EXPECT_EQ(memory_stats(cpu).peak_allocated_bytes, before + 8000);
}

TEST(CpuAllocator, ReusesMidSizedBlocksLikeALayersGradients) {
  const auto cpu = Device::cpu();
  empty_cache(cpu);
  { Tensor warm = empty({256, 784}); }  // 784 KiB, a Linear(784, 256) weight
  const size_t system_before = memory_stats(cpu).num_allocations;
  for (int i = 0; i < 5; ++i) Tensor t = empty({256, 784});
  for (int i = 0; i < 5; ++i) Tensor t = empty({100, 256});  // 100 KiB
  EXPECT_EQ(memory_stats(cpu).num_allocations, system_before + 1);
  empty_cache(cpu);
}

TEST(CpuAllocator, ReusesLargeBlocksAndEmptiesItsCache) {
  const auto cpu = Device::cpu();
  empty_cache(cpu);
  { Tensor warm = empty({1 << 22}); }
  const size_t system_before = memory_stats(cpu).num_allocations;
  for (int i = 0; i < 5; ++i) Tensor t = empty({(1 << 22) - 16 * i});
  EXPECT_EQ(memory_stats(cpu).num_allocations, system_before);
  EXPECT_GE(memory_stats(cpu).reserved_bytes, size_t{4} << 22);
  empty_cache(cpu);
  EXPECT_EQ(memory_stats(cpu).reserved_bytes, memory_stats(cpu).allocated_bytes);
}

// The op-consistency test's detector of kernels that write past their output
// (guard bytes around each CPU allocation, checked when it is freed) catches
// an overrun on either side, and only an overrun.
TEST(CpuAllocator, GuardBytesCatchAWritePastEitherEnd) {
  backend::cpu_set_guard_bytes(true);
  const size_t before = backend::cpu_guard_violations();
  { Tensor clean = full({5}, 1.0); }
  EXPECT_EQ(backend::cpu_guard_violations(), before);
  {
    Tensor t = empty({5});
    static_cast<float*>(t.data_ptr())[5] = 1;  // one element past the end
  }
  EXPECT_EQ(backend::cpu_guard_violations(), before + 1);
  {
    Tensor t = empty({5});
    static_cast<unsigned char*>(t.data_ptr())[-1] = 0;  // one byte before the start
  }
  EXPECT_EQ(backend::cpu_guard_violations(), before + 2);
  backend::cpu_set_guard_bytes(false);
}
