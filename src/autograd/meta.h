// Per-tensor autograd state and the edge a tensor's gradient flows into.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "kiln/autograd.h"
#include "kiln/tensor.h"

namespace kiln::autograd {

struct AutogradMeta {
  bool requires_grad = false;  // set by requires_grad_ on a leaf
  Tensor grad;
  std::shared_ptr<Node> grad_fn;  // null for leaves
  uint32_t output_nr = 0;         // which output of grad_fn this tensor is
  // A leaf's accumulator, shared by every use of the leaf in the graph.
  std::weak_ptr<Node> grad_accumulator;
  // Threads may build graphs over one leaf and run their backward passes at
  // once (eager, or tracing one compiled function): the accumulator is made
  // and a gradient accumulated into `grad` under this lock.
  std::mutex leaf_mutex;
  bool retains_grad = false;
  // Hooks of a leaf (a non-leaf's hooks live on its grad_fn).
  std::vector<std::pair<int64_t, Node::Hook>> leaf_hooks;
};

AutogradMeta* meta_of(const Tensor& t) noexcept;
AutogradMeta& ensure_meta(const Tensor& t);
bool requires_grad(const Tensor& t);
// Where t's gradient goes: its grad_fn's slot, its leaf accumulator, or nowhere.
// Refreshes a view's history when its base was written in place since.
Edge gradient_edge(const Tensor& t);
// Rebuilds a view's history when its base was written in place since it was made.
void refresh_view_history(const Tensor& t);
// The accumulator of a leaf that requires grad (made on first use).
std::shared_ptr<Node> grad_accumulator(const Tensor& leaf);
// Makes t the output slot of fn.
void set_history(const Tensor& t, std::shared_ptr<Node> fn, uint32_t output_nr);
// A new handle on t's data with no autograd state (same storage, sizes, strides).
Tensor alias_without_history(const Tensor& t);
// A view of base's storage with the given geometry, with no autograd state.
Tensor raw_view(const Tensor& base, const Shape& sizes, const Shape& strides, int64_t offset);

// Hook handles are unique over the process.
int64_t next_hook_handle() noexcept;

}  // namespace kiln::autograd
