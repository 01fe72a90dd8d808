#include "compiler/ir/symbolic_shapes.h"

#include <algorithm>
#include <sstream>

#include "core/shape_util.h"
#include "ops/op_table.h"
#include "ops/sym_tensor.h"

namespace kiln::compiler {
namespace {

// Row-major strides over symbolic sizes where the traced strides are
// row-major; the traced strides as constants otherwise. A size-1 dim whose
// stride is not the row-major one keeps it: its stride never matters (only
// index 0 exists), and layouts are compared without it (same_strides).
SymShape input_strides(const Value& v, const SymShape& sizes) {
  if (!contiguous_layout(sym::hints(v.sizes), sym::hints(v.strides))) return v.strides;
  SymShape out(sizes.size());
  SymInt expected = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    out[i] = v.sizes[i].hint() == 1 && v.strides[i].hint() != expected.hint()
                 ? SymInt(v.strides[i].hint())
                 : expected;
    expected *= sizes[i].hint() < 1 ? SymInt(1) : sizes[i];
  }
  return out;
}

bool same_hints(const SymShape& s, const Shape& h) { return sym::hints(s) == h; }

// Strides equal where they matter: in every dim whose size is not 1.
bool same_strides(const Shape& sizes, const Shape& a, const Shape& b) {
  if (a.size() != b.size() || sizes.size() != a.size()) return false;
  for (size_t d = 0; d < a.size(); ++d)
    if (sizes[d] != 1 && a[d] != b[d]) return false;
  return true;
}

// The layout printed: "[s0, 64]", with "{strides+offset}" where it is not
// the default one.
std::string layout_text(const SymbolicShapes::Layout& l) {
  std::string out = sym::str(l.sizes);
  const SymShape row_major = contiguous_strides(l.sizes);
  bool plain =
      !l.offset.is_symbolic() && l.offset.hint() == 0 && l.strides.size() == row_major.size();
  for (size_t i = 0; plain && i < l.strides.size(); ++i)
    plain = l.strides[i].expr() == row_major[i].expr();
  if (!plain) {
    out += "{" + sym::str(l.strides) + "+" +
           (l.offset.is_symbolic() ? l.offset.expr().str() : std::to_string(l.offset.hint())) + "}";
  }
  return out;
}

template <class F>
bool each_layout_entry(const SymbolicShapes::Layout& l, const Value& v,
                       std::span<const int64_t> values, F&& differs) {
  if (l.sizes.size() != v.sizes.size() || l.strides.size() != v.strides.size())
    return differs("rank");
  for (size_t d = 0; d < l.sizes.size(); ++d)
    if (l.sizes[d].expr().eval(values) != v.sizes[d].hint()) return differs("sizes");
  for (size_t d = 0; d < l.strides.size(); ++d)
    if (v.sizes[d].hint() != 1 && l.strides[d].expr().eval(values) != v.strides[d].hint())
      return differs("strides");
  if (l.offset.expr().eval(values) != v.offset.hint()) return differs("offset");
  return true;
}

// Sets the layouts of n's outputs in `layouts` (by value id) from its
// inputs' there, by its shape rule on symbols; false, with why, where the
// rule gives other hints than the graph has. Throws where the rule cannot
// run on them. `chosen`: a result laid out channels last is a pass's choice
// (keep_channels_last), which holds at every size; in a trace it is the
// op's, which may not, and the rule's row-major layout must match.
bool rule_layouts(const Graph& g, const Node& n, std::vector<SymbolicShapes::Layout>& layouts,
                  bool chosen, std::string& why) {
  const ops::OpSchema& schema = ops::op_schema(n.op);
  std::vector<ops::SymTensor> inputs;
  for (ValueId in : n.inputs) {
    if (in == kNoValue) {
      inputs.emplace_back();
      continue;
    }
    const Value& iv = g.value(in);
    const SymbolicShapes::Layout& il = layouts[static_cast<size_t>(in)];
    inputs.emplace_back(il.sizes, il.strides, il.offset, iv.dtype, iv.device, iv.wrapped_number);
  }
  ops::Attrs attrs = n.attrs;
  ops::SymShapeCtx ctx{schema, inputs, attrs, {}, {}};
  schema.sym_shape_rule(ctx);
  // An in-place node's output is its target's new version, laid out as
  // the target; its rule runs for the guards its checks make.
  if (ctx.outputs.size() != n.outputs.size()) {
    why = detail::str_cat(schema.name, ": its rule gives ", ctx.outputs.size(),
                          " outputs, the graph has ", n.outputs.size());
    return false;
  }
  for (size_t k = 0; k < n.outputs.size(); ++k) {
    SymbolicShapes::Layout& ol = layouts[static_cast<size_t>(n.outputs[k])];
    const Value& ov = g.value(n.outputs[k]);
    if (n.inplace()) {
      ol = layouts[static_cast<size_t>(n.target)];
    } else if (schema.has_flag(ops::kView)) {
      ol = {ctx.outputs[k].sizes, ctx.outputs[k].strides, ctx.outputs[k].offset};
    } else if (chosen && ov.sizes.size() == 4 &&
               channels_last_layout(sym::hints(ov.sizes), sym::hints(ov.strides))) {
      // A layout a pass chose (channels last): the same order in memory.
      ol = {ctx.outputs[k].sizes, channels_last_strides(ctx.outputs[k].sizes), SymInt(0)};
    } else {
      ol = {ctx.outputs[k].sizes, contiguous_strides(ctx.outputs[k].sizes), SymInt(0)};
    }
    if (!same_hints(ol.sizes, sym::hints(ov.sizes)) ||
        !same_strides(sym::hints(ov.sizes), sym::hints(ol.strides), sym::hints(ov.strides)) ||
        ol.offset.hint() != ov.offset.hint()) {
      why = detail::str_cat(schema.name, " (%", n.outputs[k], "): its rule on symbols gives ",
                            ol.sizes, "{", ol.strides, "+", ol.offset, "}, the graph has ",
                            ov.sizes, "{", ov.strides, "+", ov.offset, "}");
      return false;
    }
  }
  return true;
}

// The bytes a value's layout reaches in its storage, from its start.
SymInt extent_bytes(const Value& v) {
  SymInt last = v.offset;
  for (size_t d = 0; d < v.sizes.size(); ++d) {
    if (v.sizes[d].hint() == 0) return SymInt(0);
    last = last + (v.sizes[d] - SymInt(1)) * v.strides[d];
  }
  return (last + SymInt(1)) * SymInt(static_cast<int64_t>(dtype_size(v.dtype)));
}

}  // namespace

namespace {

// A symbol the guards fix to one value (s1 == 16), and the guard that does,
// with the read it comes from (-1: none).
struct Fixed {
  int64_t value = 0;
  sym::Guard guard;
  int32_t read = -1;
};

std::optional<SymbolicShapes> symbolize_once(const Trace& trace, std::span<const LayoutRead> reads,
                                             std::span<const uint64_t> dynamic,
                                             const std::vector<std::optional<Fixed>>& fixed,
                                             std::string& why) {
  const Graph& g = trace.graph;
  SymbolicShapes out;
  out.values.resize(g.values().size());
  out.input_values = g.inputs();
  sym::GuardScope scope;
  size_t next = 0;
  try {
    for (size_t id = 0; id < g.values().size(); ++id) {
      const Value& v = g.values()[id];
      SymbolicShapes::Layout& l = out.values[id];
      if (v.kind != ValueKind::kNode) {
        l.sizes = v.sizes;
        const uint64_t dims =
            v.kind == ValueKind::kInput && static_cast<size_t>(v.slot) < dynamic.size()
                ? dynamic[static_cast<size_t>(v.slot)]
                : 0;
        for (size_t d = 0; d < v.sizes.size() && d < 64; ++d) {
          if (!(dims >> d & 1)) continue;
          const auto k = static_cast<int32_t>(out.symbols.size());
          const int64_t size = v.sizes[d].hint();
          out.symbols.push_back({v.slot, static_cast<int64_t>(d), size});
          if (static_cast<size_t>(k) < fixed.size() && fixed[static_cast<size_t>(k)]) {
            // Fixed by a guard: a constant, and that guard.
            const Fixed& f = *fixed[static_cast<size_t>(k)];
            out.guards.push_back(f.guard);
            out.guard_reads.push_back(f.read);
          } else if (size >= 2) {
            l.sizes[d] = SymInt(size, sym::Expr::symbol(k));
          } else {
            // Sizes 0 and 1 are not symbolic (a 1 broadcasts, a 0 is empty): the graph holds for
            // this size only.
            out.guards.push_back({sym::Expr::symbol(k) - sym::Expr(size), sym::Guard::Rel::kEq,
                                  detail::str_cat("argument ", v.slot, " dim ", d, " was ", size,
                                                  " when traced (0 and 1 are not symbolic)")});
            out.guard_reads.push_back(-1);
          }
        }
        l.strides = v.kind == ValueKind::kInput ? input_strides(v, l.sizes) : v.strides;
        l.offset = v.offset;
        continue;
      }
      // Nodes without outputs (kSideEffect) before it: their rules run for
      // the guards their checks make.
      while (next < g.nodes().size() && g.nodes()[next].outputs.empty()) {
        const Node& z = g.nodes()[next++];
        scope.set_origin(std::string(op_name(z)));
        if (!rule_layouts(g, z, out.values, false, why)) return std::nullopt;
      }
      // A node's outputs: made when its first output comes.
      const Node& n = g.nodes().at(next);
      if (static_cast<size_t>(v.producer) != next) {
        why = "the trace's values are not in the order of its nodes";
        return std::nullopt;
      }
      ++next;
      scope.set_origin(detail::str_cat(op_name(n), " (%", n.outputs.at(0), ")"));
      if (!rule_layouts(g, n, out.values, false, why)) return std::nullopt;
      // The node's other outputs come in later iterations; skip them there.
      id += n.outputs.size() - 1;
    }
    // The program's reads of layouts: each value it read is a guard.
    std::vector<sym::Guard> rule_guards = scope.take();
    for (size_t i = 0; i < reads.size(); ++i) {
      const LayoutRead& r = reads[i];
      const SymbolicShapes::Layout& l = out.values.at(static_cast<size_t>(r.value));
      sym::GuardScope read_scope;
      read_scope.set_origin(detail::str_cat("the function's read of ", r.describe()));
      const auto one = [&](const SymInt& now, int64_t seen) {
        if (now != seen)
          throw Error(detail::str_cat("the read of ", r.describe(), " gave ", seen, ", not ", now));
      };
      const auto all = [&](const SymShape& now) {
        if (now.size() != r.observed.size())
          throw Error(detail::str_cat("the read of ", r.describe(), " differs"));
        for (size_t d = 0; d < now.size(); ++d) one(now[d], r.observed[d]);
      };
      const auto d = static_cast<size_t>(r.dim);
      if (r.cmp) {
        // A comparison: its outcome is the guard (s1 <= 512, s1 == s3), not
        // the size.
        const bool outcome = r.other == kNoValue
                                 ? compare_size(l.sizes.at(d), *r.cmp, r.bound)
                                 : compare_size(l.sizes.at(d), *r.cmp,
                                                out.values.at(static_cast<size_t>(r.other))
                                                    .sizes.at(static_cast<size_t>(r.other_dim)));
        if (outcome != (r.observed.at(0) != 0))
          throw Error(detail::str_cat("the comparison ", r.describe(), " differs"));
      } else {
        switch (r.field) {
          case LayoutField::kSizes:
            all(l.sizes);
            break;
          case LayoutField::kSize:
            one(l.sizes.at(d), r.observed.at(0));
            break;
          case LayoutField::kStrides:
            all(l.strides);
            break;
          case LayoutField::kStride:
            one(l.strides.at(d), r.observed.at(0));
            break;
          case LayoutField::kNumel:
            one(shape_numel(l.sizes), r.observed.at(0));
            break;
          case LayoutField::kContiguous:
            one(contiguous_layout(l.sizes, l.strides) ? 1 : 0, r.observed.at(0));
            break;
          case LayoutField::kOffset:
            one(l.offset, r.observed.at(0));
            break;
        }
      }
      for (sym::Guard& g : read_scope.take()) {
        if (std::find(out.guards.begin(), out.guards.end(), g) != out.guards.end()) continue;
        out.guards.push_back(std::move(g));
        out.guard_reads.push_back(static_cast<int32_t>(i));
      }
    }
    // A rule's guard that a read made already is said once, as the read.
    for (sym::Guard& g : rule_guards) {
      if (std::find(out.guards.begin(), out.guards.end(), g) != out.guards.end()) continue;
      out.guards.push_back(std::move(g));
      out.guard_reads.push_back(-1);
    }
  } catch (const Error& e) {
    why = detail::str_cat("its shapes cannot be made symbolic: ", e.what());
    return std::nullopt;
  }
  out.reads.assign(reads.begin(), reads.end());
  return out;
}

}  // namespace

std::optional<SymbolicShapes> symbolize(const Trace& trace, std::span<const LayoutRead> reads,
                                        std::span<const uint64_t> dynamic, std::string& why) {
  // A guard that fixes a symbol (the program read a size: s1 == 16) makes
  // it a constant, and the shapes are made again without it, so that no
  // expression keeps a symbol whose value is known (32*s0*s1//512 is s0
  // when s1 is 16). Each round fixes at least one more symbol.
  std::vector<std::optional<Fixed>> fixed;
  while (true) {
    std::optional<SymbolicShapes> out = symbolize_once(trace, reads, dynamic, fixed, why);
    if (!out) return out;
    fixed.resize(out->symbols.size());
    bool more = false;
    for (size_t i = 0; i < out->guards.size(); ++i) {
      const sym::Guard& g = out->guards[i];
      const std::vector<int32_t> syms = g.expr.symbols();
      if (g.rel != sym::Guard::Rel::kEq || syms.size() != 1 || g.expr.terms().size() > 2) continue;
      const auto k = static_cast<size_t>(syms[0]);
      const sym::Expr::Term& t =
          g.expr.terms().back();  // the symbol's term (the constant sorts first)
      if (fixed[k] || t.factors.size() != 1 || (t.coeff != 1 && t.coeff != -1)) continue;
      if (out->symbols[k].hint < 2) continue;  // a constant already
      fixed[k] = Fixed{out->symbols[k].hint, g, out->guard_reads[i]};
      more = true;
    }
    if (!more) return out;
  }
}

void SymbolicShapes::apply(Graph& graph) const {
  for (size_t id = 0; id < values.size() && id < graph.values().size(); ++id)
    graph.set_layout(static_cast<ValueId>(id), values[id].sizes, values[id].strides,
                     values[id].offset);
  set_storage_bytes(graph);
}

std::string symbolic_graph_text(const Graph& graph) {
  return to_text(graph, [&](ValueId id) {
    const Value& v = graph.value(id);
    return layout_text({v.sizes, v.strides, v.offset});
  });
}

bool derive_layouts(Graph& graph, std::string& why) {
  std::vector<SymbolicShapes::Layout> layouts(graph.values().size());
  for (size_t id = 0; id < layouts.size(); ++id) {
    const Value& v = graph.values()[id];
    layouts[id] = {v.sizes, v.strides, v.offset};
  }
  try {
    for (const Node& n : graph.nodes())
      if (!rule_layouts(graph, n, layouts, true, why)) return false;
  } catch (const Error& e) {
    why = detail::str_cat("its shapes cannot be made symbolic: ", e.what());
    return false;
  }
  for (size_t id = 0; id < layouts.size(); ++id)
    if (graph.values()[id].kind == ValueKind::kNode)
      graph.set_layout(static_cast<ValueId>(id), std::move(layouts[id].sizes),
                       std::move(layouts[id].strides), std::move(layouts[id].offset));
  set_storage_bytes(graph);
  return true;
}

void set_storage_bytes(Graph& graph) {
  for (size_t s = 0; s < graph.storages().size(); ++s) {
    const StorageInfo& info = graph.storages()[s];
    if (info.root == kNoValue) continue;
    const Value& root = graph.value(info.root);
    if (root.kind == ValueKind::kNode) {
      // A node's own result: its elements, whatever their order.
      graph.set_storage_bytes(
          static_cast<int32_t>(s),
          shape_numel(root.sizes) * SymInt(static_cast<int64_t>(dtype_size(root.dtype))));
    } else if (symbolic(root)) {
      graph.set_storage_bytes(static_cast<int32_t>(s), extent_bytes(root));
    }
  }
}

Graph bind_layouts(const Graph& graph, std::span<const int64_t> values) {
  Graph out = graph;
  const auto eval = [&](const SymInt& v) { return SymInt(v.expr().eval(values)); };
  const auto eval_all = [&](const SymShape& s) {
    SymShape r;
    r.reserve(s.size());
    for (const SymInt& d : s) r.push_back(eval(d));
    return r;
  };
  for (size_t id = 0; id < graph.values().size(); ++id) {
    const Value& v = graph.values()[id];
    out.set_layout(static_cast<ValueId>(id), eval_all(v.sizes), eval_all(v.strides),
                   eval(v.offset));
  }
  for (size_t s = 0; s < graph.storages().size(); ++s)
    out.set_storage_bytes(static_cast<int32_t>(s), eval(graph.storages()[s].nbytes));
  // A random op draws a number per element of its result, as eager does.
  for (size_t i = 0; i < out.nodes().size(); ++i) {
    Node& n = out.node(static_cast<int32_t>(i));
    if (n.draw_count >= 0) n.draw_count = shape_numel(out.value(n.outputs.at(0)).sizes).hint();
  }
  return out;
}

std::vector<int64_t> SymbolicShapes::bind(const TensorList& inputs) const {
  std::vector<int64_t> out;
  out.reserve(symbols.size());
  for (const Symbol& s : symbols)
    out.push_back(inputs.at(static_cast<size_t>(s.input)).size(s.dim));
  return out;
}

bool SymbolicShapes::admits(const TensorList& inputs, std::string& why) const {
  const std::vector<int64_t> v = bind(inputs);
  if (!covers(v)) {
    why = "a symbol's size is 0 or 1, which its expressions do not cover";
    return false;
  }
  const auto values_of = [&v](const sym::Guard& g) { return symbol_values(g, v); };
  for (size_t i = 0; i < guards.size(); ++i) {
    const sym::Guard& g = guards[i];
    if (g.holds(v)) continue;
    const int32_t read = i < guard_reads.size() ? guard_reads[i] : -1;
    if (read >= 0) {
      // What the read would give now, as retrace would say it: from the
      // argument itself, or, for one number, from the guard (its value less
      // the one read); else from the layout's expressions. A comparison of
      // two sizes is said by the symbols' values.
      const LayoutRead& r = reads.at(static_cast<size_t>(read));
      const auto now_of = [&]() -> Shape {
        if (r.other != kNoValue) return r.observed;
        const auto slot = std::find(input_values.begin(), input_values.end(), r.value);
        if (slot != input_values.end()) {
          const Tensor& t = inputs.at(static_cast<size_t>(slot - input_values.begin()));
          Value real;
          real.sizes = sym::constants(t.sizes());
          real.strides = sym::constants(t.strides());
          real.offset = t.storage_offset();
          return observe(real, r);
        }
        if (!r.cmp && r.observed.size() == 1 && r.field != LayoutField::kSizes &&
            r.field != LayoutField::kStrides)
          return {g.expr.eval(v) + r.observed[0]};
        const Layout& l = values.at(static_cast<size_t>(r.value));
        Value made;
        for (const SymInt& s : l.sizes) made.sizes.push_back(s.expr().eval(v));
        for (const SymInt& s : l.strides) made.strides.push_back(s.expr().eval(v));
        made.offset = l.offset.expr().eval(v);
        return observe(made, r);
      };
      const Shape now = now_of();
      const std::string at = values_of(g);
      // A layout whose symbols a guard fixed keeps the traced value: then
      // the symbols' values say what changed.
      why = now == r.observed ? detail::str_cat("the function read ", r.describe(), ": guard ",
                                                g.str(), " fails for ", at)
                              : detail::str_cat("the function read ", r.describe(), " (now ",
                                                shown(r, now), "): guard ", g.str());
      return false;
    }
    const std::string at = values_of(g);
    why = detail::str_cat("guard ", g.str(), " (", g.origin, ") fails for ", at);
    return false;
  }
  // Each input laid out as its layout says (its strides follow its sizes).
  for (size_t slot = 0; slot < inputs.size() && slot < input_values.size(); ++slot) {
    const Tensor& t = inputs[slot];
    const Layout& l = values.at(static_cast<size_t>(input_values[slot]));
    bool same = l.sizes.size() == static_cast<size_t>(t.dim()) &&
                l.offset.expr().eval(v) == t.storage_offset();
    for (size_t d = 0; same && d < l.sizes.size(); ++d)
      same = l.sizes[d].expr().eval(v) == t.sizes()[d] &&
             (t.sizes()[d] == 1 || l.strides[d].expr().eval(v) == t.strides()[d]);
    if (!same) {
      why = detail::str_cat("argument ", slot, " is laid out as ", t.sizes(), "{", t.strides(), "+",
                            t.storage_offset(), "}, not as ", layout_text(l));
      return false;
    }
  }
  return true;
}

std::string symbol_values(const sym::Guard& g, std::span<const int64_t> values) {
  std::string at;
  for (int32_t k : g.expr.symbols())
    at += detail::str_cat(at.empty() ? "" : ", ", "s", k, " = ", values[static_cast<size_t>(k)]);
  return at;
}

bool SymbolicShapes::covers(std::span<const int64_t> values) const {
  for (size_t k = 0; k < symbols.size() && k < values.size(); ++k)
    if (symbols[k].hint >= 2 && values[k] < 2) return false;
  return true;
}

bool SymbolicShapes::describes(const Graph& graph, std::span<const int64_t> v,
                               std::string& why) const {
  if (graph.values().size() != values.size()) {
    why = detail::str_cat("the graph has ", graph.values().size(), " values, the symbolic shapes ",
                          values.size());
    return false;
  }
  for (size_t id = 0; id < values.size(); ++id) {
    const Value& gv = graph.values()[id];
    const bool ok = each_layout_entry(values[id], gv, v, [&](const char* what) {
      why =
          detail::str_cat("%", id, "'s ", what, ": the expressions give ", layout_text(values[id]),
                          ", the graph has ", gv.sizes, "{", gv.strides, "+", gv.offset, "}");
      return false;
    });
    if (!ok) return false;
  }
  return true;
}

std::string SymbolicShapes::text(const Graph& graph) const {
  std::ostringstream os;
  for (size_t k = 0; k < symbols.size(); ++k)
    os << "s" << k << ": argument " << symbols[k].input << " dim " << symbols[k].dim
       << " (traced as " << symbols[k].hint << ")\n";
  os << to_text(graph, [&](ValueId id) { return layout_text(values.at(static_cast<size_t>(id))); });
  for (const sym::Guard& g : guards) os << "guard " << g.str() << "  (" << g.origin << ")\n";
  return os.str();
}

std::string SymbolicShapes::dot(const Graph& graph) const {
  return to_dot(graph, [&](ValueId id) { return layout_text(values.at(static_cast<size_t>(id))); });
}

}  // namespace kiln::compiler
