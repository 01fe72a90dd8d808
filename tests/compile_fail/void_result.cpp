// Must not compile: kiln::compile of a function that returns nothing. The
// test (tests/CMakeLists.txt, CompileFail.VoidResultSaysWhy) checks that the
// compiler's message is kiln's, not a failure deep inside its templates.
#include "kiln/kiln.h"

int main() {
  auto fast = kiln::compile([](const kiln::Tensor& x) { (void)(x + 1); });
  fast(kiln::ones({2}));
}
