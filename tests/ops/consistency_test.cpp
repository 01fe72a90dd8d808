// Runs every registered case on the CPU backend against the reference kernels,
// and checks that every op of the table has a shape rule, kernels and cases.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <set>

#include "backends/backend.h"
#include "backends/cpu/cpu_backend.h"
#include "ops/consistency.h"
#include "ops/dispatch.h"

namespace kiln::testing {

CaseList& all_cases() {
  static CaseList cases;
  return cases;
}

Tensor uniform(const Shape& shape, DType dtype, Generator& g, double lo, double hi) {
  Tensor u = rand(shape, {.dtype = kFloat64}, &g) * (hi - lo) + lo;
  if (dtype == kBool) return u > (lo + hi) / 2;
  if (!is_floating(dtype)) {
    if (dtype == kUInt8) u = abs(u);
    return u.to(dtype);  // truncation toward zero
  }
  return u.to(dtype);
}

Tensor uniform_transposed(const Shape& shape, DType dtype, Generator& g, double lo, double hi) {
  if (shape.size() < 2) return uniform_strided(shape, dtype, g, lo, hi);
  Shape swapped = shape;
  std::swap(swapped[swapped.size() - 1], swapped[swapped.size() - 2]);
  Tensor base = uniform(swapped, dtype, g, lo, hi);
  return base.transpose(-1, -2);
}

Tensor uniform_laid_out(const Shape& shape, Layout layout, DType dtype, Generator& g, double lo,
                        double hi) {
  switch (layout) {
    case Layout::kTransposed:
      return uniform_transposed(shape, dtype, g, lo, hi);
    case Layout::kStrided:
      return uniform_strided(shape, dtype, g, lo, hi);
    case Layout::kChannelsLast:
      return uniform({shape.at(0), shape.at(2), shape.at(3), shape.at(1)}, dtype, g, lo, hi)
          .permute({0, 3, 1, 2});
    default:
      return uniform(shape, dtype, g, lo, hi);
  }
}

Tensor uniform_strided(const Shape& shape, DType dtype, Generator& g, double lo, double hi) {
  if (shape.empty()) return uniform(shape, dtype, g, lo, hi);
  Shape wide = shape;
  wide.back() *= 2;
  return uniform(wide, dtype, g, lo, hi).slice(-1, 0, std::nullopt, 2);
}

Tensor random_mask(const Shape& shape, Generator& g, double p_true) {
  return rand(shape, {.dtype = kFloat64}, &g) < p_true;
}

TensorList clone_inputs(const TensorList& in) {
  TensorList out;
  for (const auto& t : in) {
    if (!t.defined()) {
      out.push_back(t);
      continue;
    }
    // Keep the layout (strides) of non-contiguous inputs: clone the base and re-view it.
    if (t.is_contiguous()) {
      out.push_back(t.clone());
    } else {
      Tensor base = empty({static_cast<int64_t>(t.storage()->nbytes() / t.element_size())},
                          {.dtype = t.dtype()});
      std::memcpy(base.data_ptr(), t.storage()->data(), t.storage()->nbytes());
      auto impl = std::make_shared<TensorImpl>(t.impl());
      impl->storage = base.storage();
      impl->autograd = nullptr;
      impl->view_base = nullptr;
      out.push_back(Tensor(impl));
    }
  }
  return out;
}

std::string case_name(const ::testing::TestParamInfo<size_t>& info) {
  std::string name = all_cases()[info.param].name;
  for (auto& ch : name)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return name;
}

double default_max_nmse(DType dtype) {
  switch (dtype) {
    case kFloat64:
      return 1e-20;
    case kFloat32:
      return 1e-10;
    case kFloat16:
      return 1e-6;
    case kBFloat16:
      return 1e-4;
    default:
      return 0;
  }
}

double max_nmse_for(const OpCase& c, DType dtype) {
  for (const DTypeBound& b : c.max_nmse)
    if (b.dtype == dtype) return b.max_nmse;
  return default_max_nmse(dtype);
}

void set_grad_tolerance(CaseList& cases, const std::string& name, GradTolerance tolerance) {
  for (OpCase& c : cases) {
    if (c.name == name) {
      c.grad_tolerance = tolerance;
      return;
    }
  }
  throw ValueError(detail::str_cat("set_grad_tolerance: no case called '", name, "'"));
}

Comparison compare(const Tensor& expected, const Tensor& actual, double max_nmse) {
  Comparison c;
  if (expected.sizes() != actual.sizes() || expected.dtype() != actual.dtype()) {
    c.ok = false;
    c.message = detail::str_cat("shape/dtype differ: expected ", expected.sizes(), " ",
                                expected.dtype(), ", got ", actual.sizes(), " ", actual.dtype());
    return c;
  }
  auto e = expected.to_vector<double>();
  auto a = actual.to_vector<double>();
  double err = 0, ref = 0;
  for (size_t i = 0; i < e.size(); ++i) {
    if (std::isnan(e[i]) || std::isnan(a[i]) || std::isinf(e[i]) || std::isinf(a[i])) {
      const bool same = (std::isnan(e[i]) && std::isnan(a[i])) || e[i] == a[i];
      if (!same) {
        c.ok = false;
        c.message = detail::str_cat("element ", i, ": expected ", e[i], ", got ", a[i]);
        return c;
      }
      continue;
    }
    if (max_nmse == 0 && e[i] != a[i]) {
      c.ok = false;
      c.message = detail::str_cat("element ", i, ": expected ", e[i], ", got ", a[i]);
      return c;
    }
    err += (e[i] - a[i]) * (e[i] - a[i]);
    ref += e[i] * e[i];
  }
  const double nmse = ref > 0 ? err / ref : err;
  if (nmse > max_nmse) {
    c.ok = false;
    c.message = detail::str_cat("NMSE ", nmse, " exceeds ", max_nmse);
    return c;
  }
  if (max_nmse == 0) return c;
  const double rms = std::sqrt(ref / static_cast<double>(std::max<size_t>(e.size(), 1)));
  const double relative = kElementBound * std::sqrt(max_nmse);
  for (size_t i = 0; i < e.size(); ++i) {
    if (!std::isfinite(e[i])) continue;  // checked above
    // An all-zero expectation is held to absolute error, as the NMSE is.
    const double bound = relative * std::max({std::abs(e[i]), rms, ref > 0 ? 0.0 : 1.0});
    if (std::abs(e[i] - a[i]) > bound) {
      c.ok = false;
      c.message = detail::str_cat("element ", i, ": expected ", e[i], ", got ", a[i],
                                  ", off by more than ", bound, " (NMSE ", nmse, ")");
      return c;
    }
  }
  return c;
}

// A copy of t on `device` with t's layout: a strided view stays a strided view.
Tensor to_device_keep_layout(const Tensor& t, Device device) {
  if (!t.defined() || t.is_contiguous()) return t.defined() ? t.to(device) : t;
  Tensor base =
      empty({static_cast<int64_t>(t.storage()->nbytes() / t.element_size())}, {.dtype = t.dtype()});
  std::memcpy(base.data_ptr(), t.storage()->data(), t.storage()->nbytes());
  Tensor on_device = base.to(device);
  auto impl = std::make_shared<TensorImpl>(t.impl());
  impl->storage = on_device.storage();
  impl->autograd = nullptr;
  impl->view_base = nullptr;
  return Tensor(impl);
}

// Whether an error says that an op has no kernel for a device or dtype.
bool not_supported(const Error& e) {
  const std::string what = e.what();
  return what.find("no kernel for device") != std::string::npos ||
         what.find("no CUDA kernel for") != std::string::npos;
}

namespace {

// The reference kernels' outputs for copies of the inputs.
TensorList reference_outputs(const OpCase& op_case, const TensorList& inputs) {
  TensorList ref_inputs = clone_inputs(inputs);
  ops::ReferenceModeGuard reference;
  return op_case.run(ref_inputs);
}

// Every output within the case's bound for its dtype (CPU tensors).
void expect_outputs_match(const OpCase& op_case, const TensorList& expected,
                          const TensorList& actual) {
  ASSERT_EQ(expected.size(), actual.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    const auto result = compare(expected[i], actual[i], max_nmse_for(op_case, expected[i].dtype()));
    EXPECT_TRUE(result.ok) << "output " << i << ": " << result.message;
  }
}

class OpConsistency : public ::testing::TestWithParam<size_t> {};

// The dtypes a case runs with. The plain build runs every one. The sanitizer
// build (KILN_TEST_SANITIZED) runs one per kind (bool, integer, floating) and
// element size: a kernel's memory accesses differ from one element size to
// another, not between float16 and bfloat16 or int8 and uint8, and the plain
// build's guard bytes already catch writes outside an output. This thins the
// sanitizer stage's longest tests (README, "Tests").
std::vector<DType> dtypes_to_run(const OpCase& op_case) {
#ifdef KILN_TEST_SANITIZED
  std::vector<DType> kept;
  std::set<std::pair<int, size_t>> seen;
  for (DType d : op_case.dtypes) {
    const int kind = d == kBool ? 0 : is_floating(d) ? 2 : 1;
    if (seen.insert({kind, dtype_size(d)}).second) kept.push_back(d);
  }
  return kept;
#else
  return op_case.dtypes;
#endif
}

TEST_P(OpConsistency, MatchesReference) {
  const OpCase& op_case = all_cases()[GetParam()];
  backend::cpu_set_guard_bytes(true);
  const size_t violations_before = backend::cpu_guard_violations();
  for (DType dtype : dtypes_to_run(op_case)) {
    SCOPED_TRACE(detail::str_cat(op_case.name, " dtype=", dtype));
    Generator g(1234);
    TensorList inputs = op_case.make(dtype, g);
    const TensorList expected = reference_outputs(op_case, inputs);
    expect_outputs_match(op_case, expected, op_case.run(inputs));
  }
  EXPECT_EQ(backend::cpu_guard_violations(), violations_before)
      << "a kernel wrote outside its output";
  backend::cpu_set_guard_bytes(false);
}

INSTANTIATE_TEST_SUITE_P(Cpu, OpConsistency, ::testing::Range<size_t>(0, all_cases().size()),
                         case_name);

// The CUDA backend against the reference kernels: inputs are made on the CPU,
// copied to the device with their layouts, and the outputs copied back.
// A combination without a CUDA kernel fails (none is missing today).
class CudaOpConsistency : public ::testing::TestWithParam<size_t> {};

TEST_P(CudaOpConsistency, MatchesReference) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device: " << cuda::unavailable_reason();
  const OpCase& op_case = all_cases()[GetParam()];
  const Device device = Device::cuda(0);
  ExactFloat32Guard exact;
  std::vector<std::string> unsupported;
  for (DType dtype : op_case.dtypes) {
    SCOPED_TRACE(detail::str_cat(op_case.name, " dtype=", dtype));
    Generator g(1234);
    TensorList inputs = op_case.make(dtype, g);
    const TensorList expected = reference_outputs(op_case, inputs);
    TensorList device_inputs;
    for (const Tensor& t : inputs) device_inputs.push_back(to_device_keep_layout(t, device));
    TensorList actual;
    try {
      actual = op_case.run(device_inputs);
    } catch (const Error& e) {
      if (!not_supported(e)) throw;
      unsupported.push_back(detail::str_cat(dtype, " (", e.what(), ")"));
      continue;
    }
    for (size_t i = 0; i < actual.size(); ++i) {
      ASSERT_TRUE(actual[i].device() == device)
          << "output " << i << " is on " << actual[i].device();
      actual[i] = actual[i].to(Device::cpu());
    }
    expect_outputs_match(op_case, expected, actual);
  }
  if (!unsupported.empty()) {
    std::string list;
    for (const auto& u : unsupported) list += "\n  " + u;
    // Every op has a CUDA kernel for every dtype its cases use: a gap fails.
    ADD_FAILURE() << "no CUDA kernel:" << list;
  }
}

INSTANTIATE_TEST_SUITE_P(Cuda, CudaOpConsistency, ::testing::Range<size_t>(0, all_cases().size()),
                         case_name);

TEST(OpCoverage, EveryOpHasShapeRuleKernelsAndCases) {
  std::set<OpId> covered;
  for (const auto& c : all_cases()) covered.insert(c.ops.begin(), c.ops.end());
  // Custom ops run the kernels their users define: tests/unit/library_test.cpp.
  covered.insert(OpId::custom);
  // debug_tensor has no outputs to compare: tests/compiler/debug_test.cpp.
  covered.insert(OpId::debug_tensor);
  const auto& reference = backend::reference_kernels();
  const auto& cpu = backend::backend_for(DeviceKind::CPU).kernels();
  std::vector<std::string> missing;
  for (const auto& s : ops::all_op_schemas()) {
    if (!s.shape_rule) missing.push_back(std::string(s.name) + " (shape rule)");
    if (!s.has_flag(ops::kView)) {
      if (!reference.get(s.id)) missing.push_back(std::string(s.name) + " (reference kernel)");
      if (!cpu.get(s.id)) missing.push_back(std::string(s.name) + " (cpu kernel)");
    }
    if (!covered.count(s.id)) missing.push_back(std::string(s.name) + " (consistency cases)");
  }
  std::string list;
  for (const auto& m : missing) list += "\n  " + m;
  EXPECT_TRUE(missing.empty()) << missing.size() << " gaps in the op table:" << list;
}

TEST(OpCoverage, CaseNamesAreUnique) {
  std::set<std::string> names;
  for (const auto& c : all_cases()) EXPECT_TRUE(names.insert(c.name).second) << c.name;
}

}  // namespace
}  // namespace kiln::testing
