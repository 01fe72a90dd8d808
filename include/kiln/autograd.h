// Define-by-run automatic differentiation.
//
//   auto w = kiln::randn({3, 2}).requires_grad_();
//   auto loss = kiln::matmul(x, w).relu().sum();
//   loss.backward();                       // w.grad() now holds d loss / d w
//   {
//     kiln::NoGradGuard no_grad;           // ops here record nothing
//     w.sub_(w.grad() * 0.1);
//   }
//   auto g = kiln::autograd::grad({loss2}, {w}, {}, {.create_graph = true})[0];
//
// Every differentiable op records a Node whose backward is written with kiln ops,
// so backward runs on any backend and can itself be differentiated. Grad mode is
// per thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/tensor.h"

namespace kiln {

// Whether ops on this thread record gradient history (on by default).
bool is_grad_enabled() noexcept;
void set_grad_enabled(bool enabled) noexcept;

// Ops run inside a NoGradGuard's scope record nothing (parameter updates, evaluation).
class NoGradGuard {
 public:
  NoGradGuard() noexcept;
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// Turns recording back on inside a NoGradGuard's scope.
class EnableGradGuard {
 public:
  EnableGradGuard() noexcept;
  ~EnableGradGuard();
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool previous_;
};

// Inference: no recording, and tensors made in this scope can never join a graph
// later (requires_grad_ on them is an error), like torch.inference_mode.
class InferenceModeGuard {
 public:
  InferenceModeGuard() noexcept;
  ~InferenceModeGuard();
  InferenceModeGuard(const InferenceModeGuard&) = delete;
  InferenceModeGuard& operator=(const InferenceModeGuard&) = delete;
  static bool enabled() noexcept;

 private:
  bool previous_grad_;
  bool previous_inference_;
};

namespace autograd {

struct GradOptions {
  // Keep the saved tensors so that the graph can be differentiated again
  // (defaults to create_graph).
  std::optional<bool> retain_graph = std::nullopt;
  // Record the backward computation, so that the gradients can be differentiated.
  bool create_graph = false;
  // Return an undefined tensor for an input the outputs do not depend on instead
  // of throwing.
  bool allow_unused = false;
};

// The gradients of sum(outputs[i] * grad_outputs[i]) with respect to inputs,
// returned rather than accumulated into grad(). grad_outputs may be empty when
// every output has one element.
TensorList grad(const TensorList& outputs, const TensorList& inputs,
                const TensorList& grad_outputs = {}, GradOptions options = {});

// Accumulates the gradients of the outputs into the leaves' grad() (or only
// into inputs' grad() when inputs is not empty). Tensor::backward calls this.
void backward(const TensorList& outputs, const TensorList& grad_outputs = {},
              std::optional<bool> retain_graph = std::nullopt, bool create_graph = false,
              const TensorList& inputs = {});

class Node;

// Where a gradient goes: one of a node's output slots.
struct Edge {
  std::shared_ptr<Node> node;
  uint32_t slot = 0;
  bool valid() const noexcept { return node != nullptr; }
};

// A node of the recorded graph: the backward of one op call, or the
// accumulation of a leaf's gradient. Nodes are made by the op dispatcher; users
// inspect them (t.grad_fn()->name() is "mul", "AccumulateGrad", ...).
class Node : public std::enable_shared_from_this<Node> {
 public:
  // Shape, dtype and device of one forward output: the gradient it receives has them.
  struct OutputInfo {
    Shape sizes;
    DType dtype = kFloat32;
    Device device;
  };

  Node();
  virtual ~Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  virtual std::string name() const = 0;
  // One edge per forward input; an invalid edge where the input needs no gradient.
  const std::vector<Edge>& next_edges() const noexcept { return next_edges_; }
  // Creation order; the engine runs later nodes first.
  uint64_t sequence_nr() const noexcept { return sequence_nr_; }

  // --- used by the engine ------------------------------------------------------
  // Gradients of the forward outputs (undefined: zero) -> one per next edge.
  virtual TensorList apply(TensorList grads) = 0;
  // Drops saved tensors once backward has used them (without retain_graph).
  virtual void release_saved() {}
  const std::vector<OutputInfo>& outputs() const noexcept { return outputs_; }

  // Tensor hooks of the non-leaf tensor at slot: they see and may replace its
  // gradient before this node runs. run_last hooks run after all others
  // (retain_grad stores the gradient the user's hooks produced).
  using Hook = std::function<Tensor(const Tensor&)>;
  int64_t add_hook(uint32_t slot, Hook hook, bool run_last = false);
  bool remove_hook(int64_t handle);
  // Runs the hooks of every slot on grads, in registration order.
  void run_hooks(TensorList& grads) const;

 protected:
  std::vector<Edge> next_edges_;
  std::vector<OutputInfo> outputs_;

 private:
  struct SlotHook {
    uint32_t slot;
    int64_t handle;
    Hook fn;
    bool run_last;
  };
  std::vector<SlotHook> hooks_;
  uint64_t sequence_nr_;
};

}  // namespace autograd
}  // namespace kiln
