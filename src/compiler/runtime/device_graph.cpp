#include "compiler/runtime/device_graph.h"

#include <algorithm>
#include <array>

#include "core/launch_count.h"
#include "ops/custom.h"

namespace kiln::compiler {
namespace {

// Elements from a layout's first to its last, inclusive (0 when empty).
int64_t extent(const Shape& sizes, const Shape& strides) {
  int64_t last = 0;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 0) return 0;
    last += (sizes[d] - 1) * strides[d];
  }
  return last + 1;
}

// A tensor of these sizes, strides and dtype in a new storage of just its extent.
Tensor empty_strided(const Shape& sizes, const Shape& strides, DType dtype, Device device) {
  const auto nbytes = static_cast<size_t>(extent(sizes, strides)) * dtype_size(dtype);
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = backend::backend_for(device.kind()).allocate(nbytes, device);
  impl->sizes = sizes;
  impl->strides = strides;
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

// A meta tensor of t's layout: its sizes, strides, offset and dtype, no memory.
Tensor layout_only(const Tensor& t) {
  auto impl = std::make_shared<TensorImpl>(t.impl());
  impl->storage = std::make_shared<Storage>(t.storage()->nbytes(), t.device());
  impl->autograd.reset();
  impl->view_base.reset();
  impl->watched = false;
  return Tensor(std::move(impl));
}

const char* bytes_of(const Tensor& t) {
  return static_cast<const char*>(t.storage()->data()) +
         t.storage_offset() * static_cast<int64_t>(t.element_size());
}

// The copy of a layout's whole extent (src and dst have equal sizes and strides).
backend::ByteCopy extent_copy(const Tensor& dst, const Tensor& src) {
  const auto nbytes = static_cast<size_t>(extent(src.sizes(), src.strides())) * src.element_size();
  return {const_cast<char*>(bytes_of(dst)), bytes_of(src), nbytes};
}

}  // namespace

std::vector<std::string> GraphedExecutable::obstacles(const Executable& exe) {
  const Graph& g = exe.trace().graph;
  std::vector<std::string> out;
  std::vector<Device> devices;
  for (const Value& v : g.values())
    if (v.kind != ValueKind::kConstant &&
        std::find(devices.begin(), devices.end(), v.device) == devices.end())
      devices.push_back(v.device);
  for (const Device& d : devices) {
    if (!d.is_cuda()) {
      out.push_back(detail::str_cat("it uses the ", d, ": device graphs record CUDA work only"));
      break;
    }
  }
  if (out.empty() && devices.size() > 1) out.push_back("it uses several CUDA devices");
  if (devices.empty()) out.push_back("it has no tensors on a device (nothing to record)");
  const bool launches = std::any_of(g.nodes().begin(), g.nodes().end(), [](const Node& n) {
    return n.inplace() || !ops::op_schema(n.op).has_flag(ops::kView);
  });
  if (!launches) out.push_back("it launches no kernels (nothing to record)");
  for (const Node& n : g.nodes()) {
    if (n.op == ops::OpId::debug_tensor) {
      out.push_back(detail::str_cat("debug::", n.attrs.b(1) ? "check_finite" : "print", "(\"",
                                    n.attrs.str(0), "\") reads values on the host"));
    }
    if (n.op == ops::OpId::custom && !ops::custom_op(n.attrs).def.cuda_graph_safe) {
      out.push_back(detail::str_cat("custom op ", ops::custom_op_name(n.attrs),
                                    " is not defined cuda_graph_safe"));
    }
  }
  const std::vector<bool> written = written_storages(g);
  std::vector<int32_t> input_of_storage(g.storages().size(), -1);
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    const auto s = static_cast<size_t>(g.value(g.inputs()[i]).storage);
    if (written[s]) out.push_back(detail::str_cat("it writes argument ", i, " in place"));
    if (input_of_storage[s] >= 0) {
      out.push_back(
          detail::str_cat("arguments ", input_of_storage[s], " and ", i, " share memory"));
    }
    input_of_storage[s] = static_cast<int32_t>(i);
  }
  for (size_t i = 0; i < g.outputs().size(); ++i) {
    const Value& v = g.value(g.outputs()[i]);
    const Value& root = g.value(g.storages()[static_cast<size_t>(v.storage)].root);
    if (root.kind == ValueKind::kConstant)
      out.push_back(detail::str_cat("result ", i, " is a constant or a view of one"));
  }
  return out;
}

GraphedExecutable::GraphedExecutable(std::shared_ptr<const Executable> exe,
                                     const TensorList& inputs)
    : exe_(std::move(exe)) {
  const Trace& trace = exe_->trace();
  const Graph& g = trace.graph;
  for (const Value& v : g.values()) {
    if (v.kind != ValueKind::kConstant) {
      device_ = v.device;  // obstacles() found one device
      break;
    }
  }
  // The generators the random ops draw from, each a slot of the graph's
  // seed and base offset words.
  for (const Node& n : g.nodes())
    if (n.draw_count >= 0 &&
        std::find(generators_.begin(), generators_.end(), n.generator) == generators_.end())
      generators_.push_back(n.generator);
  record_compact(inputs);
  for (const Tensor& t : trace.captured) captured_at_.push_back(t.storage()->data());
}

void GraphedExecutable::record_compact(const TensorList& inputs) {
  record(inputs, 0);
  // The pool grew by segments as the recording asked (the libraries'
  // workspaces come and go): recorded again into one block of the
  // most it held at once, it takes no more from the device than that, unless
  // splitting that block leaves no room where a request needs it. The first
  // recording is let go before, so that the two pools are never held at once.
  const size_t held = graph_->pool_bytes(), peak = graph_->pool_peak_bytes();
  if (held > peak) {
    try {
      record(inputs, peak);
    } catch (const Error&) {
      record(inputs, 0);  // as the first time
    }
  }
}

void GraphedExecutable::record(const TensorList& inputs, size_t reserve) {
  static_inputs_.clear();
  static_outputs_.clear();
  philox_words_ = Tensor();
  graph_.reset();
  graph_ = backend::backend_for(device_.kind()).make_graph(device_);
  if (reserve) graph_->reserve(reserve);
  // Reading the arguments where they are, the graph needs no copies of them.
  bound_.clear();
  if (direct_) {
    for (const Tensor& in : inputs) bound_.push_back(bytes_of(in));
  }
  graph_->allocate_from_pool([&] {
    for (const Tensor& in : direct_ ? TensorList{} : inputs) {
      static_inputs_.push_back(empty_strided(in.sizes(), in.strides(), in.dtype(), in.device()));
    }
    if (!generators_.empty()) {
      const auto words = static_cast<int64_t>(2 * generators_.size());
      philox_words_ = empty_strided({words}, {1}, kInt64, device_);
    }
  });
  // Random kernels read their seed and base offset from the words, which
  // each call sets from a draw of the whole graph's count (drawn_).
  PhiloxRecording philox;
  auto* words =
      philox_words_.defined() ? static_cast<uint64_t*>(philox_words_.data_ptr()) : nullptr;
  for (size_t s = 0; s < generators_.size(); ++s)
    philox.slots.push_back({generators_[s], words + 2 * s, 0});
  // The arguments (and the words) come in, and the results go out, by copy
  // kernels of the graph's own where the backend records them: a call sets
  // their addresses and launches once. Recorded with the sizes of every call,
  // and the addresses of the static buffers for both ends until then.
  in_slot_ = out_slot_ = -1;
  graph_->record([&] {
    std::vector<backend::ByteCopy> in;
    for (const Tensor& t : static_inputs_) in.push_back(extent_copy(t, t));
    std::vector<backend::WordWrite> writes(2 * generators_.size(), backend::WordWrite{words, 0});
    if (!in.empty() || !writes.empty()) in_slot_ = graph_->record_copies(in, writes);
    static_outputs_ = exe_->run(direct_ ? inputs : static_inputs_, {}, &philox);
    plan_results();
    // A result that views an argument is made from the call's argument: of
    // the recorded one only its layout is kept, not its memory.
    for (size_t i = 0; i < results_.size(); ++i)
      if (results_[i].group < 0) static_outputs_[i] = layout_only(static_outputs_[i]);
    std::vector<backend::ByteCopy> out;
    for (const Group& g : groups_) out.push_back({const_cast<char*>(g.first), g.first, g.nbytes});
    if (!out.empty()) out_slot_ = graph_->record_copies(out, {});
  });
  drawn_.clear();
  for (const auto& slot : philox.slots) drawn_.push_back(slot.drawn);
}

void GraphedExecutable::plan_results() {
  const Graph& g = exe_->trace().graph;
  results_.assign(g.outputs().size(), Result{});
  groups_.clear();
  std::vector<const Storage*> group_storage;
  for (size_t i = 0; i < g.outputs().size(); ++i) {
    const Value& v = g.value(g.outputs()[i]);
    const Value& root = g.value(g.storages()[static_cast<size_t>(v.storage)].root);
    Result& r = results_[i];
    r.kind = root.kind;
    if (root.kind == ValueKind::kInput || root.kind == ValueKind::kCaptured) {
      r.source = root.slot;
      r.offset = v.offset.hint() - root.offset.hint();
      continue;
    }
    const Tensor& s = static_outputs_[i];
    const auto found = std::find(group_storage.begin(), group_storage.end(), s.storage().get());
    r.group = static_cast<int32_t>(found - group_storage.begin());
    if (found == group_storage.end()) {
      group_storage.push_back(s.storage().get());
      groups_.push_back({});
    }
  }
  // Each group's bytes: from the lowest of its results' first bytes (down to
  // 16 bytes, so that every result's offset is whole elements) to the
  // highest of their last.
  std::vector<std::pair<const char*, const char*>> span(groups_.size(), {nullptr, nullptr});
  for (size_t i = 0; i < results_.size(); ++i) {
    if (results_[i].group < 0) continue;
    const Tensor& s = static_outputs_[i];
    auto& [lo, hi] = span[static_cast<size_t>(results_[i].group)];
    const char* first = bytes_of(s);
    const char* last =
        first + static_cast<size_t>(extent(s.sizes(), s.strides())) * s.element_size();
    const char* base = static_cast<const char*>(s.storage()->data());
    first = base + ((first - base) & ~std::ptrdiff_t{15});
    if (!lo || first < lo) lo = first;
    if (!hi || last > hi) hi = last;
  }
  for (size_t k = 0; k < groups_.size(); ++k)
    groups_[k] = {span[k].first, static_cast<size_t>(span[k].second - span[k].first)};
  for (size_t i = 0; i < results_.size(); ++i) {
    if (results_[i].group < 0) continue;
    const Tensor& s = static_outputs_[i];
    results_[i].offset = (bytes_of(s) - groups_[static_cast<size_t>(results_[i].group)].first) /
                         static_cast<std::ptrdiff_t>(s.element_size());
  }
}

size_t GraphedExecutable::pool_bytes() const { return graph_->pool_bytes(); }

GraphedExecutable::~GraphedExecutable() = default;

GraphedExecutable::Outcome GraphedExecutable::run(const TensorList& inputs, TensorList& results) {
  const std::vector<Tensor>& captured = exe_->trace().captured;
  for (size_t i = 0; i < captured.size(); ++i)
    if (captured[i].storage()->data() != captured_at_[i]) return Outcome::kMoved;
  std::unique_lock lock(mutex_, std::try_to_lock);
  if (!lock.owns_lock()) return Outcome::kBusy;
  const cuda::Stream stream = cuda::Stream::current(device_.index());
  if (direct_) {
    bool bound = true;
    for (size_t i = 0; i < inputs.size(); ++i) bound = bound && bytes_of(inputs[i]) == bound_[i];
    if (!bound) {
      // Arguments elsewhere than the graph reads them: it is recorded anew
      // over static copies of them, which serve this call and every later
      // one. The old graph's work is done before its memory goes.
      if (last_stream_) last_stream_->synchronize();
      direct_ = false;
      record_compact(inputs);
      last_stream_.reset();
    }
  }
  // The static buffers are free once the last call's work is done, which
  // this stream has to wait for when that call ran on another one: an event
  // recorded there now follows that work.
  if (last_stream_ && !(*last_stream_ == stream)) {
    if (!done_) done_.emplace(false, device_.index());
    done_->record(*last_stream_);
    stream.wait(*done_);
  }
  backend::Backend& backend = backend::backend_for(device_.kind());
  std::vector<backend::ByteCopy> copies;
  copies.reserve(std::max(inputs.size(), static_outputs_.size()));
  for (size_t i = 0; i < static_inputs_.size(); ++i)
    copies.push_back(extent_copy(static_inputs_[i], inputs[i]));
  // The graph's draws: as many counter values as eager's ops take, from each
  // generator, in one draw whose seed and offset the kernels read.
  std::vector<backend::WordWrite> writes;
  if (!generators_.empty()) {
    auto* words = static_cast<uint64_t*>(philox_words_.data_ptr());
    for (size_t s = 0; s < generators_.size(); ++s) {
      const ops::PhiloxDraw draw =
          ops::draw_philox(generators_[s], static_cast<int64_t>(drawn_[s]));
      writes.push_back({words + 2 * s, static_cast<uint64_t>(draw.seed)});
      writes.push_back({words + 2 * s + 1, static_cast<uint64_t>(draw.offset)});
    }
  }
  std::vector<std::shared_ptr<Storage>> out(groups_.size());
  std::vector<backend::ByteCopy> out_copies;
  out_copies.reserve(groups_.size());
  for (size_t k = 0; k < groups_.size(); ++k) {
    out[k] = backend.allocate(groups_[k].nbytes, device_);
    out_copies.push_back({out[k]->data(), groups_[k].first, groups_[k].nbytes});
  }
  std::array<backend::DeviceGraph::SlotCopies, 2> slots;
  size_t n_slots = 0;
  if (in_slot_ >= 0) {
    slots[n_slots++] = {in_slot_, copies, writes};
  } else if (!copies.empty() || !writes.empty()) {
    backend.copy_within(device_, copies, writes);
  }
  if (out_slot_ >= 0) slots[n_slots++] = {out_slot_, out_copies, {}};
  detail::count_kernel_launch();
  graph_->launch(std::span<const backend::DeviceGraph::SlotCopies>(slots.data(), n_slots));
  if (out_slot_ < 0) backend.copy_within(device_, out_copies);
  results.clear();
  for (size_t i = 0; i < results_.size(); ++i) {
    const Result& r = results_[i];
    const Tensor& s = static_outputs_[i];  // its layout
    auto impl = std::make_shared<TensorImpl>();
    impl->sizes = s.sizes();
    impl->strides = s.strides();
    impl->dtype = s.dtype();
    if (r.group >= 0) {
      impl->storage = out[static_cast<size_t>(r.group)];
      impl->offset = r.offset;
    } else {
      const Tensor& source = r.kind == ValueKind::kInput ? inputs[static_cast<size_t>(r.source)]
                                                         : captured[static_cast<size_t>(r.source)];
      impl->storage = source.storage();
      impl->offset = source.storage_offset() + r.offset;
    }
    results.push_back(Tensor(std::move(impl)));
  }
  last_stream_ = stream;
  return Outcome::kRan;
}

}  // namespace kiln::compiler
