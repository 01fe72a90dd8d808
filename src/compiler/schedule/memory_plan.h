// The memory plan of an executable: every storage that a graph's nodes make
// and that does not leave the graph gets an offset in one arena per device,
// and storages whose lifetimes do not overlap share bytes
// (docs/architecture.md, "Memory plan and workspaces").
//
// A storage lives from the step that makes it to the last step that reads or
// writes any value in it (views included); one that only the inside of a
// fused step touches gets no bytes (compiler/schedule/schedule.h). A step's
// workspace (the bytes its kernel asks for while it runs, ops/workspace.h)
// lives for that step only.
// Storages that hold a graph output (or a view of one) leave the graph and
// are allocated on their own; inputs, captured values and constants are the
// caller's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "compiler/ir/graph.h"
#include "compiler/schedule/schedule.h"

namespace kiln::compiler {

struct PlannedStorage {
  bool in_arena = false;  // false: the caller's, or allocated on its own (an output)
  size_t offset = 0;      // in the arena of its device
  size_t nbytes = 0;
  int32_t first = -1, last = -1;  // the steps that make it and use it last
};

struct MemoryPlan {
  std::vector<PlannedStorage> storages;  // by graph storage id
  // One arena per device the graph uses: its device and size.
  struct Arena {
    Device device;
    size_t nbytes = 0;
  };
  std::vector<Arena> arenas;
  std::vector<int32_t> arena_of;  // by storage id: index into arenas (-1 when not in an arena)
  // By step (empty when no workspaces were given): its workspace, and the
  // index of its arena (-1 for none).
  std::vector<PlannedStorage> workspaces;
  std::vector<int32_t> workspace_arena;
  size_t planned_bytes = 0;  // the sum of the planned sizes, before sharing
};

// Offsets aligned to `alignment` bytes (64 on the CPU, 256 on CUDA devices:
// what the eager allocators give, so kernels see the same alignment).
// Lifetimes count in the schedule's steps. `workspaces`, when given, holds
// each step's workspace bytes (0: none), on the device of its last node's
// first output.
MemoryPlan plan_memory(const Graph& graph, const Schedule& schedule,
                       std::span<const size_t> workspaces = {});
// The same over one step per node (unfused_schedule).
MemoryPlan plan_memory(const Graph& graph, std::span<const size_t> workspaces = {});

// Checks that no two storages or workspaces alive at one time overlap in an
// arena; throws kiln::Error naming them. Tests run it on every plan.
void check_plan(const Graph& graph, const Schedule& schedule, const MemoryPlan& plan);
void check_plan(const Graph& graph, const MemoryPlan& plan);

}  // namespace kiln::compiler
