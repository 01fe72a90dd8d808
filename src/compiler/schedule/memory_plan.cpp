#include "compiler/schedule/memory_plan.h"

#include <algorithm>
#include <numeric>
#include <string>
#include <utility>

#include "core/checked_size.h"

namespace kiln::compiler {
namespace {

size_t alignment_for(Device d) { return d.is_cuda() ? 256 : 64; }

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

bool overlap_in_time(const PlannedStorage& a, const PlannedStorage& b) {
  return a.first <= b.last && b.first <= a.last;
}

}  // namespace

MemoryPlan plan_memory(const Graph& g, std::span<const size_t> workspaces) {
  return plan_memory(g, unfused_schedule(g), workspaces);
}

void check_plan(const Graph& g, const MemoryPlan& plan) {
  check_plan(g, unfused_schedule(g), plan);
}

MemoryPlan plan_memory(const Graph& g, const Schedule& schedule,
                       std::span<const size_t> workspaces) {
  MemoryPlan plan;
  const auto step_of = [&](int32_t node) { return schedule.step_of[static_cast<size_t>(node)]; };
  const size_t num_steps = schedule.steps.size();
  const auto& storages = g.storages();
  const size_t num_storages = storages.size();
  plan.storages.resize(num_storages);
  plan.arena_of.assign(num_storages, -1);
  // Lifetimes, in steps: made by a step, used until the last step touching
  // any of its values. A storage only a fused step's inside touches gets none.
  const std::vector<bool> escapes = returned_storages(g);
  for (size_t s = 0; s < num_storages; ++s) {
    const Value& root = g.value(storages[s].root);
    PlannedStorage& p = plan.storages[s];
    p.nbytes = static_cast<size_t>(storages[s].nbytes.hint());
    if (root.kind == ValueKind::kNode && !escapes[s] && schedule.materialized[s]) {
      p.in_arena = true;
      p.first = p.last = step_of(root.producer);
    }
  }
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const Node& n = g.nodes()[i];
    auto touch = [&](ValueId id) {
      if (id == kNoValue) return;
      PlannedStorage& p = plan.storages[static_cast<size_t>(g.value(id).storage)];
      if (p.in_arena) p.last = std::max(p.last, step_of(static_cast<int32_t>(i)));
    };
    for (ValueId in : n.inputs) touch(in);
    touch(n.target);
    for (ValueId out : n.outputs) touch(out);
  }
  // Workspaces live for their step; with the storages, one list of items:
  // storage s is item s, step i's workspace item num_storages + i.
  std::vector<Device> device_of(num_storages);
  for (size_t s = 0; s < num_storages; ++s) device_of[s] = storages[s].device;
  if (!workspaces.empty()) {
    plan.workspaces.resize(num_steps);
    plan.workspace_arena.assign(num_steps, -1);
    device_of.resize(num_storages + num_steps);
    for (size_t i = 0; i < num_steps && i < workspaces.size(); ++i) {
      const Node& n = g.nodes()[static_cast<size_t>(schedule.steps[i].nodes.back())];
      const ValueId on = n.outputs.empty() ? n.target : n.outputs[0];
      if (workspaces[i] == 0 || on == kNoValue) continue;
      PlannedStorage& w = plan.workspaces[i];
      w.in_arena = true;
      w.nbytes = workspaces[i];
      w.first = w.last = static_cast<int32_t>(i);
      device_of[num_storages + i] = g.value(on).device;
    }
  }
  auto item = [&](size_t k) -> PlannedStorage& {
    return k < num_storages ? plan.storages[k] : plan.workspaces[k - num_storages];
  };
  auto arena_slot = [&](size_t k) -> int32_t& {
    return k < num_storages ? plan.arena_of[k] : plan.workspace_arena[k - num_storages];
  };
  std::vector<size_t> order;
  for (size_t k = 0; k < device_of.size(); ++k)
    if (item(k).in_arena) order.push_back(k);
  // Per device: the largest first, each at the lowest offset that clears
  // every placed storage alive at the same time.
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return item(a).nbytes > item(b).nbytes; });
  std::vector<std::vector<size_t>> placed;  // by arena
  for (size_t k : order) {
    PlannedStorage& p = item(k);
    const Device device = device_of[k];
    int32_t arena = -1;
    for (size_t a = 0; a < plan.arenas.size(); ++a)
      if (plan.arenas[a].device == device) arena = static_cast<int32_t>(a);
    if (arena < 0) {
      plan.arenas.push_back({device, 0});
      placed.emplace_back();
      arena = static_cast<int32_t>(plan.arenas.size() - 1);
    }
    const size_t align = alignment_for(device);
    const size_t size = round_up(std::max<size_t>(p.nbytes, 1), align);
    // Busy ranges at this storage's time, by offset.
    std::vector<std::pair<size_t, size_t>> busy;
    for (size_t other : placed[static_cast<size_t>(arena)]) {
      const PlannedStorage& q = item(other);
      if (overlap_in_time(p, q))
        busy.emplace_back(q.offset, q.offset + round_up(std::max<size_t>(q.nbytes, 1), align));
    }
    std::sort(busy.begin(), busy.end());
    size_t offset = 0;
    for (const auto& [begin, end] : busy) {
      if (offset + size <= begin) break;
      offset = std::max(offset, end);
    }
    // Each storage and every arena so far is at most kMaxTensorBytes, so the sum
    // cannot wrap; past that bound the arena could never be allocated.
    check_allocation(offset + size, "compile: the memory plan of the graph's live tensors");
    p.offset = offset;
    arena_slot(k) = arena;
    plan.arenas[static_cast<size_t>(arena)].nbytes =
        std::max(plan.arenas[static_cast<size_t>(arena)].nbytes, offset + size);
    plan.planned_bytes += size;
    placed[static_cast<size_t>(arena)].push_back(k);
  }
  return plan;
}

// An oracle that shares nothing with the planner's lifetimes: it replays the
// schedule over the arenas' bytes. Each step first reads its inputs (and an
// in-place target), whose bytes must still hold what their storage last
// wrote; then its workspace and its outputs take their bytes, which must not
// be bytes the step is reading. A lifetime the planner got wrong shows up as
// a read of bytes another storage or a workspace took since.
void check_plan(const Graph& g, const Schedule& schedule, const MemoryPlan& plan) {
  struct Claim {
    int32_t arena;
    size_t begin, end;
    std::string owner;  // "storage s" or "the workspace of node i"
    std::string step;
  };
  std::vector<Claim> claims;                                  // in the order the steps make them
  std::vector<int64_t> last_claim(plan.storages.size(), -1);  // index into claims
  auto bytes_of = [&](const PlannedStorage& p, int32_t arena, const std::string& name) {
    if (arena < 0 || static_cast<size_t>(arena) >= plan.arenas.size() ||
        p.offset + p.nbytes > plan.arenas[static_cast<size_t>(arena)].nbytes) {
      throw Error(detail::str_cat("compiler: memory plan: ", name, " ends past its arena"));
    }
    return std::pair<size_t, size_t>{p.offset, p.offset + p.nbytes};
  };
  auto in_arena = [&](ValueId id) {
    return id != kNoValue && plan.storages[static_cast<size_t>(g.value(id).storage)].in_arena;
  };
  auto storage_of = [&](ValueId id) { return static_cast<size_t>(g.value(id).storage); };
  auto name_of = [](size_t s) { return detail::str_cat("storage ", s); };
  auto claim = [&](size_t s, const std::string& step) {
    const auto [b, e] = bytes_of(plan.storages[s], plan.arena_of[s], name_of(s));
    last_claim[s] = static_cast<int64_t>(claims.size());
    claims.push_back({plan.arena_of[s], b, e, name_of(s), step});
  };
  auto overlaps = [](const Claim& c, int32_t arena, size_t b, size_t e) {
    return c.arena == arena && c.begin < e && b < c.end && b < e && c.begin < c.end;
  };
  // Storage s, read by a step, still holds its own bytes.
  auto check_read = [&](size_t s, const std::string& step) {
    const auto [b, e] = bytes_of(plan.storages[s], plan.arena_of[s], name_of(s));
    if (last_claim[s] < 0) {
      throw Error(detail::str_cat("compiler: memory plan: ", name_of(s), " is read at ", step,
                                  " before any node writes it"));
    }
    for (size_t k = static_cast<size_t>(last_claim[s]) + 1; k < claims.size(); ++k) {
      if (claims[k].owner != name_of(s) && overlaps(claims[k], plan.arena_of[s], b, e)) {
        throw Error(detail::str_cat("compiler: memory plan: ", name_of(s), " is read at ", step,
                                    " but ", claims[k].owner, " took bytes of it at ",
                                    claims[k].step, " (they overlap)"));
      }
    }
  };
  for (size_t i = 0; i < schedule.steps.size(); ++i) {
    const ScheduledStep& st = schedule.steps[i];
    const std::string step = st.fused()
                                 ? detail::str_cat("the fused step ", schedule.describe(g, i))
                                 : detail::str_cat("node ", st.nodes[0]);
    std::vector<size_t> read;
    if (st.fused()) {
      for (ValueId in : st.inputs)
        if (in_arena(in)) read.push_back(storage_of(in));
    } else {
      const Node& n = g.nodes()[static_cast<size_t>(st.nodes[0])];
      for (ValueId in : n.inputs)
        if (in_arena(in)) read.push_back(storage_of(in));
      if (in_arena(n.target)) read.push_back(storage_of(n.target));
    }
    for (size_t s : read) check_read(s, step);
    // What the step writes: its workspace, new storages, an in-place target.
    const size_t first_write = claims.size();
    if (i < plan.workspaces.size() && plan.workspaces[i].in_arena) {
      const std::string name = detail::str_cat("the workspace of ", step);
      const auto [b, e] = bytes_of(plan.workspaces[i], plan.workspace_arena[i], name);
      claims.push_back({plan.workspace_arena[i], b, e, name, step});
    }
    if (st.fused()) {
      for (ValueId out : schedule.results(g, i))
        if (in_arena(out)) claim(storage_of(out), step);
    } else {
      const Node& n = g.nodes()[static_cast<size_t>(st.nodes[0])];
      for (ValueId out : n.outputs) {
        if (!in_arena(out)) continue;
        const size_t s = storage_of(out);
        if (g.storages()[s].root == out || (out == n.outputs[0] && n.inplace())) claim(s, step);
      }
    }
    for (size_t k = first_write; k < claims.size(); ++k) {
      for (size_t s : read) {
        const auto [b, e] = bytes_of(plan.storages[s], plan.arena_of[s], name_of(s));
        if (claims[k].owner != name_of(s) && overlaps(claims[k], plan.arena_of[s], b, e)) {
          throw Error(detail::str_cat("compiler: memory plan: ", step, " writes ", claims[k].owner,
                                      " over ", name_of(s), ", which it reads (they overlap)"));
        }
      }
      for (size_t m = first_write; m < k; ++m) {
        if (claims[m].owner != claims[k].owner &&
            overlaps(claims[m], claims[k].arena, claims[k].begin, claims[k].end)) {
          throw Error(detail::str_cat("compiler: memory plan: ", step, " writes ", claims[m].owner,
                                      " and ", claims[k].owner, " over each other (they overlap)"));
        }
      }
    }
  }
  // Storages read after the last step: none stay in an arena (outputs leave
  // it), so the replay above covers every read.
}

}  // namespace kiln::compiler
