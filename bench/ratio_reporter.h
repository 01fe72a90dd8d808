// Prints Google Benchmark's usual table, then each kiln benchmark as a ratio
// against its bound measured in the same run (the acceptance figures).
#pragma once

#include <benchmark/benchmark.h>

#include <map>
#include <string>
#include <vector>

namespace kiln::bench {

struct RatioPair {
  std::string label;    // what is compared
  std::string kiln;     // benchmark name of the kiln side
  std::string bound;    // benchmark name of the bound
  std::string counter;  // counter compared ("bytes_per_second", "GFLOP/s", ...)
  double target;        // required ratio kiln / bound (higher is better)
};

class RatioReporter : public benchmark::ConsoleReporter {
 public:
  explicit RatioReporter(std::vector<RatioPair> pairs) : pairs_(std::move(pairs)) {}
  void ReportRuns(const std::vector<Run>& runs) override;
  // The ratio table; returns how many pairs missed their target.
  int print_ratios(std::ostream& os) const;
  // Mean real time per iteration in nanoseconds, for benchmarks reported as times.
  double time_ns(const std::string& name) const;

 private:
  std::vector<RatioPair> pairs_;
  std::map<std::string, std::map<std::string, double>> values_;
};

}  // namespace kiln::bench
