// kiln::compile's cache (compile.cpp): the families of keys whose graphs
// share a program for all sizes, eviction past the cache's limits, and the
// root segment a key's calls start from.
#include <algorithm>
#include <mutex>

#include "compiler/core_impl.h"
#include "compiler/logs.h"
#include "compiler/runtime/segment.h"
#include "kiln/compile.h"

namespace kiln::compiler {

using kiln::operator<<;  // Shape

namespace internal {

std::shared_ptr<Family> Core::Impl::family_of(const FlatArgs& args,
                                              const std::vector<int64_t>& shapeless,
                                              const std::vector<std::string>& names, bool& known) {
  known = false;
  if (options.dynamic == Dynamic::Off) return nullptr;
  if (dynamic.size() < args.tensors.size()) dynamic.resize(args.tensors.size(), 0);
  const auto make_dynamic = [&](size_t i, uint64_t dims, const std::string& why) {
    dims &= ~dynamic[i];
    for (size_t d = 0; d < 64; ++d) {
      if (!(dims >> d & 1)) continue;
      dynamic_reasons.push_back(detail::str_cat(names[i], " dim ", d, ": ", why));
      log(LogChannel::kRecompiles, detail::str_cat(options.name, ": ", names[i], " dim ", d,
                                                   " is dynamic from now on (", why, ")"));
    }
    dynamic[i] |= dims;
  };
  for (size_t i = 0; i < args.tensors.size(); ++i) {
    const Tensor& t = args.tensors[i];
    const uint64_t all = t.dim() >= 64 ? ~uint64_t{0} : (uint64_t{1} << t.dim()) - 1;
    if (options.dynamic == Dynamic::On) {
      make_dynamic(i, all, "CompileOptions::dynamic is On");
    } else if (const uint64_t marks = dynamic_marks(t) & all) {
      make_dynamic(i, marks, "marked by mark_dynamic");
    }
  }
  if (options.dynamic == Dynamic::Auto) {
    for (const auto& [k, e] : cache) {
      if (e->shapeless != shapeless) continue;
      for (size_t i = 0; i < args.tensors.size(); ++i) {
        const Shape& now = args.tensors[i].sizes();
        for (size_t d = 0; d < now.size() && d < 64; ++d) {
          if (e->sizes[i][d] == now[d] || (dynamic[i] >> d & 1)) continue;
          make_dynamic(i, uint64_t{1} << d,
                       detail::str_cat("its size changed from ", e->sizes[i][d], " to ", now[d]));
        }
      }
    }
  }
  bool any = false;
  for (size_t i = 0; i < args.tensors.size(); ++i) any = any || dynamic[i] != 0;
  if (!any) return nullptr;
  std::shared_ptr<Family>& family = families[build_key(args, dynamic)];
  if (!family) family = std::make_shared<Family>();
  known = !family->programs.empty();
  return family;
}

std::vector<const Segment*> segments_of(const Entry& e) {
  std::vector<const Segment*> out;
  std::vector<const Segment*> stack;
  if (e.root) stack.push_back(e.root.get());
  for (const auto& other : e.other_roots) stack.push_back(other.get());
  while (!stack.empty()) {
    const Segment* seg = stack.back();
    stack.pop_back();
    if (std::find(out.begin(), out.end(), seg) != out.end()) continue;
    out.push_back(seg);
    for (const auto& [bytes, link] : seg->next) stack.push_back(link.next.get());
  }
  return out;
}

namespace {

// The device memory an entry's graphs hold between calls (their CUDA graphs' pools).
size_t held_bytes(const Entry& e) {
  size_t bytes = 0;
  for (const Segment* seg : segments_of(e)) {
    std::lock_guard lock(seg->graph_mutex);
    if (seg->graphed) bytes += seg->graphed->pool_bytes();
  }
  return bytes;
}

}  // namespace

void Core::Impl::evict(const std::vector<int64_t>& keep) {
  size_t bytes = 0;
  for (const auto& [k, e] : cache) bytes += held_bytes(*e);
  while (cache.size() > 1 && (cache.size() > static_cast<size_t>(options.cache_limit) ||
                              bytes > options.cache_bytes_limit)) {
    auto oldest = cache.end();
    for (auto it = cache.begin(); it != cache.end(); ++it)
      if (it->first != keep &&
          (oldest == cache.end() || it->second->last_used < oldest->second->last_used))
        oldest = it;
    if (oldest == cache.end()) return;
    const size_t freed = held_bytes(*oldest->second);
    log(LogChannel::kRecompiles,
        detail::str_cat(options.name, ": the cache holds ", cache.size(), " keys and ", bytes,
                        " bytes of CUDA graphs (limits ", options.cache_limit, " and ",
                        options.cache_bytes_limit,
                        "): letting go of the graphs of the least "
                        "recently used key (",
                        oldest->second->described.empty()
                            ? std::string("no arguments")
                            : detail::str_cat(oldest->second->described[0].first, " ",
                                              oldest->second->described[0].second),
                        ", ", freed, " bytes)"));
    bytes -= freed;
    cache.erase(oldest);
    ++stats.evictions;
  }
}

std::shared_ptr<Segment> Core::Impl::other_root(Entry& entry) {
  std::lock_guard lock(mutex);
  for (const std::shared_ptr<Segment>& other : entry.other_roots) {
    if (!other->stale().empty()) continue;
    std::shared_ptr<Segment> found = other;
    set_root(entry, found);
    return found;
  }
  return nullptr;
}

void Core::Impl::set_root(Entry& entry, const std::shared_ptr<Segment>& seg) {
  std::erase(entry.other_roots, seg);
  if (entry.root && entry.root != seg) {
    bool by_host = false;
    if (!entry.root->stale(&by_host).empty() && by_host) {
      entry.other_roots.insert(entry.other_roots.begin(), entry.root);
      if (entry.other_roots.size() > Entry::kMaxOtherRoots) entry.other_roots.pop_back();
    }
  }
  entry.root = seg;
}

}  // namespace internal
}  // namespace kiln::compiler
