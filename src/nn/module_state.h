// What kiln::compile needs to know of modules (docs/compile.md, "Modules"):
// each module's state outside its tensors (its training flag), shared with
// the guards of the graphs that read it, and the registered slots of every
// live module, so that a graph that captured a parameter or buffer notices
// when its slot is given another tensor (net.fc.weight = w).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/tensor.h"

namespace kiln::nn::internal {

// Held by its module and by the guards of graphs that read it, so a guard
// outlives a module made and dropped inside a compiled function.
struct ModuleState {
  bool training = true;
  bool alive = true;  // false once the module is destroyed: its slots are gone
};

// A parameter or buffer slot of a live module.
struct SlotRef {
  std::shared_ptr<const ModuleState> owner;
  const Tensor* slot = nullptr;
  std::string description;  // "parameter 'weight' of a Linear"
};

// For each tensor, the registered slot of a live module that holds it now
// (none: no module's; several: one of them).
std::vector<std::optional<SlotRef>> find_slots(const TensorList& tensors);

}  // namespace kiln::nn::internal
