#include "compiler/memory_plan.h"

#include <algorithm>
#include <numeric>

namespace kiln::compiler {
namespace {

size_t alignment_for(Device d) { return d.is_cuda() ? 256 : 64; }

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

bool overlap_in_time(const PlannedStorage& a, const PlannedStorage& b) {
  return a.first <= b.last && b.first <= a.last;
}

}  // namespace

MemoryPlan plan_memory(const Graph& g) {
  MemoryPlan plan;
  const auto& storages = g.storages();
  plan.storages.resize(storages.size());
  plan.arena_of.assign(storages.size(), -1);
  // Lifetimes: made by a node, used until the last node touching any of its values.
  const std::vector<bool> escapes = returned_storages(g);
  for (size_t s = 0; s < storages.size(); ++s) {
    const Value& root = g.value(storages[s].root);
    PlannedStorage& p = plan.storages[s];
    p.nbytes = storages[s].nbytes;
    if (root.kind == ValueKind::kNode && !escapes[s]) {
      p.in_arena = true;
      p.first = p.last = root.producer;
    }
  }
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const Node& n = g.nodes()[i];
    auto touch = [&](ValueId id) {
      if (id == kNoValue) return;
      PlannedStorage& p = plan.storages[static_cast<size_t>(g.value(id).storage)];
      if (p.in_arena) p.last = std::max(p.last, static_cast<int32_t>(i));
    };
    for (ValueId in : n.inputs) touch(in);
    touch(n.target);
    for (ValueId out : n.outputs) touch(out);
  }
  // Per device: the largest storages first, each at the lowest offset that
  // clears every placed storage alive at the same time.
  std::vector<size_t> order(storages.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return plan.storages[a].nbytes > plan.storages[b].nbytes;
  });
  std::vector<std::vector<size_t>> placed;  // by arena
  for (size_t s : order) {
    PlannedStorage& p = plan.storages[s];
    if (!p.in_arena) continue;
    const Device device = storages[s].device;
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
      const PlannedStorage& q = plan.storages[other];
      if (overlap_in_time(p, q)) busy.emplace_back(q.offset, q.offset + round_up(std::max<size_t>(q.nbytes, 1), align));
    }
    std::sort(busy.begin(), busy.end());
    size_t offset = 0;
    for (const auto& [begin, end] : busy) {
      if (offset + size <= begin) break;
      offset = std::max(offset, end);
    }
    p.offset = offset;
    plan.arena_of[s] = arena;
    plan.arenas[static_cast<size_t>(arena)].nbytes =
        std::max(plan.arenas[static_cast<size_t>(arena)].nbytes, offset + size);
    plan.planned_bytes += size;
    placed[static_cast<size_t>(arena)].push_back(s);
  }
  return plan;
}

void check_plan(const Graph& g, const MemoryPlan& plan) {
  (void)g;
  for (size_t a = 0; a < plan.storages.size(); ++a) {
    const PlannedStorage& p = plan.storages[a];
    if (!p.in_arena) continue;
    const size_t arena = static_cast<size_t>(plan.arena_of[a]);
    if (p.offset + p.nbytes > plan.arenas[arena].nbytes)
      throw Error(detail::str_cat("compiler: memory plan: storage ", a, " ends past its arena"));
    for (size_t b = a + 1; b < plan.storages.size(); ++b) {
      const PlannedStorage& q = plan.storages[b];
      if (!q.in_arena || plan.arena_of[b] != plan.arena_of[a] || !overlap_in_time(p, q)) continue;
      if (p.offset < q.offset + q.nbytes && q.offset < p.offset + p.nbytes && p.nbytes > 0 && q.nbytes > 0) {
        throw Error(detail::str_cat("compiler: memory plan: storages ", a, " and ", b,
                                    " are alive at once (nodes ", p.first, "-", p.last, " and ", q.first, "-",
                                    q.last, ") and overlap"));
      }
    }
  }
}

}  // namespace kiln::compiler
