#include <atomic>

#include "autograd/meta.h"
#include "autograd/rules/common.h"
#include "kiln/autograd.h"

namespace kiln::autograd {
namespace {

std::atomic<uint64_t> g_next_sequence_nr{0};

}  // namespace

Node::Node() : sequence_nr_(g_next_sequence_nr.fetch_add(1, std::memory_order_relaxed)) {}

int64_t Node::add_hook(uint32_t slot, Hook hook, bool run_last) {
  const int64_t handle = next_hook_handle();
  hooks_.push_back({slot, handle, std::move(hook), run_last});
  return handle;
}

bool Node::remove_hook(int64_t handle) {
  for (auto it = hooks_.begin(); it != hooks_.end(); ++it) {
    if (it->handle == handle) {
      hooks_.erase(it);
      return true;
    }
  }
  return false;
}

void Node::run_hooks(TensorList& grads) const {
  for (bool last : {false, true}) {
    for (const auto& h : hooks_) {
      if (h.run_last != last || h.slot >= grads.size() || !grads[h.slot].defined()) continue;
      Tensor replaced = h.fn(grads[h.slot]);
      if (replaced.defined()) grads[h.slot] = check_hook_result(replaced, grads[h.slot], name());
    }
  }
}

}  // namespace kiln::autograd
