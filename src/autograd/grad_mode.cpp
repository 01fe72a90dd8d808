#include "kiln/autograd.h"

namespace kiln {
namespace {

// Per-thread recording switches, like PyTorch's GradMode and InferenceMode.
thread_local bool t_grad_enabled = true;
thread_local bool t_inference = false;

}  // namespace

bool is_grad_enabled() noexcept { return t_grad_enabled; }
void set_grad_enabled(bool enabled) noexcept { t_grad_enabled = enabled; }

NoGradGuard::NoGradGuard() noexcept : previous_(t_grad_enabled) { t_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { t_grad_enabled = previous_; }

EnableGradGuard::EnableGradGuard() noexcept : previous_(t_grad_enabled) { t_grad_enabled = true; }
EnableGradGuard::~EnableGradGuard() { t_grad_enabled = previous_; }

InferenceModeGuard::InferenceModeGuard() noexcept
    : previous_grad_(t_grad_enabled), previous_inference_(t_inference) {
  t_grad_enabled = false;
  t_inference = true;
}
InferenceModeGuard::~InferenceModeGuard() {
  t_grad_enabled = previous_grad_;
  t_inference = previous_inference_;
}
bool InferenceModeGuard::enabled() noexcept { return t_inference; }

}  // namespace kiln
