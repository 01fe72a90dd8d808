// The state of a compiled function (kiln::compile's Core), shared by its
// cache and calls (compile.cpp) and its report (core_explain.cpp).
#pragma once

#include <atomic>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "compiler/capture/capture.h"
#include "compiler/capture/guard_key.h"
#include "compiler/logs.h"
#include "compiler/passes/folded_constants.h"
#include "compiler/runtime/check.h"
#include "compiler/runtime/segment.h"
#include "kiln/compile.h"

namespace kiln::compiler::internal {

// A graph break's tree keeps at most this many values per read; a value
// read past it runs the rest of its call from a trace, unkept.
constexpr size_t kMaxValuesPerRead = 256;
// A read that has given this many values is said once: each new value
// traces the function again.
constexpr size_t kWarnValuesPerRead = 16;

// One call's way through an entry's graphs.
struct Walk {
  TensorList env;                 // the arguments, then each graph's outputs
  std::vector<size_t> offsets;    // where each graph's outputs start in env
  std::vector<std::string> keys;  // the bytes read after each graph
  std::string last_value;         // the last of them, printed
};

struct Core::Impl {
  CompileOptions options;
  std::mutex mutex;
  std::unordered_map<std::vector<int64_t>, std::shared_ptr<Entry>, KeyHash> cache;
  CompileStats stats;
  std::vector<std::string> recompiles, graph_breaks;
  bool warned_limit = false;
  bool said_autograd = false;  // the slower path for autograd was logged
  // A graph was dumped (KILN_DUMP_DIR) since the function's explain() was.
  std::atomic<bool> dump_pending{false};
  uint64_t epoch = 0;
  // The constants its graphs' passes folded, shared by them all (a frozen
  // model's weights at its several sizes); made anew by compiler::reset().
  std::shared_ptr<FoldedConstants> folded = std::make_shared<FoldedConstants>();
  int64_t compiling_traces = 0;  // traces that compiled a graph: what recompile_limit bounds
  int64_t graphs = 0;            // graphs compiled, which numbers them
  // Dynamic dims: by tensor argument, the dims left out of family keys; how
  // each became dynamic; the families by key.
  std::vector<uint64_t> dynamic;
  std::vector<std::string> dynamic_reasons;
  std::unordered_map<std::vector<int64_t>, std::shared_ptr<Family>, KeyHash> families;

  // A missed key's family (null when none of its dims is dynamic): makes the
  // dims marked, or (Dynamic::Auto) those whose sizes changed since a kept
  // key that differs only in sizes, dynamic first. Under mutex.
  // `shapeless`: the call's key with every size and stride left out.
  std::shared_ptr<Family> family_of(const FlatArgs& args, const std::vector<int64_t>& shapeless,
                                    const std::vector<std::string>& names, bool& known);
  CompileStats current_stats() const;  // under mutex
  int64_t stance_calls_logged = 0;     // calls the stance ran eagerly, logged once (under mutex)
  uint64_t tick = 0;                   // counts lookups: an entry's last_used (under mutex)
  // Lets go of the least recently used keys (not `keep`) until the cache is
  // within its bounds. Under mutex.
  void evict(const std::vector<int64_t>& keep);

  // A read that keeps giving new values: each traces the function again.
  void warn_values(const Segment& reader) {  // under mutex
    const std::string message = detail::str_cat(
        options.name, ": graph ", reader.order, " ends at a read that has given ",
        kWarnValuesPerRead, " different values (", reader.read_description,
        "); each new value traces the function again (stats().new_value_traces). Where the "
        "program only compares the value, compare it on the device and read the outcome, which "
        "has two values: `if ((x > t).item<bool>())`, not `if (x.item<float>() > t)`");
    std::fprintf(stderr, "kiln: %s\n", message.c_str());
    log(LogChannel::kGraphBreaks, message);
  }

  void warn_limit() {  // under mutex
    if (warned_limit) return;
    warned_limit = true;
    std::fprintf(
        stderr,
        "kiln: %s reached its recompile limit (%d traces); calls with new guards run eagerly "
        "(CompileOptions::recompile_limit; KILN_LOGS=recompiles shows why each trace was made)\n",
        options.name.c_str(), options.recompile_limit);
  }

  // A call: served by the cache, traced, or run eagerly (Core::call, which
  // then writes the dumps of KILN_DUMP_DIR).
  TensorList call(const FlatArgs& args, const Runner& run, std::vector<int64_t>& structure);
  std::shared_ptr<Segment> compile_segment(
      Trace traced, TraceSignature signature, double trace_ms, bool keep,
      const std::function<Tensor(const Tensor&)>& grad_at_start);
  // Lowers a kept segment (its executable, where it records no autograd) and
  // numbers it; `inputs`: the tensors it reads.
  // `symbolic`: the family's program for all sizes, bound to seg's sizes.
  void lower(Segment& seg, const TensorList& inputs, const std::shared_ptr<Family>& family,
             uint64_t program, const SymbolicProgram* symbolic = nullptr);
  // The generic trace's program for all sizes, made at its first call (null
  // where it cannot be made, or the backend runs no passes); `build_ms`:
  // the time this call took to make it (0 where it was made before).
  std::shared_ptr<const SymbolicProgram> program_of(const Family::Generic& generic,
                                                    double& build_ms);
  // A graph for symbol values `values` bound from the generic trace's
  // program; null, with why, where its guards do not admit them.
  std::shared_ptr<Segment> bound_segment(const Family::Generic& generic,
                                         std::span<const int64_t> values, const TensorList& inputs,
                                         const std::shared_ptr<Family>& family, std::string& why);
  // How the latest new size of a dynamic dim got its graphs (explain()).
  std::string sizes_note;
  // The latest dynamic program's symbolic shapes (explain()).
  std::string symbolic_text;
  std::vector<std::string> symbolic_guards;
  // A call with new sizes of a family's dynamic dims, served by a graph made
  // from the family's generic trace (retrace), the function not called.
  // Null, with the reason in `why`, where that cannot be done.
  std::optional<TensorList> retraced(Entry& entry, const Family::Generic& generic,
                                     const FlatArgs& args, std::vector<int64_t>& structure,
                                     CallState* state, std::vector<std::shared_ptr<Segment>>& path,
                                     std::string& why);
  // A first graph of the entry kept for other host values whose guards hold
  // now (made the root), or null.
  std::shared_ptr<Segment> other_root(Entry& entry);
  // Makes `seg` the entry's first graph; the one it replaces is kept for its
  // host values when only a host guard failed. Under mutex.
  void set_root(Entry& entry, const std::shared_ptr<Segment>& seg);
  // A call of a key seen before, from its first graph (root).
  TensorList serve(Entry& entry, std::shared_ptr<Segment> root, const FlatArgs& args,
                   const Runner& run, std::vector<int64_t>& structure, CallState* state,
                   std::vector<std::shared_ptr<Segment>>& path);
  TensorList trace(Entry& entry, Walk& walk, const FlatArgs& args, const Runner& run,
                   std::vector<int64_t>& structure, CallState* state,
                   std::vector<std::shared_ptr<Segment>>& path, const std::string& reason,
                   bool new_key, bool instance = false);
};

// The distinct graphs of an entry's trees.
std::vector<const Segment*> segments_of(const Entry& e);

}  // namespace kiln::compiler::internal
