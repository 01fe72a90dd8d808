// Batched recurrent projections: the steps of an LSTM written as a loop
// (`for t: state = cell(x[t], state)`) each read the whole input weight to
// project one row, `linear(x_t, W_ih, b_ih)` inside lstm_step. Where the
// inputs x_t do not depend on the steps themselves (the sequence's rows,
// the layer below's outputs), their projections are one product over all
// of them, which reads the weight once; each step keeps its hidden
// projection and the cell (lstm_step is exactly linear(x, W_ih, b_ih),
// linear(h, W_hh, b_hh) and lstm_cell; docs/compile.md, "Passes").
//
// The nodes are then laid out again in an order that respects every
// dependency: a layer's steps all come before the product over their
// outputs, and the next layer's steps after it. So the pass leaves graphs
// with in-place writes or random draws alone (their order is part of their
// meaning), and strict mode skips it: the product over T rows rounds as a
// product of T rows, not as T products of one.
#include <algorithm>
#include <queue>

#include "compiler/passes/pass.h"
#include "ops/dispatch.h"

namespace kiln::compiler {
namespace {

using ops::OpId;

// A group of lstm_step nodes (program order) sharing one input weight and
// bias, whose inputs x_t none of them feeds.
struct Group {
  std::vector<int32_t> steps;
};

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
    const std::pair<ValueId, ValueId> key{n.inputs[3],
                                          n.inputs.size() > 5 ? n.inputs[5] : kNoValue};
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
    const Shape& sizes = g.value(nodes[static_cast<size_t>(candidates[0])].inputs[0]).sizes;
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

// A node of op on inputs of the new graph, its outputs as its shape rule
// makes them (contiguous, new storages); returns the outputs.
std::vector<ValueId> emit(Graph& ng, OpId op, std::vector<ValueId> inputs, ops::Attrs attrs) {
  TensorList metas;
  for (ValueId in : inputs) metas.push_back(in == kNoValue ? Tensor() : ng.meta_tensor(in));
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
  const std::vector<Group> groups = find_groups(g);
  if (groups.empty()) return trace;
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
        if (n.inputs.size() > 5) depend(product, n.inputs[5]);
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
      ops::Attrs dim;
      dim.push_back(int64_t{0});
      const ValueId stacked = emit(ng, OpId::stack, std::move(xs), std::move(dim))[0];
      product[static_cast<size_t>(item - count)] =
          emit(ng, OpId::linear,
               {stacked, r.map(first.inputs[3]),
                first.inputs.size() > 5 ? r.map(first.inputs[5]) : kNoValue},
               {})[0];
    } else if (group_of[static_cast<size_t>(item)] >= 0) {
      const auto k = static_cast<size_t>(group_of[static_cast<size_t>(item)]);
      const Node& n = nodes[static_cast<size_t>(item)];
      const int64_t t = slot_of[static_cast<size_t>(item)];
      // Row t of the product: a view.
      const Value& p = ng.value(product[k]);
      auto row = std::make_shared<TensorImpl>();
      row->storage =
          std::make_shared<Storage>(ng.storages()[static_cast<size_t>(p.storage)].nbytes, p.device);
      row->sizes = {p.sizes[1], p.sizes[2]};
      row->strides = {p.strides[1], p.strides[2]};
      row->offset = p.offset + t * p.strides[0];
      row->dtype = p.dtype;
      ops::Attrs select;
      select.push_back(int64_t{0});
      select.push_back(t);
      const int32_t view =
          ng.add_node(OpId::select, {product[k]}, std::move(select), {Tensor(row)});
      ng.node(view).grad_enabled = false;
      const ValueId gates_x = ng.nodes()[static_cast<size_t>(view)].outputs[0];
      const ValueId gates_h = emit(ng, OpId::linear,
                                   {r.map(n.inputs[1]), r.map(n.inputs[4]),
                                    n.inputs.size() > 6 ? r.map(n.inputs[6]) : kNoValue},
                                   {})[0];
      const std::vector<ValueId> state =
          emit(ng, OpId::lstm_cell, {gates_x, gates_h, r.map(n.inputs[2])}, {});
      for (size_t o = 0; o < n.outputs.size(); ++o) r.replace(n.outputs[o], state[o]);
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
