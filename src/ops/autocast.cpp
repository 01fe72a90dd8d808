// Autocast (ops/autocast.h): the thread's state, PyTorch's op lists for CUDA
// and the CPU, and the casts.
#include "ops/autocast.h"

#include <algorithm>
#include <array>

#include "kiln/amp.h"
#include "kiln/error.h"

namespace kiln::ops::autocast {
namespace {

struct State {
  std::array<bool, kNumDeviceKinds> enabled{};
  std::array<DType, kNumDeviceKinds> dtype{kBFloat16, kFloat16};
};
thread_local State t_state;

size_t index_of(DeviceKind k) noexcept { return static_cast<size_t>(k); }

enum class Policy : uint8_t { kNone, kLower, kFloat32, kPromote };

// PyTorch's autocast op lists (torch.amp docs, "Autocast Op Reference"),
// for the ops kiln has: per device kind, what each op's inputs become.
struct Lists {
  std::array<std::array<Policy, kNumOps>, kNumDeviceKinds> policy{};
  Lists() {
    auto set = [&](DeviceKind k, Policy p, std::initializer_list<OpId> ops) {
      for (OpId op : ops) policy[index_of(k)][static_cast<size_t>(op)] = p;
    };
    // Both: the matrix products, convolutions (conv_backward_input is a
    // transposed convolution's forward) and attention in the lower dtype.
    for (DeviceKind k : {DeviceKind::CPU, DeviceKind::CUDA}) {
      set(k, Policy::kLower,
          {OpId::matmul, OpId::bmm, OpId::addmm, OpId::linear, OpId::conv1d, OpId::conv2d,
           OpId::conv_backward_input, OpId::scaled_dot_product_attention});
      set(k, Policy::kFloat32, {OpId::prod, OpId::nll_loss});
    }
    // cat and stack (PyTorch's CPU promote list) already give the widest dtype.
    set(DeviceKind::CUDA, Policy::kLower, {OpId::lstm_cell});
    set(DeviceKind::CUDA, Policy::kFloat32,
        {OpId::pow, OpId::exp, OpId::expm1, OpId::log, OpId::log1p, OpId::reciprocal, OpId::rsqrt,
         OpId::softplus, OpId::cumsum, OpId::sum, OpId::norm, OpId::layer_norm, OpId::group_norm,
         OpId::softmax, OpId::log_softmax});
    set(DeviceKind::CUDA, Policy::kPromote, {OpId::scatter_add});
  }
};

const Lists& lists() {
  static const Lists l;
  return l;
}

bool eligible(const Tensor& t) noexcept {
  return t.defined() && is_floating(t.dtype()) && t.dtype() != kFloat64;
}

std::string_view kind_name(DeviceKind k) noexcept { return k == DeviceKind::CPU ? "cpu" : "cuda"; }

}  // namespace

bool active() noexcept { return t_state.enabled[0] || t_state.enabled[1]; }

bool cast_inputs(OpId op, std::span<const Tensor> inputs, TensorList& cast) {
  const Tensor* first = nullptr;
  for (const Tensor& t : inputs) {
    if (t.defined()) {
      first = &t;
      break;
    }
  }
  if (!first) return false;
  const size_t k = index_of(first->device().kind());
  if (!t_state.enabled[k]) return false;
  const Policy policy = lists().policy[k][static_cast<size_t>(op)];
  if (policy == Policy::kNone) return false;
  DType target = t_state.dtype[k];
  if (policy == Policy::kFloat32) target = kFloat32;
  if (policy == Policy::kPromote) {
    bool any = false;
    for (const Tensor& t : inputs) {
      if (!t.defined() || !is_floating(t.dtype())) continue;
      target = any ? promote_types(target, t.dtype()) : t.dtype();
      any = true;
    }
    if (!any) return false;
  }
  const auto changes = [&](const Tensor& t) {
    const bool moves =
        policy == Policy::kPromote ? t.defined() && is_floating(t.dtype()) : eligible(t);
    return moves && t.dtype() != target;
  };
  if (std::none_of(inputs.begin(), inputs.end(), changes)) return false;
  cast.assign(inputs.begin(), inputs.end());
  for (Tensor& t : cast)
    if (changes(t)) t = t.to(target);
  return true;
}

bool to_float32(const Tensor& x, const Tensor& y, Tensor& x32, Tensor& y32) {
  if (!active() || !x.defined() || !t_state.enabled[index_of(x.device().kind())]) return false;
  const auto half = [](const Tensor& t) {
    return t.defined() && (t.dtype() == kFloat16 || t.dtype() == kBFloat16);
  };
  if (!half(x) && !half(y)) return false;
  x32 = half(x) ? x.to(kFloat32) : x;
  y32 = half(y) ? y.to(kFloat32) : y;
  return true;
}

void append_key(std::vector<int64_t>& key) {
  for (size_t k = 0; k < kNumDeviceKinds; ++k)
    key.push_back(t_state.enabled[k] ? 1 + static_cast<int64_t>(t_state.dtype[k]) : 0);
}

std::string describe() {
  std::string out;
  for (DeviceKind k : {DeviceKind::CPU, DeviceKind::CUDA}) {
    if (!t_state.enabled[index_of(k)]) continue;
    out += detail::str_cat(out.empty() ? "" : ", ", kind_name(k), " ", t_state.dtype[index_of(k)]);
  }
  return out.empty() ? "off" : out;
}

Suspend::Suspend() noexcept {
  for (size_t k = 0; k < kNumDeviceKinds; ++k) {
    enabled_[k] = t_state.enabled[k];
    t_state.enabled[k] = false;
  }
}

Suspend::~Suspend() {
  for (size_t k = 0; k < kNumDeviceKinds; ++k) t_state.enabled[k] = enabled_[k];
}

}  // namespace kiln::ops::autocast

namespace kiln::amp {

namespace state = ops::autocast;

Autocast::Autocast(Device device, DType dtype, bool enabled) : kind_(device.kind()) {
  if (dtype != kFloat16 && dtype != kBFloat16) {
    throw ValueError(detail::str_cat("Autocast: dtype ", dtype,
                                     " is not a lower precision (float16 or bfloat16)"));
  }
  const size_t k = state::index_of(kind_);
  was_enabled_ = state::t_state.enabled[k];
  was_dtype_ = state::t_state.dtype[k];
  state::t_state.enabled[k] = enabled;
  if (enabled) state::t_state.dtype[k] = dtype;
}

Autocast::Autocast(Device device, bool enabled)
    : Autocast(device, device.is_cuda() ? kFloat16 : kBFloat16, enabled) {}

Autocast::~Autocast() {
  const size_t k = state::index_of(kind_);
  state::t_state.enabled[k] = was_enabled_;
  state::t_state.dtype[k] = was_dtype_;
}

bool is_autocast_enabled(Device device) noexcept {
  return state::t_state.enabled[state::index_of(device.kind())];
}

DType autocast_dtype(Device device) noexcept {
  return state::t_state.dtype[state::index_of(device.kind())];
}

}  // namespace kiln::amp
