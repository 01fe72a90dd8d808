// The compiler's log channels (docs/architecture.md, "Logs"), switched on by KILN_LOGS, a
// comma-separated list of channel names or "all":
//   KILN_LOGS=recompiles,graph_breaks ./my_program
// Lines go to stderr as "[kiln:recompiles] ...".
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace kiln::compiler {

enum class LogChannel {
  kRecompiles,
  kGraphBreaks,
  kGuards,
  kGraphs,
  kPasses,
  kFusion,
  kPerf,
  kCount
};

std::string_view channel_name(LogChannel channel);
bool log_enabled(LogChannel channel);
void log(LogChannel channel, const std::string& message);

// Tests: the channels to enable, and where lines go instead of stderr (an
// empty function restores both to the environment's setting and stderr).
void set_log_capture(const std::string& channels, std::function<void(const std::string&)> sink);

}  // namespace kiln::compiler
