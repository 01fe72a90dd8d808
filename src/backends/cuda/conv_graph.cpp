#include "backends/cuda/conv_graph.h"

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "backends/autotune.h"

#include "backends/cuda/cudnn_common.h"

namespace kiln::backend::cuda {
namespace {

// One backend descriptor, destroyed with its owner.
class Desc {
 public:
  explicit Desc(cudnnBackendDescriptorType_t type) { status_ = cudnnBackendCreateDescriptor(type, &d_); }
  ~Desc() {
    if (d_) cudnnBackendDestroyDescriptor(d_);
  }
  Desc(Desc&& other) noexcept : d_(std::exchange(other.d_, nullptr)), status_(other.status_) {}
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  Desc& operator=(Desc&&) = delete;

  cudnnBackendDescriptor_t get() const noexcept { return d_; }
  cudnnBackendDescriptor_t release() noexcept { return std::exchange(d_, nullptr); }
  cudnnStatus_t status() const noexcept { return status_; }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
  cudnnStatus_t status_ = CUDNN_STATUS_SUCCESS;
};

// The unique ids of the three tensors of a convolution, of the epilogue's
// bias and residual, and of its virtual (never stored) intermediates.
constexpr int64_t kX = 'x', kW = 'w', kY = 'y', kBias = 'b', kZ = 'z', kSums = 's', kWithZ = 'r',
                  kWithBias = 'p';

#define KILN_DNN_TRY(call)                                       \
  do {                                                           \
    const cudnnStatus_t kiln_status_ = (call);                   \
    if (kiln_status_ != CUDNN_STATUS_SUCCESS) return kiln_status_; \
  } while (0)

cudnnStatus_t set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                  cudnnBackendAttributeType_t type, int64_t count, const void* value) {
  return cudnnBackendSetAttribute(d, name, type, count, value);
}

// A packed 4-D tensor of dims; a virtual one is an intermediate of a graph,
// never stored.
cudnnStatus_t make_tensor(Desc& t, int64_t uid, cudnnDataType_t type, const int64_t (&dims)[4],
                          int64_t alignment, bool is_virtual = false) {
  KILN_DNN_TRY(t.status());
  const int64_t strides[4] = {dims[1] * dims[2] * dims[3], dims[2] * dims[3], dims[3], 1};
  KILN_DNN_TRY(set(t.get(), CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type));
  KILN_DNN_TRY(set(t.get(), CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims));
  KILN_DNN_TRY(set(t.get(), CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides));
  KILN_DNN_TRY(set(t.get(), CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
  KILN_DNN_TRY(set(t.get(), CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment));
  if (is_virtual)
    KILN_DNN_TRY(set(t.get(), CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual));
  return cudnnBackendFinalize(t.get());
}

// A pointwise operation of the graph, y = mode(x[, b]) in float; its
// descriptors are kept in `keep` until the graph is finalized.
cudnnStatus_t pointwise(std::vector<Desc>& keep, cudnnPointwiseMode_t mode,
                        cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
                        cudnnBackendDescriptor_t y) {
  Desc& pw = keep.emplace_back(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  KILN_DNN_TRY(pw.status());
  const cudnnDataType_t precision = CUDNN_DATA_FLOAT;
  KILN_DNN_TRY(set(pw.get(), CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode));
  KILN_DNN_TRY(set(pw.get(), CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &precision));
  KILN_DNN_TRY(cudnnBackendFinalize(pw.get()));
  cudnnBackendDescriptor_t pd = pw.get();
  Desc& op = keep.emplace_back(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  KILN_DNN_TRY(op.status());
  KILN_DNN_TRY(set(op.get(), CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR,
                   CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pd));
  KILN_DNN_TRY(
      set(op.get(), CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x));
  if (b)
    KILN_DNN_TRY(
        set(op.get(), CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b));
  KILN_DNN_TRY(
      set(op.get(), CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y));
  return cudnnBackendFinalize(op.get());
}

// Whether an engine's numerical notes rule it out: inputs converted down
// (never), or TF32 tensor cores for float32 when TF32 is off.
cudnnStatus_t acceptable(cudnnBackendDescriptor_t config, bool exact_float32, bool& ok) {
  Desc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  KILN_DNN_TRY(engine.status());
  cudnnBackendDescriptor_t e = engine.get();
  int64_t n = 0;
  KILN_DNN_TRY(cudnnBackendGetAttribute(config, CUDNN_ATTR_ENGINECFG_ENGINE,
                                        CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &e));
  cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  int64_t count = 0;
  KILN_DNN_TRY(cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
                                        CUDNN_TYPE_NUMERICAL_NOTE, CUDNN_NUMERICAL_NOTE_TYPE_COUNT,
                                        &count, notes));
  ok = true;
  for (int64_t i = 0; i < count; ++i) {
    if (notes[i] == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS) ok = false;
    if (exact_float32 && notes[i] == CUDNN_NUMERICAL_NOTE_TENSOR_CORE) ok = false;
  }
  return CUDNN_STATUS_SUCCESS;
}

// The first `limit` plans, in the heuristics' order of `mode`, that are
// acceptable, build and fit max_workspace (the caller owns their descriptors).
cudnnStatus_t collect_plans(cudnnHandle_t handle, cudnnBackendDescriptor_t graph,
                            cudnnBackendHeurMode_t mode, bool exact_float32, size_t max_workspace,
                            size_t limit, std::vector<ConvGraphCache::Plan>& out) {
  Desc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  KILN_DNN_TRY(heur.status());
  KILN_DNN_TRY(set(heur.get(), CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
                   CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph));
  KILN_DNN_TRY(set(heur.get(), CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode));
  KILN_DNN_TRY(cudnnBackendFinalize(heur.get()));
  int64_t count = 0;
  KILN_DNN_TRY(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                        CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr));
  std::vector<Desc> configs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < count; ++i) {
    configs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    KILN_DNN_TRY(configs.back().status());
    raw.push_back(configs.back().get());
  }
  int64_t got = 0;
  KILN_DNN_TRY(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                        CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, raw.data()));
  for (int64_t i = 0; i < got && out.size() < limit; ++i) {
    bool ok = false;
    if (acceptable(raw[static_cast<size_t>(i)], exact_float32, ok) != CUDNN_STATUS_SUCCESS || !ok)
      continue;
    Desc plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    if (plan.status() != CUDNN_STATUS_SUCCESS) continue;
    cudnnBackendDescriptor_t config = raw[static_cast<size_t>(i)];
    if (set(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle) !=
            CUDNN_STATUS_SUCCESS ||
        set(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
            &config) != CUDNN_STATUS_SUCCESS ||
        cudnnBackendFinalize(plan.get()) != CUDNN_STATUS_SUCCESS)
      continue;
    int64_t workspace = 0, n = 0;
    if (cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                 CUDNN_TYPE_INT64, 1, &n, &workspace) != CUDNN_STATUS_SUCCESS ||
        workspace < 0 || static_cast<size_t>(workspace) > max_workspace)
      continue;
    ConvGraphCache::Plan p;
    p.workspace = workspace;
    p.plan = plan.release();
    out.push_back(p);
  }
  return CUDNN_STATUS_SUCCESS;
}

// Up to `limit` candidate plans for a pass (none when cuDNN offers none).
cudnnStatus_t build(cudnnHandle_t handle, ConvPass pass, const ConvGeometry& g, DType dtype,
                    bool tf32, int64_t alignment, size_t max_workspace, size_t limit,
                    std::vector<ConvGraphCache::Plan>& out) {
  const cudnnDataType_t type = dnn_type(dtype);
  const cudnnDataType_t compute = dtype == kFloat64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  const bool fused = pass == ConvPass::ForwardBiasRelu || pass == ConvPass::ForwardAddBiasRelu;
  Desc x(CUDNN_BACKEND_TENSOR_DESCRIPTOR), w(CUDNN_BACKEND_TENSOR_DESCRIPTOR),
      y(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  KILN_DNN_TRY(make_tensor(x, kX, type, {g.n, g.c, g.h, g.w}, alignment));
  KILN_DNN_TRY(make_tensor(w, kW, type, {g.o, g.c / g.groups, g.kh, g.kw}, alignment));
  // With an epilogue, the convolution's result is the virtual sums.
  KILN_DNN_TRY(make_tensor(y, fused ? kSums : kY, fused ? compute : type, {g.n, g.o, g.oh, g.ow},
                           alignment, fused));

  Desc conv(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  KILN_DNN_TRY(conv.status());
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  const int64_t dims = 2, dilation[2] = {g.dh, g.dw}, stride[2] = {g.sh, g.sw};
  const int64_t pre[2] = {g.ph0, g.pw0}, post[2] = {g.ph1, g.pw1};
  KILN_DNN_TRY(set(conv.get(), CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute));
  KILN_DNN_TRY(set(conv.get(), CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode));
  KILN_DNN_TRY(set(conv.get(), CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims));
  KILN_DNN_TRY(set(conv.get(), CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dilation));
  KILN_DNN_TRY(set(conv.get(), CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, stride));
  KILN_DNN_TRY(set(conv.get(), CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pre));
  KILN_DNN_TRY(set(conv.get(), CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, post));
  KILN_DNN_TRY(cudnnBackendFinalize(conv.get()));

  struct Names {
    cudnnBackendDescriptorType_t type;
    cudnnBackendAttributeName_t x, w, y, conv, alpha, beta;
  };
  const Names names = pass == ConvPass::Forward || fused
                          ? Names{CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
                                  CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
                                  CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
                                  CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
                                  CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
                                  CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
                                  CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA}
                      : pass == ConvPass::BackwardData
                          ? Names{CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
                                  CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
                                  CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
                                  CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
                                  CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
                                  CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
                                  CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA}
                          : Names{CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
                                  CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
                                  CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
                                  CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
                                  CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
                                  CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
                                  CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA};
  Desc op(names.type);
  KILN_DNN_TRY(op.status());
  cudnnBackendDescriptor_t xd = x.get(), wd = w.get(), yd = y.get(), cd = conv.get();
  KILN_DNN_TRY(set(op.get(), names.x, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &xd));
  KILN_DNN_TRY(set(op.get(), names.w, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &wd));
  KILN_DNN_TRY(set(op.get(), names.y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &yd));
  KILN_DNN_TRY(set(op.get(), names.conv, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cd));
  const float f1 = 1, f0 = 0;
  const double d1 = 1, d0 = 0;
  if (dtype == kFloat64) {
    KILN_DNN_TRY(set(op.get(), names.alpha, CUDNN_TYPE_DOUBLE, 1, &d1));
    KILN_DNN_TRY(set(op.get(), names.beta, CUDNN_TYPE_DOUBLE, 1, &d0));
  } else {
    KILN_DNN_TRY(set(op.get(), names.alpha, CUDNN_TYPE_FLOAT, 1, &f1));
    KILN_DNN_TRY(set(op.get(), names.beta, CUDNN_TYPE_FLOAT, 1, &f0));
  }
  KILN_DNN_TRY(cudnnBackendFinalize(op.get()));

  // The epilogue: (+ z) + bias, relu, in float, the last stored as y.
  std::vector<Desc> keep;
  keep.reserve(16);
  std::vector<cudnnBackendDescriptor_t> ops = {op.get()};
  if (fused) {
    const int64_t out_dims[4] = {g.n, g.o, g.oh, g.ow};
    cudnnBackendDescriptor_t sums = y.get();
    const auto tensor = [&](int64_t uid, const int64_t(&dims)[4], bool is_virtual,
                            cudnnBackendDescriptor_t& made) {
      Desc& t = keep.emplace_back(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
      made = t.get();
      return make_tensor(t, uid, is_virtual ? compute : type, dims, alignment, is_virtual);
    };
    const auto step = [&](cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t a,
                          cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t out) {
      KILN_DNN_TRY(pointwise(keep, mode, a, b, out));
      ops.push_back(keep.back().get());
      return CUDNN_STATUS_SUCCESS;
    };
    if (pass == ConvPass::ForwardAddBiasRelu) {
      cudnnBackendDescriptor_t z = nullptr, with_z = nullptr;
      KILN_DNN_TRY(tensor(kZ, out_dims, false, z));
      KILN_DNN_TRY(tensor(kWithZ, out_dims, true, with_z));
      KILN_DNN_TRY(step(CUDNN_POINTWISE_ADD, sums, z, with_z));
      sums = with_z;
    }
    cudnnBackendDescriptor_t bias = nullptr, with_bias = nullptr, out = nullptr;
    KILN_DNN_TRY(tensor(kBias, {1, g.o, 1, 1}, false, bias));
    KILN_DNN_TRY(tensor(kWithBias, out_dims, true, with_bias));
    KILN_DNN_TRY(tensor(kY, out_dims, false, out));
    KILN_DNN_TRY(step(CUDNN_POINTWISE_ADD, sums, bias, with_bias));
    KILN_DNN_TRY(step(CUDNN_POINTWISE_RELU_FWD, with_bias, nullptr, out));
  }

  Desc graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  KILN_DNN_TRY(graph.status());
  KILN_DNN_TRY(set(graph.get(), CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                   static_cast<int64_t>(ops.size()), ops.data()));
  KILN_DNN_TRY(set(graph.get(), CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle));
  KILN_DNN_TRY(cudnnBackendFinalize(graph.get()));

  const bool exact_float32 = dtype == kFloat32 && !tf32;
  KILN_DNN_TRY(collect_plans(handle, graph.get(), CUDNN_HEUR_MODE_A, exact_float32, max_workspace, limit, out));
  if (out.empty()) {
    KILN_DNN_TRY(collect_plans(handle, graph.get(), CUDNN_HEUR_MODE_FALLBACK, exact_float32, max_workspace,
                               limit, out));
  }
  return CUDNN_STATUS_SUCCESS;
}

// Candidates timed per convolution pass under autotuning.
constexpr size_t kTunedCandidates = 8;

}  // namespace

ConvGraphCache::~ConvGraphCache() {
  for (auto& [key, p] : plans_)
    if (p.plan) cudnnBackendDestroyDescriptor(p.plan);
}

const ConvGraphCache::Plan& ConvGraphCache::plan(cudnnHandle_t handle, ConvPass pass,
                                                 const ConvGeometry& g, DType dtype, bool tf32,
                                                 int64_t alignment,
                                                 const std::function<size_t()>& max_workspace,
                                                 const std::function<double(const Plan&)>& time,
                                                 const std::string& device) {
  std::vector<int64_t> key = g.key();
  key.insert(key.end(), {static_cast<int64_t>(pass), static_cast<int64_t>(dtype), tf32, alignment});
  auto it = plans_.find(key);
  const bool tune = autotune::active() && time;
  if (it != plans_.end() && (!tune || it->second.tuned)) return it->second;
  std::vector<Plan> candidates;
  // A configuration cuDNN refuses leaves no candidate: the caller takes the legacy API.
  (void)build(handle, pass, g, dtype, tf32, alignment, max_workspace(), tune ? kTunedCandidates : 1, candidates);
  size_t best = 0;
  if (tune && candidates.size() > 1) {
    std::string disk_key = detail::str_cat("cudnn ", cudnnGetVersion(), " conv on ", device, ":");
    for (int64_t v : key) disk_key += detail::str_cat(" ", v);
    const std::optional<int64_t> known = autotune::lookup(disk_key);
    if (known && *known >= 0 && static_cast<size_t>(*known) < candidates.size()) {
      best = static_cast<size_t>(*known);
    } else {
      double best_ms = std::numeric_limits<double>::infinity();
      for (size_t i = 0; i < candidates.size(); ++i) {
        const double ms = time(candidates[i]);
        if (ms < best_ms) best_ms = ms, best = i;
      }
      autotune::note_timed(static_cast<int64_t>(candidates.size()));
      autotune::store(disk_key, static_cast<int64_t>(best));
    }
  }
  Plan chosen;
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (i == best) {
      chosen = candidates[i];
    } else {
      cudnnBackendDestroyDescriptor(candidates[i].plan);
    }
  }
  chosen.tuned = tune;
  chosen.pass = pass;
  if (it != plans_.end()) {  // a plan taken from the heuristics before: the tuned one replaces it
    if (it->second.plan) cudnnBackendDestroyDescriptor(it->second.plan);
    it->second = chosen;
    return it->second;
  }
  return plans_.emplace(std::move(key), chosen).first->second;
}

cudnnStatus_t execute_conv_plan(cudnnHandle_t handle, const ConvGraphCache::Plan& plan, void* x,
                                void* w, void* y, void* workspace, void* bias, void* z) {
  Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  KILN_DNN_TRY(pack.status());
  const int64_t uids[5] = {kX, kW, kY, kBias, kZ};
  void* pointers[5] = {x, w, y, bias, z};
  const int64_t n = plan.pass == ConvPass::ForwardAddBiasRelu ? 5
                    : plan.pass == ConvPass::ForwardBiasRelu  ? 4
                                                              : 3;
  KILN_DNN_TRY(set(pack.get(), CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids));
  KILN_DNN_TRY(
      set(pack.get(), CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, pointers));
  KILN_DNN_TRY(set(pack.get(), CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace));
  KILN_DNN_TRY(cudnnBackendFinalize(pack.get()));
  return cudnnBackendExecute(handle, plan.plan, pack.get());
}

int64_t common_alignment(std::initializer_list<const void*> pointers) {
  int64_t alignment = 16;
  for (const void* p : pointers) {
    const auto address = reinterpret_cast<uintptr_t>(p);
    while (alignment > 1 && address % static_cast<uintptr_t>(alignment) != 0) alignment /= 2;
  }
  return alignment;
}

}  // namespace kiln::backend::cuda
