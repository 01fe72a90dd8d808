// Host time per op, for finding where eager time goes: with KILN_PROFILE_OPS=1
// in the environment, every outermost dispatch (shape rule, allocation, kernel
// call or launch) is timed on the host and the sums per op are printed to
// stderr at exit. Device work runs asynchronously and is not included.
#pragma once

#include <chrono>

#include "ops/op_table.h"

namespace kiln::ops {

class OpProfileScope {
 public:
  explicit OpProfileScope(OpId op) noexcept {
    if (enabled()) start(op);
  }
  ~OpProfileScope() {
    if (active_) stop();
  }
  OpProfileScope(const OpProfileScope&) = delete;
  OpProfileScope& operator=(const OpProfileScope&) = delete;

  static bool enabled() noexcept;

 private:
  void start(OpId op) noexcept;
  void stop() noexcept;

  bool active_ = false;
  bool outermost_ = false;
  OpId op_{};
  std::chrono::steady_clock::time_point begin_;
};

}  // namespace kiln::ops
