// Gradient mode of the op-consistency test: every case that runs in float64 is
// differentiated with autograd and compared with central finite differences,
// and every differentiable op of the table must have a rule and a checked case.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>
#include <set>

#include "autograd/rules.h"
#include "ops/consistency.h"

namespace kiln::testing {
namespace {

constexpr double kStep = 1e-6;
constexpr int64_t kMaxProbes = 24;  // finite differences per input, at sampled elements

// A case is differentiated when it runs in float64 and exercises an op with a derivative.
bool gradient_case(const OpCase& c) {
  const bool differentiable = std::any_of(c.ops.begin(), c.ops.end(), [](ops::OpId op) {
    return !ops::op_schema(op).has_flag(ops::kNoGrad);
  });
  return differentiable && c.check_grad &&
         std::find(c.dtypes.begin(), c.dtypes.end(), kFloat64) != c.dtypes.end();
}

// sum(out_i * weight_i) over the outputs that have weights (the floating ones that
// depend on the inputs).
Tensor projected_loss(const TensorList& outputs, const TensorList& weights) {
  Tensor loss = zeros({}, {.dtype = kFloat64});
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!weights[i].defined()) continue;
    loss = loss + sum(outputs[i].to(kFloat64) * weights[i]);
  }
  return loss;
}

// Runs the case on copies of the inputs; the leaves are the floating ones. In-place
// cases write into their inputs, which leaves may not allow: they get copies.
TensorList run_on(const OpCase& c, const TensorList& leaves, bool* used_copies) {
  TensorList in = leaves;
  if (*used_copies) {
    for (auto& t : in)
      if (t.defined() && t.requires_grad()) t = t.clone();
  }
  try {
    return c.run(in);
  } catch (const Error& e) {
    if (*used_copies || std::string(e.what()).find("leaf") == std::string::npos) throw;
    *used_copies = true;
    return run_on(c, leaves, used_copies);
  }
}

double loss_at(const OpCase& c, const TensorList& base, const TensorList& weights) {
  NoGradGuard no_grad;
  TensorList in = clone_inputs(base);
  return projected_loss(c.run(in), weights).item<double>();
}

// The address of element `flat` (row-major) of a float64 CPU tensor of any strides.
double* element(const Tensor& t, int64_t flat) {
  int64_t offset = 0;
  for (int64_t d = t.dim() - 1; d >= 0; --d) {
    offset += (flat % t.size(d)) * t.stride(d);
    flat /= t.size(d);
  }
  return static_cast<double*>(t.data_ptr()) + offset;
}

class OpGradients : public ::testing::TestWithParam<size_t> {};

TEST_P(OpGradients, MatchFiniteDifferences) {
  const OpCase& c = all_cases()[GetParam()];
  Generator g(1234);
  TensorList inputs = clone_inputs(c.make(kFloat64, g));
  std::vector<size_t> leaf_index;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].defined() && inputs[i].dtype() == kFloat64) {
      inputs[i].requires_grad_();
      leaf_index.push_back(i);
    }
  }
  if (leaf_index.empty()) GTEST_SKIP() << "no floating inputs";
  bool used_copies = false;
  TensorList outputs = run_on(c, inputs, &used_copies);
  Generator wg(99);
  TensorList weights(outputs.size());
  bool any = false;
  for (size_t i = 0; i < outputs.size(); ++i) {
    // Outputs rounded to a narrower dtype would drown finite differences in rounding.
    if (outputs[i].defined() && outputs[i].dtype() == kFloat64 && outputs[i].requires_grad()) {
      weights[i] = rand(outputs[i].sizes(), {.dtype = kFloat64}, &wg) * 2 - 1;
      any = true;
    }
  }
  if (!any) GTEST_SKIP() << "no output depends on a floating input";
  TensorList leaves;
  for (size_t i : leaf_index) leaves.push_back(inputs[i]);
  TensorList analytic =
      autograd::grad({projected_loss(outputs, weights)}, leaves, {}, {.allow_unused = true});
  TensorList base = clone_inputs(inputs);
  // Rounding in the loss limits how small a derivative differences can resolve.
  const double loss_scale = std::abs(loss_at(c, base, weights));
  for (size_t li = 0; li < leaf_index.size(); ++li) {
    const Tensor& x = base[leaf_index[li]];
    const int64_t n = x.numel();
    Generator pick(7 + li);
    std::vector<int64_t> probes;
    if (n <= kMaxProbes) {
      for (int64_t k = 0; k < n; ++k) probes.push_back(k);
    } else {
      probes = randint(0, n, {kMaxProbes}, {}, &pick).to_vector<int64_t>();
    }
    const Tensor grad =
        analytic[li].defined() ? analytic[li].contiguous() : zeros(x.sizes(), {.dtype = kFloat64});
    for (int64_t k : probes) {
      double* p = element(x, k);
      const double saved = *p;
      if (!std::isfinite(saved)) continue;  // no derivative to difference at inf or NaN
      *p = saved + kStep;
      const double up = loss_at(c, base, weights);
      *p = saved - kStep;
      const double down = loss_at(c, base, weights);
      *p = saved;
      const double numeric = (up - down) / (2 * kStep);
      const double got = grad.data<double>()[k];
      if (!std::isfinite(numeric) || !std::isfinite(loss_scale)) continue;
      const double rounding = 8 * std::numeric_limits<double>::epsilon() * loss_scale / kStep;
      const GradTolerance& tol = c.grad_tolerance;
      EXPECT_NEAR(got, numeric, tol.atol + tol.rtol * std::abs(numeric) + rounding)
          << c.name << ": input " << leaf_index[li] << " element " << k;
    }
  }
}

std::vector<size_t> gradient_cases() {
  std::vector<size_t> indices;
  for (size_t i = 0; i < all_cases().size(); ++i)
    if (gradient_case(all_cases()[i])) indices.push_back(i);
  return indices;
}

INSTANTIATE_TEST_SUITE_P(Cpu, OpGradients, ::testing::ValuesIn(gradient_cases()), case_name);

// The gradients of one run of a case on `device`: inputs of `dtype` are the
// leaves, the loss weights come from a fixed seed; returned on the CPU.
TensorList gradients_on(const OpCase& c, DType dtype, Device device) {
  Generator g(1234);
  TensorList inputs;
  for (const Tensor& t : c.make(dtype, g)) inputs.push_back(to_device_keep_layout(t, device));
  std::vector<size_t> leaf_index;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].defined() && inputs[i].dtype() == dtype) {
      inputs[i].requires_grad_();
      leaf_index.push_back(i);
    }
  }
  bool used_copies = false;
  TensorList outputs = run_on(c, inputs, &used_copies);
  Generator wg(99);
  TensorList weights(outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (outputs[i].defined() && is_floating(outputs[i].dtype()) && outputs[i].requires_grad()) {
      weights[i] = (rand(outputs[i].sizes(), {.dtype = kFloat64}, &wg) * 2 - 1).to(device);
    }
  }
  TensorList leaves;
  for (size_t i : leaf_index) leaves.push_back(inputs[i]);
  TensorList grads =
      autograd::grad({projected_loss(outputs, weights)}, leaves, {}, {.allow_unused = true});
  for (auto& t : grads)
    if (t.defined()) t = t.to(Device::cpu());
  return grads;
}

// Gradient mode on CUDA: the backward rules run on the device, in float64 and
// float32, and must give the CPU's gradients (which the finite differences
// above check). A combination without a CUDA kernel fails.
class CudaOpGradients : public ::testing::TestWithParam<size_t> {};

TEST_P(CudaOpGradients, MatchTheCpu) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device: " << cuda::unavailable_reason();
  const OpCase& c = all_cases()[GetParam()];
  ExactFloat32Guard exact;
  std::vector<std::string> unsupported;
  int ran = 0;
  for (DType dtype : {kFloat64, kFloat32}) {
    if (std::find(c.dtypes.begin(), c.dtypes.end(), dtype) == c.dtypes.end()) continue;
    SCOPED_TRACE(detail::str_cat(c.name, " dtype=", dtype));
    const TensorList expected = gradients_on(c, dtype, Device::cpu());
    TensorList actual;
    try {
      actual = gradients_on(c, dtype, Device::cuda(0));
    } catch (const Error& e) {
      if (!not_supported(e)) throw;
      unsupported.push_back(detail::str_cat(dtype, " (", e.what(), ")"));
      continue;
    }
    ++ran;
    ASSERT_EQ(expected.size(), actual.size());
    for (size_t i = 0; i < expected.size(); ++i) {
      ASSERT_EQ(expected[i].defined(), actual[i].defined()) << "gradient " << i;
      if (!expected[i].defined()) continue;
      // Backward rules chain several ops: float32 gets more room than one op's bound.
      const double bound = dtype == kFloat64 ? 1e-20 : 1e-8;
      const auto result = compare(expected[i], actual[i], bound);
      EXPECT_TRUE(result.ok) << "gradient " << i << ": " << result.message;
    }
  }
  if (!unsupported.empty()) {
    std::string list;
    for (const auto& u : unsupported) list += "\n  " + u;
    // Every op has a CUDA kernel for every dtype its cases use: a gap fails.
    ADD_FAILURE() << "no CUDA kernel (" << ran << " dtypes ran):" << list;
  }
}

INSTANTIATE_TEST_SUITE_P(Cuda, CudaOpGradients, ::testing::ValuesIn(gradient_cases()), case_name);

TEST(OpCoverage, EveryDifferentiableOpHasACheckedBackwardRule) {
  std::set<ops::OpId> checked;
  for (const auto& c : all_cases())
    if (gradient_case(c)) checked.insert(c.ops.begin(), c.ops.end());
  // A custom op differentiates as its user defines (tests/unit/library_test.cpp).
  checked.insert(ops::OpId::custom);
  std::vector<std::string> missing;
  for (const auto& s : ops::all_op_schemas()) {
    const bool has_rule = autograd::derivative(s.id).rule != nullptr;
    if (s.has_flag(ops::kNoGrad)) {
      if (has_rule) missing.push_back(std::string(s.name) + " (kNoGrad op with a rule)");
      continue;
    }
    if (!has_rule) missing.push_back(std::string(s.name) + " (backward rule)");
    if (!checked.count(s.id)) missing.push_back(std::string(s.name) + " (float64 gradient case)");
  }
  std::string list;
  for (const auto& m : missing) list += "\n  " + m;
  EXPECT_TRUE(missing.empty()) << missing.size() << " gaps in the derivative table:" << list;
}

}  // namespace
}  // namespace kiln::testing
