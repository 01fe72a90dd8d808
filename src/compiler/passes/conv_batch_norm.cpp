// Convolution + batch-norm folding, for frozen graphs: conv(x, W, b) read
// only by batch_norm(eval; gamma, beta, mean, var constants) becomes
// conv(x, W * s, (b - mean) * s + beta) with s = gamma / sqrt(var + eps) per
// output channel, computed in float64 and rounded to W's dtype once.
#include "compiler/passes/pass.h"

#include "kiln/autograd.h"
#include "kiln/ops/pointwise.h"

namespace kiln::compiler {
namespace {

bool is_constant(const Graph& g, ValueId id) { return id == kNoValue || g.value(id).kind == ValueKind::kConstant; }

const Tensor& constant(const Graph& g, ValueId id) {
  return g.constant_values()[static_cast<size_t>(g.value(id).slot)];
}

}  // namespace

Trace fold_conv_batch_norm(const Trace& trace) {
  const Graph& g = trace.graph;
  std::vector<int32_t> uses(g.values().size(), 0), consumer(g.values().size(), -1);
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const Node& n = g.nodes()[i];
    for (ValueId in : n.inputs) {
      if (in == kNoValue) continue;
      ++uses[static_cast<size_t>(in)];
      consumer[static_cast<size_t>(in)] = static_cast<int32_t>(i);
    }
    if (n.inplace()) uses[static_cast<size_t>(n.target)] += 2;  // never folded through
  }
  for (ValueId id : g.outputs()) uses[static_cast<size_t>(id)] += 2;
  std::vector<bool> skip(g.nodes().size(), false);
  NoGradGuard no_grad;
  Rewriter r(trace);
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    if (skip[i]) continue;
    const Node& n = g.nodes()[i];
    const bool conv = n.op == ops::OpId::conv2d || n.op == ops::OpId::conv1d;
    const ValueId out = n.outputs.empty() ? kNoValue : n.outputs[0];
    const int32_t m_index = out == kNoValue ? -1 : consumer[static_cast<size_t>(out)];
    bool fold = conv && uses[static_cast<size_t>(out)] == 1 && m_index >= 0 && is_constant(g, n.inputs[1]) &&
                (n.inputs.size() < 3 || is_constant(g, n.inputs[2]));
    const Node* m = fold ? &g.nodes()[static_cast<size_t>(m_index)] : nullptr;
    if (fold) {
      fold = m->op == ops::OpId::batch_norm && !m->attrs.b(0) && m->inputs[0] == out && m->inputs.size() == 5 &&
             m->inputs[3] != kNoValue && m->inputs[4] != kNoValue;
      for (size_t k = 1; fold && k < 5; ++k) fold = is_constant(g, m->inputs[k]);
      fold = fold && uses[static_cast<size_t>(m->outputs[1])] == 0 && uses[static_cast<size_t>(m->outputs[2])] == 0;
    }
    if (!fold) {
      r.copy(n);
      continue;
    }
    const Tensor& w = constant(g, n.inputs[1]);
    const int64_t channels = w.size(0);
    const double eps = m->attrs.f(1);
    const Tensor var = constant(g, m->inputs[4]).to(kFloat64), mean = constant(g, m->inputs[3]).to(kFloat64);
    Tensor scale = (var + eps).rsqrt();
    if (m->inputs[1] != kNoValue) scale = scale * constant(g, m->inputs[1]).to(kFloat64);
    Shape per_channel(static_cast<size_t>(w.dim()), 1);
    per_channel[0] = channels;
    const Tensor folded_w = (w.to(kFloat64) * scale.reshape(per_channel)).to(w.dtype());
    Tensor bias = n.inputs.size() > 2 && n.inputs[2] != kNoValue ? constant(g, n.inputs[2]).to(kFloat64)
                                                                   : zeros({channels}, {.dtype = kFloat64, .device = w.device()});
    bias = (bias - mean) * scale;
    if (m->inputs[2] != kNoValue) bias = bias + constant(g, m->inputs[2]).to(kFloat64);
    Graph& ng = r.new_graph();
    const ValueId w_id = ng.add_constant(folded_w), b_id = ng.add_constant(bias.to(w.dtype()));
    const int32_t node = ng.add_node(n.op, {r.map(n.inputs[0]), w_id, b_id}, n.attrs, {g.meta_tensor(m->outputs[0])});
    ng.node(node).grad_enabled = n.grad_enabled;
    r.replace(m->outputs[0], ng.nodes()[static_cast<size_t>(node)].outputs[0]);
    skip[static_cast<size_t>(m_index)] = true;
  }
  return r.finish();
}

}  // namespace kiln::compiler
