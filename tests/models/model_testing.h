// Comparisons shared by the model tests and the PyTorch parity tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <sstream>
#include <string>

#include "kiln/tensor.h"

namespace kiln::testing {

// tests/data: the KILN_TEST_DATA_DIR environment variable when set (a build run
// on another machine), else the source tree's.
inline std::string test_data_dir() {
  const char* dir = std::getenv("KILN_TEST_DATA_DIR");
  return dir && *dir ? dir : KILN_TEST_DATA_DIR;
}

// max |actual - expected| <= bound * max |expected|: the parity bound of the
// reference models (relative to the output's scale, not per element).
inline ::testing::AssertionResult within_scaled_bound(const Tensor& actual, const Tensor& expected,
                                                      double bound = 1e-4) {
  if (actual.shape() != expected.shape()) {
    std::ostringstream message;
    message << "shape " << actual.shape() << " differs from the expected " << expected.shape();
    return ::testing::AssertionFailure() << message.str();
  }
  const Tensor a = actual.detach().to(Device::cpu()).to(kFloat64);
  const Tensor e = expected.detach().to(Device::cpu()).to(kFloat64);
  const double scale = e.abs().max().item<double>();
  const double error = (a - e).abs().max().item<double>();
  if (error <= bound * scale) {
    return ::testing::AssertionSuccess() << "max error " << error << ", scale " << scale;
  }
  return ::testing::AssertionFailure() << "max error " << error << " exceeds " << bound << " x "
                                       << scale << " (max |expected|) = " << bound * scale;
}

}  // namespace kiln::testing
