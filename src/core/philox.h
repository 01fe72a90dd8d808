// Philox 4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
// SC 2011): a counter-based generator, so value i of a random op depends only on
// (seed, offset + i). Every backend and thread count gives the same numbers.
#pragma once

#include <cmath>
#include <cstdint>
#if defined(__AVX512F__) && !defined(__CUDACC__)
#include <immintrin.h>
#endif

#if defined(__CUDACC__)
#define KILN_HOST_DEVICE __host__ __device__
#else
#define KILN_HOST_DEVICE
#endif

namespace kiln::philox {

struct Block {
  uint32_t v[4];
};

// One round on a counter (c0..c3) under the round's key (k0, k1).
KILN_HOST_DEVICE inline void one_round(uint32_t& c0, uint32_t& c1, uint32_t& c2, uint32_t& c3,
                                       uint32_t k0, uint32_t k1) {
  const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c0;
  const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c2;
  const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
  const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
  c1 = static_cast<uint32_t>(p1);
  c3 = static_cast<uint32_t>(p0);
  c0 = n0;
  c2 = n2;
}

// The key of the next round.
KILN_HOST_DEVICE inline void bump(uint32_t& k0, uint32_t& k1) {
  k0 += 0x9E3779B9u;
  k1 += 0xBB67AE85u;
}

KILN_HOST_DEVICE inline Block block(uint64_t seed, uint64_t counter) {
  uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32);
  uint32_t c2 = 0, c3 = 0;
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int r = 0; r < 10; ++r, bump(k0, k1)) one_round(c0, c1, c2, c3, k0, k1);
  return Block{{c0, c1, c2, c3}};
}

#if !defined(__CUDACC__)
#if defined(__AVX512F__)
// blocks<16> in 512-bit vectors, counter j in lane j: a round's 32 x 32 ->
// 64-bit products by vpmuludq on the even and the odd lanes (GCC 12
// vectorizes the portable loop below with 64 x 64-bit multiplies, about 4x
// slower). The same integers, so the same bits.
inline void blocks16_avx512(uint64_t seed, uint64_t first, uint32_t* out) {
  const auto splat = [](uint32_t v) { return _mm512_set1_epi32(static_cast<int>(v)); };
  const __m512i low = splat(static_cast<uint32_t>(first));
  __m512i c0 = _mm512_add_epi32(
      low, _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  const __m512i high = splat(static_cast<uint32_t>(first >> 32));
  // The high word, plus one where the low word wrapped.
  __m512i c1 = _mm512_mask_add_epi32(high, _mm512_cmplt_epu32_mask(c0, low), high, splat(1));
  __m512i c2 = _mm512_setzero_si512(), c3 = _mm512_setzero_si512();
  const __m512i m0 = splat(0xD2511F53u), m1 = splat(0xCD9E8D57u);
  const auto high_word = [](__m512i a, __m512i m) {
    const __m512i even = _mm512_srli_epi64(_mm512_mul_epu32(a, m), 32);
    const __m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), m);
    return _mm512_mask_blend_epi32(0xAAAA, even, odd);
  };
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int r = 0; r < 10; ++r, bump(k0, k1)) {
    const __m512i h0 = high_word(c0, m0), l0 = _mm512_mullo_epi32(c0, m0);
    const __m512i h1 = high_word(c2, m1), l1 = _mm512_mullo_epi32(c2, m1);
    c0 = _mm512_xor_si512(_mm512_xor_si512(h1, c1), splat(k0));
    c2 = _mm512_xor_si512(_mm512_xor_si512(h0, c3), splat(k1));
    c1 = l1;
    c3 = l0;
  }
  // Interleaved as out[4 j + word]: x_t's 128-bit lane q is block 4 q + t.
  const __m512i a = _mm512_unpacklo_epi32(c0, c1), b = _mm512_unpackhi_epi32(c0, c1);
  const __m512i c = _mm512_unpacklo_epi32(c2, c3), d = _mm512_unpackhi_epi32(c2, c3);
  const __m512i x[4] = {_mm512_unpacklo_epi64(a, c), _mm512_unpackhi_epi64(a, c),
                        _mm512_unpacklo_epi64(b, d), _mm512_unpackhi_epi64(b, d)};
  for (int t = 0; t < 4; ++t) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 4 * t), _mm512_extracti32x4_epi32(x[t], 0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 4 * (4 + t)),
                     _mm512_extracti32x4_epi32(x[t], 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 4 * (8 + t)),
                     _mm512_extracti32x4_epi32(x[t], 2));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 4 * (12 + t)),
                     _mm512_extracti32x4_epi32(x[t], 3));
  }
}
#endif

// The N blocks of counters first, first + 1, ... into out[4 j + lane], each
// as block() computes it, the N counters' rounds side by side so that the
// compiler vectorizes them (a dropout's mask 4 N elements at a time).
template <int N>
inline void blocks(uint64_t seed, uint64_t first, uint32_t* out) {
#if defined(__AVX512F__)
  if constexpr (N == 16) {
    blocks16_avx512(seed, first, out);
    return;
  }
#endif
  uint32_t c0[N], c1[N], c2[N], c3[N];
  for (int j = 0; j < N; ++j) {
    const uint64_t counter = first + static_cast<uint64_t>(j);
    c0[j] = static_cast<uint32_t>(counter);
    c1[j] = static_cast<uint32_t>(counter >> 32);
    c2[j] = 0;
    c3[j] = 0;
  }
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  // Unrolled, the loops go scalar (GCC 12, -O3); rolled, a round is N lanes wide.
#pragma GCC unroll 1
  for (int r = 0; r < 10; ++r, bump(k0, k1)) {
#pragma GCC unroll 1
    for (int j = 0; j < N; ++j) one_round(c0[j], c1[j], c2[j], c3[j], k0, k1);
  }
  for (int j = 0; j < N; ++j) {
    out[4 * j] = c0[j];
    out[4 * j + 1] = c1[j];
    out[4 * j + 2] = c2[j];
    out[4 * j + 3] = c3[j];
  }
}

// Values first, first + 1, ..., first + n - 1 of the stream (u32) into out:
// whole spans of blocks() from a counter divisible by four, and the span
// around an unaligned start or a short end computed whole and copied from.
// A dropout's bits, in the library kernel and in generated kernels.
inline void u32s(uint64_t seed, uint64_t first, int64_t n, uint32_t* out) {
  constexpr int kBlocks = 16;
  constexpr int64_t kSpan = 4 * kBlocks;
  uint32_t part[kSpan];
  int64_t i = 0;
  while (i < n) {
    const uint64_t counter = first + static_cast<uint64_t>(i);
    const auto lane = static_cast<int64_t>(counter & 3);
    // The last span of the index space: blocks() would count past its last
    // block where the stream's indices wrap to 0, so value by value there.
    if ((counter >> 2) > (~uint64_t{0} >> 2) - kBlocks) {
      out[i++] = block(seed, counter >> 2).v[lane];
      continue;
    }
    if (lane == 0 && n - i >= kSpan) {
      blocks<kBlocks>(seed, counter >> 2, out + i);
      i += kSpan;
      continue;
    }
    blocks<kBlocks>(seed, counter >> 2, part);
    const int64_t take = n - i < kSpan - lane ? n - i : kSpan - lane;
    for (int64_t k = 0; k < take; ++k) out[i + k] = part[lane + k];
    i += take;
  }
}
#endif

// The index-th 32-bit value of the stream.
KILN_HOST_DEVICE inline uint32_t u32(uint64_t seed, uint64_t index) {
  return block(seed, index >> 2).v[index & 3];
}

// A 64-bit value from the two 32-bit values at 2*index and 2*index + 1.
KILN_HOST_DEVICE inline uint64_t u64(uint64_t seed, uint64_t index) {
  const Block b = block(seed, index >> 1);
  const int lane = static_cast<int>(index & 1) * 2;
  return (static_cast<uint64_t>(b.v[lane]) << 32) | b.v[lane + 1];
}

// Uniform in [0, 1): 24 bits for float, 53 for double.
KILN_HOST_DEVICE inline float uniform_f32(uint64_t seed, uint64_t index) {
  return static_cast<float>(u32(seed, index) >> 8) * 5.9604644775390625e-8f;
}
KILN_HOST_DEVICE inline double uniform_f64(uint64_t seed, uint64_t index) {
  return static_cast<double>(u64(seed, index) >> 11) * 1.1102230246251565e-16;
}

// Standard normal by Box-Muller over the uniform pair (2k, 2k+1): even indices
// take the cosine branch, odd ones the sine branch.
KILN_HOST_DEVICE inline double normal(uint64_t seed, uint64_t index) {
  const uint64_t pair = index & ~uint64_t{1};
  const double u1 = 1.0 - uniform_f64(seed, pair);  // (0, 1]: log is finite
  const double u2 = uniform_f64(seed, pair + 1);
  const double r = std::sqrt(-2.0 * std::log(u1));
  const double angle = 6.283185307179586 * u2;
  return (index & 1) ? r * std::sin(angle) : r * std::cos(angle);
}

}  // namespace kiln::philox
