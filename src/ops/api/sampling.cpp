// Sampling composed of rand and other ops: multinomial (inverse CDF with
// replacement, the top keys p / E with E ~ Exp(1) without) and bernoulli. The
// generator's draws make them reproducible on every backend.
#include <algorithm>

#include "kiln/ops/factory.h"
#include "kiln/ops/pointwise.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape.h"

namespace kiln {
namespace {

// PyTorch's checks of a distribution, eagerly: weights finite and
// non-negative, each row with a positive one, and enough positive ones to
// draw `needed` distinct categories. A traced call skips them (they read values).
void check_distribution(const Tensor& rows, int64_t needed) {
  if (rows.is_meta()) return;
  const Tensor bad = any(logical_or(logical_or(rows < 0, isnan(rows)), isinf(rows)));
  const Tensor fewest_positive = amin(sum(rows > 0, {-1}));
  const auto v = stack({bad.to(kInt64), fewest_positive}).to_vector<int64_t>();
  KILN_CHECK(v[0] == 0, ValueError,
             "multinomial: the probabilities must be finite and non-negative");
  KILN_CHECK(v[1] > 0, ValueError, "multinomial: a row of probabilities sums to 0");
  KILN_CHECK(v[1] >= needed, ValueError, "multinomial: cannot draw ", needed,
             " categories without replacement from a row with ", v[1], " positive probabilities");
}

}  // namespace

Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement,
                   Generator* generator) {
  KILN_CHECK(is_floating(probs.dtype()), DTypeError,
             "multinomial: probabilities must be floating, got ", probs.dtype());
  KILN_CHECK(probs.dim() == 1 || probs.dim() == 2, ShapeError,
             "multinomial: probabilities must be [n] or [rows, n], got shape ", probs.sizes());
  const int64_t n = probs.size(-1);
  KILN_CHECK(n > 0, ShapeError, "multinomial: no categories (shape ", probs.sizes(), ")");
  KILN_CHECK(num_samples > 0, ValueError, "multinomial: num_samples must be positive, got ",
             num_samples);
  KILN_CHECK(replacement || num_samples <= n, ValueError, "multinomial: cannot draw ", num_samples,
             " of ", n, " categories without replacement");
  const Tensor rows = (probs.dim() == 1 ? probs.unsqueeze(0) : probs).to(kFloat64);
  check_distribution(rows, replacement ? 1 : num_samples);
  const int64_t m = rows.size(0);
  const TensorOptions on{.dtype = kFloat64, .device = probs.device()};
  Tensor samples;
  if (replacement) {
    // Sample s of row r: the number of categories whose cumulative weight is
    // at most u * total, u uniform in [0, 1).
    const Tensor cdf = cumsum(rows, -1);
    const Tensor threshold = rand({m, num_samples}, on, generator) * cdf.narrow(1, n - 1, 1);
    samples = clamp_max(sum(cdf.unsqueeze(1) <= threshold.unsqueeze(2), {2}), n - 1);
  } else {
    // The num_samples largest p / E, E ~ Exp(1): a draw without replacement
    // in proportion to p (the exponential race).
    const Tensor exponential = neg(log(rand({m, n}, on, generator)));
    samples = topk(rows / exponential, num_samples, 1).indices;
  }
  return probs.dim() == 1 ? samples.squeeze(0) : samples;
}

Tensor bernoulli(const Tensor& p, Generator* generator) {
  KILN_CHECK(is_floating(p.dtype()), DTypeError, "bernoulli: p must be floating, got ", p.dtype());
  return (rand_like(p.to(kFloat32), generator) < p).to(p.dtype());
}

Tensor bernoulli(const Tensor& x, double p, Generator* generator) {
  KILN_CHECK(p >= 0 && p <= 1, ValueError, "bernoulli: p must be in [0, 1], got ", p);
  KILN_CHECK(is_floating(x.dtype()), DTypeError, "bernoulli: x must be floating, got ", x.dtype());
  return (rand_like(x.to(kFloat32), generator) < p).to(x.dtype());
}

}  // namespace kiln
