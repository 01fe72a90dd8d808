#include "compiler/capture/guard_key.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <functional>
#include <memory>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "kiln/autograd.h"
#include "kiln/runtime.h"
#include "ops/autocast.h"

namespace kiln::compiler {

using kiln::operator<<;  // Shape

size_t KeyHash::operator()(const std::vector<int64_t>& key) const noexcept {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ key.size();
  for (int64_t v : key) h ^= static_cast<uint64_t>(v) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return static_cast<size_t>(h);
}

namespace {

// A tensor's part of a key. Dims in `dynamic` (a bit per dim) leave their
// size out; a tensor with a dynamic dim keeps only its layout's class:
// contiguous, or else the order of its strides.
void append_tensor_key(const Tensor& t, std::vector<int64_t>& key, uint64_t dynamic) {
  key.push_back(t.dim());
  if (dynamic == 0) {
    key.insert(key.end(), t.sizes().begin(), t.sizes().end());
    key.insert(key.end(), t.strides().begin(), t.strides().end());
  } else {
    for (size_t d = 0; d < t.sizes().size(); ++d)
      key.push_back(d < 64 && (dynamic >> d & 1) ? -1 : t.sizes()[d]);
    const bool contiguous = t.is_contiguous();
    key.push_back(contiguous);
    if (!contiguous) {
      std::vector<int64_t> order(t.sizes().size());
      for (size_t d = 0; d < order.size(); ++d) order[d] = static_cast<int64_t>(d);
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
        return t.strides()[static_cast<size_t>(a)] > t.strides()[static_cast<size_t>(b)];
      });
      key.insert(key.end(), order.begin(), order.end());
    }
  }
  key.push_back(static_cast<int64_t>(t.dtype()));
  key.push_back(static_cast<int64_t>(t.device().kind()));
  key.push_back(t.device().index());
  key.push_back(t.requires_grad());
  if (t.requires_grad()) {
    // Its gradient, which a traced backward() adds to in place: by identity.
    const Tensor g = t.grad();
    key.push_back(g.defined() ? static_cast<int64_t>(reinterpret_cast<intptr_t>(g.impl_ptr().get()))
                              : 0);
  }
}

// The first tensor argument before i that shares i's storage, or -1.
int64_t shares_with(const TensorList& tensors, size_t i) {
  const Storage* storage = tensors[i].storage().get();
  for (size_t j = 0; j < i; ++j)
    if (tensors[j].storage().get() == storage) return static_cast<int64_t>(j);
  return -1;
}

// shares_with of every tensor argument after the first (a call's hot path:
// each storage looked up once).
void append_sharing(const TensorList& tensors, std::vector<int64_t>& key) {
  if (tensors.size() <= 16) {
    std::array<const Storage*, 16> seen{};
    for (size_t i = 0; i < tensors.size(); ++i) {
      seen[i] = tensors[i].storage().get();
      if (i == 0) continue;
      const auto j =
          std::find(seen.begin(), seen.begin() + static_cast<std::ptrdiff_t>(i), seen[i]);
      key.push_back(j == seen.begin() + static_cast<std::ptrdiff_t>(i) ? -1 : j - seen.begin());
    }
    return;
  }
  std::unordered_map<const Storage*, int64_t> first;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto [it, added] = first.emplace(tensors[i].storage().get(), static_cast<int64_t>(i));
    if (i > 0) key.push_back(added ? -1 : it->second);
  }
}

// `dynamic`: by tensor argument, its dims left out (absent: none).
}  // namespace

std::vector<int64_t> build_key(const internal::FlatArgs& args,
                               const std::vector<uint64_t>& dynamic) {
  std::vector<int64_t> key = args.key;
  key.reserve(key.size() + args.tensors.size() * 12 + 4);
  for (size_t i = 0; i < args.tensors.size(); ++i) {
    const Tensor& t = args.tensors[i];
    if (!t.defined()) throw Error("compile: an argument is an undefined tensor");
    append_tensor_key(t, key, i < dynamic.size() ? dynamic[i] : 0);
  }
  // Which arguments share memory: a graph traced for aliasing arguments (or
  // for distinct ones) is the program's graph only for calls alike.
  append_sharing(args.tensors, key);
  const Tf32Policy tf32 = allow_tf32();
  key.push_back(is_grad_enabled());
  ops::autocast::append_key(key);
  key.push_back(tf32.matmul);
  key.push_back(tf32.conv);
  return key;
}

namespace {

// Marks of mark_dynamic, by tensor handle.
struct Mark {
  std::weak_ptr<TensorImpl> impl;
  uint64_t dims = 0;
};
std::mutex g_marks_mutex;
std::unordered_map<const TensorImpl*, Mark> g_marks;
std::atomic<bool> g_any_marks{false};

}  // namespace

std::string str(const Shape& s) {
  std::ostringstream os;
  os << s;
  return os.str();
}

namespace {

// Walks a call's key (compile_args.h's grammar) value by value, naming each:
// "argument 2", "argument 2[0]" in a vector, "argument 2.1" for a member of a
// tuple or aggregate, "argument 2['mask']" in a map.
class KeyWalk {
 public:
  struct Visitor {
    std::function<void(const std::string& name, const Tensor* t)> tensor;  // null: undefined
    std::function<void(const std::string& name, const std::string& value)> other;
  };
  KeyWalk(const internal::FlatArgs& args, Visitor visit) : args_(args), visit_(std::move(visit)) {}

  void all() {
    for (size_t position = 0; k_ < args_.key.size(); ++position)
      value("argument " + std::to_string(position));
  }

 private:
  int64_t next() { return args_.key.at(k_++); }

  void value(const std::string& name) {
    switch (next()) {
      case internal::kKeyTensor:
        visit_.tensor(name, &args_.tensors.at(tensor_++));
        break;
      case internal::kKeyNoTensor:
        visit_.tensor(name, nullptr);
        break;
      case internal::kKeyFloat: {
        std::ostringstream d;
        d << std::bit_cast<double>(next());
        visit_.other(name + " value", d.str());
        break;
      }
      case internal::kKeyInt:
        visit_.other(name + " value", std::to_string(next()));
        break;
      case internal::kKeyText:
        visit_.other(name + " value", '"' + internal::read_text(args_.key, k_) + '"');
        break;
      case internal::kKeyOptional: {
        const bool present = next() != 0;
        visit_.other(name + " present", present ? "true" : "false");
        if (present) value(name);
        break;
      }
      case internal::kKeyList: {
        const int64_t n = next();
        visit_.other(name + " list length", std::to_string(n));
        for (int64_t i = 0; i < n; ++i) value(name + "[" + std::to_string(i) + "]");
        break;
      }
      case internal::kKeyMap: {
        const int64_t n = next();
        visit_.other(name + " map size", std::to_string(n));
        for (int64_t i = 0; i < n; ++i) {
          const std::string item = name + "['" + internal::read_text(args_.key, k_) + "']";
          visit_.other(item + " key", "present");
          value(item);
        }
        break;
      }
      case internal::kKeyFields: {
        const int64_t n = next();
        for (int64_t i = 0; i < n; ++i) value(name + "." + std::to_string(i));
        break;
      }
      default:
        throw Error("compile: a malformed argument key");
    }
  }

  const internal::FlatArgs& args_;
  Visitor visit_;
  size_t k_ = 0, tensor_ = 0;
};

}  // namespace

std::vector<std::string> tensor_names(const internal::FlatArgs& args) {
  std::vector<std::string> out;
  KeyWalk(args, {[&](const std::string& name, const Tensor* t) {
                   if (t) out.push_back(name);
                 },
                 [](const std::string&, const std::string&) {}})
      .all();
  return out;
}

// Every guard of a call, named, in a fixed order: what recompile logs compare.
std::vector<std::pair<std::string, std::string>> describe(const internal::FlatArgs& args) {
  std::vector<std::pair<std::string, std::string>> out;
  const auto tensor = [&](const std::string& arg, const Tensor* t) {
    if (!t) {
      out.emplace_back(arg, "an undefined tensor");
      return;
    }
    out.emplace_back(arg + " sizes", str(t->sizes()));
    out.emplace_back(arg + " strides", str(t->strides()));
    out.emplace_back(arg + " dtype", std::string(dtype_name(t->dtype())));
    std::ostringstream d;
    d << t->device();
    out.emplace_back(arg + " device", d.str());
    out.emplace_back(arg + " requires_grad", t->requires_grad() ? "true" : "false");
    if (t->requires_grad()) {
      std::ostringstream g;
      if (t->grad().defined())
        g << "a tensor at " << static_cast<const void*>(t->grad().impl_ptr().get());
      out.emplace_back(arg + " grad", t->grad().defined() ? g.str() : "none");
    }
  };
  KeyWalk(args, {tensor, [&](const std::string& name,
                             const std::string& value) { out.emplace_back(name, value); }})
      .all();
  std::string shared;
  const std::vector<std::string> names = tensor_names(args);
  for (size_t i = 1; i < args.tensors.size(); ++i) {
    if (const int64_t j = shares_with(args.tensors, i); j >= 0)
      shared += detail::str_cat(shared.empty() ? "" : ", ", names[i], " with ",
                                names[static_cast<size_t>(j)]);
  }
  out.emplace_back("memory shared by arguments", shared.empty() ? "none" : shared);
  const Tf32Policy tf32 = allow_tf32();
  out.emplace_back("grad mode", is_grad_enabled() ? "enabled" : "disabled");
  out.emplace_back("autocast", ops::autocast::describe());
  out.emplace_back("TF32 policy", std::string("matmul ") + (tf32.matmul ? "on" : "off") +
                                      ", conv " + (tf32.conv ? "on" : "off"));
  return out;
}

// The first guard in which `now` differs from `before`.
std::string first_difference(const std::vector<std::pair<std::string, std::string>>& before,
                             const std::vector<std::pair<std::string, std::string>>& now) {
  for (size_t i = 0; i < std::min(before.size(), now.size()); ++i) {
    if (before[i].first != now[i].first)
      return "the arguments' kinds changed (" + now[i].first + ")";
    if (before[i].second != now[i].second)
      return now[i].first + " was " + before[i].second + ", now " + now[i].second;
  }
  return "the number of arguments changed";
}

void mark_dynamic(const Tensor& t, int64_t dim) {
  if (!t.defined()) throw ValueError("mark_dynamic: the tensor is undefined");
  const int64_t rank = t.dim();
  const int64_t d = dim < 0 ? dim + rank : dim;
  if (d < 0 || d >= rank) {
    throw IndexError(detail::str_cat("mark_dynamic: dim ", dim, " is out of range for a tensor of ",
                                     rank, " dims (sizes ", str(t.sizes()), ")"));
  }
  if (d >= 64)
    throw ValueError(
        detail::str_cat("mark_dynamic: dim ", d, ": only dims below 64 can be dynamic"));
  std::lock_guard lock(g_marks_mutex);
  if ((g_marks.size() & (g_marks.size() - 1)) ==
      0) {  // now and then, forget the marks of freed tensors
    std::erase_if(g_marks, [](const auto& m) { return m.second.impl.expired(); });
  }
  Mark& m = g_marks[t.impl_ptr().get()];
  if (m.impl.lock() != t.impl_ptr()) m = Mark{t.impl_ptr(), 0};
  m.dims |= uint64_t{1} << d;
  g_any_marks.store(true, std::memory_order_relaxed);
}

uint64_t dynamic_marks(const Tensor& t) {
  if (!t.defined() || !g_any_marks.load(std::memory_order_relaxed)) return 0;
  std::lock_guard lock(g_marks_mutex);
  const auto it = g_marks.find(t.impl_ptr().get());
  if (it == g_marks.end() || it->second.impl.lock() != t.impl_ptr()) return 0;
  return it->second.dims;
}

}  // namespace kiln::compiler
