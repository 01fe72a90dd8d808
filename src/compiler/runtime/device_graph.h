// Mode::ReduceOverhead: an executable recorded once as a device graph (a CUDA
// graph) and replayed by one launch per call, so that a call costs the host
// a few copies and one launch instead of a launch per kernel.
//
// The graph first reads its arguments where the first call had them, and
// serves every call whose arguments are there (a server's input buffers,
// reused by the allocator, usually are): no copies, no memory beyond
// eager's. The first call with an argument elsewhere records it anew over
// static copies of the arguments, which then serve every call: a call copies
// its arguments in. Results are written to static buffers, in memory
// private to the graph (backend::DeviceGraph), and copied out into fresh
// tensors on the current stream (on CUDA one launch: the copies are kernels
// of the graph whose addresses the call sets), so results stay valid for as long as
// the caller keeps them, as in eager mode. Results that share memory are
// copied out together, into one fresh storage, so they share it as eager's
// do; a result that is an argument or a captured tensor (or a view of one)
// is that tensor's view, made on the host, as eager's is. Captured tensors (parameters,
// buffers) are read where they are: updates made to them in place are seen;
// a captured tensor that moved to other memory makes the call report kMoved,
// and the caller records anew.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "compiler/runtime/executable.h"
#include "kiln/cuda.h"

namespace kiln::compiler {

class GraphedExecutable {
 public:
  // Why `exe` cannot be replayed as one device graph: empty when it can.
  static std::vector<std::string> obstacles(const Executable& exe);

  // Records `exe` over static arguments laid out as `inputs`. The executable
  // must have run once on such arguments (libraries' plans and handles are
  // made by then). kiln::Error with the reason when the device refuses to
  // record the work.
  GraphedExecutable(std::shared_ptr<const Executable> exe, const TensorList& inputs);
  ~GraphedExecutable();

  enum class Outcome {
    kRan,    // results are set
    kBusy,   // another thread is in a call of this graph: run the executable instead
    kMoved,  // a captured tensor is no longer where the graph reads it: record anew
  };
  Outcome run(const TensorList& inputs, TensorList& results);

  // The device memory the graph's private pool holds: static results (and
  // arguments, once copied), and every buffer the recorded work uses.
  size_t pool_bytes() const;

 private:
  // Records into a new graph whose pool starts as one block of `reserve`
  // bytes (0: grows by segments).
  void record(const TensorList& inputs, size_t reserve);
  // Records, then again into one block of the most the pool held at once.
  void record_compact(const TensorList& inputs);

  // How each result is made at a call: a view of an argument or captured
  // tensor (`source` >= 0, its slot), or of a storage copied out of the
  // graph (`source` < 0: the group it shares with the results of the same
  // static storage).
  struct Result {
    ValueKind kind = ValueKind::kNode;
    int32_t source = -1;  // the argument's or captured tensor's slot
    int64_t offset = 0;   // elements from the source's offset, or from the group's first byte
    int32_t group = -1;
  };
  struct Group {  // results of one static storage: the bytes copied out for them
    const char* first = nullptr;
    size_t nbytes = 0;
  };
  void plan_results();

  std::shared_ptr<const Executable> exe_;
  Device device_;
  std::vector<Result> results_;
  std::vector<Group> groups_;
  // The graph's copy kernels (DeviceGraph::record_copies): arguments and
  // words in, results out; -1: copied around the launch instead.
  int in_slot_ = -1, out_slot_ = -1;
  std::unique_ptr<backend::DeviceGraph> graph_;
  // Whether the graph reads the arguments where they were when recorded
  // (bound_, their first bytes), or static copies of them (static_inputs_).
  bool direct_ = true;
  std::vector<const char*> bound_;
  TensorList static_inputs_, static_outputs_;
  std::vector<const void*> captured_at_;  // where each captured tensor's data was when recorded
  // Random ops: the generators they draw from, the device words (seed, base
  // offset per generator) their kernels read, and each generator's count
  // of counter values per call.
  std::vector<Generator*> generators_;
  Tensor philox_words_;
  std::vector<uint64_t> drawn_;
  std::mutex mutex_;
  // The stream the last call ran on: a call on another stream waits for the
  // work queued there (through done_) before touching the static buffers.
  std::optional<cuda::Event> done_;
  std::optional<cuda::Stream> last_stream_;
};

}  // namespace kiln::compiler
