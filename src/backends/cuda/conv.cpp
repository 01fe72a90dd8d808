// CUDA kernels of conv1d, conv2d and their gradients through cuDNN.
//
// Every call is a 2-D convolution on NCHW tensors (conv1d has H = kH = 1; an
// unbatched input is N = 1), described by backends/conv_geometry.h. Each pass
// first takes cuDNN's graph API (conv_graph.h): an execution plan per shape,
// dtype, math mode and alignment, made once, which handles asymmetric padding
// itself. Where cuDNN offers no plan, the legacy calls run, with the
// descriptors and the algorithm cuDNN's heuristics rank first kept per shape;
// they pad symmetrically, so the part of an asymmetric padding beyond the
// smaller side is applied to the input explicitly (and cut from the input
// gradient); KILN_CUDNN_CONV=legacy takes them always. Workspaces come from
// kiln's allocator. A compiled frozen net's convolution with its bias,
// residual add and relu runs as one fused legacy call (conv_epilogue_run). float32 uses TF32 tensor
// cores when kiln::allow_tf32().conv is set (the default, as PyTorch's), exact
// float32 math otherwise.
#include <cudnn.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <string_view>

#include "backends/conv_geometry.h"
#include "backends/cuda/conv_graph.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/cudnn_common.h"
#include "backends/cuda_preview.h"
#include "backends/epilogue.h"
#include "core/shape_util.h"
#include "kiln/kiln.h"
#include "ops/dispatch.h"
#include "ops/workspace.h"

namespace kiln::backend::cuda {
namespace {

using ops::OpId;

enum class Pass { Forward, BackwardData, BackwardFilter };

struct Plan {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  int algo = 0;
  size_t workspace = 0;
};

struct DeviceState {
  std::mutex mutex;
  cudnnHandle_t handle = nullptr;
  std::map<std::vector<int64_t>, Plan> plans;  // the legacy API's
  ConvGraphCache graphs;
  // The fused forward's (conv_epilogue_run): a relu that keeps NaN, and a
  // [1, C, 1, 1] bias descriptor by C.
  cudnnActivationDescriptor_t relu = nullptr;
  std::map<int64_t, cudnnTensorDescriptor_t> bias_descriptors;
};

DeviceState& state_for(int device) {
  return per_device_state<DeviceState>(
      device, [](DeviceState& s) { check_dnn(cudnnCreate(&s.handle), "cudnnCreate"); });
}

// The geometry with symmetric padding (the smaller side of each dim).
struct Symmetric {
  ConvGeometry g;         // padding: ph0 = ph1 = min, pw0 = pw1 = min; h, w of the padded input
  int64_t extra[4] = {};  // explicit padding: top, bottom, left, right
  bool padded() const { return extra[0] || extra[1] || extra[2] || extra[3]; }
};

Symmetric symmetric(const ConvGeometry& g) {
  Symmetric s{g};
  const int64_t ph = std::min(g.ph0, g.ph1), pw = std::min(g.pw0, g.pw1);
  s.extra[0] = g.ph0 - ph;
  s.extra[1] = g.ph1 - ph;
  s.extra[2] = g.pw0 - pw;
  s.extra[3] = g.pw1 - pw;
  s.g.ph0 = s.g.ph1 = ph;
  s.g.pw0 = s.g.pw1 = pw;
  s.g.h += s.extra[0] + s.extra[1];
  s.g.w += s.extra[2] + s.extra[3];
  return s;
}

// The largest workspace a new plan may take: half of what the device has free,
// at least 64 MiB.
size_t workspace_limit(int device) {
  size_t free_bytes = 0, total = 0;
  check(cudaMemGetInfo(&free_bytes, &total), "cudaMemGetInfo");
  (void)device;
  return std::max<size_t>(free_bytes / 2, size_t{64} << 20);
}

// Called with the device current and state.mutex held.
const Plan& plan_for(DeviceState& state, Pass pass, const ConvGeometry& g, DType dtype,
                     int device) {
  const bool tf32 = dtype == kFloat32 && allow_tf32().conv;
  std::vector<int64_t> key = g.key();
  key.push_back(static_cast<int64_t>(pass));
  key.push_back(static_cast<int64_t>(dtype));
  key.push_back(tf32);
  auto it = state.plans.find(key);
  if (it != state.plans.end()) return it->second;
  const size_t max_workspace = workspace_limit(device);
  Plan p;
  const cudnnDataType_t type = dnn_type(dtype);
  const cudnnDataType_t compute = dtype == kFloat64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  check_dnn(cudnnCreateTensorDescriptor(&p.x), "cudnnCreateTensorDescriptor");
  check_dnn(cudnnCreateTensorDescriptor(&p.y), "cudnnCreateTensorDescriptor");
  check_dnn(cudnnCreateFilterDescriptor(&p.w), "cudnnCreateFilterDescriptor");
  check_dnn(cudnnCreateConvolutionDescriptor(&p.conv), "cudnnCreateConvolutionDescriptor");
  auto i32 = [](int64_t v) { return static_cast<int>(v); };
  check_dnn(cudnnSetTensor4dDescriptor(p.x, CUDNN_TENSOR_NCHW, type, i32(g.n), i32(g.c), i32(g.h),
                                       i32(g.w)),
            "cudnnSetTensor4dDescriptor");
  check_dnn(cudnnSetTensor4dDescriptor(p.y, CUDNN_TENSOR_NCHW, type, i32(g.n), i32(g.o), i32(g.oh),
                                       i32(g.ow)),
            "cudnnSetTensor4dDescriptor");
  check_dnn(cudnnSetFilter4dDescriptor(p.w, type, CUDNN_TENSOR_NCHW, i32(g.o), i32(g.c / g.groups),
                                       i32(g.kh), i32(g.kw)),
            "cudnnSetFilter4dDescriptor");
  check_dnn(cudnnSetConvolution2dDescriptor(p.conv, i32(g.ph0), i32(g.pw0), i32(g.sh), i32(g.sw),
                                            i32(g.dh), i32(g.dw), CUDNN_CROSS_CORRELATION, compute),
            "cudnnSetConvolution2dDescriptor");
  check_dnn(cudnnSetConvolutionGroupCount(p.conv, i32(g.groups)), "cudnnSetConvolutionGroupCount");
  const cudnnMathType_t math = dtype == kFloat16 || dtype == kBFloat16 ? CUDNN_TENSOR_OP_MATH
                               : tf32                                  ? CUDNN_DEFAULT_MATH
                                                                       : CUDNN_FMA_MATH;
  check_dnn(cudnnSetConvolutionMathType(p.conv, math), "cudnnSetConvolutionMathType");
  constexpr int kCandidates = 16;
  int found = 0;
  bool chosen = false;
  auto pick = [&](const auto* results) {
    for (int i = 0; i < found && !chosen; ++i) {
      if (results[i].status == CUDNN_STATUS_SUCCESS && results[i].memory <= max_workspace) {
        p.algo = static_cast<int>(results[i].algo);
        p.workspace = results[i].memory;
        chosen = true;
      }
    }
  };
  if (pass == Pass::Forward) {
    cudnnConvolutionFwdAlgoPerf_t r[kCandidates];
    check_dnn(cudnnGetConvolutionForwardAlgorithm_v7(state.handle, p.x, p.w, p.conv, p.y,
                                                     kCandidates, &found, r),
              "cudnnGetConvolutionForwardAlgorithm_v7");
    pick(r);
  } else if (pass == Pass::BackwardData) {
    cudnnConvolutionBwdDataAlgoPerf_t r[kCandidates];
    check_dnn(cudnnGetConvolutionBackwardDataAlgorithm_v7(state.handle, p.w, p.y, p.conv, p.x,
                                                          kCandidates, &found, r),
              "cudnnGetConvolutionBackwardDataAlgorithm_v7");
    pick(r);
  } else {
    cudnnConvolutionBwdFilterAlgoPerf_t r[kCandidates];
    check_dnn(cudnnGetConvolutionBackwardFilterAlgorithm_v7(state.handle, p.x, p.y, p.conv, p.w,
                                                            kCandidates, &found, r),
              "cudnnGetConvolutionBackwardFilterAlgorithm_v7");
    pick(r);
  }
  if (!chosen) {
    throw Error(detail::str_cat("cuda conv: cuDNN has no algorithm for ", dtype, " input [", g.n,
                                ", ", g.c, ", ", g.h, ", ", g.w, "] and weight [", g.o, ", ",
                                g.c / g.groups, ", ", g.kh, ", ", g.kw, "] within ", max_workspace,
                                " bytes of workspace"));
  }
  return state.plans.emplace(key, p).first->second;
}

// Runs a pass through its cached graph plan (g with its own, possibly
// asymmetric padding; x, w, y packed as in ConvGraphCache::plan). False when
// cuDNN has no plan for it or refused to run it: the legacy path runs instead.
// Called with state.mutex held, the device current and the stream set.
bool run_graph(DeviceState& state, ConvPass pass, const ConvGeometry& g, DType dtype, int device,
               Device on, void* x, void* w, void* y, void* bias = nullptr, void* z = nullptr) {
  static const bool legacy_only = [] {  // KILN_CUDNN_CONV=legacy: the legacy calls only
    const char* v = std::getenv("KILN_CUDNN_CONV");
    return v && std::string_view(v) == "legacy";
  }();
  if (legacy_only) return false;
  const bool tf32 = dtype == kFloat32 && allow_tf32().conv;
  // Under autotuning: milliseconds per run of a candidate, on these very
  // buffers (the pass's output is written again by the chosen plan).
  const auto time = [&](const ConvGraphCache::Plan& candidate) {
    Tensor scratch = ops::make_tensor({std::max<int64_t>(candidate.workspace, 1)}, kUInt8, on, false);
    return time_device_ms(device, [&] {
      return execute_conv_plan(state.handle, candidate, x, w, y, scratch.data_ptr(), bias, z) ==
             CUDNN_STATUS_SUCCESS;
    });
  };
  const ConvGraphCache::Plan& plan = state.graphs.plan(
      state.handle, pass, g, dtype, tf32, common_alignment({x, w, y, bias, z}),
      [device] { return workspace_limit(device); }, time, device_name(device));
  if (!plan.plan) return false;
  Tensor workspace = ops::make_workspace(std::max<size_t>(plan.workspace, 1), on);
  return execute_conv_plan(state.handle, plan, x, w, y, workspace.data_ptr(), bias, z) ==
         CUDNN_STATUS_SUCCESS;
}

void set_stream(DeviceState& state, int device) {
  check_dnn(cudnnSetStream(state.handle, static_cast<cudaStream_t>(current_stream_handle(device))),
            "cudnnSetStream");
}

struct Scale {
  float f1 = 1, f0 = 0;
  double d1 = 1, d0 = 0;
  const void* one(DType t) const { return t == kFloat64 ? static_cast<const void*>(&d1) : &f1; }
  const void* zero(DType t) const { return t == kFloat64 ? static_cast<const void*>(&d0) : &f0; }
};

// x padded explicitly by s.extra (zeros), 4-D.
Tensor explicitly_padded(const Tensor& x4, const Symmetric& s) {
  if (!s.padded()) return x4.contiguous();
  NoGradGuard no_grad;
  return nn::functional::pad(x4, {s.extra[2], s.extra[3], s.extra[0], s.extra[1]}).contiguous();
}

Shape as_4d(const ConvGeometry& g, int64_t channels, int64_t h, int64_t w) {
  return {g.n, channels, h, w};
}

void conv_forward_op(const KernelCall& c) {
  const Tensor& out = c.out();
  if (out.numel() == 0) return;
  const ConvGeometry g0 = conv_geometry(c.in(0).sizes(), c.in(1).sizes(), out.sizes(), c.attrs, 0);
  const bool has_bias = c.inputs.size() > 2 && c.in(2).defined();
  if (g0.c == 0) {  // no input channels: the sums are empty, only the bias is left
    fill_bits(out, 0);
    if (has_bias) {
      NoGradGuard no_grad;
      Shape column(out.dim() - (out.dim() == c.in(1).dim() ? 1 : 0), 1);
      column[0] = g0.o;
      copy_same_dtype(out, add(out, c.in(2).reshape(column)));
    }
    return;
  }
  const Tensor x0 = c.in(0).contiguous();
  const Tensor w = c.in(1).contiguous();
  const int device = out.device().index();
  DeviceState& state = state_for(device);
  DeviceGuard guard(device);
  const DType dtype = out.dtype();
  std::lock_guard<std::mutex> lock(state.mutex);
  set_stream(state, device);
  const Scale k;
  if (!run_graph(state, ConvPass::Forward, g0, dtype, device, out.device(), x0.data_ptr(),
                 w.data_ptr(), out.data_ptr())) {
    const Symmetric s = symmetric(g0);
    const ConvGeometry& g = s.g;
    const Tensor x = explicitly_padded(x0.reshape(as_4d(g0, g0.c, g0.h, g0.w)), s);
    const Plan& p = plan_for(state, Pass::Forward, g, dtype, device);
    Tensor workspace = ops::make_workspace(std::max<size_t>(p.workspace, 1), out.device());
    check_dnn(cudnnConvolutionForward(
                  state.handle, k.one(dtype), p.x, x.data_ptr(), p.w, w.data_ptr(), p.conv,
                  static_cast<cudnnConvolutionFwdAlgo_t>(p.algo), workspace.data_ptr(),
                  p.workspace, k.zero(dtype), p.y, out.data_ptr()),
              "cudnnConvolutionForward");
  }
  if (has_bias) {  // added in place by the elementwise engine, broadcast over the positions
    NoGradGuard no_grad;
    Shape column(out.dim() - (out.dim() == c.in(1).dim() ? 1 : 0), 1);
    column[0] = g0.o;
    Tensor target = out;
    target.add_(c.in(2).reshape(column));
  }
}

void conv_backward_input_op(const KernelCall& c) {
  const Tensor& gx = c.out();
  if (gx.numel() == 0) return;
  const ConvGeometry g0 = conv_geometry(gx.sizes(), c.in(1).sizes(), c.in(0).sizes(), c.attrs, 1);
  if (g0.n * g0.o * g0.oh * g0.ow == 0) {
    fill_bits(gx, 0);
    return;
  }
  const Tensor gy = c.in(0).contiguous();
  const Tensor w = c.in(1).contiguous();
  const int device = gx.device().index();
  const DType dtype = gx.dtype();
  const Symmetric s = symmetric(g0);
  const ConvGeometry& g = s.g;
  Tensor target;  // the gradient of the explicitly padded input, when there is padding to cut
  {
    DeviceState& state = state_for(device);
    DeviceGuard guard(device);
    std::lock_guard<std::mutex> lock(state.mutex);
    set_stream(state, device);
    if (run_graph(state, ConvPass::BackwardData, g0, dtype, device, gx.device(), gx.data_ptr(),
                  w.data_ptr(), gy.data_ptr()))
      return;
    target = s.padded() ? ops::make_tensor(as_4d(g, g.c, g.h, g.w), dtype, gx.device(), false) : gx;
    const Plan& p = plan_for(state, Pass::BackwardData, g, dtype, device);
    Tensor workspace = ops::make_workspace(std::max<size_t>(p.workspace, 1), gx.device());
    const Scale k;
    check_dnn(cudnnConvolutionBackwardData(
                  state.handle, k.one(dtype), p.w, w.data_ptr(), p.y, gy.data_ptr(), p.conv,
                  static_cast<cudnnConvolutionBwdDataAlgo_t>(p.algo), workspace.data_ptr(),
                  p.workspace, k.zero(dtype), p.x, target.data_ptr()),
              "cudnnConvolutionBackwardData");
  }
  if (s.padded()) {
    const Tensor inner =
        target.slice(2, s.extra[0], s.extra[0] + g0.h).slice(3, s.extra[2], s.extra[2] + g0.w);
    copy_same_dtype(gx, inner.reshape(gx.sizes()));
  }
}

void conv_backward_weight_op(const KernelCall& c) {
  const Tensor& gw = c.out();
  if (gw.numel() == 0) return;
  const ConvGeometry g0 = conv_geometry(c.in(1).sizes(), gw.sizes(), c.in(0).sizes(), c.attrs, 1);
  const Symmetric s = symmetric(g0);
  const ConvGeometry& g = s.g;
  if (g.n * g.oh * g.ow == 0) {
    fill_bits(gw, 0);
    return;
  }
  const Tensor x0 = c.in(1).contiguous();
  const Tensor gy = c.in(0).contiguous();
  const int device = gw.device().index();
  DeviceState& state = state_for(device);
  DeviceGuard guard(device);
  const DType dtype = gw.dtype();
  std::lock_guard<std::mutex> lock(state.mutex);
  set_stream(state, device);
  if (run_graph(state, ConvPass::BackwardFilter, g0, dtype, device, gw.device(), x0.data_ptr(),
                gw.data_ptr(), gy.data_ptr()))
    return;
  const Tensor x = explicitly_padded(x0.reshape(as_4d(g0, g0.c, g0.h, g0.w)), s);
  const Plan& p = plan_for(state, Pass::BackwardFilter, g, dtype, device);
  Tensor workspace = ops::make_workspace(std::max<size_t>(p.workspace, 1), gw.device());
  const Scale k;
  check_dnn(cudnnConvolutionBackwardFilter(
                state.handle, k.one(dtype), p.x, x.data_ptr(), p.y, gy.data_ptr(), p.conv,
                static_cast<cudnnConvolutionBwdFilterAlgo_t>(p.algo), workspace.data_ptr(),
                p.workspace, k.zero(dtype), p.w, gw.data_ptr()),
            "cudnnConvolutionBackwardFilter");
}

// cuDNN takes float16, bfloat16, float32 and float64.
void check_dtype(const KernelCall& c, DType t) {
  if (!is_floating(t)) throw DTypeError(detail::str_cat(c.schema.name, ": no CUDA kernel for ", t));
}

// A frozen convolutional net's conv2d with its bias, a residual add and the
// relu after them (backends/epilogue.h) as one cuDNN call,
// cudnnConvolutionBiasActivationForward: y = relu(conv(x, w) + r + bias),
// the residual and the bias added to the convolution's float sums before
// they are stored, so that the result is written once instead of three
// times, by one kernel instead of three. Its sums are added in another
// order than eager's (conv + bias, then + r): strict mode keeps them apart.
std::string conv_epilogue_supports(OpId, std::span<const ops::TensorMeta> inputs,
                                   const ops::TensorMeta& output, const ops::Attrs&,
                                   const Epilogue& epilogue) {
  if (std::string off = cuda_preview_off("cuDNN's fused convolution"); !off.empty()) return off;
  if (output.dtype != kFloat32)
    return detail::str_cat("cuDNN's fused convolution runs it on float32, not ", output.dtype);
  if (inputs.empty() || inputs[0].sizes.size() != 4) return "its input is not batched";
  if (!contiguous_layout(output.sizes, output.strides))
    return detail::str_cat("its result's strides ", output.strides, " are not row-major");
  using Kind = Epilogue::Kind;
  const std::vector<Kind>& ops = epilogue.ops;
  const bool relu = ops == std::vector<Kind>{Kind::kRelu},
             add_relu = ops == std::vector<Kind>{Kind::kAdd, Kind::kRelu};
  if (!relu && !add_relu)
    return detail::str_cat(
        "cuDNN's fused convolution takes a relu, after a residual add or "
        "alone, not ",
        epilogue.describe());
  return "";
}

// The bias tensor's descriptor, [1, C, 1, 1] float; state.mutex held.
cudnnTensorDescriptor_t bias_descriptor(DeviceState& state, int64_t channels) {
  cudnnTensorDescriptor_t& d = state.bias_descriptors[channels];
  if (!d) {
    check_dnn(cudnnCreateTensorDescriptor(&d), "cudnnCreateTensorDescriptor");
    check_dnn(cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1,
                                         static_cast<int>(channels), 1, 1),
              "cudnnSetTensor4dDescriptor");
  }
  return d;
}

// The epilogue's ops on y, in place, after the convolution ran alone.
void apply_epilogue(const KernelCall& c, bool add) {
  NoGradGuard no_grad;
  Tensor y = c.out();
  if (add) y.add_(c.inputs.back());
  y.relu_();
}

void conv_epilogue_run(const KernelCall& c, const Epilogue& epilogue) {
  const bool add = epilogue.ops.front() == Epilogue::Kind::kAdd;
  const std::span<const Tensor> conv_inputs = c.inputs.first(c.inputs.size() - (add ? 1 : 0));
  const KernelCall conv{c.schema, conv_inputs, c.outputs, c.attrs, c.prepared};
  const Tensor& out = c.out();
  if (out.numel() == 0) return;
  const ConvGeometry g0 = conv_geometry(c.in(0).sizes(), c.in(1).sizes(), out.sizes(), c.attrs, 0);
  if (g0.c == 0) {  // no sums: the bias alone (conv_forward_op), then the epilogue
    conv_forward_op(conv);
    apply_epilogue(c, add);
    return;
  }
  const Tensor w = c.in(1).contiguous();
  const Tensor bias = conv_inputs.size() > 2 && conv_inputs[2].defined()
                          ? conv_inputs[2].contiguous()
                          : zeros({g0.o}, TensorOptions{.dtype = kFloat32, .device = out.device()});
  const Tensor r = add ? c.inputs.back().contiguous() : Tensor();
  const int device = out.device().index();
  DeviceState& state = state_for(device);
  DeviceGuard guard(device);
  {
    // First the graph API's plan, made once per geometry: a call binds its
    // pointers and runs. It takes the padding as it is.
    const Tensor x0 = c.in(0).contiguous();
    std::lock_guard<std::mutex> lock(state.mutex);
    set_stream(state, device);
    if (run_graph(state, add ? ConvPass::ForwardAddBiasRelu : ConvPass::ForwardBiasRelu, g0,
                  kFloat32, device, out.device(), x0.data_ptr(), w.data_ptr(), out.data_ptr(),
                  bias.data_ptr(), add ? r.data_ptr() : nullptr))
      return;
  }
  // Else the legacy fused call, which builds its state on every call.
  const Symmetric s = symmetric(g0);
  const ConvGeometry& g = s.g;
  const Tensor x = explicitly_padded(c.in(0), s);
  cudnnStatus_t status = CUDNN_STATUS_SUCCESS;
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    set_stream(state, device);
    if (!state.relu) {
      check_dnn(cudnnCreateActivationDescriptor(&state.relu), "cudnnCreateActivationDescriptor");
      check_dnn(
          cudnnSetActivationDescriptor(state.relu, CUDNN_ACTIVATION_RELU, CUDNN_PROPAGATE_NAN, 0.0),
          "cudnnSetActivationDescriptor");
    }
    const Plan& p = plan_for(state, Pass::Forward, g, kFloat32, device);
    Tensor workspace = ops::make_workspace(std::max<size_t>(p.workspace, 1), out.device());
    const float one = 1, residual = add ? 1.f : 0.f;
    // Without a residual, z is y itself, weighted 0.
    status = cudnnConvolutionBiasActivationForward(
        state.handle, &one, p.x, x.data_ptr(), p.w, w.data_ptr(), p.conv,
        static_cast<cudnnConvolutionFwdAlgo_t>(p.algo), workspace.data_ptr(), p.workspace,
        &residual, p.y, add ? r.data_ptr() : out.data_ptr(), bias_descriptor(state, g.o),
        bias.data_ptr(), state.relu, p.y, out.data_ptr());
  }
  if (status == CUDNN_STATUS_NOT_SUPPORTED) {  // this geometry has no fused kernel: apart
    conv_forward_op(conv);
    apply_epilogue(c, add);
    return;
  }
  check_dnn(status, "cudnnConvolutionBiasActivationForward");
}

}  // namespace

void register_cuda_conv_kernels(KernelTable& t) {
  auto forward = [](const KernelCall& c) {
    check_dtype(c, c.out().dtype());
    conv_forward_op(c);
  };
  t.set(OpId::conv1d, forward);
  t.set(OpId::conv2d, forward);
  register_epilogue_lowering(
      DeviceKind::CUDA, OpId::conv2d,
      {conv_epilogue_supports, conv_epilogue_run,
       [](std::span<const ops::TensorMeta>, const Epilogue&) { return false; }});
  t.set(OpId::conv_backward_input, [](const KernelCall& c) {
    check_dtype(c, c.out().dtype());
    conv_backward_input_op(c);
  });
  t.set(OpId::conv_backward_weight, [](const KernelCall& c) {
    check_dtype(c, c.out().dtype());
    conv_backward_weight_op(c);
  });
}

}  // namespace kiln::backend::cuda
