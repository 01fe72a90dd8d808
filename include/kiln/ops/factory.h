// Creating tensors: constants, ranges, random values and host data.
//
//   auto a = kiln::zeros({2, 3});
//   auto b = kiln::arange(0, 10, 2, {.dtype = kiln::kInt64});
//   kiln::manual_seed(0);
//   auto c = kiln::randn({4, 4});
//   auto d = kiln::from_vector<float>({1, 2, 3, 4}, {2, 2});
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "kiln/tensor.h"

namespace kiln {

struct TensorOptions {
  std::optional<DType> dtype;  // float32 unless said otherwise (int64 for randint)
  Device device = Device::cpu();
};

// A counter-based (Philox) random stream: a seed and how many values were drawn.
// Each random op takes a fresh offset, so results do not depend on the backend
// or the thread count.
class Generator {
 public:
  explicit Generator(uint64_t seed = 0x5EEDull) : seed_(seed) {}
  void manual_seed(uint64_t seed) noexcept { seed_ = seed, offset_ = 0; }
  uint64_t seed() const noexcept { return seed_; }
  // Reserves n counter values and returns the first.
  uint64_t advance(uint64_t n) noexcept;

 private:
  uint64_t seed_;
  uint64_t offset_ = 0;
};

// The process-wide default generator (a registry; guarded by a mutex).
Generator& default_generator();
void manual_seed(uint64_t seed);

Tensor empty(const Shape& sizes, TensorOptions options = {});
Tensor zeros(const Shape& sizes, TensorOptions options = {});
Tensor ones(const Shape& sizes, TensorOptions options = {});
Tensor full(const Shape& sizes, Scalar value, TensorOptions options = {});
// With sizes of tensors' dims (Tensor::sym_size) among the sizes: in a
// compiled program they stay those dims' sizes (docs/compile.md).
Tensor empty(const SymSizes& sizes, TensorOptions options = {});
Tensor empty(std::initializer_list<SymSize> sizes, TensorOptions options = {});
Tensor zeros(const SymSizes& sizes, TensorOptions options = {});
Tensor zeros(std::initializer_list<SymSize> sizes, TensorOptions options = {});
Tensor ones(const SymSizes& sizes, TensorOptions options = {});
Tensor ones(std::initializer_list<SymSize> sizes, TensorOptions options = {});
Tensor full(const SymSizes& sizes, Scalar value, TensorOptions options = {});
Tensor full(std::initializer_list<SymSize> sizes, Scalar value, TensorOptions options = {});
Tensor empty_like(const Tensor& t);
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, Scalar value);
// [start, end) in steps; the dtype defaults to int64 when all three are integers.
Tensor arange(Scalar end, TensorOptions options = {});
Tensor arange(Scalar start, Scalar end, Scalar step = 1, TensorOptions options = {});
Tensor linspace(double start, double end, int64_t steps, TensorOptions options = {});
Tensor eye(int64_t n, std::optional<int64_t> m = std::nullopt, TensorOptions options = {});
Tensor rand(const Shape& sizes, TensorOptions options = {}, Generator* generator = nullptr);
Tensor randn(const Shape& sizes, TensorOptions options = {}, Generator* generator = nullptr);
// Integers uniform in [low, high).
Tensor randint(int64_t low, int64_t high, const Shape& sizes, TensorOptions options = {},
               Generator* generator = nullptr);
Tensor rand_like(const Tensor& t, Generator* generator = nullptr);
Tensor randn_like(const Tensor& t, Generator* generator = nullptr);

// num_samples int64 category indices per row of probs [n] or [rows, n]
// (finite non-negative weights, not necessarily summing to 1): with
// replacement each draw is independent; without, the categories of a row are
// distinct. Eager calls check the weights (and read them on the host to do so).
Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement = false,
                   Generator* generator = nullptr);
// 1 with probability p (per element of the tensor p, or the number p for
// every element of x), else 0, in the tensor's floating dtype.
Tensor bernoulli(const Tensor& p, Generator* generator = nullptr);
Tensor bernoulli(const Tensor& x, double p, Generator* generator = nullptr);

// Copies host values into a new CPU tensor; sizes default to {values.size()}.
template <typename T>
Tensor from_vector(const std::vector<T>& values, std::optional<Shape> sizes = std::nullopt);
// Wraps memory the caller owns without copying; deleter runs when the last view dies.
Tensor from_blob(void* data, const Shape& sizes, DType dtype,
                 std::function<void(void*)> deleter = {}, std::optional<Shape> strides = {});
// A 0-dim tensor of a value (float32 for floating values, int64 for integers, bool).
Tensor scalar_tensor(Scalar value, TensorOptions options = {});

}  // namespace kiln
