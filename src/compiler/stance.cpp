// The compile stance (compiler::set_stance, docs/debugging.md "The stance"):
// one process-wide setting that Core::call reads on every call.
#include <atomic>
#include <cstdlib>
#include <string_view>

#include "kiln/compile.h"

namespace kiln::compiler {
namespace {

// The process-wide stance (compile.h); KILN_COMPILE=0 starts it at ForceEager.
std::atomic<int>& stance_cell() {
  static std::atomic<int> cell{[] {
    const char* env = std::getenv("KILN_COMPILE");
    return static_cast<int>(env && std::string_view(env) == "0" ? Stance::ForceEager
                                                                : Stance::Default);
  }()};
  return cell;
}

}  // namespace

void set_stance(Stance s) { stance_cell().store(static_cast<int>(s), std::memory_order_relaxed); }

Stance stance() { return static_cast<Stance>(stance_cell().load(std::memory_order_relaxed)); }

std::string_view stance_name(Stance s) {
  switch (s) {
    case Stance::ForceEager:
      return "force_eager";
    case Stance::EagerOnRecompile:
      return "eager_on_recompile";
    case Stance::FailOnRecompile:
      return "fail_on_recompile";
    default:
      return "default";
  }
}

}  // namespace kiln::compiler
