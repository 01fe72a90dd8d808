// A small kiln program: tensors, broadcasting, views, printing and a few network ops.
#include <kiln/kiln.h>

#include <cmath>
#include <iostream>

int main() {
  using namespace kiln;
  manual_seed(0);
  Tensor x = arange(6, {.dtype = kFloat32}).view({2, 3});
  Tensor y = (x * 2 + from_vector<float>({1, 0, -1})).relu();
  std::cout << "x =\n" << x << "\n";
  std::cout << "relu(2x + [1, 0, -1]) =\n" << y << "\n";
  std::cout << "first column: " << y.index({Slice(), 0}) << "\n";
  Tensor p = softmax(matmul(y, x.t()), -1);
  std::cout << "softmax(y @ x^T) =\n" << p << "\n";
  Tensor img = nn::functional::layer_norm(conv2d(randn({1, 3, 32, 32}), randn({8, 3, 3, 3})), {8, 30, 30});
  std::cout << "layer-normed feature map: " << img.sizes() << ", mean " << img.mean().item<float>() << "\n";
  try {
    x.view({4, 2});
  } catch (const ShapeError& e) {
    std::cout << "error, as expected: " << e.what() << "\n";
  }
  const bool ok = y.to_vector<float>()[5] == 9.f && std::abs(p.sum().item<float>() - 2.f) < 1e-5f &&
                  img.sizes() == Shape{1, 8, 30, 30};
  return ok ? 0 : 1;
}
