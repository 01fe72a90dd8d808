#include "compiler/capture/capture.h"

#include <algorithm>
#include <optional>
#include <sstream>

#include "autograd/meta.h"
#include "core/shape_util.h"
#include "kiln/autograd.h"
#include "ops/dispatch.h"

namespace kiln::compiler {

Tracer::Tracer() { activate(); }

Tracer::~Tracer() {
  deactivate();
  // A trace that did not finish (an error) leaves every grad() as it found it.
  for (const auto& [real, original] : grad_owners_) {
    if (real.grad().impl_ptr() == original.impl_ptr()) continue;
    try {
      real.set_grad(original);
    } catch (...) {  // NOLINT(bugprone-empty-catch): it had this gradient before
    }
  }
}

void Tracer::link_gradient(const Tensor& real, const Tensor& proxy) {
  if (!real.requires_grad() || !real.is_leaf()) return;
  proxy.requires_grad_(true);
  std::shared_ptr<autograd::Node> acc = autograd::grad_accumulator(real);
  autograd::ensure_meta(proxy).grad_accumulator = acc;
  accumulators_.push_back(std::move(acc));
  note_grad_owner(real);
}

void Tracer::note_grad_owner(const Tensor& real) {
  const auto known = std::find_if(grad_owners_.begin(), grad_owners_.end(), [&](const auto& o) {
    return o.first.impl_ptr() == real.impl_ptr();
  });
  if (known == grad_owners_.end()) grad_owners_.emplace_back(real, real.grad());
}

Tensor Tracer::grad_at_start(const Tensor& real) const {
  for (const auto& [owner, original] : grad_owners_)
    if (owner.impl_ptr() == real.impl_ptr()) return original;
  return real.grad();
}

ValueId Tracer::same_data(const Tensor& t) const {
  int32_t storage = -1;
  for (const auto& [id, meta] : meta_storages_) {
    if (meta == t.storage()) storage = id;
  }
  if (storage < 0) return kNoValue;
  const auto& values = trace_.graph.values();
  for (size_t i = values.size(); i-- > 0;) {
    const Value& v = values[i];
    const TensorImpl& layout = t.impl();  // read unnoted: the trace's own
    if (v.storage == storage && sym::hints(v.sizes) == layout.sizes &&
        sym::hints(v.strides) == layout.strides && v.offset.hint() == layout.offset &&
        v.dtype == layout.dtype)
      return static_cast<ValueId>(i);
  }
  return kNoValue;
}

void Tracer::alias(const Tensor& proxy, const Tensor& alias) {
  const auto it = values_.find(proxy.impl_ptr().get());
  if (it == values_.end()) return;
  values_[alias.impl_ptr().get()] = it->second;
  aliases_.push_back(alias);
}

void Tracer::add_host_guard(std::string what, std::function<double()> read, const void* source,
                            bool flag) {
  if (source != nullptr && std::any_of(host_guards_.begin(), host_guards_.end(),
                                       [&](const HostGuard& h) { return h.source == source; }))
    return;
  const double value = read();
  host_guards_.push_back({std::move(what), std::move(read), value, source, flag});
}

std::string HostGuard::changed(double now) const {
  if (flag)
    return detail::str_cat(what, " was ", value != 0 ? "true" : "false", ", now ",
                           now != 0 ? "true" : "false");
  return detail::str_cat(what, " was ", value, ", now ", now);
}

Shape observe(const Value& v, LayoutField field, int64_t dim) {
  const Shape sizes = sym::hints(v.sizes), strides = sym::hints(v.strides);
  switch (field) {
    case LayoutField::kSizes:
      return sizes;
    case LayoutField::kSize:
      return {sizes.at(static_cast<size_t>(dim))};
    case LayoutField::kStrides:
      return strides;
    case LayoutField::kStride:
      return {strides.at(static_cast<size_t>(dim))};
    case LayoutField::kNumel:
      return {shape_numel(sizes)};
    case LayoutField::kContiguous:
      return {contiguous_layout(sizes, strides) ? 1 : 0};
    case LayoutField::kOffset:
      return {v.offset.hint()};
  }
  return {};
}

Shape observe(const Value& v, const LayoutRead& read, const Value* other) {
  if (!read.cmp) return observe(v, read.field, read.dim);
  int64_t bound = read.bound;
  if (read.other != kNoValue) {
    if (!other)
      throw Error(detail::str_cat("observe: ", read.describe(), " needs its other value"));
    bound = other->sizes.at(static_cast<size_t>(read.other_dim)).hint();
  }
  return {compare_size(v.sizes.at(static_cast<size_t>(read.dim)).hint(), *read.cmp, bound) ? 1 : 0};
}

std::string shown(LayoutField field, const Shape& observed) {
  using kiln::operator<<;
  std::ostringstream os;
  if (field == LayoutField::kSizes || field == LayoutField::kStrides) {
    os << observed;
  } else if (field == LayoutField::kContiguous) {
    os << (observed.at(0) != 0 ? "true" : "false");
  } else {
    os << observed.at(0);
  }
  return os.str();
}

std::string shown(const LayoutRead& read, const Shape& observed) {
  if (read.cmp) return observed.at(0) != 0 ? "true" : "false";
  return shown(read.field, observed);
}

std::string LayoutRead::describe() const {
  std::string file = where.file_name();
  if (const size_t slash = file.find_last_of('/'); slash != std::string::npos)
    file = file.substr(slash + 1);
  std::string what;
  switch (field) {
    case LayoutField::kSizes:
      what = "sizes()";
      break;
    case LayoutField::kSize:
      what = detail::str_cat("size(", dim, ")");
      break;
    case LayoutField::kStrides:
      what = "strides()";
      break;
    case LayoutField::kStride:
      what = detail::str_cat("stride(", dim, ")");
      break;
    case LayoutField::kNumel:
      what = "numel()";
      break;
    case LayoutField::kContiguous:
      what = "is_contiguous()";
      break;
    case LayoutField::kOffset:
      what = "storage_offset()";
      break;
  }
  if (cmp) {
    static constexpr const char* kOps[] = {" == ", " != ", " < ", " <= ", " > ", " >= "};
    what += detail::str_cat(" of %", value, kOps[static_cast<int>(*cmp)]);
    what += other == kNoValue ? detail::str_cat(bound)
                              : detail::str_cat("size(", other_dim, ") of %", other);
  } else {
    what += detail::str_cat(" of %", value);
  }
  return detail::str_cat(what, " at ", file, ":", where.line(), ", which gave ",
                         shown(*this, observed));
}

void Tracer::note_layout_read(const TensorImpl& impl, LayoutField field, int64_t dim,
                              const std::source_location& where) {
  const auto it = values_.find(&impl);
  if (it == values_.end()) {
    unmapped_read_ = true;
    return;
  }
  const uint64_t key = static_cast<uint64_t>(static_cast<uint32_t>(it->second)) << 16 |
                       static_cast<uint64_t>(field) << 8 | static_cast<uint64_t>(dim & 0xff);
  const auto at = std::lower_bound(layout_read_keys_.begin(), layout_read_keys_.end(), key);
  if (at != layout_read_keys_.end() && *at == key) return;
  layout_read_keys_.insert(at, key);
  layout_reads_.push_back(
      {it->second, field, dim, observe(trace_.graph.value(it->second), field, dim), where});
}

void Tracer::note_size_compare(const TensorImpl& impl, int64_t dim, SizeCmp cmp, int64_t bound,
                               bool result, const std::source_location& where) {
  const auto it = values_.find(&impl);
  if (it == values_.end()) {
    unmapped_read_ = true;
    return;
  }
  for (const LayoutRead& r : layout_reads_)
    if (r.value == it->second && r.dim == dim && r.cmp == cmp && r.bound == bound &&
        r.other == kNoValue)
      return;
  LayoutRead read{it->second, LayoutField::kSize, dim, {result ? 1 : 0}, where};
  read.cmp = cmp;
  read.bound = bound;
  layout_reads_.push_back(std::move(read));
}

void Tracer::note_size_relation(const TensorImpl& impl, int64_t dim, SizeCmp cmp,
                                const TensorImpl& other, int64_t other_dim, bool result,
                                const std::source_location& where) {
  const auto a = values_.find(&impl), b = values_.find(&other);
  const bool known_a = a != values_.end(), known_b = b != values_.end();
  // A tensor the trace does not hold (not a proxy) has a constant size.
  if ((!known_a && impl.watched) || (!known_b && other.watched)) {
    unmapped_read_ = true;
    return;
  }
  if (!known_b) {
    note_size_compare(impl, dim, cmp, other.sizes.at(static_cast<size_t>(other_dim)), result,
                      where);
    return;
  }
  if (!known_a) {
    static constexpr SizeCmp kMirror[] = {SizeCmp::kEq, SizeCmp::kNe, SizeCmp::kGt,
                                          SizeCmp::kGe, SizeCmp::kLt, SizeCmp::kLe};
    note_size_compare(other, other_dim, kMirror[static_cast<int>(cmp)],
                      impl.sizes.at(static_cast<size_t>(dim)), result, where);
    return;
  }
  for (const LayoutRead& r : layout_reads_)
    if (r.value == a->second && r.dim == dim && r.cmp == cmp && r.other == b->second &&
        r.other_dim == other_dim)
      return;
  LayoutRead read{a->second, LayoutField::kSize, dim, {result ? 1 : 0}, where};
  read.cmp = cmp;
  read.bound = other.sizes.at(static_cast<size_t>(other_dim));
  read.other = b->second;
  read.other_dim = other_dim;
  layout_reads_.push_back(std::move(read));
}

int32_t Tracer::storage_of_real(const Tensor& real) const {
  const auto it = real_storages_.find(real.storage().get());
  return it == real_storages_.end() ? -1 : it->second;
}

Tensor Tracer::make_proxy(const Tensor& real, int32_t storage) {
  auto& meta = meta_storages_[storage];
  if (!meta) meta = std::make_shared<Storage>(real.storage()->nbytes(), real.device());
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = meta;
  impl->sizes = real.sizes();
  impl->strides = real.strides();
  impl->offset = real.storage_offset();
  impl->dtype = real.dtype();
  impl->wrapped_number = real.is_wrapped_number();
  return Tensor(std::move(impl));
}

ValueId Tracer::bind(const Tensor& proxy, ValueId id) {
  proxy.impl().watched = true;
  values_[proxy.impl_ptr().get()] = id;
  if (proxies_.size() <= static_cast<size_t>(id)) proxies_.resize(static_cast<size_t>(id) + 1);
  proxies_[static_cast<size_t>(id)] = proxy;
  auto& meta = meta_storages_[trace_.graph.value(id).storage];
  if (!meta) meta = proxy.storage();
  return id;
}

Tensor Tracer::input(const Tensor& real) {
  if (!real.defined()) throw Error("compile: an argument is an undefined tensor");
  if (real.is_meta()) throw Error("compile: arguments must hold data; got a meta tensor");
  const int32_t known = storage_of_real(real);
  const ValueId id = trace_.graph.add_input(real, known);
  const int32_t storage = trace_.graph.value(id).storage;
  real_storages_[real.storage().get()] = storage;
  keep_.push_back(real);
  env_.push_back(real);
  sources_.push_back(static_cast<int32_t>(env_.size() - 1));
  Tensor proxy = make_proxy(real, storage);
  bind(proxy, id);
  link_gradient(real, proxy);
  return proxy;
}

Tensor Tracer::materialize(const Tensor& proxy, const HostRead& read) {
  std::string description = read.describe(proxy);
  if (!on_break_) throw DataDependentRead(description);
  const auto found = values_.find(proxy.impl_ptr().get());
  if (found == values_.end()) {
    throw Error("compile: the traced function read a meta tensor it did not get from the trace");
  }
  // The values the program still holds: proxies referenced from outside the
  // tracer (by the program's handles, or views of them).
  std::unordered_map<const TensorImpl*, std::pair<const Tensor*, long>>
      held;  // impl -> (a handle, tracer's references)
  for (const TensorList* list : {&proxies_, &aliases_}) {
    for (const Tensor& p : *list) {
      if (!p.defined()) continue;
      auto& h = held[p.impl_ptr().get()];
      h.first = &p;
      ++h.second;
    }
  }
  std::vector<std::pair<ValueId, const Tensor*>> live;  // current value of each held proxy
  for (const auto& [impl, id] : values_) {
    const auto h = held.find(impl);
    if (h == held.end() || !impl->storage->is_meta())
      continue;  // real tensors are bound again when read
    if (h->second.first->impl_ptr().use_count() > h->second.second || id == found->second)
      live.emplace_back(id, h->second.first);
  }
  std::sort(live.begin(), live.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<ValueId> outputs;
  for (const auto& [id, handle] : live)
    if (outputs.empty() || outputs.back() != id) outputs.push_back(id);
  const size_t read_output = static_cast<size_t>(
      std::lower_bound(outputs.begin(), outputs.end(), found->second) - outputs.begin());
  trace_.graph.set_outputs(outputs);

  Cut cut{std::move(trace_),      std::move(sources_), read_output, read,
          std::move(description), take_host_guards()};
  trace_ = Trace{};
  sources_.clear();
  values_.clear();
  real_storages_.clear();
  meta_storages_.clear();
  // Handles of the cut graph stay alive, so that no new tensor takes their addresses.
  std::vector<std::pair<const TensorImpl*, size_t>> carried;  // proxy -> output index
  for (const auto& [id, handle] : live) {
    carried.emplace_back(handle->impl_ptr().get(),
                         static_cast<size_t>(std::lower_bound(outputs.begin(), outputs.end(), id) -
                                             outputs.begin()));
  }
  for (TensorList* list : {&proxies_, &aliases_}) {
    for (Tensor& p : *list)
      if (p.defined()) retired_.push_back(std::move(p));
    list->clear();
  }
  pending_generator_ = nullptr;
  pending_count_ = -1;

  TensorList real;
  {
    TracerPause pause;  // the handler runs real ops
    real = on_break_(std::move(cut));
  }
  if (real.size() != outputs.size()) {
    throw Error(detail::str_cat("compile: a graph cut at a read gave ", real.size(),
                                " results for ", outputs.size(), " outputs"));
  }
  const size_t base = env_.size();
  env_.insert(env_.end(), real.begin(), real.end());
  for (const auto& [impl, index] : carried) carried_[impl] = static_cast<int32_t>(base + index);
  return real[read_output];
}

ValueId Tracer::value_of(const Tensor& t) {
  const auto it = values_.find(t.impl_ptr().get());
  if (it != values_.end()) return it->second;
  if (t.is_meta()) {
    // A value of a graph cut earlier (a graph break): an input of this one.
    const auto carried = carried_.find(t.impl_ptr().get());
    if (carried == carried_.end()) {
      // Another handle on a proxy's data, made where tracing was paused (the
      // tensors autograd saves for backward): the latest value laid out so in
      // that storage, which is what eager would read.
      const ValueId same = same_data(t);
      if (same == kNoValue)
        throw Error(
            "compile: the traced function used a meta tensor it did not get from the trace");
      values_[t.impl_ptr().get()] = same;
      aliases_.push_back(t);
      return same;
    }
    const Tensor& real = env_.at(static_cast<size_t>(carried->second));
    const ValueId id = trace_.graph.add_input(real, storage_of_real(real));
    real_storages_[real.storage().get()] = trace_.graph.value(id).storage;
    sources_.push_back(carried->second);
    bind(t, id);
    return id;
  }
  ValueId id;
  if (t.is_wrapped_number()) {
    id = trace_.graph.add_constant(t);
  } else {
    id = trace_.graph.add_captured(t, storage_of_real(t));
    trace_.captured.push_back(t);
    real_storages_[t.storage().get()] = trace_.graph.value(id).storage;
  }
  keep_.push_back(t);
  values_[t.impl_ptr().get()] = id;
  Tensor proxy = make_proxy(t, trace_.graph.value(id).storage);
  bind(proxy, id);
  link_gradient(t, proxy);
  return id;
}

void Tracer::map_inputs(std::span<const Tensor> inputs, std::vector<ValueId>& ids,
                        TensorList& proxies) {
  ids.reserve(inputs.size());
  proxies.reserve(inputs.size());
  for (const Tensor& t : inputs) {
    if (!t.defined()) {
      ids.push_back(kNoValue);
      proxies.emplace_back();
      continue;
    }
    ids.push_back(value_of(t));
    proxies.push_back(proxy_of(ids.back()));
  }
}

TensorList Tracer::record(ops::OpId op, std::span<const Tensor> inputs, ops::Attrs attrs) {
  std::vector<ValueId> ids;
  TensorList proxies;
  map_inputs(inputs, ids, proxies);
  TensorList outputs;
  {
    TracerPause pause;  // the op's own checks and shape rule, on the proxies
    outputs = ops::dispatch(op, proxies, attrs);
  }
  const int32_t node = trace_.graph.add_node(op, std::move(ids), std::move(attrs), outputs);
  take_random_draw(op, node);
  const auto& out_ids = trace_.graph.nodes()[static_cast<size_t>(node)].outputs;
  for (size_t k = 0; k < outputs.size(); ++k) bind(outputs[k], out_ids[k]);
  return outputs;
}

void Tracer::record_inplace(ops::OpId op, Tensor& self, std::span<const Tensor> inputs,
                            ops::Attrs attrs) {
  std::vector<ValueId> ids;
  TensorList proxies;
  map_inputs(inputs, ids, proxies);
  const ValueId target = value_of(self);
  Tensor target_proxy = proxy_of(target);
  {
    TracerPause pause;
    ops::dispatch_inplace(op, target_proxy, proxies, attrs);
  }
  const int32_t node =
      trace_.graph.add_node(op, std::move(ids), std::move(attrs), {target_proxy}, target);
  take_random_draw(op, node);
  const ValueId version = trace_.graph.nodes()[static_cast<size_t>(node)].outputs[0];
  // Both the program's handle and the proxy now stand for the new version.
  values_[self.impl_ptr().get()] = version;
  bind(target_proxy, version);
}

ops::PhiloxDraw Tracer::note_random_draw(Generator* generator, int64_t count) {
  pending_generator_ = generator;
  pending_count_ = count;
  return {kTracedDrawSeed, draws_++};
}

void Tracer::take_random_draw(ops::OpId op, int32_t node) {
  trace_.graph.node(node).grad_enabled = is_grad_enabled();
  if (pending_count_ < 0) return;
  if (ops::op_schema(op).has_flag(ops::kRandom)) {
    Node& n = trace_.graph.node(node);
    n.generator = pending_generator_;
    n.draw_count = pending_count_;
  }
  pending_generator_ = nullptr;
  pending_count_ = -1;
}

Trace Tracer::finish(const TensorList& outputs) {
  std::vector<ValueId> ids;
  ids.reserve(outputs.size());
  for (const Tensor& t : outputs) {
    if (!t.defined()) throw Error("compile: the traced function returned an undefined tensor");
    ids.push_back(value_of(t));
  }
  // Gradients the program left: outputs after its results, applied by each run.
  for (const auto& [real, original] : grad_owners_) {
    const Tensor now = real.grad();
    if (now.impl_ptr() == original.impl_ptr()) continue;
    GradWrite write{real, -1};
    if (now.defined()) {
      write.output = static_cast<int32_t>(ids.size());
      ids.push_back(value_of(now));
    }
    real.set_grad(original);
    grad_writes_.push_back(std::move(write));
  }
  trace_.graph.set_outputs(std::move(ids));
  return std::move(trace_);
}

}  // namespace kiln::compiler

namespace kiln::compiler {
namespace {

bool same_layout(const Tensor& t, const Value& v) {
  return t.sizes() == sym::hints(v.sizes) && t.strides() == sym::hints(v.strides) &&
         t.dtype() == v.dtype && t.device() == v.device;
}

}  // namespace

std::vector<Tensor> bind_sources(const Trace& trace, const TensorList& inputs,
                                 std::span<const Tensor> constants) {
  const Graph& g = trace.graph;
  std::vector<Tensor> env(g.values().size());
  for (size_t i = 0; i < inputs.size(); ++i) env[static_cast<size_t>(g.inputs()[i])] = inputs[i];
  for (size_t i = 0; i < g.captured().size(); ++i)
    env[static_cast<size_t>(g.captured()[i])] = trace.captured[i];
  for (size_t i = 0; i < g.constants().size(); ++i)
    env[static_cast<size_t>(g.constants()[i])] = constants.empty() ? g.constant(i) : constants[i];
  return env;
}

namespace {

// Where a random op's seed and offset are among its attributes (past the
// end where it has none).
std::pair<size_t, size_t> draw_attrs(const ops::OpSchema& schema) {
  size_t seed = schema.attrs.size(), offset = schema.attrs.size();
  for (size_t i = 0; i < schema.attrs.size(); ++i) {
    if (schema.attrs[i].name == "seed") seed = i;
    if (schema.attrs[i].name == "offset") offset = i;
  }
  return {seed, offset};
}

}  // namespace

const ops::Attrs& call_attrs(const Node& n, const ops::Attrs& base, ops::Attrs& scratch,
                             CallDraws& draws, const uint64_t** words) {
  const ops::OpSchema& schema = ops::op_schema(n.op);
  if (!schema.has_flag(ops::kRandom)) return base;
  const auto [seed, offset] = draw_attrs(schema);
  if (seed >= base.size() || offset >= base.size() || base.i(seed) != kTracedDrawSeed) return base;
  const int64_t number = base.i(offset);
  ops::PhiloxDraw draw;
  size_t slot = 0;
  if (n.draw_count >= 0) {
    if (PhiloxRecording* r = draws.recording) {
      while (slot < r->slots.size() && r->slots[slot].generator != n.generator) ++slot;
      if (slot == r->slots.size())
        throw Error("compile: a recorded random op's generator has no slot");
      draw = {0, static_cast<int64_t>(r->slots[slot].drawn)};
      r->slots[slot].drawn += (static_cast<uint64_t>(n.draw_count) + 1) & ~uint64_t{1};
    } else {
      draw = ops::draw_philox(n.generator, n.draw_count);
    }
    if (number >= 0) {
      const auto k = static_cast<size_t>(number);
      if (draws.draws.size() <= k) {
        draws.draws.resize(k + 1), draws.made.resize(k + 1), draws.slot.resize(k + 1);
      }
      draws.draws[k] = draw;
      draws.made[k] = true;
      draws.slot[k] = slot;
    }
  } else {
    const auto k = static_cast<size_t>(number);
    if (number < 0 || k >= draws.made.size() || !draws.made[k]) {
      throw Error(detail::str_cat(
          "compile: ", schema.name, " reuses random draw ", number,
          " of the trace, which this graph did not make (it was made before a graph "
          "break): keep a random op and the backward that recomputes it in one graph"));
    }
    draw = draws.draws[k];
    slot = draws.slot[k];
  }
  if (words && draws.recording) *words = draws.recording->slots[slot].words;
  scratch = base;
  scratch[seed] = draw.seed;
  scratch[offset] = draw.offset;
  return scratch;
}

ops::PhiloxDraw call_draw(const Node& n, ops::Attrs& scratch, CallDraws& draws) {
  if (draws.recording)
    throw Error(detail::str_cat("compile: ", ops::op_schema(n.op).name,
                                " in a generated kernel, under a device graph's recording"));
  const ops::Attrs& attrs = call_attrs(n, n.attrs, scratch, draws);
  const auto [seed, offset] = draw_attrs(ops::op_schema(n.op));
  return {attrs.i(seed), attrs.i(offset)};
}

TensorList replay(const Trace& trace, const TensorList& inputs, const NodeObserver& observe) {
  const Graph& g = trace.graph;
  if (inputs.size() != g.inputs().size()) {
    throw Error(detail::str_cat("compile: replay: expected ", g.inputs().size(),
                                " tensor arguments, got ", inputs.size()));
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Value& v = g.value(g.inputs()[i]);
    if (!inputs[i].defined() || !same_layout(inputs[i], v)) {
      throw Error(detail::str_cat(
          "compile: replay: argument ", i, " is ",
          inputs[i].defined()
              ? detail::str_cat(inputs[i].dtype(), inputs[i].sizes(), " ", inputs[i].device())
              : std::string("undefined"),
          ", the trace has ", v.dtype, v.sizes, " ", v.device));
    }
  }
  std::vector<Tensor> env = bind_sources(trace, inputs);
  TensorList args;
  ops::Attrs scratch;
  CallDraws draws;
  for (size_t index = 0; index < g.nodes().size(); ++index) {
    const Node& n = g.nodes()[index];
    std::optional<NoGradGuard> no_grad;
    if (!n.grad_enabled) no_grad.emplace();
    args.clear();
    for (ValueId id : n.inputs)
      args.push_back(id == kNoValue ? Tensor() : env[static_cast<size_t>(id)]);
    const ops::Attrs& attrs = call_attrs(n, n.attrs, scratch, draws);
    if (n.inplace()) {
      Tensor target = env[static_cast<size_t>(n.target)];
      ops::dispatch_inplace(n.op, target, args, attrs);
      env[static_cast<size_t>(n.outputs[0])] = target;
      if (observe) observe(index, std::span<const Tensor>(&target, 1));
      continue;
    }
    TensorList outs = ops::dispatch(n.op, args, attrs);
    if (observe) observe(index, outs);
    for (size_t k = 0; k < outs.size(); ++k)
      env[static_cast<size_t>(n.outputs[k])] = std::move(outs[k]);
  }
  TensorList results;
  for (ValueId id : g.outputs()) results.push_back(env[static_cast<size_t>(id)]);
  return results;
}

std::optional<Trace> retrace(const Trace& traced, std::span<const LayoutRead> reads,
                             const TensorList& inputs, std::string& why) {
  const Graph& g = traced.graph;
  if (inputs.size() != g.inputs().size()) {
    why = detail::str_cat(inputs.size(), " tensor arguments for a graph of ", g.inputs().size());
    return std::nullopt;
  }
  Trace out;
  Graph& ng = out.graph;
  std::vector<ValueId> map(g.values().size(), kNoValue);
  // Each traced storage's storage in the new graph, and the real storage
  // behind it: sources alias as they did when traced, or not at all.
  std::vector<int32_t> storages(g.storages().size(), -1);
  std::vector<const Storage*> reals(g.storages().size(), nullptr);
  const auto source = [&](const Value& v, const Tensor& real, const char* what) -> bool {
    if (real.dtype() != v.dtype || real.device() != v.device) {
      why = detail::str_cat(what, " ", v.slot, " is ", real.dtype(), " on ", real.device(),
                            ", traced as ", v.dtype, " on ", v.device);
      return false;
    }
    const auto s = static_cast<size_t>(v.storage);
    const Storage* storage = real.storage().get();
    const bool known = reals[s] != nullptr;
    if (known != (std::find(reals.begin(), reals.end(), storage) != reals.end()) ||
        (known && reals[s] != storage)) {
      why = detail::str_cat(what, " ", v.slot,
                            " shares memory with the other tensors otherwise than when traced");
      return false;
    }
    reals[s] = storage;
    return true;
  };
  // The reads, by value: each checked as soon as its value (both, for a
  // comparison of two sizes) is made again, so that a program that read a
  // changed size is refused early.
  const auto last_value = [](const LayoutRead* r) { return std::max(r->value, r->other); };
  std::vector<const LayoutRead*> by_value;
  for (const LayoutRead& r : reads) by_value.push_back(&r);
  std::stable_sort(by_value.begin(), by_value.end(), [&](const LayoutRead* a, const LayoutRead* b) {
    return last_value(a) < last_value(b);
  });
  size_t checked = 0;
  const auto reads_hold = [&](size_t made_up_to) {
    for (; checked < by_value.size() &&
           static_cast<size_t>(last_value(by_value[checked])) < made_up_to;
         ++checked) {
      const LayoutRead& r = *by_value[checked];
      const Value* other =
          r.other == kNoValue ? nullptr : &ng.value(map.at(static_cast<size_t>(r.other)));
      const Shape now = observe(ng.value(map.at(static_cast<size_t>(r.value))), r, other);
      if (now != r.observed) {
        why = detail::str_cat("the function read ", r.describe(), " (now ", shown(r, now), ")");
        return false;
      }
    }
    return true;
  };
  size_t next = 0;  // the next traced node to make again
  for (size_t id = 0; id < g.values().size(); ++id) {
    if (!reads_hold(id)) return std::nullopt;
    if (map[id] != kNoValue) continue;
    const Value& v = g.values()[id];
    const auto s = static_cast<size_t>(v.storage);
    switch (v.kind) {
      case ValueKind::kInput: {
        const Tensor& real = inputs[static_cast<size_t>(v.slot)];
        if (!source(v, real, "argument")) return std::nullopt;
        map[id] = ng.add_input(real, storages[s]);
        break;
      }
      case ValueKind::kCaptured: {
        const Tensor& real = traced.captured[static_cast<size_t>(v.slot)];
        if (real.sizes() != sym::hints(v.sizes) || real.strides() != sym::hints(v.strides) ||
            real.storage_offset() != v.offset.hint()) {
          why = detail::str_cat("captured tensor ", v.slot, " is now ", real.sizes(),
                                ", traced as ", v.sizes);
          return std::nullopt;
        }
        if (!source(v, real, "captured tensor")) return std::nullopt;
        map[id] = ng.add_captured(real, storages[s]);
        out.captured.push_back(real);
        break;
      }
      case ValueKind::kConstant:
        map[id] = ng.copy_constant(g, static_cast<size_t>(v.slot));
        break;
      case ValueKind::kNode: {
        const Node& n = g.nodes().at(next);
        if (static_cast<size_t>(v.producer) != next++) {
          why = "the traced graph's values are not in the order of its nodes";
          return std::nullopt;
        }
        // A random op draws a number per element of its result (every
        // random op's draw_philox): as many as its new sizes say.
        const int64_t traced_numel =
            n.draw_count >= 0 ? shape_numel(g.value(n.outputs.at(0)).sizes).hint() : -1;
        if (n.draw_count >= 0 && n.draw_count != traced_numel) {
          why = detail::str_cat(ops::op_schema(n.op).name, " drew ", n.draw_count,
                                " random numbers for ", traced_numel, " elements");
          return std::nullopt;
        }
        std::vector<ValueId> ids;
        TensorList metas;
        for (ValueId in : n.inputs) {
          ids.push_back(in == kNoValue ? kNoValue : map[static_cast<size_t>(in)]);
          metas.push_back(in == kNoValue ? Tensor() : ng.meta_hint(ids.back()));
        }
        int32_t made = 0;
        try {
          TracerPause untraced;
          if (n.inplace()) {
            const ValueId target = map[static_cast<size_t>(n.target)];
            Tensor meta = ng.meta_hint(target);
            ops::dispatch_inplace(n.op, meta, metas, n.attrs);
            made = ng.add_node(n.op, std::move(ids), n.attrs, {meta}, target);
          } else {
            made = ng.add_node(n.op, std::move(ids), n.attrs, ops::dispatch(n.op, metas, n.attrs));
          }
        } catch (const Error& e) {
          why = detail::str_cat(ops::op_schema(n.op).name, " rejects the new sizes: ", e.what());
          return std::nullopt;
        }
        Node& copy = ng.node(made);
        copy.generator = n.generator;
        copy.draw_count = n.draw_count >= 0 ? shape_numel(ng.value(copy.outputs.at(0)).sizes).hint()
                                            : n.draw_count;
        copy.grad_enabled = n.grad_enabled;
        for (size_t k = 0; k < n.outputs.size(); ++k)
          map[static_cast<size_t>(n.outputs[k])] = copy.outputs.at(k);
        break;
      }
    }
    if (storages[s] < 0) storages[s] = ng.value(map[id]).storage;
  }
  std::vector<ValueId> outputs;
  for (ValueId id : g.outputs()) outputs.push_back(map[static_cast<size_t>(id)]);
  ng.set_outputs(std::move(outputs));
  if (!reads_hold(g.values().size())) return std::nullopt;
  return out;
}

}  // namespace kiln::compiler
