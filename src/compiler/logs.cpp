#include "compiler/logs.h"

#include <array>
#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace kiln::compiler {
namespace {

constexpr std::array<std::string_view, static_cast<size_t>(LogChannel::kCount)> kNames = {
    "recompiles", "graph_breaks", "guards", "graphs", "passes", "fusion", "perf"};

struct LogState {
  std::mutex mutex;
  std::array<bool, kNames.size()> enabled{};
  std::function<void(const std::string&)> sink;
};

void parse(const std::string& spec, std::array<bool, kNames.size()>& enabled) {
  enabled.fill(false);
  size_t start = 0;
  while (start <= spec.size()) {
    const size_t end = std::min(spec.find(',', start), spec.size());
    const std::string_view item = std::string_view(spec).substr(start, end - start);
    for (size_t i = 0; i < kNames.size(); ++i) {
      if (item == kNames[i] || item == "all") enabled[i] = true;
    }
    start = end + 1;
  }
}

LogState& state() {
  static LogState* s = [] {
    auto* st = new LogState();  // never destroyed: logs may come from static destructors
    const char* env = std::getenv("KILN_LOGS");
    parse(env ? env : "", st->enabled);
    return st;
  }();
  return *s;
}

}  // namespace

std::string_view channel_name(LogChannel channel) { return kNames[static_cast<size_t>(channel)]; }

bool log_enabled(LogChannel channel) {
  LogState& s = state();
  std::lock_guard lock(s.mutex);
  return s.enabled[static_cast<size_t>(channel)];
}

void log(LogChannel channel, const std::string& message) {
  LogState& s = state();
  std::lock_guard lock(s.mutex);
  if (!s.enabled[static_cast<size_t>(channel)]) return;
  const std::string line = "[kiln:" + std::string(channel_name(channel)) + "] " + message;
  if (s.sink) {
    s.sink(line);
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
}

void set_log_capture(const std::string& channels, std::function<void(const std::string&)> sink) {
  LogState& s = state();
  std::lock_guard lock(s.mutex);
  if (sink) {
    parse(channels, s.enabled);
  } else {
    const char* env = std::getenv("KILN_LOGS");
    parse(env ? env : "", s.enabled);
  }
  s.sink = std::move(sink);
}

}  // namespace kiln::compiler
