// Workspaces: memory a kernel needs only while it runs (a cuDNN or cuBLASLt
// workspace, a split reduction's partial sums). A kernel asks for one with
// make_workspace and lets it go before it returns.
//
// Eagerly a workspace is a new tensor from the device's allocator. An
// executable (compiler/runtime/executable.h) runs each step inside a WorkspaceScope:
// its first run measures the bytes each step asks for, and its memory plan
// then gives every step a slice of the arena for them, alive for that step
// only, so a compiled call holds no more than eager's live tensors plus the
// workspace of the kernel running (docs/architecture.md, "Memory plan and workspaces").
#pragma once

#include <cstddef>
#include <memory>

#include "kiln/tensor.h"

namespace kiln::ops {

// A contiguous uint8 tensor of nbytes on device, valid until the kernel
// that asked for it returns (the kernel must not keep it).
Tensor make_workspace(size_t nbytes, Device device);

// While alive on a thread: make_workspace on `device` is measured, and, when
// a slice is given, served from it while it has room (beyond it, from the
// allocator). Workspaces stack: one asked while another is held (a kernel
// that runs others) goes above it, and a workspace let go frees its bytes
// once those above it are gone too. Scopes nest: the innermost one is used.
class WorkspaceScope {
 public:
  // Measures only.
  explicit WorkspaceScope(Device device);
  // Serves from [offset, offset + capacity) of `arena`.
  WorkspaceScope(Device device, std::shared_ptr<Storage> arena, size_t offset, size_t capacity);
  ~WorkspaceScope();
  WorkspaceScope(const WorkspaceScope&) = delete;
  WorkspaceScope& operator=(const WorkspaceScope&) = delete;

  // The most bytes held at once so far (each workspace rounded as the
  // memory plan rounds it): what a slice must hold for the scope's work.
  size_t high_water() const noexcept;
  // The bytes served from the slice so far.
  size_t served() const noexcept { return served_; }

  // The rounding of a workspace of nbytes on device (256 on CUDA, 64 on the CPU).
  static size_t rounded(size_t nbytes, Device device) noexcept;

 private:
  struct Stack;
  friend Tensor make_workspace(size_t nbytes, Device device);
  Device device_;
  std::shared_ptr<Storage> arena_;
  size_t offset_ = 0, capacity_ = 0, served_ = 0;
  std::shared_ptr<Stack> stack_;  // held by the workspaces too
  WorkspaceScope* previous_;
};

}  // namespace kiln::ops
