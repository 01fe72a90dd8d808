// CUDA kernels of conv1d, conv2d and their gradients through cuDNN.
//
// Every call is a 2-D convolution on NCHW tensors (conv1d has H = kH = 1; an
// unbatched input is N = 1), described by backends/conv_geometry.h. cuDNN
// pads symmetrically: the part of an asymmetric padding beyond the smaller
// side is applied to the input explicitly (and cut from the input gradient).
// For each shape, dtype and math mode, the descriptors and the algorithm
// cuDNN's heuristics rank first are kept; workspaces come from kiln's
// allocator. float32 uses TF32 tensor cores when kiln::allow_tf32().conv is
// set (the default, as PyTorch's), exact float32 math otherwise.
#include <cudnn.h>

#include <map>
#include <mutex>

#include "backends/conv_geometry.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cudnn_common.h"
#include "backends/cuda/cuda_kernels.h"
#include "kiln/kiln.h"
#include "ops/dispatch.h"

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
  std::map<std::vector<int64_t>, Plan> plans;
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
  const Symmetric s = symmetric(g0);
  const ConvGeometry& g = s.g;
  const Tensor x = explicitly_padded(c.in(0).contiguous().reshape(as_4d(g0, g0.c, g0.h, g0.w)), s);
  const Tensor w = c.in(1).contiguous();
  const int device = out.device().index();
  DeviceState& state = state_for(device);
  DeviceGuard guard(device);
  const DType dtype = out.dtype();
  std::lock_guard<std::mutex> lock(state.mutex);
  const Plan& p = plan_for(state, Pass::Forward, g, dtype, device);
  check_dnn(cudnnSetStream(state.handle, static_cast<cudaStream_t>(current_stream_handle(device))),
            "cudnnSetStream");
  Tensor workspace = ops::make_tensor({static_cast<int64_t>(std::max<size_t>(p.workspace, 1))},
                                      kUInt8, out.device(), false);
  const Scale k;
  check_dnn(cudnnConvolutionForward(
                state.handle, k.one(dtype), p.x, x.data_ptr(), p.w, w.data_ptr(), p.conv,
                static_cast<cudnnConvolutionFwdAlgo_t>(p.algo), workspace.data_ptr(), p.workspace,
                k.zero(dtype), p.y, out.data_ptr()),
            "cudnnConvolutionForward");
  if (has_bias) {
    const Tensor bias = c.in(2).contiguous();
    cudnnTensorDescriptor_t b;
    check_dnn(cudnnCreateTensorDescriptor(&b), "cudnnCreateTensorDescriptor");
    check_dnn(cudnnSetTensor4dDescriptor(b, CUDNN_TENSOR_NCHW, dnn_type(dtype), 1,
                                         static_cast<int>(g.o), 1, 1),
              "cudnnSetTensor4dDescriptor");
    const cudnnStatus_t status = cudnnAddTensor(state.handle, k.one(dtype), b, bias.data_ptr(),
                                                k.one(dtype), p.y, out.data_ptr());
    cudnnDestroyTensorDescriptor(b);
    check_dnn(status, "cudnnAddTensor");
  }
}

void conv_backward_input_op(const KernelCall& c) {
  const Tensor& gx = c.out();
  if (gx.numel() == 0) return;
  const ConvGeometry g0 = conv_geometry(gx.sizes(), c.in(1).sizes(), c.in(0).sizes(), c.attrs, 1);
  const Symmetric s = symmetric(g0);
  const ConvGeometry& g = s.g;
  const Tensor gy = c.in(0).contiguous();
  const Tensor w = c.in(1).contiguous();
  const int device = gx.device().index();
  // The gradient of the explicitly padded input, when there is padding to cut.
  Tensor target =
      s.padded() ? ops::make_tensor(as_4d(g, g.c, g.h, g.w), gx.dtype(), gx.device(), false) : gx;
  if (g.n * g.o * g.oh * g.ow == 0) {
    fill_bits(gx, 0);
    return;
  }
  {
    DeviceState& state = state_for(device);
    DeviceGuard guard(device);
    const DType dtype = gx.dtype();
    std::lock_guard<std::mutex> lock(state.mutex);
    const Plan& p = plan_for(state, Pass::BackwardData, g, dtype, device);
    check_dnn(
        cudnnSetStream(state.handle, static_cast<cudaStream_t>(current_stream_handle(device))),
        "cudnnSetStream");
    Tensor workspace = ops::make_tensor({static_cast<int64_t>(std::max<size_t>(p.workspace, 1))},
                                        kUInt8, gx.device(), false);
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
  const Tensor x = explicitly_padded(c.in(1).contiguous().reshape(as_4d(g0, g0.c, g0.h, g0.w)), s);
  const Tensor gy = c.in(0).contiguous();
  const int device = gw.device().index();
  DeviceState& state = state_for(device);
  DeviceGuard guard(device);
  const DType dtype = gw.dtype();
  std::lock_guard<std::mutex> lock(state.mutex);
  const Plan& p = plan_for(state, Pass::BackwardFilter, g, dtype, device);
  check_dnn(cudnnSetStream(state.handle, static_cast<cudaStream_t>(current_stream_handle(device))),
            "cudnnSetStream");
  Tensor workspace = ops::make_tensor({static_cast<int64_t>(std::max<size_t>(p.workspace, 1))},
                                      kUInt8, gw.device(), false);
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

}  // namespace

void register_cuda_conv_kernels(KernelTable& t) {
  auto forward = [](const KernelCall& c) {
    check_dtype(c, c.out().dtype());
    conv_forward_op(c);
  };
  t.set(OpId::conv1d, forward);
  t.set(OpId::conv2d, forward);
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
