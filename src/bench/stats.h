// Latency statistics of kiln bench: percentiles by linear interpolation
// between closest ranks (numpy's default), as bench/torch/bench_torch.py
// computes PyTorch's.
#pragma once

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "kiln/bench.h"

namespace kiln::bench {

// The p-th percentile (0 to 100) of sorted, non-empty samples.
inline double percentile(const std::vector<double>& sorted, double p) {
  const double rank = p / 100.0 * static_cast<double>(sorted.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (rank - static_cast<double>(lo)) * (sorted[hi] - sorted[lo]);
}

// Every sample counts: none is dropped as an outlier.
inline Latency latency_of(std::vector<double> samples) {
  Latency l;
  if (samples.empty()) return l;
  std::sort(samples.begin(), samples.end());
  const double n = static_cast<double>(samples.size());
  l.samples = static_cast<int64_t>(samples.size());
  l.min = samples.front();
  l.max = samples.back();
  l.median = percentile(samples, 50);
  l.p10 = percentile(samples, 10);
  l.p90 = percentile(samples, 90);
  l.p99 = percentile(samples, 99);
  l.mean = std::accumulate(samples.begin(), samples.end(), 0.0) / n;
  double sq = 0;
  for (double s : samples) sq += (s - l.mean) * (s - l.mean);
  l.stddev = std::sqrt(sq / n);
  return l;
}

}  // namespace kiln::bench
