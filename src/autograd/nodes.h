// The node kinds of the recorded graph: an op's backward, a leaf's gradient
// accumulation, and the two nodes that keep in-place writes through views exact.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "autograd/rules.h"
#include "kiln/autograd.h"
#include "ops/attrs.h"
#include "ops/op_table.h"

namespace kiln::autograd {

// A tensor kept for backward, with the version it had: using it after an in-place
// write is an error naming the op. An op's own output is kept without its history
// (no reference cycle) and gets it back when unpacked.
class SavedTensor {
 public:
  SavedTensor() = default;
  SavedTensor(const Tensor& t, bool is_output);
  // owner: the node that saved it (the grad_fn an output gets back).
  Tensor unpack(Node& owner, uint32_t output_nr) const;
  void release() noexcept;
  bool defined() const noexcept { return data_.defined() || released_; }

 private:
  Tensor data_;
  uint64_t version_ = 0;
  bool is_output_ = false;
  bool released_ = false;
};

// The backward of one op call.
class OpNode final : public Node {
 public:
  OpNode(const ops::OpSchema& schema, ops::Attrs attrs);
  std::string name() const override { return std::string(schema_.name); }
  TensorList apply(TensorList grads) override;
  void release_saved() override;

  // Recording, in order: inputs (edges, infos and saved inputs), then results.
  void add_inputs(std::span<const Tensor> inputs);
  void save_results(std::span<const Tensor> results);
  // Computes input's gradient even without an edge (CopySlices needs it).
  void force_grad(size_t input);
  const ops::OpSchema& schema() const noexcept { return schema_; }

 private:
  const ops::OpSchema& schema_;
  ops::Attrs attrs_;
  std::vector<BackwardCtx::InputInfo> infos_;
  std::vector<SavedTensor> saved_inputs_;
  std::vector<SavedTensor> saved_results_;
  std::vector<bool> needed_;  // per input: compute its gradient
  bool released_ = false;
};

// The backward of a copy to another device: the gradient goes back to the
// source's device.
class DeviceCopyBackward final : public Node {
 public:
  DeviceCopyBackward(const Tensor& input, const Tensor& result);
  std::string name() const override { return "DeviceCopyBackward"; }
  TensorList apply(TensorList grads) override;

 private:
  Device source_;
};

// Adds the incoming gradient into a leaf's grad().
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(Tensor leaf);
  std::string name() const override { return "AccumulateGrad"; }
  TensorList apply(TensorList grads) override;
  const Tensor& leaf() const noexcept { return leaf_; }

 private:
  Tensor leaf_;
};

// The history of a base tensor after an in-place op wrote into one of its views:
// the view's region takes the op's input gradient, the rest flows to the base's
// previous history.
class CopySlices final : public Node {
 public:
  CopySlices(const Tensor& base, const Tensor& view, std::shared_ptr<OpNode> fn,
             bool view_is_input);
  std::string name() const override { return "CopySlices(" + fn_->name() + ")"; }
  TensorList apply(TensorList grads) override;
  void release_saved() override { fn_->release_saved(); }

 private:
  Shape view_sizes_, view_strides_;
  int64_t view_offset_;
  std::shared_ptr<OpNode> fn_;
  bool view_is_input_;  // the op read the view's old values (add_) rather than only wrote it
};

// A view's history rebuilt from its base's (after the base changed in place).
class ViewOfBase final : public Node {
 public:
  ViewOfBase(const Tensor& base, const Tensor& view);
  std::string name() const override { return "ViewOfBase"; }
  TensorList apply(TensorList grads) override;

 private:
  Shape view_strides_;
  int64_t view_offset_;
  Shape base_sizes_;
};

}  // namespace kiln::autograd
