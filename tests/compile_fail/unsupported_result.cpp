// Must not compile: kiln::compile of a function whose result is not made of
// tensors (here a pointer to a tensor's data). The test (tests/CMakeLists.txt,
// CompileFail.UnsupportedResultSaysWhy) checks that the compiler's message is
// kiln's, not a failure deep inside its templates. (A function that returns
// nothing compiles: it is compiled for what it writes.)
#include "kiln/kiln.h"

int main() {
  auto fast = kiln::compile([](const kiln::Tensor& x) { return (x + 1).data_ptr(); });
  fast(kiln::ones({2}));
}
