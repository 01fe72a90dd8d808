// The smallest kiln program: tensors, broadcasting, views and printing.
#include <kiln/kiln.h>

#include <iostream>

int main() {
  using namespace kiln;
  manual_seed(0);
  Tensor x = arange(6, {.dtype = kFloat32}).view({2, 3});
  Tensor y = (x * 2 + from_vector<float>({1, 0, -1})).relu();
  std::cout << "x =\n" << x << "\n";
  std::cout << "relu(2x + [1, 0, -1]) =\n" << y << "\n";
  std::cout << "first column: " << y.index({Slice(), 0}) << "\n";
  try {
    x.view({4, 2});
  } catch (const ShapeError& e) {
    std::cout << "error, as expected: " << e.what() << "\n";
  }
  return y.to_vector<float>()[5] == 9.f ? 0 : 1;
}
