// The op-consistency test (after ggml's test-backend-ops): every op, every dtype
// it supports, awkward shapes, run on each backend present and compared with the
// reference kernels under a normalized-error bound, with guard bytes around
// every CPU allocation.
//
// A group of ops registers its cases from its own file:
//
//   static const CaseRegistration kCases([](CaseList& cases) {
//     cases.push_back({.name = "exp/odd", .ops = {OpId::exp}, .dtypes = kFloatTypes,
//                      .make = [](DType t, Generator& g) { return TensorList{uniform({7, 13}, t, g)}; },
//                      .run = [](const TensorList& in) { return TensorList{kiln::exp(in[0])}; }});
//   });
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "ops/op_table.h"

namespace kiln::testing {

using ops::OpId;

inline const std::vector<DType> kFloatTypes = {kFloat32, kFloat64, kFloat16, kBFloat16};
inline const std::vector<DType> kIntTypes = {kUInt8, kInt8, kInt16, kInt32, kInt64};
inline const std::vector<DType> kNumericTypes = {kFloat32, kFloat64, kFloat16, kBFloat16, kUInt8,
                                                 kInt8,    kInt16,   kInt32,   kInt64};
inline const std::vector<DType> kAllTypes = {kFloat32, kFloat64, kFloat16, kBFloat16, kUInt8,
                                             kInt8,    kInt16,   kInt32,   kInt64,    kBool};

// A normalized-mean-squared-error bound for one floating dtype.
struct DTypeBound {
  DType dtype;
  double max_nmse;
};

// |autograd - finite difference| <= atol + rtol * |finite difference|, plus
// the rounding of the loss that the difference step magnifies (float64).
struct GradTolerance {
  double atol = 1e-8;
  double rtol = 1e-6;
};

struct OpCase {
  std::string name;            // "<op>/<what is awkward about it>", unique
  std::vector<OpId> ops;       // the op-table rows this case exercises
  std::vector<DType> dtypes;   // run once per dtype
  // Inputs for one dtype; built once per case and dtype, cloned for each run.
  std::function<TensorList(DType, Generator&)> make;
  // Calls the public API; returns every tensor to compare (in-place ops return
  // the mutated input).
  std::function<TensorList(TensorList&)> run;
  // Bounds for the dtypes that need another than default_max_nmse, each with
  // its reason beside it. Integer and bool outputs always match exactly.
  std::vector<DTypeBound> max_nmse = {};
  // Gradient mode: whether the backward rules of the case's ops are checked on it
  // against finite differences (false only where the case sits on a point where
  // the op is not differentiable, with the reason in a comment).
  bool check_grad = true;
  // Gradient mode's bound; set_grad_tolerance() loosens it for an
  // ill-conditioned case, with the reason beside the call.
  GradTolerance grad_tolerance = {};
};

using CaseList = std::vector<OpCase>;

CaseList& all_cases();

struct CaseRegistration {
  explicit CaseRegistration(const std::function<void(CaseList&)>& add) { add(all_cases()); }
};

// --- input makers -------------------------------------------------------------
// Values uniform in [lo, hi), converted to dtype (integers: rounded toward zero).
Tensor uniform(const Shape& shape, DType dtype, Generator& g, double lo = -2, double hi = 2);
// The same values as uniform(), laid out non-contiguously: the view of a larger
// tensor with the last two dims transposed back (a transposed buffer).
Tensor uniform_transposed(const Shape& shape, DType dtype, Generator& g, double lo = -2,
                          double hi = 2);
// Every other element of a tensor twice as wide in the last dim.
Tensor uniform_strided(const Shape& shape, DType dtype, Generator& g, double lo = -2, double hi = 2);
// How a case lays out an input: row-major, transposed (uniform_transposed),
// strided (uniform_strided) or channels last (a [N, H, W, C] buffer seen as
// [N, C, H, W]; 4-D shapes only).
enum class Layout { kPlain, kTransposed, kStrided, kChannelsLast };
Tensor uniform_laid_out(const Shape& shape, Layout layout, DType dtype, Generator& g,
                        double lo = -2, double hi = 2);
// Random bools.
Tensor random_mask(const Shape& shape, Generator& g, double p_true = 0.5);

double default_max_nmse(DType dtype);
// The case's bound for dtype: its own entry, else the default.
double max_nmse_for(const OpCase& c, DType dtype);
// Loosens the gradient check of the case called `name`, which must exist.
void set_grad_tolerance(CaseList& cases, const std::string& name, GradTolerance tolerance);

// A case's name as a test name (letters and digits, the rest '_').
std::string case_name(const ::testing::TestParamInfo<size_t>& info);

// Copies of the inputs with their layouts (a strided view stays a strided view).
TensorList clone_inputs(const TensorList& in);
// A copy of t on `device` with t's layout.
Tensor to_device_keep_layout(const Tensor& t, Device device);

struct Comparison {
  bool ok = true;
  std::string message;
};
// NaNs must sit in the same places, infinities must be equal, the rest must
// meet the NMSE bound (exact equality for integers and bools when it is 0),
// and each element must be within kElementBound * sqrt(max_nmse) of the
// expected one, relative to the larger of its magnitude and the tensor's root
// mean square: one wrong element cannot hide in a large tensor's mean.
inline constexpr double kElementBound = 4;
Comparison compare(const Tensor& expected, const Tensor& actual, double max_nmse);

// Exact float32 math on CUDA devices for its lifetime (TF32 off for matmul
// and convolutions), so that float32 results meet float32 bounds.
class ExactFloat32Guard : public Tf32PolicyGuard {
 public:
  ExactFloat32Guard() : Tf32PolicyGuard({.matmul = false, .conv = false}) {}
};

// Whether an error says that an op has no kernel for a device or dtype: the
// CUDA tests fail on those combinations.
bool not_supported(const Error& e);

}  // namespace kiln::testing
