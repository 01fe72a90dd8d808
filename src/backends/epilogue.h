// Library calls with an epilogue: a convolution or a linear whose result
// goes through pointwise ops before anything else reads it runs as one call,
// the pointwise work applied to the result while it is still in cache, or as
// the library writes it (docs/architecture.md, "Schedules and fused steps").
// The compiler decides what to fuse, the same way for every backend
// (compiler/schedule/); a backend says what it can run this way and runs it,
// each element rounded as the separate ops round it (results eager's
// bitwise) unless its `bitwise` says otherwise, which strict mode refuses.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "backends/backend.h"

namespace kiln::backend {

// The pointwise ops after the call, applied in order to its result y.
struct Epilogue {
  enum class Kind : uint8_t {
    kAdd,       // y + r, r the call's next extra input: y's sizes and dtype, r row-major
                // or laid out as y
    kRelu,      // y < 0 ? 0 : y (NaN kept), as eager's relu
    kGelu,      // gelu(y), the erf form
    kGeluTanh,  // gelu(y, "tanh")
  };
  std::vector<Kind> ops;

  std::string describe() const;  // "add, relu"
};

// A backend's way to run op with an epilogue on one device kind.
struct EpilogueLowering {
  // Empty when it can run `op` with `epilogue` on inputs and output of these
  // layouts (the call's inputs, then one tensor per kAdd); else why not.
  // It decides from dtypes, devices, ranks and whether each layout is
  // row-major or channels last, not from sizes: a dynamic program's sizes
  // are those it was traced with, and the compiler guards those kinds alone
  // (docs/architecture.md, "One executable for all sizes").
  std::string (*supports)(ops::OpId op, std::span<const ops::TensorMeta> inputs,
                          const ops::TensorMeta& output, const ops::Attrs& attrs,
                          const Epilogue& epilogue) = nullptr;
  // Runs it: call.inputs are the op's inputs then the epilogue's, call.out()
  // the epilogue's result, which no input shares bytes with.
  void (*run)(const KernelCall& call, const Epilogue& epilogue) = nullptr;
  // Whether its results are eager's bitwise for these inputs and epilogue
  // (decided as `supports` decides); null: always.
  bool (*bitwise)(std::span<const ops::TensorMeta> inputs, const Epilogue& epilogue) = nullptr;
};

// Backends register their lowerings when they start; null where there is none.
void register_epilogue_lowering(DeviceKind device, ops::OpId op, EpilogueLowering lowering);
const EpilogueLowering* epilogue_lowering(DeviceKind device, ops::OpId op);

}  // namespace kiln::backend
