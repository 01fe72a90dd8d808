// Common-subexpression elimination. Two nodes compute the same thing when
// they have one op, the same inputs (in the rewritten graph), equal attributes,
// and no write reached a storage their inputs read in between (a version
// per storage, bumped by every in-place node). A node whose outputs are
// written later keeps its own storage; views may merge, as they alias the
// same bytes either way. Writes and random draws never merge, nor does a
// node whose storage the graph returns.
#include <unordered_map>

#include "compiler/passes/pass.h"

namespace kiln::compiler {
namespace {

struct Candidate {
  ops::OpId op;
  std::vector<ValueId> inputs;
  std::vector<int64_t> versions;
  const ops::Attrs* attrs;
  std::vector<ValueId> outputs;  // in the new graph
};

uint64_t hash_of(ops::OpId op, const std::vector<ValueId>& inputs, const std::vector<int64_t>& versions) {
  uint64_t h = static_cast<uint64_t>(op) * 0x9e3779b97f4a7c15ull;
  for (ValueId v : inputs) h = (h ^ static_cast<uint64_t>(v + 2)) * 0xbf58476d1ce4e5b9ull;
  for (int64_t v : versions) h = (h ^ static_cast<uint64_t>(v)) * 0x94d049bb133111ebull;
  return h;
}

}  // namespace

Trace eliminate_common_subexpressions(const Trace& trace) {
  const Graph& g = trace.graph;
  // Storages written later, or returned (two results must not become one).
  const std::vector<bool> written = written_storages(g), returned = returned_storages(g);
  std::vector<int64_t> version(g.storages().size(), 0);
  std::unordered_map<uint64_t, std::vector<Candidate>> seen;
  Rewriter r(trace);
  for (const Node& n : g.nodes()) {
    if (n.inplace()) {
      r.copy(n);
      ++version[static_cast<size_t>(g.value(n.target).storage)];
      continue;
    }
    bool eligible = n.draw_count < 0 && !ops::op_schema(n.op).has_flag(ops::kSideEffect);
    const bool view = ops::op_schema(n.op).has_flag(ops::kView);
    for (ValueId out : n.outputs) {
      const auto storage = static_cast<size_t>(g.value(out).storage);
      eligible = eligible && (view || !written[storage]) && !returned[storage];
    }
    if (!eligible) {
      r.copy(n);
      continue;
    }
    Candidate c{n.op, {}, {}, &n.attrs, {}};
    for (ValueId in : n.inputs) {
      c.inputs.push_back(r.map(in));
      c.versions.push_back(in == kNoValue ? -1 : version[static_cast<size_t>(g.value(in).storage)]);
    }
    auto& bucket = seen[hash_of(n.op, c.inputs, c.versions)];
    const Candidate* match = nullptr;
    for (const Candidate& other : bucket) {
      if (other.op == c.op && other.inputs == c.inputs && other.versions == c.versions && *other.attrs == n.attrs) {
        match = &other;
        break;
      }
    }
    if (match) {
      for (size_t k = 0; k < n.outputs.size(); ++k) r.replace(n.outputs[k], match->outputs[k]);
      continue;
    }
    r.copy(n);
    for (ValueId out : n.outputs) c.outputs.push_back(r.map(out));
    bucket.push_back(std::move(c));
  }
  return r.finish();
}

}  // namespace kiln::compiler
