#include "compiler/schedule/schedule.h"

#include <algorithm>
#include <iterator>
#include <optional>

#include "compiler/codegen/cuda_source.h"
#include "compiler/ir/readers.h"
#include "core/shape_util.h"
#include "ops/dispatch.h"

namespace kiln::compiler {
namespace {

// A value's layout for a backend's epilogue_supports, which decides from
// its kind (backends/epilogue.h): the hints, with guards that it stays
// row-major, or channels last, or neither, as it is at them.
ops::TensorMeta layout_kind_meta(const Value& v) {
  if (!contiguous_layout(v.sizes, v.strides) && v.sizes.size() == 4)
    channels_last_layout(v.sizes, v.strides);
  return {sym::hints(v.sizes), v.dtype, v.device, sym::hints(v.strides), v.offset.hint()};
}

using backend::Epilogue;

// A library call and the pointwise nodes after it that only it feeds.
struct Candidate {
  std::vector<int32_t> nodes;
  Epilogue epilogue;
  std::vector<ValueId> inputs;
  const backend::EpilogueLowering* lowering = nullptr;
  std::optional<codegen::PointwiseKernel> kernel;
  std::optional<codegen::RowReduction> reduction;
  // A row reduction with an epilogue: the second kernel, after the rows'
  // reduction (codegen::RowReduction's epilogue).
  std::optional<codegen::PointwiseKernel> epilogue_kernel, row_kernel;
  int32_t writes_input = -1;  // a group written in place into this input
  // Values stored besides the result, and the input each writes, else -1.
  std::vector<ValueId> stored;
  std::vector<int32_t> stored_writes;
};

bool library_call(ops::OpId op) {
  return op == ops::OpId::conv2d || op == ops::OpId::conv1d || op == ops::OpId::linear;
}

// Extends the call at `call` with the nodes that alone read its result, one
// after another: a convolution's relu and residual add, a linear's gelu;
// empty epilogue when there are none.
Candidate epilogue_of(const Graph& g, const Readers& readers, int32_t call) {
  const Node& c = g.nodes()[static_cast<size_t>(call)];
  Candidate cand;
  cand.nodes.push_back(call);
  for (ValueId in : c.inputs) cand.inputs.push_back(in);
  while (cand.inputs.size() < 3) cand.inputs.push_back(kNoValue);
  const Value& y = g.value(c.outputs[0]);
  ValueId cur = c.outputs[0];
  bool added = false, relued = false;
  const bool linear = c.op == ops::OpId::linear;
  for (;;) {
    const int32_t next = readers.only(cur);
    if (next < 0) break;
    const Node& n = g.nodes()[static_cast<size_t>(next)];
    if (n.outputs.empty()) break;
    const Value& out = g.value(n.outputs[0]);
    if (out.dtype != y.dtype || out.sizes != y.sizes || out.device != y.device) break;
    if (linear) {
      if (n.op == ops::OpId::gelu && cand.epilogue.ops.empty() && n.inputs.size() == 1 &&
          n.inputs[0] == cur && (!n.inplace() || n.target == cur)) {
        cand.epilogue.ops.push_back(n.attrs.str(0) == "tanh" ? Epilogue::Kind::kGeluTanh
                                                             : Epilogue::Kind::kGelu);
        cand.nodes.push_back(next);
      }
      break;
    }
    if (n.op == ops::OpId::relu && !relued && n.inputs.size() == 1 && n.inputs[0] == cur &&
        (!n.inplace() || n.target == cur)) {
      relued = true;
      cand.epilogue.ops.push_back(Epilogue::Kind::kRelu);
    } else if (n.op == ops::OpId::add && !added && !relued && n.inputs.size() == 2 &&
               n.attrs.scalar(0).to_double() == 1) {
      // y + r, r + y, or y += r.
      const bool first = n.inputs[0] == cur && n.inputs[1] != cur;
      const bool second = !n.inplace() && n.inputs[1] == cur && n.inputs[0] != cur;
      if (!(first || second) || (n.inplace() && n.target != cur)) break;
      const ValueId r = n.inputs[first ? 1 : 0];
      const Value& rv = g.value(r);
      if (rv.sizes != y.sizes || rv.dtype != y.dtype || rv.device != y.device ||
          rv.storage == y.storage ||
          !(contiguous_layout(rv.sizes, rv.strides) || rv.strides == y.strides)) {
        break;
      }
      added = true;
      cand.epilogue.ops.push_back(Epilogue::Kind::kAdd);
      cand.inputs.push_back(r);
    } else {
      break;
    }
    cand.nodes.push_back(next);
    cur = n.outputs[0];
  }
  return cand;
}

// Whether node n reads value v (as an input or its in-place target).
bool reads(const Node& n, ValueId v) {
  return n.target == v || std::find(n.inputs.begin(), n.inputs.end(), v) != n.inputs.end();
}

// How many of `nodes` read v.
int32_t reads_among(const Graph& g, const std::vector<int32_t>& nodes, ValueId v) {
  return static_cast<int32_t>(std::count_if(nodes.begin(), nodes.end(), [&](int32_t k) {
    return reads(g.nodes()[static_cast<size_t>(k)], v);
  }));
}

// Whether node n reads or writes a value of `storage`.
bool touches(const Graph& g, const Node& n, int32_t storage) {
  if (n.target != kNoValue && g.value(n.target).storage == storage) return true;
  return std::any_of(n.inputs.begin(), n.inputs.end(),
                     [&](ValueId v) { return v != kNoValue && g.value(v).storage == storage; });
}

// The input of cand that is the tensor v writes in place (its storage, in
// v's view): its index; -1 where no input is; -2 where cand reads that
// tensor through another view, or twice.
int32_t input_written(const Graph& g, const Candidate& cand, const Value& v) {
  int32_t found = -1;
  for (size_t i = 0; i < cand.inputs.size(); ++i) {
    if (cand.inputs[i] == kNoValue) continue;
    const Value& in = g.value(cand.inputs[i]);
    if (in.storage != v.storage) continue;
    if (found >= 0 || in.sizes != v.sizes || in.strides != v.strides || in.offset != v.offset)
      return -2;
    found = static_cast<int32_t>(i);
  }
  return found;
}

// Why the group cannot run at its last node's place: a node in between
// writes a storage that one of its nodes read before that write (empty when
// none does). A write before the first node that reads a storage is one the
// group sees in program order too: `p.mul_(d); m.mul_(b).add_(g);
// p.add_(m / v)` is one group of p's updates, reading m after its update.
std::string moved_past_a_write(const Graph& g, const Candidate& cand) {
  // The first member reading each storage that comes from outside.
  std::vector<std::pair<int32_t, int32_t>> first_read;  // (storage, node)
  for (ValueId in : cand.inputs) {
    if (in == kNoValue) continue;
    const int32_t storage = g.value(in).storage;
    for (int32_t k : cand.nodes) {
      if (reads(g.nodes()[static_cast<size_t>(k)], in)) {
        first_read.emplace_back(storage, k);
        break;
      }
    }
  }
  for (int32_t k = cand.nodes.front() + 1; k < cand.nodes.back(); ++k) {
    if (std::find(cand.nodes.begin(), cand.nodes.end(), k) != cand.nodes.end()) continue;
    const Node& n = g.nodes()[static_cast<size_t>(k)];
    if (!n.inplace()) continue;
    const int32_t written = g.value(n.target).storage;
    for (const auto& [storage, reader] : first_read)
      if (storage == written && reader < k)
        return detail::str_cat("node ", k, " writes a tensor it reads in between");
  }
  return "";
}

bool draws(const Graph& g, int32_t node) {
  return ops::op_schema(g.nodes()[static_cast<size_t>(node)].op).has_flag(ops::kRandom);
}

std::vector<int32_t> random_nodes(const Graph& g, const std::vector<int32_t>& nodes) {
  std::vector<int32_t> out;
  std::copy_if(nodes.begin(), nodes.end(), std::back_inserter(out),
               [&](int32_t k) { return draws(g, k); });
  return out;
}

// Why a group's random nodes cannot draw at its last node's place, where
// the step makes their draws in program order (empty when they can): a
// random node outside it in between would draw before them, not after.
std::string draws_moved(const Graph& g, const Candidate& cand) {
  const auto first =
      std::find_if(cand.nodes.begin(), cand.nodes.end(), [&](int32_t k) { return draws(g, k); });
  if (first == cand.nodes.end()) return "";
  for (int32_t k = *first + 1; k < cand.nodes.back(); ++k)
    if (draws(g, k) && !std::binary_search(cand.nodes.begin(), cand.nodes.end(), k))
      return detail::str_cat("node ", k, " draws random numbers in between");
  return "";
}

std::string node_list(const Graph& g, const std::vector<int32_t>& nodes) {
  std::string s;
  for (int32_t i : nodes) {
    const Node& n = g.nodes()[static_cast<size_t>(i)];
    if (!s.empty()) s += " + ";
    s += op_name(n);
    if (n.inplace()) s += "_";
  }
  return detail::str_cat(s, " (node", nodes.size() > 1 ? "s " : " ", nodes.front(),
                         nodes.size() > 1 ? detail::str_cat("-", nodes.back()) : std::string(),
                         ")");
}

// ", and 3 outputs, written in place into inputs 0 and 2"
// for a group that stores values besides its result; else its result's note.
std::string stored_note(const Candidate& c) {
  std::vector<int32_t> written;
  for (int32_t w : c.stored_writes)
    if (w >= 0) written.push_back(w);
  if (c.writes_input >= 0) written.push_back(c.writes_input);
  std::sort(written.begin(), written.end());
  std::string note = c.stored.empty() ? std::string()
                     : c.reduction    ? std::string(", its input stored as it is reduced")
                                      : detail::str_cat(", and ", c.stored.size() + 1, " outputs");
  for (size_t i = 0; i < written.size(); ++i)
    note += detail::str_cat(i > 0                 ? (i + 1 == written.size() ? " and " : ", ")
                            : written.size() == 1 ? ", written in place into input "
                                                  : ", written in place into inputs ",
                            written[i]);
  return note;
}

// Groups of pointwise nodes, each grown from a node (its result) back
// through the producers whose every reader is in the group, and made one
// generated kernel. The cost model (docs/architecture.md, "Schedules and
// fused steps"): a value made and read only inside a group never goes
// through memory, which saves a write and a read of its bytes per reader;
// nothing is computed twice, as every node of a group has the result's
// sizes (a smaller value, say a broadcast bias, is an input instead); no
// library call is ever taken apart (only pointwise ops join). A reduction
// over rows whose input a group alone makes joins it as the group's last
// node (codegen/row_reduction.h): its input never goes through memory either.
class PointwiseGrouper {
 public:
  PointwiseGrouper(const Graph& g, const Readers& readers, const ScheduleOptions& options,
                   std::vector<bool>& taken)
      : g_(g),
        readers_(readers),
        options_(options),
        taken_(taken),
        written_(written_storages(g)),
        returned_(returned_storages(g)),
        fusible_(g.nodes().size()),
        inside_reads_(g.values().size(), 0),
        member_(g.nodes().size(), false),
        private_(g.storages().size(), true) {
    for (size_t i = 0; i < g.nodes().size(); ++i)
      fusible_[i] = !taken[i] && codegen::why_not_generated(g, g.nodes()[i]).empty();
    // A private storage: a tensor the program makes with a pointwise node
    // and then only writes in place with pointwise nodes (no view of it, not
    // returned). Where a group holds all of its values, it is the group's
    // scratch: `(1 - b.pow(t)).sqrt()` written as `neg(pow(b, t)).add_(1).sqrt()`.
    for (size_t v = 0; v < g.values().size(); ++v) {
      const Value& value = g.values()[v];
      const auto storage = static_cast<size_t>(value.storage);
      if (value.kind != ValueKind::kNode) {
        private_[storage] = false;
        continue;
      }
      const Node& n = g.nodes()[static_cast<size_t>(value.producer)];
      const bool made_here = g.storages()[storage].root == static_cast<ValueId>(v);
      if (!fusible_[static_cast<size_t>(value.producer)] || returned_[storage] ||
          n.outputs.size() != 1 || made_here == n.inplace())
        private_[storage] = false;
    }
  }

  void run(std::vector<Candidate>& groups, std::vector<std::string>& fused,
           std::vector<std::string>& not_fused) {
    std::vector<std::string> lines;
    // The last plain group made (index in groups) and its line.
    int32_t last_plain = -1;
    size_t last_line = 0;
    for (auto root = static_cast<int32_t>(g_.nodes().size()) - 1; root >= 0; --root) {
      const auto r = static_cast<size_t>(root);
      if (taken_[r]) continue;
      std::optional<codegen::RowReduction> reduction;
      int32_t start = root;
      bool stores = false;  // the reduction's input is read after it too
      if (!fusible_[r]) {
        const int32_t p = prologue_of(root, &stores);
        if (p < 0) continue;
        std::string why;
        reduction = codegen::row_reduction_of(g_, g_.nodes()[r], why);
        if (!reduction) {
          lines.push_back(detail::str_cat(node_list(g_, {p, root}), " not fused: ", why));
          continue;
        }
        // Permuted rows are written in blocks of their own order: such an
        // input is stored whole by its own group.
        if (stores && !reduction->permutation.empty()) continue;
        start = p;
      }
      // A row reduction's groups store their results alone.
      Candidate cand = grow(start, false);
      // Stored, the input is the group's one output: where the group would
      // store other values too (and so hold more nodes) without the
      // reduction, the reduction reads the input from memory instead.
      if (stores && grow(start, true).nodes != cand.nodes) continue;
      if (reduction) {
        const Node& n = g_.nodes()[r];
        reduction->kernel_inputs = cand.inputs.size();
        reduction->node = root;
        cand.nodes.push_back(root);
        cand.inputs.insert(cand.inputs.end(), n.inputs.begin() + 1, n.inputs.end());
        cand.reduction = std::move(reduction);
        if (stores) {
          cand.stored = {n.inputs[0]};
          cand.stored_writes = {-1};
        }
      } else if (std::optional<Candidate> whole = with_reduction_before(cand)) {
        for (int32_t k : whole->nodes) taken_[static_cast<size_t>(k)] = true;
        // (Its inputs less those that stand for values inside.)
        lines.push_back(detail::str_cat(
            node_list(g_, whole->nodes), ": generated kernels of ",
            whole->inputs.size() - (whole->row_kernel ? 2 : 1), " inputs around ",
            ops::op_schema(whole->reduction->op).name,
            ", its rows reduced in cache and the ops after it applied to each block"));
        groups.push_back(std::move(*whole));
        continue;
      } else {
        cand = grow(start, true);
      }
      if (cand.nodes.size() < 2) continue;
      const std::string what = node_list(g_, cand.nodes);
      std::string why;
      if (!options_.generate)
        why = options_.generate_off;
      else if (ops::ReferenceModeGuard::enabled())
        why = "the CPU runs its reference kernels";
      if (!why.empty()) {
        // No part of the group would fare better: one line for it.
        for (int32_t k : cand.nodes) fusible_[static_cast<size_t>(k)] = false;
      }
      if (why.empty()) why = moved_past_a_write(g_, cand);
      if (why.empty()) why = draws_moved(g_, cand);
      if (why.empty() && cand.reduction && !cand.reduction->permutation.empty() &&
          !random_nodes(g_, cand.nodes).empty())
        why = detail::str_cat("its rows are dims ", cand.reduction->permutation,
                              " of its input, and a random node draws in the input's order");
      if (why.empty() && g_.nodes()[r].inplace()) why = in_place_hazard(cand);
      if (why.empty()) {
        const size_t kernel_nodes = cand.nodes.size() - (cand.reduction ? 1 : 0);
        const size_t kernel_inputs =
            cand.reduction ? cand.reduction->kernel_inputs : cand.inputs.size();
        // (A reduction's stored input is its kernel's one output.)
        cand.kernel = codegen::lower_group(
            g_, std::span<const int32_t>(cand.nodes).first(kernel_nodes),
            std::span<const ValueId>(cand.inputs).first(kernel_inputs), why,
            cand.reduction ? std::span<const ValueId>() : std::span<const ValueId>(cand.stored),
            random_nodes(g_, cand.nodes));
        // On a device, one kernel computes the rows and reduces them.
        if (cand.kernel && cand.reduction && !cand.kernel->device.is_cpu())
          codegen::as_row_kernel(*cand.kernel, g_.nodes()[r], stores);
      }
      if (!why.empty()) {
        lines.push_back(detail::str_cat(what, " not fused: ", why));
        continue;
      }
      for (int32_t k : cand.nodes) taken_[static_cast<size_t>(k)] = true;
      // With the group made just before (it runs after this one), as one kernel?
      if (last_plain >= 0 && static_cast<size_t>(last_plain) + 1 == groups.size()) {
        if (std::optional<Candidate> u = joined(cand, groups.back())) {
          groups.back() = std::move(*u);
          lines[last_line] = kernel_line(groups.back());
          continue;
        }
      }
      if (!cand.reduction) {
        last_plain = static_cast<int32_t>(groups.size());
        last_line = lines.size();
      }
      lines.push_back(kernel_line(cand));
      groups.push_back(std::move(cand));
    }
    // In program order, as the epilogue groups' lines.
    for (auto it = lines.rbegin(); it != lines.rend(); ++it)
      (it->find(" not fused: ") == std::string::npos ? fused : not_fused).push_back(*it);
  }

 private:
  // Why a group rooted in place cannot run at its root's place (empty when
  // it can); sets cand.writes_input where it writes an input in place. Each
  // element is read before the kernel writes it, so the group may read the
  // tensor it writes, at the same elements: not through another view of it.
  // A node in between that reads or writes that tensor would see it
  // written too late, or be overwritten.
  std::string in_place_hazard(Candidate& cand) const {
    const Value& result = g_.value(g_.nodes()[static_cast<size_t>(cand.nodes.back())].outputs[0]);
    const int32_t written = input_written(g_, cand, result);
    cand.writes_input = -1;
    if (written == -2) return "it reads another view of the tensor it writes in place";
    for (int32_t k = cand.nodes.front() + 1; k < cand.nodes.back(); ++k) {
      if (!std::binary_search(cand.nodes.begin(), cand.nodes.end(), k) &&
          touches(g_, g_.nodes()[static_cast<size_t>(k)], result.storage))
        return detail::str_cat("node ", k, " uses the tensor it writes in place, in between");
    }
    cand.writes_input = written;
    return "";
  }

  // Group e (grown from a pointwise root) with the row reduction whose
  // result it reads and the group that makes the reduction's input: one
  // step whose last kernel applies e to each block of rows as the reduction
  // leaves it (`softmax(x) * m`, `x / sum(x * x, keepdim)`); ops on the
  // result alone in between (RMSNorm's `rsqrt(mean + eps)`) run on the
  // block's results first. The reduction keeps its input's rank (softmax,
  // or keepdim), e's result has the reduction's input's sizes and dtype,
  // contiguous, each value in between is read inside alone, and nothing
  // writes in place; where it cannot be so, none (e stays a group of its own).
  std::optional<Candidate> with_reduction_before(const Candidate& e) {
    const Node& root = g_.nodes()[static_cast<size_t>(e.nodes.back())];
    const Value& result = g_.value(root.outputs[0]);
    if (!options_.generate || ops::ReferenceModeGuard::enabled() ||
        !contiguous_layout(result.sizes, result.strides))
      return std::nullopt;
    const auto in_place = [&](const std::vector<int32_t>& nodes) {
      return std::any_of(nodes.begin(), nodes.end(),
                         [&](int32_t k) { return g_.nodes()[static_cast<size_t>(k)].inplace(); });
    };
    // Whether `nodes` alone read v, and v may stay out of memory.
    const auto read_by = [&](ValueId v, const std::vector<int32_t>& nodes) {
      int32_t reads = 0;
      for (int32_t k : nodes) {
        const std::vector<ValueId>& in = g_.nodes()[static_cast<size_t>(k)].inputs;
        reads += std::find(in.begin(), in.end(), v) != in.end();
      }
      const auto storage = static_cast<size_t>(g_.value(v).storage);
      return reads == readers_.count[static_cast<size_t>(v)] && !written_[storage] &&
             !returned_[storage];
    };
    const auto made_by_reduction = [&](ValueId v) {
      const Value& value = g_.value(v);
      return v != kNoValue && value.kind == ValueKind::kNode &&
             !taken_[static_cast<size_t>(value.producer)] &&
             codegen::keeps_rank(g_, g_.nodes()[static_cast<size_t>(value.producer)]);
    };
    if (in_place(e.nodes)) return std::nullopt;
    for (size_t i = 0; i < e.inputs.size(); ++i) {
      const ValueId v = e.inputs[i];
      if (v == kNoValue || g_.value(v).kind != ValueKind::kNode || !read_by(v, e.nodes)) continue;
      // The reduction's result, or the ops on it alone that make v.
      ValueId rv = v;
      std::optional<Candidate> row;
      if (!made_by_reduction(v)) {
        const auto c = static_cast<size_t>(g_.value(v).producer);
        if (!fusible_[c] || taken_[c]) continue;
        row = grow(static_cast<int32_t>(c), false);
        const auto found = std::find_if(row->inputs.begin(), row->inputs.end(), made_by_reduction);
        if (found == row->inputs.end() || in_place(row->nodes)) continue;
        rv = *found;
        if (g_.value(rv).sizes != g_.value(v).sizes || g_.value(v).dtype != result.dtype ||
            !read_by(rv, row->nodes))
          continue;
      }
      const int32_t rnode = g_.value(rv).producer;
      const Node& rn = g_.nodes()[static_cast<size_t>(rnode)];
      if (g_.value(rn.inputs[0]).sizes != result.sizes ||
          g_.value(rn.inputs[0]).dtype != result.dtype)
        continue;
      const int32_t p = prologue_of(rnode);
      std::string why;
      std::optional<codegen::RowReduction> reduction =
          p < 0 ? std::nullopt : codegen::row_reduction_of(g_, rn, why);
      // Columns and permuted rows take no epilogue, nor a device's rows yet.
      if (!reduction || reduction->column_begin >= 0 || !reduction->permutation.empty() ||
          !g_.value(rn.inputs[0]).device.is_cpu())
        continue;
      Candidate pro = grow(p, false);
      Candidate whole;
      whole.nodes = pro.nodes;
      whole.nodes.push_back(rnode);
      if (row) whole.nodes.insert(whole.nodes.end(), row->nodes.begin(), row->nodes.end());
      whole.nodes.insert(whole.nodes.end(), e.nodes.begin(), e.nodes.end());
      std::sort(whole.nodes.begin(), whole.nodes.end());
      whole.inputs = pro.inputs;
      reduction->kernel_inputs = whole.inputs.size();
      reduction->node = rnode;
      whole.inputs.insert(whole.inputs.end(), rn.inputs.begin() + 1, rn.inputs.end());
      reduction->row_inputs = whole.inputs.size();
      if (row) {
        reduction->row_result_input = static_cast<size_t>(
            std::find(row->inputs.begin(), row->inputs.end(), rv) - row->inputs.begin());
        whole.inputs.insert(whole.inputs.end(), row->inputs.begin(), row->inputs.end());
      }
      reduction->epilogue_inputs = whole.inputs.size();
      reduction->result_input = i;
      whole.inputs.insert(whole.inputs.end(), e.inputs.begin(), e.inputs.end());
      if (!moved_past_a_write(g_, whole).empty() || !draws_moved(g_, whole).empty()) continue;
      // Its kernels' draws numbered among the step's.
      const std::vector<int32_t> step_draws = random_nodes(g_, whole.nodes);
      whole.kernel = codegen::lower_group(g_, pro.nodes, pro.inputs, why, {}, step_draws);
      if (whole.kernel && row)
        whole.row_kernel = codegen::lower_group(g_, row->nodes, row->inputs, why, {}, step_draws);
      if (whole.kernel && (!row || whole.row_kernel))
        whole.epilogue_kernel = codegen::lower_group(g_, e.nodes, e.inputs, why, {}, step_draws);
      if (!whole.epilogue_kernel) continue;
      whole.reduction = std::move(reduction);
      return whole;
    }
    return std::nullopt;
  }

  // The node that makes input 0 of a possible row reduction at `node` for
  // it alone, where it could start the reduction's group; else -1. With
  // `stores`, also where the input is read after the reduction too (later
  // nodes, the program's results), never before: *stores then says so.
  int32_t prologue_of(int32_t node, bool* stores = nullptr) const {
    const Node& n = g_.nodes()[static_cast<size_t>(node)];
    if (n.inputs.empty() || n.inputs[0] == kNoValue || n.outputs.size() != 1 || n.inplace())
      return -1;
    const Value& x = g_.value(n.inputs[0]);
    if (x.kind != ValueKind::kNode) return -1;
    const auto p = static_cast<size_t>(x.producer);
    const auto storage = static_cast<size_t>(x.storage);
    const bool alone = readers_.count[static_cast<size_t>(n.inputs[0])] == 1 && !returned_[storage];
    // Read after the reduction alone (by nodes after it, or returned): the
    // step stores it as it reduces it.
    const bool after = stores && readers_.reads_up_to(n.inputs[0], node) == 1 &&
                       g_.storages()[storage].root == n.inputs[0];
    if (!fusible_[p] || taken_[p] || written_[storage] || (!alone && !after)) return -1;
    if (stores) *stores = !alone;
    return codegen::reduces_rows(n.op) ? x.producer : -1;
  }

  // The group grown from `root` (its result): nodes ascending, the values
  // it reads from outside in order of first use. Private storages' writes
  // join where the group then holds every write before them too (else the
  // storage's memory would have to hold what a node outside wrote). With
  // `multi`, values the group makes that nodes after it read, or that it
  // writes in place into tensors other than its result's, join too, and the
  // kernel stores them (Candidate::stored): an optimizer's update of a
  // parameter with its moments, a forward value saved for the backward.
  Candidate grow(int32_t root, bool multi) {
    Candidate cand = grow(root, true, multi);
    const Value& result = g_.value(g_.nodes()[static_cast<size_t>(root)].outputs[0]);
    for (int32_t k : cand.nodes) {
      const Node& n = g_.nodes()[static_cast<size_t>(k)];
      if (!n.inplace()) continue;
      const Value& target = g_.value(n.target);
      if (target.storage == result.storage || !private_[static_cast<size_t>(target.storage)])
        continue;
      if (!std::binary_search(cand.nodes.begin(), cand.nodes.end(), target.producer)) {
        cand = grow(root, false, multi);
        break;
      }
    }
    if (multi && !find_stored(cand)) return grow(root, false);
    return cand;
  }

  // The values of a group grown with `multi` that it stores besides its
  // result, each with the input whose memory it writes (in place) or -1;
  // false where the group cannot run so. A tensor the group writes is
  // stored once, its last value: its values before that are read inside
  // alone. Stored are the values read after the group or returned, and a
  // tensor's last value where the tensor comes from outside (its memory is
  // then the input's, of the same view), and no node in between touches
  // the tensor: the group runs at its last node's place.
  bool find_stored(Candidate& cand) const {
    const auto& nodes = g_.nodes();
    const int32_t root = cand.nodes.back();
    const int32_t result_storage = g_.value(nodes[static_cast<size_t>(root)].outputs[0]).storage;
    const auto in_group = [&](int32_t k) {
      return std::binary_search(cand.nodes.begin(), cand.nodes.end(), k);
    };
    for (size_t m = 0; m + 1 < cand.nodes.size(); ++m) {
      const int32_t k = cand.nodes[m];
      const ValueId out = nodes[static_cast<size_t>(k)].outputs[0];
      const Value& v = g_.value(out);
      if (v.storage == result_storage) continue;
      const bool read_outside =
          reads_among(g_, cand.nodes, out) != readers_.count[static_cast<size_t>(out)];
      const bool last = std::none_of(
          cand.nodes.begin() + static_cast<std::ptrdiff_t>(m) + 1, cand.nodes.end(),
          [&](int32_t j) {
            return g_.value(nodes[static_cast<size_t>(j)].outputs[0]).storage == v.storage;
          });
      if (!last) {
        if (read_outside) return false;
        continue;
      }
      const Value& made = g_.value(g_.storages()[static_cast<size_t>(v.storage)].root);
      const bool made_inside = made.kind == ValueKind::kNode && in_group(made.producer);
      if (!read_outside && made_inside) continue;  // a value inside alone
      const int32_t writes = made_inside ? -1 : input_written(g_, cand, v);
      if (!made_inside && writes < 0) return false;
      for (int32_t j = cand.nodes.front() + 1; j < root; ++j)
        if (!in_group(j) && touches(g_, nodes[static_cast<size_t>(j)], v.storage)) return false;
      cand.stored.push_back(out);
      cand.stored_writes.push_back(writes);
    }
    return true;
  }

  std::string kernel_line(const Candidate& c) const {
    return detail::str_cat(
        node_list(g_, c.nodes), ": one generated kernel of ", c.inputs.size(),
        c.inputs.size() == 1 ? " input" : " inputs",
        c.reduction ? detail::str_cat(
                          c.reduction->column_begin >= 0 ? ", its columns reduced by "
                          : c.reduction->permutation.empty()
                              ? ", its rows reduced by "
                              : detail::str_cat(", its rows (dims ", c.reduction->permutation,
                                                " of its input) reduced by "),
                          ops::op_schema(g_.nodes()[static_cast<size_t>(c.nodes.back())].op).name,
                          c.kernel && c.kernel->rows ? " as it computes them" : " in cache")
                    : std::string(),
        stored_note(c));
  }

  Candidate grow(int32_t root, bool with_private, bool multi) {
    const auto& nodes = g_.nodes();
    const Value& result = g_.value(nodes[static_cast<size_t>(root)].outputs[0]);
    // The storage a root in place writes: the group may hold the writes
    // before it to that storage, and the node that made it.
    const int32_t chain = nodes[static_cast<size_t>(root)].inplace() ? result.storage : -1;
    Candidate cand;
    std::vector<ValueId> counted;
    auto join = [&](int32_t k) {
      cand.nodes.push_back(k);
      member_[static_cast<size_t>(k)] = true;
      std::vector<ValueId> read = nodes[static_cast<size_t>(k)].inputs;
      read.push_back(nodes[static_cast<size_t>(k)].target);  // as Readers counts it
      std::sort(read.begin(), read.end());
      read.erase(std::unique(read.begin(), read.end()), read.end());
      for (ValueId v : read) {
        if (v == kNoValue) continue;
        if (inside_reads_[static_cast<size_t>(v)]++ == 0) counted.push_back(v);
      }
    };
    join(root);
    // Producers come before their readers: going down once decides each
    // after all its readers.
    for (int32_t k = root - 1; k >= 0; --k) {
      const auto ku = static_cast<size_t>(k);
      if (!fusible_[ku] || taken_[ku]) continue;
      const ValueId out = nodes[ku].outputs[0];
      const Value& v = g_.value(out);
      const int32_t reads = inside_reads_[static_cast<size_t>(out)];
      if (reads == 0 || v.sizes != result.sizes) continue;
      // Read outside the group too: only after it (the kernel stores it).
      const bool outside = reads != readers_.count[static_cast<size_t>(out)];
      if (outside && (!multi || readers_.reads_up_to(out, root) != reads)) continue;
      const auto storage = static_cast<size_t>(v.storage);
      const bool scratch = with_private && private_[storage];
      if (v.storage == chain) {
        if (outside) continue;  // its tensor's later values would be read
      } else if (nodes[ku].inplace() || written_[storage] || returned_[storage]) {
        if (scratch && outside) continue;
        if (!scratch && !multi) continue;
        // A tensor the group writes again: its value here is read inside alone.
        if (outside && std::any_of(cand.nodes.begin(), cand.nodes.end(), [&](int32_t j) {
              return g_.value(nodes[static_cast<size_t>(j)].outputs[0]).storage == v.storage;
            }))
          continue;
      }
      join(k);
    }
    for (ValueId v : counted) inside_reads_[static_cast<size_t>(v)] = 0;
    for (int32_t k : cand.nodes) member_[static_cast<size_t>(k)] = false;
    std::sort(cand.nodes.begin(), cand.nodes.end());
    cand.inputs = inputs_of(cand.nodes);
    return cand;
  }

  // The values nodes (ascending) read from outside them, in order of first use.
  std::vector<ValueId> inputs_of(const std::vector<int32_t>& group) {
    std::vector<ValueId> inputs;
    for (int32_t k : group) member_[static_cast<size_t>(k)] = true;
    for (int32_t k : group)
      for (ValueId in : g_.nodes()[static_cast<size_t>(k)].inputs) {
        const bool inside = in != kNoValue && g_.value(in).kind == ValueKind::kNode &&
                            member_[static_cast<size_t>(g_.value(in).producer)];
        if (in != kNoValue && !inside &&
            std::find(inputs.begin(), inputs.end(), in) == inputs.end())
          inputs.push_back(in);
      }
    for (int32_t k : group) member_[static_cast<size_t>(k)] = false;
    return inputs;
  }

  // Group a joined to the group b that runs after it with nothing between
  // them but b's nodes and views, where both have one sizes and b reads a's
  // values or an input of a (siblings: the two bias corrections of an Adam
  // step), as one kernel at b's place: a's values are then stored by it
  // (those read after it) or stay inside (those b alone reads). None where
  // a node outside reads a's values before b's place, or the joined group
  // could not run there (as a group grown so).
  std::optional<Candidate> joined(const Candidate& a, const Candidate& b) {
    const auto& nodes = g_.nodes();
    const int32_t a_last = a.nodes.back(), b_last = b.nodes.back();
    const auto result_of = [&](const Candidate& c) {
      return g_.value(nodes[static_cast<size_t>(c.nodes.back())].outputs[0]);
    };
    if (!a.kernel || !b.kernel || a.reduction || b.reduction || a_last > b_last ||
        result_of(a).sizes != result_of(b).sizes)
      return std::nullopt;
    for (int32_t k = a_last + 1; k < b_last; ++k)
      if (!std::binary_search(b.nodes.begin(), b.nodes.end(), k) &&
          !ops::op_schema(nodes[static_cast<size_t>(k)].op).has_flag(ops::kView))
        return std::nullopt;
    const bool related = std::any_of(b.inputs.begin(), b.inputs.end(), [&](ValueId v) {
      const Value& value = g_.value(v);
      return std::find(a.inputs.begin(), a.inputs.end(), v) != a.inputs.end() ||
             (value.kind == ValueKind::kNode &&
              std::binary_search(a.nodes.begin(), a.nodes.end(), value.producer));
    });
    if (!related) return std::nullopt;
    Candidate u;
    std::merge(a.nodes.begin(), a.nodes.end(), b.nodes.begin(), b.nodes.end(),
               std::back_inserter(u.nodes));
    u.inputs = inputs_of(u.nodes);
    for (int32_t k : u.nodes) {
      const ValueId out = nodes[static_cast<size_t>(k)].outputs[0];
      if (readers_.reads_up_to(out, b_last) != reads_among(g_, u.nodes, out)) return std::nullopt;
    }
    if (!moved_past_a_write(g_, u).empty() || !draws_moved(g_, u).empty()) return std::nullopt;
    if (nodes[static_cast<size_t>(b_last)].inplace() && !in_place_hazard(u).empty())
      return std::nullopt;
    if (!find_stored(u)) return std::nullopt;
    std::string why;
    u.kernel =
        codegen::lower_group(g_, u.nodes, u.inputs, why, u.stored, random_nodes(g_, u.nodes));
    if (!u.kernel) return std::nullopt;
    return u;
  }

  const Graph& g_;
  const Readers& readers_;
  const ScheduleOptions& options_;
  std::vector<bool>& taken_;
  const std::vector<bool> written_, returned_;
  std::vector<bool> fusible_;
  std::vector<int32_t> inside_reads_;
  std::vector<bool> member_;
  std::vector<bool> private_;  // by storage
};

// The kernel's index in s.kernels, added there unless a kernel of the same
// IR is (BERT's residual adds, layer after layer, share one).
int32_t kernel_index(Schedule& s, const codegen::PointwiseKernel& kernel) {
  const auto same = std::find_if(s.kernels.begin(), s.kernels.end(),
                                 [&](const auto& k) { return k.symbol == kernel.symbol; });
  const auto index = static_cast<int32_t>(same - s.kernels.begin());
  if (same == s.kernels.end()) s.kernels.push_back(kernel);
  return index;
}

}  // namespace

ValueId Schedule::result(const Graph& graph, size_t step) const {
  const Node& last = graph.nodes()[static_cast<size_t>(steps[step].nodes.back())];
  return last.outputs.empty() ? kNoValue : last.outputs[0];
}

std::vector<ValueId> Schedule::results(const Graph& graph, size_t step) const {
  std::vector<ValueId> all = steps[step].stored;
  all.push_back(result(graph, step));
  return all;
}

std::string Schedule::describe(const Graph& graph, size_t step) const {
  return node_list(graph, steps[step].nodes);
}

Schedule unfused_schedule(const Graph& graph) {
  Schedule s;
  const size_t n = graph.nodes().size();
  s.steps.resize(n);
  s.step_of.resize(n);
  for (size_t i = 0; i < n; ++i) {
    s.steps[i].nodes = {static_cast<int32_t>(i)};
    s.step_of[i] = static_cast<int32_t>(i);
  }
  s.materialized.assign(graph.storages().size(), true);
  return s;
}

Schedule schedule_graph(const Graph& g, const ScheduleOptions& options) {
  const Readers readers(g);
  const auto& nodes = g.nodes();
  std::vector<Candidate> groups;
  std::vector<int32_t> group_at(nodes.size(), -1);  // by last node
  std::vector<bool> taken(nodes.size(), false);
  Schedule s;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    if (!library_call(n.op) || taken[i] || n.outputs.empty()) continue;
    Candidate cand = epilogue_of(g, readers, static_cast<int32_t>(i));
    if (cand.epilogue.ops.empty()) continue;
    const std::string what = node_list(g, cand.nodes);
    const Value& y = g.value(n.outputs[0]);
    std::string why;
    const backend::EpilogueLowering* lowering = nullptr;
    if (y.device.is_cpu() && ops::ReferenceModeGuard::enabled()) {
      why = "the CPU runs its reference kernels";
    } else {
      lowering = backend::epilogue_lowering(y.device.kind(), n.op);
      if (!lowering)
        why =
            detail::str_cat("the ", y.device, " backend runs no ", op_name(n), " with an epilogue");
    }
    for (size_t k = 0; k < 3 && why.empty(); ++k) {
      const ValueId in = cand.inputs[k];
      if (in != kNoValue && g.value(in).dtype != y.dtype)
        why = detail::str_cat("input ", k, " is ", g.value(in).dtype, ", the result ", y.dtype);
    }
    if (why.empty()) {
      std::vector<ops::TensorMeta> metas;
      for (ValueId in : cand.inputs) {
        if (in == kNoValue) {
          metas.push_back({});
          continue;
        }
        metas.push_back(layout_kind_meta(g.value(in)));
      }
      // Canonical attributes, as run gets them (from ranks, not sizes).
      TensorList call_inputs;
      for (ValueId in : n.inputs)
        call_inputs.push_back(in == kNoValue ? Tensor() : g.meta_hint(in));
      const ops::Attrs attrs =
          ops::infer(n.op, call_inputs, n.attrs).attrs;  // canonical, as run gets them
      why = lowering->supports(n.op, metas, layout_kind_meta(y), attrs, cand.epilogue);
      // Strict keeps eager's bits: only epilogues that round as eager.
      if (why.empty() && options.strict && lowering->bitwise &&
          !lowering->bitwise(metas, cand.epilogue))
        why = detail::str_cat("strict: the ", y.device, " backend's ", cand.epilogue.describe(),
                              " rounds otherwise than eager's");
    }
    if (why.empty()) why = moved_past_a_write(g, cand);
    if (!why.empty()) {
      s.not_fused.push_back(detail::str_cat(what, " not fused: ", why));
      continue;
    }
    for (int32_t k : cand.nodes) taken[static_cast<size_t>(k)] = true;
    s.fused.push_back(detail::str_cat(what, ": one ", op_name(n), " call with epilogue ",
                                      cand.epilogue.describe()));
    cand.lowering = lowering;
    groups.push_back(std::move(cand));
  }
  PointwiseGrouper(g, readers, options, taken).run(groups, s.fused, s.not_fused);
  for (size_t k = 0; k < groups.size(); ++k)
    group_at[static_cast<size_t>(groups[k].nodes.back())] = static_cast<int32_t>(k);
  // The steps in program order: a group at its last node's place.
  s.step_of.assign(nodes.size(), -1);
  s.materialized.assign(g.storages().size(), true);
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (taken[i] && group_at[i] < 0) continue;
    ScheduledStep st;
    if (group_at[i] >= 0) {
      const Candidate& c = groups[static_cast<size_t>(group_at[i])];
      st.nodes = c.nodes;
      st.lowering = c.lowering;
      st.epilogue = c.epilogue;
      st.inputs = c.inputs;
      if (c.kernel) {
        st.kernel = kernel_index(s, *c.kernel);
        st.reduction = c.reduction;
        st.writes_input = c.writes_input;
        st.stored = c.stored;
        st.stored_writes = c.stored_writes;
        st.draws = random_nodes(g, c.nodes);
        if (c.epilogue_kernel) st.reduction->epilogue_kernel = kernel_index(s, *c.epilogue_kernel);
        if (c.row_kernel) st.reduction->row_kernel = kernel_index(s, *c.row_kernel);
      }
      // Values inside the group get no bytes, unless they live in the
      // storage of its result or of a value it stores.
      std::vector<int32_t> kept{g.value(nodes[i].outputs[0]).storage};
      for (ValueId v : c.stored) kept.push_back(g.value(v).storage);
      for (size_t k = 0; k + 1 < c.nodes.size(); ++k) {
        const int32_t inner = g.value(nodes[static_cast<size_t>(c.nodes[k])].outputs[0]).storage;
        if (std::find(kept.begin(), kept.end(), inner) == kept.end())
          s.materialized[static_cast<size_t>(inner)] = false;
      }
    } else {
      st.nodes = {static_cast<int32_t>(i)};
    }
    for (int32_t k : st.nodes)
      s.step_of[static_cast<size_t>(k)] = static_cast<int32_t>(s.steps.size());
    s.steps.push_back(std::move(st));
  }
  return s;
}

}  // namespace kiln::compiler
