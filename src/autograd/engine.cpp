// The backward engine: runs the recorded graph from the outputs to the leaves,
// later nodes first, summing the gradients that meet at a node.
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "autograd/meta.h"
#include "autograd/nodes.h"
#include "autograd/rules/common.h"
#include "kiln/autograd.h"
#include "kiln/ops/factory.h"
#include "ops/autocast.h"
#include "ops/tracing.h"

namespace kiln::autograd {
namespace {

// What one run of the engine does besides running nodes: for grad(), where the
// gradients of the inputs are caught; for backward(inputs=...), which leaves and
// retained non-leaves receive them.
struct Capture {
  Node* node;
  uint32_t slot;
  size_t index;  // into the caller's inputs
};

class GraphRun {
 public:
  GraphRun(bool keep_graph, bool accumulate) : keep_graph_(keep_graph), accumulate_(accumulate) {}

  void add_root(const Edge& edge, const Tensor& grad) {
    roots_.push_back(edge);
    add_grad(edge, grad);
  }
  void add_capture(const Edge& edge, size_t index) {
    captures_.push_back({edge.node.get(), edge.slot, index});
    targets_.insert(edge.node.get());
  }
  // Runs the graph; returns the captured gradients (one per capture index).
  TensorList run(size_t num_captures);

 private:
  void count_dependencies();
  void mark_needed();
  void add_grad(const Edge& edge, const Tensor& grad) {
    TensorList& buffer = buffers_[edge.node.get()];
    if (buffer.size() <= edge.slot) buffer.resize(edge.node->outputs().size());
    Tensor& slot = buffer[edge.slot];
    slot = slot.defined() ? slot + grad : grad;
  }
  void run_node(Node& node, TensorList& captured);

  bool keep_graph_;
  bool accumulate_;  // backward(): run leaf accumulators; grad(): don't
  std::vector<Edge> roots_;
  std::vector<Capture> captures_;
  std::unordered_set<Node*> targets_;
  std::unordered_map<Node*, int> dependencies_;
  std::unordered_map<Node*, bool> needed_;
  std::unordered_map<Node*, TensorList> buffers_;
  std::unordered_map<Node*, std::shared_ptr<Node>> owners_;
};

void GraphRun::count_dependencies() {
  std::vector<Node*> stack;
  for (const auto& r : roots_) {
    if (owners_.emplace(r.node.get(), r.node).second) stack.push_back(r.node.get());
  }
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next_edges()) {
      if (!e.valid()) continue;
      ++dependencies_[e.node.get()];
      if (owners_.emplace(e.node.get(), e.node).second) stack.push_back(e.node.get());
    }
  }
}

// A node is needed when it is a target or leads to one. Without targets every
// node is needed.
void GraphRun::mark_needed() {
  if (targets_.empty()) return;
  // Children before parents: repeat over a post-order of the graph.
  std::vector<Node*> order;
  std::unordered_set<Node*> seen;
  std::vector<std::pair<Node*, size_t>> stack;
  for (const auto& r : roots_) {
    if (!seen.insert(r.node.get()).second) continue;
    stack.push_back({r.node.get(), 0});
    while (!stack.empty()) {
      auto& [n, i] = stack.back();
      if (i < n->next_edges().size()) {
        const Edge& e = n->next_edges()[i++];
        if (e.valid() && seen.insert(e.node.get()).second) stack.push_back({e.node.get(), 0});
      } else {
        order.push_back(n);
        stack.pop_back();
      }
    }
  }
  for (Node* n : order) {
    bool need = targets_.count(n) > 0;
    for (const Edge& e : n->next_edges()) need = need || (e.valid() && needed_[e.node.get()]);
    needed_[n] = need;
  }
}

void GraphRun::run_node(Node& node, TensorList& captured) {
  TensorList grads = std::move(buffers_[&node]);
  buffers_.erase(&node);
  grads.resize(node.outputs().size());
  node.run_hooks(grads);
  for (const Capture& c : captures_) {
    if (c.node == &node && grads[c.slot].defined()) {
      captured[c.index] = captured[c.index].defined() ? captured[c.index] + grads[c.slot]
                                                      : grads[c.slot];
    }
  }
  const bool is_accumulator = dynamic_cast<AccumulateGrad*>(&node) != nullptr;
  const bool run = !targets_.empty() ? needed_[&node] && (!is_accumulator || accumulate_)
                                     : (!is_accumulator || accumulate_);
  bool any = false;
  for (const auto& g : grads) any = any || g.defined();
  TensorList out;
  if (run && any) {
    out = node.apply(std::move(grads));
    if (!keep_graph_) node.release_saved();
  }
  const auto& edges = node.next_edges();
  for (size_t i = 0; i < edges.size(); ++i) {
    if (!edges[i].valid()) continue;
    if (i < out.size() && out[i].defined()) add_grad(edges[i], out[i]);
  }
}

TensorList GraphRun::run(size_t num_captures) {
  // Each op's backward runs in its forward's dtypes, autocast or not.
  ops::autocast::Suspend no_autocast;
  count_dependencies();
  mark_needed();
  TensorList captured(num_captures);
  auto later_first = [](Node* a, Node* b) { return a->sequence_nr() < b->sequence_nr(); };
  std::priority_queue<Node*, std::vector<Node*>, decltype(later_first)> ready(later_first);
  std::unordered_set<Node*> queued;
  for (const auto& r : roots_) {
    if (dependencies_[r.node.get()] == 0 && queued.insert(r.node.get()).second)
      ready.push(r.node.get());
  }
  while (!ready.empty()) {
    Node* node = ready.top();
    ready.pop();
    if (targets_.empty() || needed_[node]) run_node(*node, captured);
    for (const Edge& e : node->next_edges()) {
      if (e.valid() && --dependencies_[e.node.get()] == 0) ready.push(e.node.get());
    }
  }
  return captured;
}

// The root edges and their gradients: ones for one-element outputs.
void add_roots(GraphRun& run, const TensorList& outputs, const TensorList& grad_outputs,
               std::string_view fn) {
  if (!grad_outputs.empty() && grad_outputs.size() != outputs.size()) {
    throw ValueError(detail::str_cat(fn, ": got ", grad_outputs.size(), " gradients for ",
                                     outputs.size(), " outputs"));
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& out = outputs[i];
    if (!out.defined() || !requires_grad(out)) {
      throw Error(detail::str_cat(fn, ": output ", i, " does not require grad and has no ",
                                  "grad_fn (was it computed under a NoGradGuard, or from tensors ",
                                  "without requires_grad_()?)"));
    }
    Tensor g = grad_outputs.empty() ? Tensor() : grad_outputs[i];
    if (!g.defined()) {
      if (out.numel() != 1) {
        throw ShapeError(detail::str_cat(fn, ": a gradient is needed for output ", i,
                                         " of shape ", out.sizes(),
                                         " (only one-element outputs get an implicit 1)"));
      }
      g = ones_like(out);
    } else if (g.sizes() != out.sizes()) {
      throw ShapeError(detail::str_cat(fn, ": gradient ", i, " has shape ", g.sizes(),
                                       ", its output has shape ", out.sizes()));
    }
    run.add_root(gradient_edge(out), g);
  }
}

}  // namespace

TensorList grad(const TensorList& outputs, const TensorList& inputs,
                const TensorList& grad_outputs, GradOptions options) {
  if (ops::TraceRecorder* tracer = ops::TraceRecorder::active()) tracer->note_backward();
  const bool keep = options.retain_graph.value_or(options.create_graph);
  GraphRun run(keep, /*accumulate=*/false);
  std::vector<Edge> input_edges;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!requires_grad(inputs[i])) {
      throw Error(detail::str_cat("grad: input ", i, " does not require grad"));
    }
    input_edges.push_back(gradient_edge(inputs[i]));
    run.add_capture(input_edges.back(), i);
  }
  add_roots(run, outputs, grad_outputs, "grad");
  TensorList result;
  {
    std::optional<NoGradGuard> no_grad;
    std::optional<EnableGradGuard> enable_grad;
    if (options.create_graph) enable_grad.emplace(); else no_grad.emplace();
    result = run.run(inputs.size());
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!result[i].defined() && !options.allow_unused) {
      throw Error(detail::str_cat("grad: input ", i, " (shape ", inputs[i].sizes(),
                                  ") was not used to compute the outputs; pass allow_unused "
                                  "to get an undefined gradient for it"));
    }
  }
  return result;
}

void backward(const TensorList& outputs, const TensorList& grad_outputs,
              std::optional<bool> retain_graph, bool create_graph, const TensorList& inputs) {
  // Inside kiln::compile the engine runs on proxies and its ops are recorded.
  if (ops::TraceRecorder* tracer = ops::TraceRecorder::active()) tracer->note_backward();
  GraphRun run(retain_graph.value_or(create_graph), /*accumulate=*/true);
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!requires_grad(inputs[i])) {
      throw Error(detail::str_cat("backward: input ", i, " does not require grad"));
    }
    run.add_capture(gradient_edge(inputs[i]), i);
  }
  add_roots(run, outputs, grad_outputs, "backward");
  std::optional<NoGradGuard> no_grad;
  std::optional<EnableGradGuard> enable_grad;
  if (create_graph) enable_grad.emplace(); else no_grad.emplace();
  TensorList captured = run.run(inputs.size());
  // Leaves got theirs from their accumulators; a non-leaf input keeps its own.
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].is_leaf() || !captured[i].defined()) continue;
    Tensor g = create_graph ? captured[i] : captured[i].detach();
    const Tensor old = inputs[i].grad();
    ensure_meta(inputs[i]).grad = old.defined() ? (old + g) : g;
  }
}

}  // namespace kiln::autograd
