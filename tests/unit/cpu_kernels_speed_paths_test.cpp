// The fast CPU paths of scaled_dot_product_attention (float32 blocks of query
// rows through sgemm) and layer_norm (float lanes) against plain double loops,
// on shapes that cross the block edges: query counts around the 16/32/64-row
// blocks, causal blocks with fewer or more keys than queries, masked rows,
// rows longer than one summation block and rows with a large common offset.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kiln/ops/factory.h"
#include "kiln/ops/nn.h"
#include "kiln/ops/pointwise.h"
#include "kiln/ops/shape.h"

namespace kiln {
namespace {

namespace F = nn::functional;
using Values = std::vector<double>;
constexpr double kInf = std::numeric_limits<double>::infinity();

Values values(const Tensor& t) { return t.to(kFloat64).contiguous().to_vector<double>(); }

struct Sizes {
  int64_t batches, l, s, e, ev;
};

// softmax(q k^T * scale + mask) v per batch entry, in double; mask(b, i, j) is
// added to the scores (-inf masks). A row with every key masked gives zeros.
template <typename Mask>
Values reference_attention(const Values& q, const Values& k, const Values& v, const Sizes& z,
                           double scale, Mask mask) {
  Values out(z.batches * z.l * z.ev, 0.0);
  for (int64_t b = 0; b < z.batches; ++b) {
    for (int64_t i = 0; i < z.l; ++i) {
      Values p(z.s);
      double top = -kInf;
      for (int64_t j = 0; j < z.s; ++j) {
        double d = 0;
        for (int64_t a = 0; a < z.e; ++a)
          d += q[(b * z.l + i) * z.e + a] * k[(b * z.s + j) * z.e + a];
        p[j] = d * scale + mask(b, i, j);
        top = std::max(top, p[j]);
      }
      if (top == -kInf) continue;
      double total = 0;
      for (double& x : p) total += (x = std::exp(x - top));
      for (int64_t j = 0; j < z.s; ++j) {
        for (int64_t a = 0; a < z.ev; ++a)
          out[(b * z.l + i) * z.ev + a] += p[j] / total * v[(b * z.s + j) * z.ev + a];
      }
    }
  }
  return out;
}

void expect_near(const Values& got, const Values& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], tol) << "at " << i;
}

TEST(CpuKernelsSpeedPaths, AttentionMatchesPlainLoopsAcrossQueryBlockEdges) {
  for (const int64_t l : {1, 15, 17, 33, 64, 65, 130}) {
    for (const int64_t s : {1, 7, 64, 129}) {
      const Sizes z{6, l, s, 8, 5};
      const Tensor q = randn({2, 3, l, z.e}), k = randn({2, 3, s, z.e}), v = randn({2, 3, s, z.ev});
      const Tensor mask = randn({1, 1, 1, s});  // float, added to every row of every head
      const Values m = values(mask);
      const Values want =
          reference_attention(values(q), values(k), values(v), z, 1 / std::sqrt(8.0),
                              [&](int64_t, int64_t, int64_t j) { return m[j]; });
      SCOPED_TRACE(testing::Message() << "L=" << l << " S=" << s);
      expect_near(values(F::scaled_dot_product_attention(q, k, v, {.attn_mask = mask})), want,
                  2e-5);
    }
  }
}

TEST(CpuKernelsSpeedPaths, CausalAttentionSeesOnlyEarlierKeysWhateverTheKeyCount) {
  for (const int64_t s : {40, 70, 200}) {
    const Sizes z{4, 70, s, 16, 16};
    const Tensor q = randn({4, 70, 16}), k = randn({4, s, 16}), v = randn({4, s, 16});
    const Values want =
        reference_attention(values(q), values(k), values(v), z, 0.5,
                            [](int64_t, int64_t i, int64_t j) { return j <= i ? 0.0 : -kInf; });
    SCOPED_TRACE(testing::Message() << "S=" << s);
    expect_near(values(F::scaled_dot_product_attention(q, k, v, {.is_causal = true, .scale = 0.5})),
                want, 2e-5);
  }
}

TEST(CpuKernelsSpeedPaths, MaskedAttentionRowsBroadcastOverHeadsAndFullyMaskedRowsAreZero) {
  const int64_t l = 70, s = 50;
  const Sizes z{2 * 4, l, s, 8, 8};
  // Bool mask [2, 1, L, S] (true = attend): query i of batch b skips keys
  // j % 3 == (i + b) % 3; queries 5 and 66 of batch 1 attend to nothing.
  std::vector<uint8_t> keep(2 * l * s);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t i = 0; i < l; ++i)
      for (int64_t j = 0; j < s; ++j)
        keep[(b * l + i) * s + j] = (j % 3 != (i + b) % 3) && !(b == 1 && (i == 5 || i == 66));
  const Tensor mask = from_vector<uint8_t>(keep, Shape{2, 1, l, s}).to(kBool);
  const Tensor q = randn({2, 4, l, 8}), k = randn({2, 4, s, 8}), v = randn({2, 4, s, 8});
  const auto masked = [&](int64_t bh, int64_t i, int64_t j) {
    return keep[((bh / 4) * l + i) * s + j] ? 0.0 : -kInf;
  };
  const Values want =
      reference_attention(values(q), values(k), values(v), z, 1 / std::sqrt(8.0), masked);
  const Values got = values(F::scaled_dot_product_attention(q, k, v, {.attn_mask = mask}));
  expect_near(got, want, 2e-5);
  for (const int64_t i : {5, 66})
    for (int64_t h = 0; h < 4; ++h)
      for (int64_t a = 0; a < 8; ++a) EXPECT_EQ(got[((4 + h) * l + i) * 8 + a], 0.0) << i;
  // The same mask as -inf additions gives the same result.
  const Tensor additive = where(mask, zeros({1}), -kInf);
  expect_near(values(F::scaled_dot_product_attention(q, k, v, {.attn_mask = additive})), got, 1e-6);
}

TEST(CpuKernelsSpeedPaths, AttentionReadsHeadsOfAStridedProjection) {
  // BERT's layout: [B, L, H, E] viewed as [B, H, L, E] without a copy.
  const Tensor q = randn({2, 37, 3, 8}).transpose(1, 2), k = randn({2, 41, 3, 8}).transpose(1, 2),
               v = randn({2, 41, 3, 8}).transpose(1, 2);
  const Sizes z{6, 37, 41, 8, 8};
  const Values want = reference_attention(values(q), values(k), values(v), z, 1 / std::sqrt(8.0),
                                          [](int64_t, int64_t, int64_t) { return 0.0; });
  expect_near(values(F::scaled_dot_product_attention(q, k, v)), want, 2e-5);
}

// layer_norm over the last dim in double, no affine parameters.
Values reference_layer_norm(const Values& x, int64_t k, double eps) {
  Values out(x.size());
  for (size_t r = 0; r < x.size() / k; ++r) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < k; ++i) mean += x[r * k + i];
    mean /= static_cast<double>(k);
    for (int64_t i = 0; i < k; ++i) var += (x[r * k + i] - mean) * (x[r * k + i] - mean);
    const double rs = 1 / std::sqrt(var / static_cast<double>(k) + eps);
    for (int64_t i = 0; i < k; ++i) out[r * k + i] = (x[r * k + i] - mean) * rs;
  }
  return out;
}

TEST(CpuKernelsSpeedPaths, LayerNormRowsSplitAcrossThreadsMatchPlainLoops) {
  const Tensor x = randn({1, 128, 768});
  expect_near(values(F::layer_norm(x, {768})), reference_layer_norm(values(x), 768, 1e-5), 2e-5);
}

TEST(CpuKernelsSpeedPaths, LayerNormKeepsPrecisionOnLongRowsWithALargeOffset) {
  // 1999 elements: several summation blocks and a tail of 15 beyond the lanes.
  for (const double offset : {0.0, 1e4}) {
    const Tensor x = add(mul(randn({6, 1999}), 0.5), offset);
    SCOPED_TRACE(testing::Message() << "offset " << offset);
    // Float inputs near 1e4 are spaced 1e-3 apart: the reference normalizes the
    // same rounded values, so only the kernel's own error remains.
    expect_near(values(F::layer_norm(x, {1999})), reference_layer_norm(values(x), 1999, 1e-5),
                offset == 0 ? 2e-5 : 3e-4);
  }
}

}  // namespace
}  // namespace kiln
