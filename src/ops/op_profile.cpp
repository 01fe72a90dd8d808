#include "ops/op_profile.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::ops {
namespace {

thread_local int t_depth = 0;

struct Totals {
  std::mutex mutex;
  std::vector<double> us = std::vector<double>(static_cast<size_t>(kNumOps), 0.0);
  std::vector<int64_t> calls = std::vector<int64_t>(static_cast<size_t>(kNumOps), 0);
  // The names, copied now: the op table may be destroyed before this
  // report, which prints at exit.
  std::vector<std::string> names;

  Totals() {
    for (const OpSchema& schema : all_op_schemas()) names.emplace_back(schema.name);
  }
  ~Totals() {
    std::vector<size_t> order;
    double all = 0;
    int64_t all_calls = 0;
    for (size_t i = 0; i < us.size(); ++i) {
      if (calls[i] == 0) continue;
      order.push_back(i);
      all += us[i];
      all_calls += calls[i];
    }
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return us[a] > us[b]; });
    std::fprintf(stderr, "kiln op profile (host time of outermost dispatches)\n%-32s %10s %12s %10s\n",
                 "op", "calls", "total ms", "us/call");
    for (size_t i : order) {
      std::fprintf(stderr, "%-32s %10lld %12.3f %10.2f\n",
                   names[i].c_str(),
                   static_cast<long long>(calls[i]), us[i] / 1000, us[i] / static_cast<double>(calls[i]));
    }
    std::fprintf(stderr, "%-32s %10lld %12.3f\n", "all", static_cast<long long>(all_calls), all / 1000);
  }
};

Totals& totals() {
  static Totals t;
  return t;
}

}  // namespace

bool OpProfileScope::enabled() noexcept {
  static const bool on = [] {
    const char* v = std::getenv("KILN_PROFILE_OPS");
    return v && *v && std::string_view(v) != "0";
  }();
  return on;
}

void OpProfileScope::start(OpId op) noexcept {
  active_ = true;
  outermost_ = t_depth++ == 0;
  op_ = op;
  if (outermost_) {
    totals();  // constructed before first use, destroyed (and printed) at exit
    begin_ = std::chrono::steady_clock::now();
  }
}

void OpProfileScope::stop() noexcept {
  --t_depth;
  if (!outermost_) return;
  const double us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - begin_).count();
  Totals& t = totals();
  std::lock_guard<std::mutex> lock(t.mutex);
  t.us[static_cast<size_t>(op_)] += us;
  ++t.calls[static_cast<size_t>(op_)];
}

}  // namespace kiln::ops
