// The registries of what a backend runs beyond one kernel per op: library
// calls with an epilogue (epilogue.h) and inputs it prepares once
// (prepared.h).
#include "backends/epilogue.h"
#include "backends/prepared.h"

#include <map>
#include <mutex>
#include <utility>

namespace kiln::backend {
namespace {

struct Registry {
  std::mutex mutex;
  std::map<std::pair<DeviceKind, ops::OpId>, EpilogueLowering> lowerings;
  std::map<std::pair<DeviceKind, ops::OpId>, InputPreparation> preparations;
};

Registry& registry() {
  static Registry r;
  return r;
}

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
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  r.lowerings[{device, op}] = lowering;
}

const EpilogueLowering* epilogue_lowering(DeviceKind device, ops::OpId op) {
  // Backends register when they start: make sure this device's has.
  backend_for(device);
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  const auto it = r.lowerings.find({device, op});
  return it == r.lowerings.end() ? nullptr : &it->second;
}

void register_input_preparation(DeviceKind device, ops::OpId op, InputPreparation preparation) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  r.preparations[{device, op}] = preparation;
}

const InputPreparation* input_preparation(DeviceKind device, ops::OpId op) {
  backend_for(device);
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  const auto it = r.preparations.find({device, op});
  return it == r.preparations.end() ? nullptr : &it->second;
}

}  // namespace kiln::backend
