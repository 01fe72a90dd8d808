// Batched recurrent projections: the steps of an LSTM written as a loop
// (`for t: state = cell(x[t], state)`) each read the whole input weight to
// project one row, `linear(x_t, W_ih, b_ih)` inside lstm_step. Where the
// inputs x_t do not depend on the steps themselves (the sequence's rows,
// the layer below's outputs), their projections are one product over all
// of them, which reads the weight once; each step keeps its hidden
// projection and the cell (lstm_step is exactly linear(x, W_ih, b_ih),
// linear(h, W_hh, b_hh) and lstm_cell; docs/compile.md, "Passes").
//
// Where a group's steps are one chain besides (each step's state is the one
// before it's, one hidden weight and bias, each cell state read by the next
// step alone), the whole group is one lstm_sequence node: the product and
// the steps in one kernel, the library's own step loop (its input product,
// then each step's hidden product and cell with the weight split between
// the threads once), each step's h a row of its output.
//
// The nodes are then laid out again in an order that respects every
// dependency: a layer's steps all come before the product over their
// outputs, and the next layer's steps after it. So the pass leaves graphs
// with in-place writes or random draws alone (their order is part of their
// meaning), and strict mode skips it: the product over T rows rounds as a
// product of T rows, not as T products of one.
#include <algorithm>
#include <queue>

#include "compiler/ir/readers.h"
#include "compiler/passes/pass.h"
#include "ops/dispatch.h"

namespace kiln::compiler {
namespace {

using ops::OpId;

// A group of lstm_step nodes (program order) sharing one input weight and
// bias, whose inputs x_t none of them feeds.
struct Group {
  std::vector<int32_t> steps;
  bool sequence = false;  // one chain: one lstm_sequence node
};

ValueId input_or_none(const Node& n, size_t k) {
  return k < n.inputs.size() ? n.inputs[k] : kNoValue;
}

bool batchable(const Graph& g, const Node& n) {
  if (n.op != OpId::lstm_step || n.inplace() || n.grad_enabled || n.inputs[0] == kNoValue)
    return false;
  const Value& x = g.value(n.inputs[0]);
  return x.device.is_cpu() && x.sizes.size() == 2 && x.dtype == kFloat32;
}

// The groups: lstm_step nodes by input weight and bias, each group its
// steps in program order up to the first whose input x_t descends from an
// earlier step of it (an output fed back as the next input), with x_t of
// one size.
std::vector<Group> find_groups(const Graph& g) {
  const auto& nodes = g.nodes();
  std::vector<std::vector<int32_t>> by_weight;  // candidate steps per (W_ih, b_ih)
  std::vector<std::pair<ValueId, ValueId>> keys;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    if (!batchable(g, n)) continue;
    const std::pair<ValueId, ValueId> key{n.inputs[3], input_or_none(n, 5)};
    const auto it = std::find(keys.begin(), keys.end(), key);
    if (it == keys.end()) {
      keys.push_back(key);
      by_weight.push_back({static_cast<int32_t>(i)});
    } else {
      by_weight[static_cast<size_t>(it - keys.begin())].push_back(static_cast<int32_t>(i));
    }
  }
  std::vector<Group> groups;
  for (const auto& candidates : by_weight) {
    if (candidates.size() < 2) continue;
    // Which nodes descend from a step of the group: a step whose input does
    // is fed by the group and leaves it (with every step after it).
    std::vector<bool> downstream(nodes.size(), false);
    Group group;
    size_t next = 0;
    const SymShape& sizes = g.value(nodes[static_cast<size_t>(candidates[0])].inputs[0]).sizes;
    for (size_t i = static_cast<size_t>(candidates[0]); i < nodes.size(); ++i) {
      const Node& n = nodes[i];
      bool fed = false;
      for (ValueId in : n.inputs) {
        const Value* v = in == kNoValue ? nullptr : &g.value(in);
        fed = fed ||
              (v && v->kind == ValueKind::kNode && downstream[static_cast<size_t>(v->producer)]);
      }
      if (next < candidates.size() && candidates[next] == static_cast<int32_t>(i)) {
        ++next;
        const Value& x = g.value(n.inputs[0]);
        const bool x_fed =
            x.kind == ValueKind::kNode && downstream[static_cast<size_t>(x.producer)];
        if (x_fed) break;  // this step's input comes from the group's own steps
        if (x.sizes == sizes) group.steps.push_back(static_cast<int32_t>(i));
        downstream[i] = true;
        continue;
      }
      downstream[i] = fed;
    }
    if (group.steps.size() >= 2) groups.push_back(std::move(group));
  }
  return groups;
}

// Whether the group's steps are one chain: each step's hx and cx the step
// before it's results, all with one hidden weight and bias (both biases or
// neither), each cell state but the last read by the next step alone; and
// lstm_sequence's operands: the first state [B, H], every tensor float32.
bool one_chain(const Graph& g, const Readers& readers, const Group& group) {
  const Node& first = g.nodes()[static_cast<size_t>(group.steps.front())];
  if ((input_or_none(first, 5) == kNoValue) != (input_or_none(first, 6) == kNoValue)) return false;
  const Value& w_hh = g.value(first.inputs[4]);
  if (w_hh.sizes.size() != 2) return false;
  const SymShape state{g.value(first.inputs[0]).sizes[0], w_hh.sizes[1]};
  for (size_t k = 1; k < first.inputs.size(); ++k) {
    const ValueId in = first.inputs[k];
    if (in == kNoValue) continue;
    const Value& v = g.value(in);
    if (v.dtype != kFloat32 || !v.device.is_cpu() || (k <= 2 && v.sizes != state)) return false;
  }
  for (size_t t = 1; t < group.steps.size(); ++t) {
    const Node& n = g.nodes()[static_cast<size_t>(group.steps[t])];
    const Node& before = g.nodes()[static_cast<size_t>(group.steps[t - 1])];
    if (n.inputs[1] != before.outputs[0] || n.inputs[2] != before.outputs[1] ||
        n.inputs[4] != first.inputs[4] || input_or_none(n, 6) != input_or_none(first, 6) ||
        readers.count[static_cast<size_t>(before.outputs[1])] != 1)
      return false;
  }
  return true;
}

// A view of input in the new graph, laid out as its shape rule lays it out.
ValueId emit_view(Graph& ng, OpId op, ValueId input, ops::Attrs attrs) {
  const Tensor meta = ng.meta_hint(input);
  const TensorList view = ops::dispatch(op, std::span<const Tensor>(&meta, 1), attrs);
  const int32_t index = ng.add_node(op, {input}, std::move(attrs), view);
  ng.node(index).grad_enabled = false;
  return ng.nodes()[static_cast<size_t>(index)].outputs[0];
}

// A node of op on inputs of the new graph, its outputs as its shape rule
// makes them (contiguous, new storages); returns the outputs.
std::vector<ValueId> emit(Graph& ng, OpId op, std::vector<ValueId> inputs, ops::Attrs attrs) {
  TensorList metas;
  for (ValueId in : inputs) metas.push_back(in == kNoValue ? Tensor() : ng.meta_hint(in));
  const ops::Inferred inferred = ops::infer(op, metas, attrs);
  TensorList outs;
  for (const ops::TensorMeta& m : inferred.outputs)
    outs.push_back(ops::make_tensor(m.sizes, m.dtype, m.device, true));
  const int32_t index = ng.add_node(op, std::move(inputs), std::move(attrs), outs);
  ng.node(index).grad_enabled = false;
  return ng.nodes()[static_cast<size_t>(index)].outputs;
}

}  // namespace

Trace batch_recurrent_projections(const Trace& trace) {
  const Graph& g = trace.graph;
  const auto& nodes = g.nodes();
  for (const Node& n : nodes)
    if (n.inplace() || n.draw_count >= 0 || n.generator) return trace;
  std::vector<Group> groups = find_groups(g);
  if (groups.empty()) return trace;
  const Readers readers(g);
  for (Group& group : groups) group.sequence = one_chain(g, readers, group);
  // The new order: Kahn's algorithm over the old nodes plus one product per
  // group, taking the earliest ready in program order. A group's product
  // needs every input x_t; its steps need the product.
  const int32_t count = static_cast<int32_t>(nodes.size());
  const auto total = static_cast<size_t>(count) + groups.size();
  std::vector<int32_t> group_of(nodes.size(), -1), slot_of(nodes.size(), -1);
  for (size_t k = 0; k < groups.size(); ++k) {
    for (size_t t = 0; t < groups[k].steps.size(); ++t) {
      group_of[static_cast<size_t>(groups[k].steps[t])] = static_cast<int32_t>(k);
      slot_of[static_cast<size_t>(groups[k].steps[t])] = static_cast<int32_t>(t);
    }
  }
  std::vector<std::vector<int32_t>> after(total);  // item -> items waiting on it
  std::vector<int32_t> waiting(total, 0);
  // Item `item` waits for the node that makes value v, if a node does.
  auto depend = [&](int32_t item, ValueId v) {
    if (v == kNoValue || g.value(v).kind != ValueKind::kNode) return;
    after[static_cast<size_t>(g.value(v).producer)].push_back(item);
    ++waiting[static_cast<size_t>(item)];
  };
  for (int32_t i = 0; i < count; ++i) {
    const Node& n = nodes[static_cast<size_t>(i)];
    const int32_t k = group_of[static_cast<size_t>(i)];
    size_t first_input = 0;
    if (k >= 0) {
      // x_t feeds the product (and, on the first step, the weight and bias
      // it multiplies, where the program computes them); the step reads
      // the product instead of x_t.
      const int32_t product = count + k;
      depend(product, n.inputs[0]);
      if (slot_of[static_cast<size_t>(i)] == 0) {
        depend(product, n.inputs[3]);
        depend(product, input_or_none(n, 5));
        if (groups[static_cast<size_t>(k)].sequence) {  // the state and hidden weights too
          for (size_t in : {1, 2, 4, 6}) depend(product, input_or_none(n, in));
        }
      }
      after[static_cast<size_t>(product)].push_back(i);
      ++waiting[static_cast<size_t>(i)];
      first_input = 1;
    }
    // Once per producer (a value may be read twice; a waiting count per edge).
    std::vector<int32_t> seen;
    for (size_t in = first_input; in < n.inputs.size(); ++in) {
      const ValueId v = n.inputs[in];
      if (v == kNoValue || g.value(v).kind != ValueKind::kNode) continue;
      if (std::find(seen.begin(), seen.end(), g.value(v).producer) != seen.end()) continue;
      seen.push_back(g.value(v).producer);
      depend(i, v);
    }
  }
  // Items by the program position they stand for: a product at its first step's.
  auto position = [&](int32_t item) {
    return item < count ? item : groups[static_cast<size_t>(item - count)].steps.front();
  };
  auto later = [&](int32_t a, int32_t b) {
    return position(a) != position(b) ? position(a) > position(b) : a < b;
  };
  std::priority_queue<int32_t, std::vector<int32_t>, decltype(later)> ready(later);
  for (size_t item = 0; item < total; ++item)
    if (waiting[item] == 0) ready.push(static_cast<int32_t>(item));
  Rewriter r(trace);
  Graph& ng = r.new_graph();
  std::vector<ValueId> product(groups.size(), kNoValue);
  std::vector<std::vector<ValueId>> sequence(groups.size());  // output, h_n, c_n
  size_t emitted = 0;
  while (!ready.empty()) {
    const int32_t item = ready.top();
    ready.pop();
    ++emitted;
    if (item >= count) {
      const Group& group = groups[static_cast<size_t>(item - count)];
      const Node& first = nodes[static_cast<size_t>(group.steps.front())];
      std::vector<ValueId> xs;
      for (int32_t s : group.steps) xs.push_back(r.map(nodes[static_cast<size_t>(s)].inputs[0]));
      const ops::Attrs dim{int64_t{0}};
      const ValueId stacked = emit(ng, OpId::stack, std::move(xs), dim)[0];
      if (group.sequence) {
        std::vector<ValueId> tensors{stacked,
                                     emit_view(ng, OpId::unsqueeze, r.map(first.inputs[1]), dim),
                                     emit_view(ng, OpId::unsqueeze, r.map(first.inputs[2]), dim),
                                     r.map(first.inputs[3]), r.map(first.inputs[4])};
        const bool biases = input_or_none(first, 5) != kNoValue;
        if (biases) {
          tensors.push_back(r.map(first.inputs[5]));
          tensors.push_back(r.map(first.inputs[6]));
        }
        ops::Attrs attrs{int64_t{1}, biases};
        sequence[static_cast<size_t>(item - count)] =
            emit(ng, OpId::lstm_sequence, std::move(tensors), std::move(attrs));
      } else {
        product[static_cast<size_t>(item - count)] =
            emit(ng, OpId::linear,
                 {stacked, r.map(first.inputs[3]), r.map(input_or_none(first, 5))}, {})[0];
      }
    } else if (group_of[static_cast<size_t>(item)] >= 0) {
      const auto k = static_cast<size_t>(group_of[static_cast<size_t>(item)]);
      const Node& n = nodes[static_cast<size_t>(item)];
      const int64_t t = slot_of[static_cast<size_t>(item)];
      // Row t of a result: a view.
      const auto row = [&](ValueId of, int64_t index) {
        return emit_view(ng, OpId::select, of, ops::Attrs{int64_t{0}, index});
      };
      if (groups[k].sequence) {
        // h_t is row t of the output; only the last step's c is read.
        r.replace(n.outputs[0], row(sequence[k][0], t));
        if (static_cast<size_t>(t) + 1 == groups[k].steps.size())
          r.replace(n.outputs[1], row(sequence[k][2], 0));
      } else {
        const ValueId gates_x = row(product[k], t);
        const ValueId gates_h =
            emit(ng, OpId::linear,
                 {r.map(n.inputs[1]), r.map(n.inputs[4]), r.map(input_or_none(n, 6))}, {})[0];
        const std::vector<ValueId> state =
            emit(ng, OpId::lstm_cell, {gates_x, gates_h, r.map(n.inputs[2])}, {});
        for (size_t o = 0; o < n.outputs.size(); ++o) r.replace(n.outputs[o], state[o]);
      }
    } else {
      r.copy(nodes[static_cast<size_t>(item)]);
    }
    for (int32_t next : after[static_cast<size_t>(item)])
      if (--waiting[static_cast<size_t>(next)] == 0) ready.push(next);
  }
  if (emitted != total) return trace;  // a cycle cannot happen; if it did, change nothing
  return r.finish();
}

}  // namespace kiln::compiler
