// Autotuning (Mode::MaxAutotune): while an AutotuneScope is alive on a thread,
// a convolution or matmul shape the CUDA backend meets for the first time (or
// met before without tuning) gets its algorithm by timing the candidates the
// library offers instead of taking the heuristics' first; the winner serves
// every later call of that shape, tuned or not, and is remembered on disk.
//
// The cache is a JSON file of {key: choice}, a key naming the library and its
// version, the device and the problem (shape, dtype, layout, alignment):
// $KILN_AUTOTUNE_CACHE, else $XDG_CACHE_HOME/kiln/autotune.json, else
// ~/.cache/kiln/autotune.json. It is written whole to a temporary file and
// renamed over the old one. A cache that cannot be read or written only costs
// tuning again: kiln says so once on stderr and goes on (a malformed file is
// written afresh).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace kiln::backend::autotune {

// Whether this thread tunes new shapes.
bool active() noexcept;

class Scope {
 public:
  Scope() noexcept;
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  bool previous_;
};

// The file the cache lives in (the environment is read at each call).
std::string cache_path();
// The recorded choice for a key, if any.
std::optional<int64_t> lookup(const std::string& key);
// Records a choice and writes the cache file.
void store(const std::string& key, int64_t choice);
// Forgets what was read from the file (tests: the next lookup reads it again).
void forget_loaded();

// How many candidates were timed in this process, for tests and explain.
int64_t candidates_timed() noexcept;
void note_timed(int64_t candidates) noexcept;

}  // namespace kiln::backend::autotune
