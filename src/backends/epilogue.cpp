// The registries of what a backend runs beyond one kernel per op: library
// calls with an epilogue (epilogue.h), inputs it prepares once (prepared.h)
// and generated kernels (device_codegen.h).
#include "backends/epilogue.h"

#include "backends/device_codegen.h"
#include "backends/prepared.h"

#include <map>
#include <mutex>
#include <optional>
#include <utility>

namespace kiln::backend {
namespace {

// What backends registered for (device, op), one map per kind of entry.
template <typename Entry>
class Registry {
 public:
  static Registry& instance() {
    static Registry r;
    return r;
  }
  void put(DeviceKind device, ops::OpId op, Entry entry) {
    std::lock_guard lock(mutex_);
    entries_[{device, op}] = entry;
  }
  const Entry* find(DeviceKind device, ops::OpId op) {
    // Backends register when they start: make sure this device's has.
    backend_for(device);
    std::lock_guard lock(mutex_);
    const auto it = entries_.find({device, op});
    return it == entries_.end() ? nullptr : &it->second;
  }

 private:
  std::mutex mutex_;
  std::map<std::pair<DeviceKind, ops::OpId>, Entry> entries_;
};

}  // namespace

std::string Epilogue::describe() const {
  std::string s;
  for (Kind k : ops) {
    if (!s.empty()) s += ", ";
    s += k == Kind::kAdd    ? "add"
         : k == Kind::kRelu ? "relu"
         : k == Kind::kGelu ? "gelu"
                            : "gelu (tanh)";
  }
  return s;
}

void register_epilogue_lowering(DeviceKind device, ops::OpId op, EpilogueLowering lowering) {
  Registry<EpilogueLowering>::instance().put(device, op, lowering);
}

const EpilogueLowering* epilogue_lowering(DeviceKind device, ops::OpId op) {
  return Registry<EpilogueLowering>::instance().find(device, op);
}

void register_input_preparation(DeviceKind device, ops::OpId op, InputPreparation preparation) {
  Registry<InputPreparation>::instance().put(device, op, preparation);
}

const InputPreparation* input_preparation(DeviceKind device, ops::OpId op) {
  return Registry<InputPreparation>::instance().find(device, op);
}

namespace {

struct CodegenRegistry {
  std::mutex mutex;
  std::optional<DeviceCodegen> entries[kNumDeviceKinds];
};
CodegenRegistry& codegen_registry() {
  static CodegenRegistry r;
  return r;
}

}  // namespace

void register_device_codegen(DeviceKind device, DeviceCodegen codegen) {
  CodegenRegistry& r = codegen_registry();
  std::lock_guard lock(r.mutex);
  r.entries[static_cast<size_t>(device)] = codegen;
}

const DeviceCodegen* device_codegen(DeviceKind device) {
  try {
    backend_for(device);  // backends register when they start
  } catch (const DeviceError&) {
    return nullptr;  // a build without that backend
  }
  CodegenRegistry& r = codegen_registry();
  std::lock_guard lock(r.mutex);
  const std::optional<DeviceCodegen>& e = r.entries[static_cast<size_t>(device)];
  return e ? &*e : nullptr;
}

}  // namespace kiln::backend
