#include "compiler/guard_key.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <memory>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "kiln/autograd.h"
#include "kiln/runtime.h"

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

// Each tensor argument's name: "argument 2", or "argument 2[0]" in a list.
std::vector<std::string> tensor_names(const internal::FlatArgs& args) {
  std::vector<std::string> out;
  size_t position = 0;
  for (size_t k = 0; k < args.key.size(); ++position) {
    const int64_t tag = args.key[k];
    const std::string arg = "argument " + std::to_string(position);
    if (tag == 1) {
      out.push_back(arg);
      k += 1;
    } else if (tag == 2) {
      for (int64_t i = 0; i < args.key[k + 1]; ++i)
        out.push_back(arg + "[" + std::to_string(i) + "]");
      k += 2;
    } else {
      k += 2;
    }
  }
  return out;
}

// Every guard of a call, named, in a fixed order: what recompile logs compare.
std::vector<std::pair<std::string, std::string>> describe(const internal::FlatArgs& args) {
  std::vector<std::pair<std::string, std::string>> out;
  size_t tensor = 0, position = 0;
  for (size_t k = 0; k < args.key.size(); ++position) {
    const int64_t tag = args.key[k];
    const std::string arg = "argument " + std::to_string(position);
    if (tag == 1) {
      const Tensor& t = args.tensors[tensor++];
      out.emplace_back(arg + " sizes", str(t.sizes()));
      out.emplace_back(arg + " strides", str(t.strides()));
      out.emplace_back(arg + " dtype", std::string(dtype_name(t.dtype())));
      std::ostringstream d;
      d << t.device();
      out.emplace_back(arg + " device", d.str());
      out.emplace_back(arg + " requires_grad", t.requires_grad() ? "true" : "false");
      if (t.requires_grad()) {
        std::ostringstream g;
        if (t.grad().defined())
          g << "a tensor at " << static_cast<const void*>(t.grad().impl_ptr().get());
        out.emplace_back(arg + " grad", t.grad().defined() ? g.str() : "none");
      }
      k += 1;
    } else if (tag == 2) {
      out.emplace_back(arg + " list length", std::to_string(args.key[k + 1]));
      for (int64_t i = 0; i < args.key[k + 1]; ++i) {
        const Tensor& t = args.tensors[tensor++];
        const std::string item = arg + "[" + std::to_string(i) + "]";
        std::ostringstream d;
        d << t.dtype() << t.sizes() << " strides " << t.strides() << " " << t.device()
          << (t.requires_grad() ? " requires_grad" : "");
        out.emplace_back(item, d.str());
      }
      k += 2;
    } else if (tag == 3) {
      std::ostringstream d;
      d << std::bit_cast<double>(args.key[k + 1]);
      out.emplace_back(arg + " value", d.str());
      k += 2;
    } else {
      out.emplace_back(arg + " value", std::to_string(args.key[k + 1]));
      k += 2;
    }
  }
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
