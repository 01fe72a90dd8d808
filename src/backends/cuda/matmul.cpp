// CUDA kernels of matmul, bmm, addmm and linear through cuBLASLt.
//
// kiln's tensors are row-major; cuBLASLt is column-major. A row-major
// C[m, n] = A[m, k] B[k, n] is the column-major C'[n, m] = B'[n, k] A'[k, m],
// so B goes first. Each operand is used in place when one of its two matrix
// strides is 1 (the other is its leading dimension, transposed or not) and
// its batch dims collapse to one stride (0 for a broadcast operand); anything
// else is copied to a contiguous tensor first. linear folds the input's rows
// into one matrix and adds the bias in cuBLASLt's epilogue; inputs of up to
// 8 rows take a warp-per-feature kernel instead (few_rows_linear.cu).
//
// Each distinct problem (sizes, layouts, dtype, epilogue, alignment) keeps its
// descriptors and the algorithm cuBLASLt's heuristic chose (under
// autotune::Scope, the fastest of its first candidates, timed once and
// remembered on disk). float32 uses pure
// float32 math unless TF32 is allowed for matmul (kiln::set_allow_tf32).
#include <cublasLt.h>

#include <array>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>

#include "backends/autotune.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_kernels.h"
#include "kiln/kiln.h"
#include "ops/dispatch.h"
#include "ops/workspace.h"

namespace kiln::backend::cuda {
namespace {

using ops::OpId;

// The most workspace an algorithm may ask for; a call allocates only what
// its algorithm needs.
constexpr size_t kWorkspaceBytes = size_t{32} << 20;

void check_lt(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw Error(detail::str_cat("cuda: ", what, ": cuBLAS status ", static_cast<int>(status)));
}

// One matrix operand as cuBLASLt sees it (column-major).
struct Operand {
  const void* ptr = nullptr;
  int64_t rows = 0, cols = 0, ld = 0;  // the stored layout
  bool transposed = false;
  int64_t batch_stride = 0;
};

// The row-major [r, c] matrices of t (batch dims first, already broadcast to
// `batch` entries) as a stored column-major operand of the transposed
// product, or nothing when t's layout does not allow it.
std::optional<Operand> as_operand(const Tensor& t, int64_t batch) {
  const int64_t nd = t.dim();
  const int64_t r = t.size(nd - 2), c = t.size(nd - 1);
  const int64_t s0 = t.stride(nd - 2), s1 = t.stride(nd - 1);
  Operand o;
  if (s1 == 1 && s0 >= std::max<int64_t>(1, c)) {
    o.rows = c, o.cols = r, o.ld = s0, o.transposed = false;  // row-major: col-major [c, r]
  } else if (s0 == 1 && s1 >= std::max<int64_t>(1, r)) {
    o.rows = r, o.cols = c, o.ld = s1, o.transposed = true;  // col-major [r, c], used transposed
  } else if (r == 1 && s1 == 1) {
    o.rows = c, o.cols = 1, o.ld = std::max<int64_t>(1, c), o.transposed = false;
  } else if (c == 1 && s0 == 1) {
    o.rows = 1, o.cols = r, o.ld = 1, o.transposed = false;
  } else {
    return std::nullopt;
  }
  // The batch dims must step by one stride.
  int64_t stride = 0;
  bool first = true;
  int64_t expected = -1;
  for (int64_t d = nd - 3; d >= 0; --d) {
    if (t.size(d) == 1) continue;
    if (first) {
      stride = t.stride(d);
      expected = stride * t.size(d);
      first = false;
    } else {
      if (t.stride(d) != expected) return std::nullopt;
      expected = t.stride(d) * t.size(d);
    }
  }
  o.batch_stride = batch > 1 ? stride : 0;
  o.ptr = t.data_ptr();
  return o;
}

cudaDataType_t data_type(DType t) {
  switch (t) {
    case kFloat16:
      return CUDA_R_16F;
    case kBFloat16:
      return CUDA_R_16BF;
    case kFloat64:
      return CUDA_R_64F;
    default:
      return CUDA_R_32F;
  }
}

int alignment_of(const void* p) {
  const auto v = reinterpret_cast<uintptr_t>(p);
  int a = 256;
  while (a > 1 && v % a != 0) a /= 2;
  return a;
}

struct PlanKey {
  std::tuple<int, int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
             int64_t, bool, bool, bool, bool, int, int, int, int>
      fields;
  bool operator<(const PlanKey& o) const { return fields < o.fields; }
};

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  size_t workspace = 0;   // bytes algo needs
  bool algo_set = false;  // the heuristics (or tuning) chose algo
  bool tuned = false;     // chosen by timing the candidates (autotune::Scope)
};

// Candidates timed per matmul shape under autotuning.
constexpr size_t kTunedCandidates = 8;

struct DeviceState {
  std::mutex mutex;
  cublasLtHandle_t handle = nullptr;
  std::map<PlanKey, Plan> plans;
};

DeviceState& state_for(int device) {
  return per_device_state<DeviceState>(
      device, [](DeviceState& s) { check_lt(cublasLtCreate(&s.handle), "cublasLtCreate"); });
}

cublasLtMatrixLayout_t make_layout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld,
                                   int64_t batch, int64_t batch_stride) {
  cublasLtMatrixLayout_t layout;
  check_lt(cublasLtMatrixLayoutCreate(&layout, type, rows, cols, ld), "cublasLtMatrixLayoutCreate");
  if (batch > 1) {
    const int32_t count = static_cast<int32_t>(batch);
    check_lt(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                              sizeof(count)),
             "cublasLtMatrixLayoutSetAttribute");
    check_lt(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                              &batch_stride, sizeof(batch_stride)),
             "cublasLtMatrixLayoutSetAttribute");
  }
  return layout;
}

// D[m, n] (row-major, contiguous, `batch` of them m * n apart) =
//   alpha * A @ B + beta * D (+ bias[n] on each row when bias is given).
// a: [batch, m, k] and b: [batch, k, n] views (batch dims broadcast).
void gemm(const Tensor& d, const Tensor& a, const Tensor& b, int64_t batch, int64_t m, int64_t n,
          int64_t k, double alpha, double beta, const Tensor& bias) {
  if (batch == 0 || m == 0 || n == 0) return;
  // Operands whose layout cuBLASLt cannot read are copied to contiguous ones.
  Tensor a_copy, b_copy;
  std::optional<Operand> found_a = as_operand(a, batch), found_b = as_operand(b, batch);
  if (!found_a) found_a = as_operand(a_copy = a.contiguous(), batch);
  if (!found_b) found_b = as_operand(b_copy = b.contiguous(), batch);
  const Operand oa = *found_a, ob = *found_b;
  const DType dtype = d.dtype();
  const int device = d.device().index();
  const bool tf32 = dtype == kFloat32 && allow_tf32().matmul;
  const cublasComputeType_t compute =
      dtype == kFloat64 ? CUBLAS_COMPUTE_64F
                        : (tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F);
  const cudaDataType_t scale_type = dtype == kFloat64 ? CUDA_R_64F : CUDA_R_32F;
  const cudaDataType_t type = data_type(dtype);
  const int align_a = alignment_of(ob.ptr), align_b = alignment_of(oa.ptr),
            align_d = alignment_of(d.data_ptr());
  const int align_bias = bias.defined() ? alignment_of(bias.data_ptr()) : 256;
  // cuBLASLt's A is our b, its B our a.
  const PlanKey key{{device, static_cast<int>(dtype), batch, m, n, k, ob.ld, oa.ld, ob.batch_stride,
                     oa.batch_stride, ob.rows, ob.transposed, oa.transposed, bias.defined(), tf32,
                     align_a, align_b, align_d, align_bias}};
  DeviceState& state = state_for(device);
  DeviceGuard guard(device);
  const cudaStream_t stream = static_cast<cudaStream_t>(current_stream_handle(device));
  std::lock_guard<std::mutex> lock(state.mutex);
  auto it = state.plans.find(key);
  const bool tune = autotune::active();
  if (it == state.plans.end()) {
    Plan p;
    check_lt(cublasLtMatmulDescCreate(&p.desc, compute, scale_type), "cublasLtMatmulDescCreate");
    const cublasOperation_t ta = ob.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t tb = oa.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
    check_lt(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)),
             "set TRANSA");
    check_lt(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)),
             "set TRANSB");
    if (bias.defined()) {
      const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
      check_lt(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                              sizeof(epilogue)),
               "set EPILOGUE");
      const cudaDataType_t bias_type = type;
      check_lt(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                              &bias_type, sizeof(bias_type)),
               "set BIAS_DATA_TYPE");
    }
    p.a = make_layout(type, ob.rows, ob.cols, ob.ld, batch, ob.batch_stride);
    p.b = make_layout(type, oa.rows, oa.cols, oa.ld, batch, oa.batch_stride);
    p.d = make_layout(type, n, m, n, batch, m * n);
    it = state.plans.emplace(key, p).first;
  }
  Plan& p = it->second;
  if (bias.defined()) {
    const void* bias_ptr = bias.data_ptr();
    check_lt(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr,
                                            sizeof(bias_ptr)),
             "set BIAS_POINTER");
  }
  const float alpha_f = static_cast<float>(alpha), beta_f = static_cast<float>(beta);
  const void* alpha_p = dtype == kFloat64 ? static_cast<const void*>(&alpha) : &alpha_f;
  const void* beta_p = dtype == kFloat64 ? static_cast<const void*>(&beta) : &beta_f;
  if (!p.algo_set || (tune && !p.tuned)) {
    cublasLtMatmulPreference_t pref;
    check_lt(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
    const size_t ws = kWorkspaceBytes;
    check_lt(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                  &ws, sizeof(ws)),
             "set MAX_WORKSPACE_BYTES");
    const uint32_t alignments[4] = {static_cast<uint32_t>(align_a), static_cast<uint32_t>(align_b),
                                    static_cast<uint32_t>(align_d), static_cast<uint32_t>(align_d)};
    const cublasLtMatmulPreferenceAttributes_t which[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4; ++i) {
      check_lt(
          cublasLtMatmulPreferenceSetAttribute(pref, which[i], &alignments[i], sizeof(uint32_t)),
          "set MIN_ALIGNMENT");
    }
    std::array<cublasLtMatmulHeuristicResult_t, kTunedCandidates> results{};
    int found = 0;
    const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
        state.handle, p.desc, p.a, p.b, p.d, p.d, pref, tune ? static_cast<int>(kTunedCandidates) : 1,
        results.data(), &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (status != CUBLAS_STATUS_SUCCESS || found == 0) {
      if (!p.algo_set) {
        cublasLtMatrixLayoutDestroy(p.a);
        cublasLtMatrixLayoutDestroy(p.b);
        cublasLtMatrixLayoutDestroy(p.d);
        cublasLtMatmulDescDestroy(p.desc);
        state.plans.erase(it);
      }
      throw Error(detail::str_cat("cuda matmul: cuBLASLt has no algorithm for ", dtype, " [", batch,
                                  " x ", m, " x ", k, "] @ [", k, " x ", n, "]",
                                  bias.defined() ? " with bias" : ""));
    }
    int best = 0;
    if (tune && found > 1) {
      std::string disk_key = detail::str_cat("cublasLt ", cublasLtGetVersion(), " matmul on ", device_name(device), ":");
      std::apply([&](const auto&... v) { ((disk_key += detail::str_cat(" ", static_cast<int64_t>(v))), ...); },
                 key.fields);
      const std::optional<int64_t> known = autotune::lookup(disk_key);
      if (known && *known >= 0 && *known < found) {
        best = static_cast<int>(*known);
      } else {
        // Each candidate writes a scratch result (D may be accumulated into).
        Tensor scratch = ops::make_tensor({batch * m * n}, dtype, d.device(), false);
        const Tensor workspace =
            ops::make_tensor({static_cast<int64_t>(kWorkspaceBytes)}, kUInt8, d.device(), false);
        double best_ms = std::numeric_limits<double>::infinity();
        for (int i = 0; i < found; ++i) {
          const double ms = time_device_ms(device, [&] {
            return cublasLtMatmul(state.handle, p.desc, alpha_p, ob.ptr, p.a, oa.ptr, p.b, beta_p,
                                  scratch.data_ptr(), p.d, scratch.data_ptr(), p.d, &results[i].algo,
                                  workspace.data_ptr(), kWorkspaceBytes, stream) == CUBLAS_STATUS_SUCCESS;
          });
          if (ms < best_ms) best_ms = ms, best = i;
        }
        autotune::note_timed(found);
        autotune::store(disk_key, best);
      }
    }
    p.algo = results[static_cast<size_t>(best)].algo;
    p.workspace = results[static_cast<size_t>(best)].workspaceSize;
    p.algo_set = true;
    p.tuned = tune;
  }
  const Tensor workspace =
      p.workspace ? ops::make_workspace(p.workspace, d.device()) : Tensor();
  check_lt(cublasLtMatmul(state.handle, p.desc, alpha_p, ob.ptr, p.a, oa.ptr, p.b, beta_p,
                          d.data_ptr(), p.d, d.data_ptr(), p.d, &p.algo,
                          p.workspace ? workspace.data_ptr() : nullptr, p.workspace, stream),
           "cublasLtMatmul");
}

// The batch shape of a and b broadcast, as a list of sizes, and both
// operands expanded to it (views).
struct Batched {
  Tensor a, b;
  Shape batch;
  int64_t count = 1;
};

Batched broadcast_batch(const Tensor& a, const Tensor& b) {
  Shape ba(a.sizes().begin(), a.sizes().end() - 2), bb(b.sizes().begin(), b.sizes().end() - 2);
  Shape batch(std::max(ba.size(), bb.size()), 1);
  for (size_t i = 0; i < batch.size(); ++i) {
    const int64_t x = i < batch.size() - ba.size() ? 1 : ba[i - (batch.size() - ba.size())];
    const int64_t y = i < batch.size() - bb.size() ? 1 : bb[i - (batch.size() - bb.size())];
    batch[i] = x == 1 ? y : x;
  }
  Batched r;
  r.batch = batch;
  for (int64_t s : batch) r.count *= s;
  Shape sa = batch, sb = batch;
  sa.push_back(a.size(-2));
  sa.push_back(a.size(-1));
  sb.push_back(b.size(-2));
  sb.push_back(b.size(-1));
  r.a = a.expand(sa);
  r.b = b.expand(sb);
  return r;
}

// out = a @ b for a [..., m, k], b [..., k, n]; out [batch..., m, n] contiguous.
void batched_product(const Tensor& out, const Tensor& a, const Tensor& b, double alpha, double beta,
                     const Tensor& bias) {
  const int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  if (bias.defined() && out.dtype() == kFloat64) {
    // cuBLASLt's bias epilogue is not offered for float64: add it afterwards.
    batched_product(out, a, b, alpha, beta, Tensor());
    NoGradGuard no_grad;
    copy_same_dtype(out, add(out, bias));
    return;
  }
  if (k == 0) {  // an empty sum: zero (and the bias)
    fill_bits(out, 0);
    if (bias.defined()) copy_same_dtype(out, bias.expand(out.sizes()));
    return;
  }
  // b without batch dims against a stack of a's rows: one product of a's rows.
  if (b.dim() == 2 && a.dim() > 2) {
    const Tensor rows = a.reshape({-1, k});
    gemm(out, rows, b, 1, rows.size(0), n, k, alpha, beta, bias);
    return;
  }
  const Batched bt = broadcast_batch(a, b);
  gemm(out, bt.a, bt.b, bt.count, m, n, k, alpha, beta, bias);
}

void matmul_op(const KernelCall& c) {
  const Tensor a = c.in(0).dim() == 1 ? c.in(0).unsqueeze(0) : c.in(0);
  const Tensor b = c.in(1).dim() == 1 ? c.in(1).unsqueeze(1) : c.in(1);
  batched_product(c.out(), a, b, 1, 0, Tensor());
}

void linear_op(const KernelCall& c) {
  const Tensor& x = c.in(0);
  const Tensor a = x.dim() == 1 ? x.unsqueeze(0) : x;
  const Tensor bias = c.inputs.size() > 2 && c.in(2).defined() ? c.in(2).contiguous() : Tensor();
  if (few_rows_linear(c.out(), x, c.in(1), bias)) return;
  batched_product(c.out(), a, c.in(1).t(), 1, 0, bias);
}

void addmm_op(const KernelCall& c) {
  const Tensor& self = c.in(0);
  const double beta = c.attrs.scalar(0).to_double(), alpha = c.attrs.scalar(1).to_double();
  const Tensor& out = c.out();
  const int64_t m = c.in(1).size(0), k = c.in(1).size(1), n = c.in(2).size(1);
  if (beta == 1 && self.dim() == 1 && self.size(0) == n && alpha != 0 && k > 0 &&
      out.dtype() != kFloat64) {
    gemm(out, c.in(1), c.in(2), 1, m, n, k, alpha, 0, self.contiguous());
    return;
  }
  if (beta != 0) copy_same_dtype(out, self.expand(out.sizes()));
  if (k == 0 || alpha == 0) {
    if (beta == 0)
      fill_bits(out, 0);
    else if (beta != 1)
      copy_same_dtype(out, (out * beta));
    return;
  }
  gemm(out, c.in(1), c.in(2), 1, m, n, k, alpha, beta, Tensor());
}

}  // namespace

void register_cuda_matmul_kernels(KernelTable& t) {
  t.set(OpId::matmul, matmul_op);
  t.set(OpId::bmm,
        [](const KernelCall& c) { batched_product(c.out(), c.in(0), c.in(1), 1, 0, Tensor()); });
  t.set(OpId::addmm, addmm_op);
  t.set(OpId::linear, linear_op);
}

}  // namespace kiln::backend::cuda
