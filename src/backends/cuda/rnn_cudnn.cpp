// lstm_sequence on CUDA through cuDNN's RNN API (cudnnRNNForward, inference).
//
// For each shape, dtype and math mode, the RNN and data descriptors, the
// buffer sizes and where each gate's matrix and bias sit in cuDNN's weight
// space are kept. Every call copies the module's weights into a fresh weight
// space from kiln's allocator (a few microseconds of bandwidth), so that
// weights changed between calls are always seen and concurrent calls on other
// streams never share a buffer.
//
// Batches of up to 32 sequences take cuDNN's persistent kernel, which keeps
// the recurrent weights on chip for the whole sequence; larger ones the
// standard algorithm. KILN_CUDNN_RNN_ALGO=standard|persist|off overrides that
// choice (off: the products plus cell kernel of rnn_attention.cu). A
// configuration cuDNN refuses falls back to the next algorithm, then to the
// products plus cell kernel. float32 uses TF32 tensor cores when
// kiln::allow_tf32().conv is set, the cuDNN flag, as PyTorch's
// torch.backends.cudnn.allow_tf32.
#include <cudnn.h>

#include <array>
#include <cstdlib>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/cudnn_common.h"
#include "kiln/kiln.h"
#include "ops/dispatch.h"
#include "ops/workspace.h"

namespace kiln::backend::cuda {
namespace {

constexpr int kGates = 4;

// Whether cuDNN refused a configuration (bad or unsupported parameters), as
// opposed to failing.
bool refused(cudnnStatus_t s) {
  return s >= CUDNN_STATUS_BAD_PARAM && s < CUDNN_STATUS_NOT_SUPPORTED + 1000;
}

struct Plan {
  bool usable = false;  // false: cuDNN refused every algorithm; the composite path runs
  cudnnRNNAlgo_t algo = CUDNN_RNN_ALGO_STANDARD;
  cudnnRNNDescriptor_t rnn = nullptr;
  cudnnRNNDataDescriptor_t x = nullptr, y = nullptr;
  cudnnTensorDescriptor_t state = nullptr;  // h and c: [layers, batch, hidden]
  size_t weight_bytes = 0, workspace = 0;
  // Per layer, element offsets in the weight space of the 8 matrices (4 input,
  // 4 recurrent, in the gate order i, f, g, o) and of the 8 biases.
  std::vector<std::array<int64_t, 2 * kGates>> matrix, bias;
  Tensor seq_lengths;  // int32 [batch] on the device, every entry = steps
};

struct DeviceState {
  std::mutex mutex;
  cudnnHandle_t handle = nullptr;
  cudnnDropoutDescriptor_t no_dropout = nullptr;
  std::map<std::vector<int64_t>, Plan> plans;
};

DeviceState& state_for(int device) {
  return per_device_state<DeviceState>(device, [](DeviceState& s) {
    check_dnn(cudnnCreate(&s.handle), "cudnnCreate");
    check_dnn(cudnnCreateDropoutDescriptor(&s.no_dropout), "cudnnCreateDropoutDescriptor");
    check_dnn(cudnnSetDropoutDescriptor(s.no_dropout, s.handle, 0.0f, nullptr, 0, 0),
              "cudnnSetDropoutDescriptor");
  });
}

struct Config {
  int64_t steps, batch, input, hidden, layers;
  bool biases;
  DType dtype;
  bool tf32;
  std::vector<int64_t> key() const {
    return {steps, batch, input, hidden, layers, biases, static_cast<int64_t>(dtype), tf32};
  }
};

// The algorithms to try, in order, for this configuration (empty: none).
std::vector<cudnnRNNAlgo_t> candidates(const Config& c) {
  const char* env = std::getenv("KILN_CUDNN_RNN_ALGO");
  const std::string choice = env ? env : "";
  if (choice == "off") return {};
  if (choice == "standard") return {CUDNN_RNN_ALGO_STANDARD};
  if (choice == "persist") return {CUDNN_RNN_ALGO_PERSIST_STATIC, CUDNN_RNN_ALGO_STANDARD};
  if (c.batch <= 32 && c.dtype != kFloat64)
    return {CUDNN_RNN_ALGO_PERSIST_STATIC, CUDNN_RNN_ALGO_STANDARD};
  return {CUDNN_RNN_ALGO_STANDARD};
}

void destroy(Plan& p) {
  if (p.rnn) cudnnDestroyRNNDescriptor(p.rnn);
  if (p.x) cudnnDestroyRNNDataDescriptor(p.x);
  if (p.y) cudnnDestroyRNNDataDescriptor(p.y);
  if (p.state) cudnnDestroyTensorDescriptor(p.state);
  p = Plan{};
}

// Sets up p for one algorithm; returns the status of the first call that did
// not succeed (p is then to be destroyed).
cudnnStatus_t try_setup(DeviceState& s, const Config& c, cudnnRNNAlgo_t algo, Device device,
                        Plan& p) {
  auto i32 = [](int64_t v) { return static_cast<int32_t>(v); };
  const cudnnDataType_t type = dnn_type(c.dtype);
  const cudnnDataType_t math_precision =
      c.dtype == kFloat64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  const cudnnMathType_t math = c.dtype == kFloat16 || c.dtype == kBFloat16 ? CUDNN_TENSOR_OP_MATH
                               : c.tf32                                    ? CUDNN_DEFAULT_MATH
                                                                           : CUDNN_FMA_MATH;
  p.algo = algo;
  cudnnStatus_t st;
#define KILN_DNN_TRY(call)                             \
  if ((st = (call)) != CUDNN_STATUS_SUCCESS) return st;
  KILN_DNN_TRY(cudnnCreateRNNDescriptor(&p.rnn));
  KILN_DNN_TRY(cudnnSetRNNDescriptor_v8(
      p.rnn, algo, CUDNN_LSTM, c.biases ? CUDNN_RNN_DOUBLE_BIAS : CUDNN_RNN_NO_BIAS,
      CUDNN_UNIDIRECTIONAL, CUDNN_LINEAR_INPUT, type, math_precision, math, i32(c.input),
      i32(c.hidden), i32(c.hidden), i32(c.layers), s.no_dropout, CUDNN_RNN_PADDED_IO_DISABLED));
  const std::vector<int> lengths(static_cast<size_t>(c.batch), i32(c.steps));
  KILN_DNN_TRY(cudnnCreateRNNDataDescriptor(&p.x));
  KILN_DNN_TRY(cudnnSetRNNDataDescriptor(p.x, type, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED,
                                         i32(c.steps), i32(c.batch), i32(c.input), lengths.data(),
                                         nullptr));
  KILN_DNN_TRY(cudnnCreateRNNDataDescriptor(&p.y));
  KILN_DNN_TRY(cudnnSetRNNDataDescriptor(p.y, type, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED,
                                         i32(c.steps), i32(c.batch), i32(c.hidden),
                                         lengths.data(), nullptr));
  KILN_DNN_TRY(cudnnCreateTensorDescriptor(&p.state));
  const int dims[3] = {i32(c.layers), i32(c.batch), i32(c.hidden)};
  const int strides[3] = {i32(c.batch * c.hidden), i32(c.hidden), 1};
  KILN_DNN_TRY(cudnnSetTensorNdDescriptor(p.state, type, 3, dims, strides));
  size_t reserve = 0;
  KILN_DNN_TRY(cudnnGetRNNTempSpaceSizes(s.handle, p.rnn, CUDNN_FWD_MODE_INFERENCE, p.x,
                                         &p.workspace, &reserve));
  KILN_DNN_TRY(cudnnGetRNNWeightSpaceSize(s.handle, p.rnn, &p.weight_bytes));

  // Where each gate's matrix and bias lives: asked of a scratch weight space.
  const size_t element = dtype_size(c.dtype);
  const Tensor scratch = ops::make_tensor(
      {static_cast<int64_t>((p.weight_bytes + element - 1) / element)}, c.dtype, device, false);
  const auto* base = static_cast<const char*>(scratch.data_ptr());
  cudnnTensorDescriptor_t m_desc = nullptr, b_desc = nullptr;
  KILN_DNN_TRY(cudnnCreateTensorDescriptor(&m_desc));
  if ((st = cudnnCreateTensorDescriptor(&b_desc)) != CUDNN_STATUS_SUCCESS) {
    cudnnDestroyTensorDescriptor(m_desc);
    return st;
  }
  p.matrix.resize(static_cast<size_t>(c.layers));
  p.bias.resize(static_cast<size_t>(c.layers));
  for (int32_t l = 0; l < c.layers && st == CUDNN_STATUS_SUCCESS; ++l) {
    for (int32_t id = 0; id < 2 * kGates && st == CUDNN_STATUS_SUCCESS; ++id) {
      void* m = nullptr;
      void* b = nullptr;
      st = cudnnGetRNNWeightParams(s.handle, p.rnn, l, p.weight_bytes, base, id, m_desc, &m,
                                   b_desc, &b);
      if (st != CUDNN_STATUS_SUCCESS) break;
      // Each matrix must be [hidden, in] densely packed, as PyTorch's rows of a gate.
      cudnnDataType_t t;
      int nd = 0, md[3] = {}, ms[3] = {};
      st = cudnnGetTensorNdDescriptor(m_desc, 3, &t, &nd, md, ms);
      const int64_t in = id < kGates ? (l == 0 ? c.input : c.hidden) : c.hidden;
      if (st == CUDNN_STATUS_SUCCESS &&
          int64_t{md[0]} * md[1] * (nd > 2 ? md[2] : 1) != c.hidden * in)
        st = CUDNN_STATUS_NOT_SUPPORTED_LAYOUT;
      p.matrix[l][id] = (static_cast<const char*>(m) - base) / static_cast<int64_t>(element);
      p.bias[l][id] = b ? (static_cast<const char*>(b) - base) / static_cast<int64_t>(element) : -1;
    }
  }
  cudnnDestroyTensorDescriptor(m_desc);
  cudnnDestroyTensorDescriptor(b_desc);
  if (st != CUDNN_STATUS_SUCCESS) return st;
#undef KILN_DNN_TRY
  p.seq_lengths = full({c.batch}, c.steps, {.dtype = kInt32, .device = device});
  p.usable = true;
  return CUDNN_STATUS_SUCCESS;
}

// The plan of a configuration; algorithms cuDNN refuses are skipped. Called
// with s.mutex held and the device current.
Plan& plan_for(DeviceState& s, const Config& c, Device device, bool skip_persistent = false) {
  std::vector<int64_t> key = c.key();
  auto it = s.plans.find(key);
  if (it != s.plans.end() && !(skip_persistent && it->second.algo != CUDNN_RNN_ALGO_STANDARD))
    return it->second;
  if (it != s.plans.end()) {
    destroy(it->second);
    s.plans.erase(it);
  }
  Plan p;
  for (cudnnRNNAlgo_t algo : candidates(c)) {
    if (skip_persistent && algo != CUDNN_RNN_ALGO_STANDARD) continue;
    const cudnnStatus_t st = try_setup(s, c, algo, device, p);
    if (st == CUDNN_STATUS_SUCCESS) break;
    destroy(p);
    if (!refused(st)) check_dnn(st, "lstm_sequence: setting up cuDNN's LSTM");
  }
  return s.plans.emplace(std::move(key), std::move(p)).first->second;
}

// Copies the 4 gate blocks of src (rows g * hidden .. (g + 1) * hidden, or
// entries of a bias) to their offsets in the weight space: one copy when the
// blocks are consecutive there, as they are in practice.
void copy_gates(const Tensor& space, const int64_t* offsets, const Tensor& src, int64_t hidden) {
  const int64_t block = src.numel() / kGates;
  bool consecutive = true;
  for (int g = 1; g < kGates; ++g) consecutive = consecutive && offsets[g] == offsets[0] + g * block;
  if (consecutive) {
    copy_same_dtype(space.slice(0, offsets[0], offsets[0] + kGates * block).view(src.sizes()), src);
    return;
  }
  for (int g = 0; g < kGates; ++g) {
    const Tensor part = src.slice(0, g * hidden, (g + 1) * hidden);
    copy_same_dtype(space.slice(0, offsets[g], offsets[g] + block).view(part.sizes()), part);
  }
}

// out, or a contiguous scratch tensor to copy into out afterwards.
Tensor writable(const Tensor& out) {
  return out.is_contiguous() ? out
                             : ops::make_tensor(out.sizes(), out.dtype(), out.device(), false);
}

void lstm_sequence_cudnn(const KernelCall& call) {
  NoGradGuard no_grad;
  const Tensor& x = call.in(0);
  const int64_t layers = call.attrs.i(0);
  const bool biases = call.attrs.b(1);
  const size_t per_layer = biases ? 4 : 2;
  const Config c{x.size(0),     x.size(1), x.size(2), call.in(4).size(1), layers, biases,
                 x.dtype(),     x.dtype() == kFloat32 && allow_tf32().conv};
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  if (!is_floating(x.dtype()) || c.steps == 0 || c.batch == 0 || c.steps > kMax ||
      c.batch > kMax || c.input > kMax || c.hidden > kMax || layers > kMax) {
    lstm_sequence_composite(call);
    return;
  }
  const Device device = x.device();
  DeviceState& s = state_for(device.index());
  DeviceGuard guard(device.index());
  std::lock_guard<std::mutex> lock(s.mutex);
  bool skip_persistent = false;
  for (;;) {
    Plan& p = plan_for(s, c, device, skip_persistent);
    if (!p.usable) {
      lstm_sequence_composite(call);
      return;
    }
    const size_t element = dtype_size(c.dtype);
    const Tensor weights = ops::make_tensor(
        {static_cast<int64_t>((p.weight_bytes + element - 1) / element)}, c.dtype, device, false);
    for (int64_t l = 0; l < layers; ++l) {
      const size_t k = 3 + static_cast<size_t>(l) * per_layer;
      const auto& m = p.matrix[static_cast<size_t>(l)];
      const auto& b = p.bias[static_cast<size_t>(l)];
      copy_gates(weights, &m[0], call.in(k), c.hidden);
      copy_gates(weights, &m[kGates], call.in(k + 1), c.hidden);
      if (biases) {
        copy_gates(weights, &b[0], call.in(k + 2), c.hidden);
        copy_gates(weights, &b[kGates], call.in(k + 3), c.hidden);
      }
    }
    const Tensor input = x.contiguous(), h0 = call.in(1).contiguous(), c0 = call.in(2).contiguous();
    const Tensor y = writable(call.out(0)), hy = writable(call.out(1)), cy = writable(call.out(2));
    const Tensor workspace = ops::make_workspace(std::max<size_t>(p.workspace, 1), device);
    check_dnn(cudnnSetStream(s.handle, static_cast<cudaStream_t>(current_stream_handle(device.index()))),
              "cudnnSetStream");
    const cudnnStatus_t st = cudnnRNNForward(
        s.handle, p.rnn, CUDNN_FWD_MODE_INFERENCE,
        static_cast<const int32_t*>(p.seq_lengths.data_ptr()), p.x, input.data_ptr(), p.y,
        y.data_ptr(), p.state, h0.data_ptr(), hy.data_ptr(), p.state, c0.data_ptr(), cy.data_ptr(),
        p.weight_bytes, weights.data_ptr(), p.workspace, workspace.data_ptr(), 0, nullptr);
    if (refused(st) && p.algo != CUDNN_RNN_ALGO_STANDARD) {
      skip_persistent = true;  // the persistent kernel refused this shape at run time
      continue;
    }
    check_dnn(st, "lstm_sequence: cudnnRNNForward");
    for (auto [out, written] : {std::pair{0, &y}, std::pair{1, &hy}, std::pair{2, &cy}}) {
      if (call.out(out).impl_ptr() != written->impl_ptr()) copy_same_dtype(call.out(out), *written);
    }
    return;
  }
}

}  // namespace

void register_cuda_cudnn_rnn_kernels(KernelTable& t) {
  t.set(ops::OpId::lstm_sequence, lstm_sequence_cudnn);
}

}  // namespace kiln::backend::cuda
