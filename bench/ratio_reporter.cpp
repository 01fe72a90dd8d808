#include "ratio_reporter.h"

#include <cstdio>
#include <ostream>

namespace kiln::bench {

void RatioReporter::ReportRuns(const std::vector<Run>& runs) {
  ConsoleReporter::ReportRuns(runs);
  for (const auto& run : runs) {
    if (run.run_type != Run::RT_Iteration && run.aggregate_name != "median") continue;
    auto& v = values_[run.run_name.str()];
    for (const auto& [name, counter] : run.counters) v[name] = counter.value;
    v["time_ns"] = run.GetAdjustedRealTime() * (run.time_unit == benchmark::kMicrosecond   ? 1e3
                                                : run.time_unit == benchmark::kMillisecond ? 1e6
                                                                                           : 1.0);
  }
}

double RatioReporter::time_ns(const std::string& name) const {
  auto it = values_.find(name);
  return it == values_.end() ? 0 : it->second.at("time_ns");
}

int RatioReporter::print_ratios(std::ostream& os) const {
  int missed = 0;
  char line[256];
  std::snprintf(line, sizeof line, "\n%-44s %12s %12s %7s %7s\n", "kiln vs bound (same run)",
                "kiln", "bound", "ratio", "target");
  os << line;
  for (const auto& p : pairs_) {
    auto k = values_.find(p.kiln), b = values_.find(p.bound);
    if (k == values_.end() || b == values_.end() || !k->second.count(p.counter) ||
        !b->second.count(p.counter)) {
      continue;  // filtered out of this run
    }
    const double kv = k->second.at(p.counter), bv = b->second.at(p.counter);
    const double ratio = kv / bv;
    const bool ok = ratio >= p.target;
    missed += ok ? 0 : 1;
    std::snprintf(line, sizeof line, "%-44s %12.4g %12.4g %7.2f %6.2f%s\n", p.label.c_str(), kv, bv,
                  ratio, p.target, ok ? "" : "  MISSED");
    os << line;
  }
  return missed;
}

}  // namespace kiln::bench
