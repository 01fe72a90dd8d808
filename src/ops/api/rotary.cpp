// Rotary position embeddings (RoPE), as Llama-style decoders apply them to
// queries and keys: the two halves of each head's features rotate by angles
// that grow with the position.
#include "kiln/ops/factory.h"
#include "kiln/ops/linalg.h"
#include "kiln/ops/nn.h"
#include "kiln/ops/pointwise.h"
#include "kiln/ops/shape.h"

namespace kiln::nn::functional {

RotaryTables rotary_embedding(const Tensor& positions, int64_t dim, double base) {
  KILN_CHECK(dim > 0 && dim % 2 == 0, ValueError,
             "rotary_embedding: dim must be positive and even, got ", dim);
  KILN_CHECK(base > 0, ValueError, "rotary_embedding: base must be positive, got ", base);
  KILN_CHECK(!is_floating(positions.dtype()) || positions.dtype() == kFloat32, DTypeError,
             "rotary_embedding: positions must be integers or float32, got ", positions.dtype());
  // base^(-2i / dim) for i < dim / 2, computed in float32 as the checkpoints' code does.
  const Tensor exponents =
      arange(0, dim, 2, {.dtype = kInt64, .device = positions.device()}).to(kFloat32) /
      static_cast<double>(dim);
  const Tensor inverse_frequency = reciprocal(pow(base, exponents));
  const Tensor angles = positions.to(kFloat32).unsqueeze(-1) * inverse_frequency;
  const Tensor both_halves = cat({angles, angles}, -1);
  return {cos(both_halves), sin(both_halves)};
}

Tensor rotate_half(const Tensor& x) {
  KILN_CHECK(x.dim() > 0 && x.size(-1) % 2 == 0, ShapeError,
             "rotate_half: the last dim must be even, got shape ", x.sizes());
  const int64_t half = x.size(-1) / 2;
  return cat({neg(x.narrow(-1, half, half)), x.narrow(-1, 0, half)}, -1);
}

Tensor apply_rotary_emb(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  // Compared, not read: a compiled caller keeps the sequence length symbolic.
  KILN_CHECK(cos.defined() && sin.defined() && cos.same_sizes(sin), ShapeError,
             "apply_rotary_emb: cos and sin must have one shape, got ",
             cos.defined() ? cos.sizes() : Shape{}, " and ", sin.defined() ? sin.sizes() : Shape{});
  KILN_CHECK(x.dim() > 0 && cos.dim() > 0 && cos.size(-1) == x.size(-1), ShapeError,
             "apply_rotary_emb: cos and sin ", cos.sizes(), " must end with x's feature size ",
             x.dim() > 0 ? x.size(-1) : 0, " (x is ", x.sizes(), ")");
  return x * cos.to(x.dtype()) + rotate_half(x) * sin.to(x.dtype());
}

}  // namespace kiln::nn::functional
