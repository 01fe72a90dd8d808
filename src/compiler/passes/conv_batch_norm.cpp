// Convolution + batch-norm folding, for frozen graphs: conv(x, W, b) read
// only by batch_norm(eval; gamma, beta, mean, var constants) becomes
// conv(x, W * s, (b - mean) * s + beta) with s = gamma / sqrt(var + eps) per
// output channel, computed in float64 and rounded to W's dtype once.
//
// W * s is a lazy constant (compiler/ir/graph.h): it is computed when the
// executable asks for it, which on the CPU hands it to the convolution's
// primitive to keep in its own layout and lets it go, so that a frozen
// graph holds one copy of each folded weight, not two (docs/architecture.md,
// "Prepared weights"). The function's other graphs (its other sizes, its
// later traces) get the same folded constants (passes/folded_constants.h),
// so a frozen model's weights are prepared once for all its sizes where
// their kernels read one layout.
#include "compiler/passes/pass.h"

#include <algorithm>

#include "compiler/passes/folded_constants.h"
#include "kiln/autograd.h"
#include "kiln/ops/pointwise.h"
#include "ops/dispatch.h"

namespace kiln::compiler {
namespace {

bool is_constant(const Graph& g, ValueId id) { return id == kNoValue || g.value(id).kind == ValueKind::kConstant; }

Tensor constant(const Graph& g, ValueId id) {
  return g.constant(static_cast<size_t>(g.value(id).slot));
}

// w * scale (float64, one per output channel) rounded to w's dtype, a block
// of output channels at a time, so that no float64 copy of the whole weight
// is ever held (the same values: each element is one product, rounded once).
Tensor scale_weight(const Tensor& w, const Tensor& scale) {
  NoGradGuard no_grad;
  Tensor out = ops::make_tensor(w.sizes(), w.dtype(), w.device());
  const int64_t channels = w.size(0);
  const int64_t per_channel = channels == 0 ? 1 : std::max<int64_t>(1, w.numel() / channels);
  const int64_t block = std::max<int64_t>(1, (int64_t{1} << 16) / per_channel);
  Shape sizes(static_cast<size_t>(w.dim()), 1);
  for (int64_t o = 0; o < channels; o += block) {
    const int64_t k = std::min(block, channels - o);
    sizes[0] = k;
    out.narrow(0, o, k).copy_(
        (w.narrow(0, o, k).to(kFloat64) * scale.narrow(0, o, k).reshape(sizes)).to(w.dtype()));
  }
  return out;
}

// The folded weight and bias of conv node n read by batch norm m, added to
// `into` as constants: W * s (lazy, unless one element) and
// (b - mean) * s + beta.
std::vector<ValueId> fold_weights(const Graph& g, const Node& n, const Node& m, Graph& into) {
  const Tensor w = constant(g, n.inputs[1]);
  const int64_t channels = w.size(0);
  const double eps = m.attrs.f(1);
  const Tensor var = constant(g, m.inputs[4]).to(kFloat64);
  const Tensor mean = constant(g, m.inputs[3]).to(kFloat64);
  Tensor scale = (var + eps).rsqrt();
  if (m.inputs[1] != kNoValue) scale = scale * constant(g, m.inputs[1]).to(kFloat64);
  Tensor bias = n.inputs.size() > 2 && n.inputs[2] != kNoValue
                    ? constant(g, n.inputs[2]).to(kFloat64)
                    : zeros({channels}, {.dtype = kFloat64, .device = w.device()});
  bias = (bias - mean) * scale;
  if (m.inputs[2] != kNoValue) bias = bias + constant(g, m.inputs[2]).to(kFloat64);
  // A weight of one element is a number: folded now, its value in the graph's hash.
  const ValueId w_id =
      w.numel() == 1
          ? into.add_constant(scale_weight(w, scale))
          : into.add_lazy_constant(ops::make_tensor(w.sizes(), w.dtype(), w.device(), true),
                                   [w, scale](int64_t begin, int64_t end) {
                                     return scale_weight(w.narrow(0, begin, end - begin),
                                                         scale.narrow(0, begin, end - begin));
                                   });
  return {w_id, into.add_constant(bias.to(w.dtype()))};
}

// FoldedConstants' tag of this fold.
constexpr int32_t kFoldConvBatchNorm = 1;

}  // namespace

Trace fold_conv_batch_norm(const Trace& trace, FoldedConstants* folded) {
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
    // The same constants folded before (another size of the program, another
    // trace): the same folded constants, whose prepared forms are made once.
    const std::vector<ValueId> sources = {
        n.inputs[1],  n.inputs.size() > 2 ? n.inputs[2] : kNoValue,
        m->inputs[1], m->inputs[2],
        m->inputs[3], m->inputs[4]};
    const FoldedConstants::Key key =
        FoldedConstants::key(kFoldConvBatchNorm, g, sources, {m->attrs.f(1)});
    Graph& ng = r.new_graph();
    std::optional<std::vector<ValueId>> made = folded ? folded->find(key, ng) : std::nullopt;
    if (!made) {
      made = fold_weights(g, n, *m, ng);
      if (folded) folded->add(key, g, sources, ng, *made);
    }
    const ValueId w_id = (*made)[0], b_id = (*made)[1];
    const int32_t node =
        ng.add_node(n.op, {r.map(n.inputs[0]), w_id, b_id}, n.attrs, {g.meta_hint(m->outputs[0])});
    ng.node(node).grad_enabled = n.grad_enabled;
    r.replace(m->outputs[0], ng.nodes()[static_cast<size_t>(node)].outputs[0]);
    skip[static_cast<size_t>(m_index)] = true;
  }
  return r.finish();
}

}  // namespace kiln::compiler
