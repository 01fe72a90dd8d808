// kiln bench's progress on stderr: on a terminal one bar redrawn in place
// with the stage and an estimate of the time left; otherwise a plain line per
// stage.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

class ProgressBar {
 public:
  explicit ProgressBar(bool enabled) : enabled_(enabled), tty_(isatty(STDERR_FILENO) != 0) {}

  // fraction: of the whole run, 0 to 1.
  void update(const std::string& stage, double fraction) {
    if (!enabled_) return;
    const auto now = std::chrono::steady_clock::now();
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    if (!tty_) {
      if (stage != last_stage_)
        std::fprintf(stderr, "[%3.0f%%] %s\n", 100 * fraction, stage.c_str());
      last_stage_ = stage;
      return;
    }
    if (stage == last_stage_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_stage_ = stage;
    last_draw_ = now;
    constexpr int kWidth = 28;
    const int filled = static_cast<int>(fraction * kWidth + 0.5);
    std::string bar(static_cast<size_t>(filled), '#');
    bar.append(static_cast<size_t>(kWidth - filled), '.');
    std::string eta = "";
    if (fraction > 0.02 && fraction < 1) {
      const int left = static_cast<int>(elapsed * (1 - fraction) / fraction + 0.5);
      char buf[32];
      std::snprintf(buf, sizeof buf, "  ETA %d:%02d", left / 60, left % 60);
      eta = buf;
    }
    std::fprintf(stderr, "\r\033[K[%s] %3.0f%%  %s%s", bar.c_str(), 100 * fraction, stage.c_str(),
                 eta.c_str());
    std::fflush(stderr);
    drawn_ = true;
  }

  // Clears the bar (a terminal) before the results are printed.
  void finish() {
    if (enabled_ && tty_ && drawn_) std::fprintf(stderr, "\r\033[K");
    drawn_ = false;
  }

 private:
  bool enabled_;
  bool tty_;
  bool drawn_ = false;
  std::string last_stage_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_draw_{};
};
