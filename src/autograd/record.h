// The dispatcher's hooks into autograd: recording a Node for an op call, and
// rebasing a tensor's history after an in-place op.
#pragma once

#include <memory>
#include <span>

#include "kiln/tensor.h"
#include "ops/attrs.h"
#include "ops/op_table.h"

namespace kiln::autograd {

class OpNode;

// Whether a call of op on inputs must be recorded (grad mode on, a differentiable
// op, an input that requires grad).
bool should_record(const ops::OpSchema& schema, std::span<const Tensor> inputs);

// Records an out-of-place call: a node with the inputs' edges, saving what the
// rule needs; the floating outputs become its slots.
void record_op(const ops::OpSchema& schema, std::span<const Tensor> inputs,
               const ops::Attrs& attrs, std::span<Tensor> outputs);

// Records result = input copied to another device (or into pinned memory):
// its gradient is copied back to input's device.
void record_device_copy(const Tensor& input, const Tensor& result);

// An in-place call op(inputs) -> self, recorded around the kernel: begin before
// it runs (checks, edges, saved inputs), finish after (self's new history).
class InplaceRecord {
 public:
  InplaceRecord(const ops::OpSchema& schema, const Tensor& self, std::span<const Tensor> inputs,
                const ops::Attrs& attrs);
  ~InplaceRecord();
  InplaceRecord(const InplaceRecord&) = delete;
  InplaceRecord& operator=(const InplaceRecord&) = delete;
  void finish(const Tensor& self);

 private:
  std::shared_ptr<OpNode> node_;
  bool view_is_input_ = false;
};

// Marks a view op's output as a view of input's base.
void mark_view(const Tensor& input, const Tensor& view);

}  // namespace kiln::autograd
