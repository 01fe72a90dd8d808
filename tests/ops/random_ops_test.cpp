// Random calls of every op of the op table (docs/errors.md): random inputs
// (dtypes, shapes with empty and size-1 dims, strided, transposed and
// broadcast layouts, values with NaN, infinities, INT_MIN, -1 and 0) and
// random attributes of the schema's types (huge, negative, zero and
// overflowing sizes and indices, NaN and infinite floats, unknown modes).
// Each call must give a kiln::Error, or outputs equal to the reference
// kernels' on the same call; never another exception, a crash, a sanitizer
// report or a hang. In CI it also runs in the sanitizer build (ASan + UBSan).
//
// KILN_RANDOM_OPS_CALLS (default 4000) sets the number of calls and
// KILN_RANDOM_OPS_SEED (default 1) the first seed; a failure names the seed of
// its call, which KILN_RANDOM_OPS_SEED=<seed> KILN_RANDOM_OPS_CALLS=1 repeats;
// KILN_RANDOM_OPS_VERBOSE=1 prints each call before it runs (for a crash).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "backends/cpu/cpu_allocator.h"
#include "core/shape_util.h"
#include "kiln/debug.h"
#include "kiln/kiln.h"
#include "ops/consistency.h"
#include "ops/dispatch.h"
#include "ops/op_table.h"

namespace kiln::testing {
namespace {

constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kI64Min = std::numeric_limits<int64_t>::min();

int64_t env_or(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoll(v, nullptr, 10) : fallback;
}

class Draw {
 public:
  explicit Draw(uint64_t seed) : g_(seed) {}
  int64_t in(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(g_); }
  bool coin(double p = 0.5) { return std::uniform_real_distribution<double>(0, 1)(g_) < p; }
  double uniform(double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(g_);
  }
  template <class T>
  const T& one_of(const std::vector<T>& v) {
    return v[static_cast<size_t>(in(0, static_cast<int64_t>(v.size()) - 1))];
  }

  // Mostly small sizes and dims; at times an edge that must be refused cleanly.
  int64_t integer() {
    if (coin(0.85)) return in(-2, 5);
    static const std::vector<int64_t> kEdges = {
        kI64Max, kI64Min,     int64_t{1} << 62, int64_t{1} << 32, -(int64_t{1} << 40),
        1000,    kI64Max - 1, int64_t{1} << 31};
    return one_of(kEdges);
  }
  std::vector<int64_t> integers() {
    std::vector<int64_t> v(static_cast<size_t>(in(0, 4)));
    for (auto& x : v) x = integer();
    return v;
  }
  double real() {
    if (coin(0.8)) return one_of(std::vector<double>{0, 1, -1, 0.5, 2, 1e-3, 0.1, 3});
    return one_of(
        std::vector<double>{std::nan(""), INFINITY, -INFINITY, 1e300, -1e-300, 1e39, -5e9});
  }
  Scalar scalar() {
    switch (in(0, 3)) {
      case 0:
        return Scalar(integer());
      case 1:
        return Scalar(coin());
      default:
        return Scalar(real());
    }
  }

  // A tensor of at most 4 dims of sizes 0..5, in one of four layouts; now and
  // then an empty one with a huge dim beside its 0 (a kernel that walks one
  // dim while another is empty would hang on it).
  Tensor tensor() {
    const DType dtype = coin(0.4) ? kFloat32 : one_of(kAllTypes);
    Shape shape(static_cast<size_t>(in(0, 4)));
    for (auto& s : shape) s = coin(0.1) ? 0 : in(1, 4);
    if (shape.size() >= 2 && coin(0.04)) {
      const auto zero = static_cast<size_t>(in(0, static_cast<int64_t>(shape.size()) - 1));
      auto huge = static_cast<size_t>(in(0, static_cast<int64_t>(shape.size()) - 2));
      if (huge >= zero) ++huge;
      shape[zero] = 0;
      shape[huge] = one_of(std::vector<int64_t>{int64_t{1} << 40, int64_t{1} << 55});
      return fill(shape, dtype);
    }
    const Tensor values = fill(shape, dtype);
    switch (in(0, 3)) {
      case 1:  // transposed: a contiguous buffer of the swapped shape, viewed back
        if (shape.size() >= 2) {
          Shape swapped = shape;
          std::swap(swapped[swapped.size() - 2], swapped.back());
          return fill(swapped, dtype).transpose(-1, -2);
        }
        return values;
      case 2:  // broadcast: a size-1 dim expanded
        if (!shape.empty() && shape[0] > 0) {
          Shape one = shape;
          one[0] = 1;
          return fill(one, dtype).expand(shape);
        }
        return values;
      case 3: {  // every other element of a wider tensor
        if (shape.empty()) return values;
        Shape wide = shape;
        wide.back() *= 2;
        return fill(wide, dtype).slice(-1, 0, std::nullopt, 2);
      }
      default:
        return values;
    }
  }

 private:
  Tensor fill(const Shape& shape, DType dtype) {
    const int64_t n = shape_numel(shape);
    if (is_floating(dtype)) {
      std::vector<double> v(static_cast<size_t>(n));
      for (auto& x : v) x = coin(0.9) ? uniform(-3, 3) : real();
      return from_vector<double>(v, shape).to(dtype);
    }
    std::vector<int64_t> v(static_cast<size_t>(n));
    for (auto& x : v) {
      x = dtype == kBool ? in(0, 1)
          : coin(0.9)    ? in(-3, 5)
                         : one_of(std::vector<int64_t>{-1, 0, 127, -128, 255});
      if (dtype == kInt32 && coin(0.05)) x = std::numeric_limits<int32_t>::min();
      if (dtype == kInt64 && coin(0.05)) x = kI64Min;
    }
    return from_vector<int64_t>(v, shape).to(dtype);
  }

  std::mt19937_64 g_;
};

ops::AttrValue attr_of(const ops::AttrSpec& spec, Draw& d) {
  if (spec.optional && d.coin(0.3)) return std::monostate{};
  switch (spec.type) {
    case ops::AttrType::Int:
      return d.integer();
    case ops::AttrType::Float:
      return d.real();
    case ops::AttrType::Bool:
      return d.coin();
    case ops::AttrType::Ints:
      return d.integers();
    case ops::AttrType::DType:
      return d.one_of(kAllTypes);
    case ops::AttrType::Device:
      return Device::cpu();
    case ops::AttrType::Scalar:
      return d.scalar();
    case ops::AttrType::Str:
      return d.one_of(std::vector<std::string>{"constant", "reflect", "replicate", "nearest",
                                               "bilinear", "mean", "sum", "none", "floor", "trunc",
                                               "tanh", "", "bogus"});
  }
  return std::monostate{};
}

struct Call {
  const ops::OpSchema* schema = nullptr;
  TensorList inputs;
  ops::Attrs attrs;
  bool inplace = false;
};

Call random_call(Draw& d) {
  const auto schemas = ops::all_op_schemas();
  Call c;
  c.schema = &schemas[static_cast<size_t>(d.in(0, static_cast<int64_t>(schemas.size()) - 1))];
  for (const auto& in : c.schema->inputs) {
    const int64_t count = in.variadic ? d.in(0, 4) : 1;
    for (int64_t k = 0; k < count; ++k) {
      c.inputs.push_back(in.optional && d.coin(0.3) ? Tensor() : d.tensor());
    }
  }
  // Inputs of one dtype now and then: most ops want that, and the kernels
  // behind the checks are the point.
  if (!c.inputs.empty() && d.coin(0.5)) {
    for (auto& t : c.inputs)
      if (t.defined() && c.inputs[0].defined()) t = t.to(c.inputs[0].dtype());
  }
  for (const auto& spec : c.schema->attrs) c.attrs.push_back(attr_of(spec, d));
  c.inplace = c.schema->has_flag(ops::kInplace) && !c.inputs.empty() && c.inputs[0].defined() &&
              d.coin(0.3);
  return c;
}

std::string describe(const Call& c, uint64_t seed) {
  std::ostringstream s;
  s << "seed " << seed << ": " << c.schema->name << (c.inplace ? "_" : "") << " on";
  for (const auto& t : c.inputs) {
    if (!t.defined()) {
      s << " (undefined)";
    } else {
      s << " " << t.dtype() << t.sizes() << "/" << t.strides();
    }
  }
  s << ", attrs";
  for (size_t k = 0; k < c.attrs.size(); ++k) {
    s << " " << c.schema->attrs[k].name << "=";
    std::visit(
        [&](const auto& v) {
          using V = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<V, std::monostate>) {
            s << "none";
          } else if constexpr (std::is_same_v<V, Scalar>) {
            s << (v.is_floating() ? v.to_double() : static_cast<double>(v.to_int()));
          } else {
            s << v;
          }
        },
        c.attrs[k]);
  }
  return s.str();
}

// Runs the call on copies of its inputs (layouts kept).
TensorList run(const Call& c) {
  TensorList inputs = clone_inputs(c.inputs);
  if (!c.inplace) return ops::dispatch(c.schema->id, inputs, c.attrs);
  Tensor self = inputs[0];
  ops::dispatch_inplace(c.schema->id, self, inputs, c.attrs);
  return {self};
}

TEST(RandomOps, GiveAnErrorOrTheReferenceResultNeverACrash) {
  const int64_t calls = env_or("KILN_RANDOM_OPS_CALLS", 4000);
  const auto first = static_cast<uint64_t>(env_or("KILN_RANDOM_OPS_SEED", 1));
  // Legal calls past this many live bytes are out-of-memory errors here, so a
  // random size cannot take the machine's memory or minutes of work.
  backend::CpuAllocator::instance().set_limit(size_t{256} << 20);
  const bool verbose = env_or("KILN_RANDOM_OPS_VERBOSE", 0) != 0;  // each call, before it runs
  // debug_tensor's prints of random tensors are dropped (its checks still run).
  const debug::PrintHandler previous_print = debug::set_print_handler([](const std::string&) {});
  int64_t refused = 0, compared = 0;
  for (uint64_t seed = first; seed < first + static_cast<uint64_t>(calls); ++seed) {
    Draw d(seed);
    const Call c = random_call(d);
    if (verbose) std::fprintf(stderr, "%s\n", describe(c, seed).c_str());
    TensorList got;
    try {
      got = run(c);
    } catch (const Error&) {
      ++refused;
      continue;
    } catch (const std::exception& e) {
      ADD_FAILURE() << describe(c, seed) << ": not a kiln::Error: " << e.what();
      continue;
    }
    TensorList want;
    try {
      ops::ReferenceModeGuard reference;
      want = run(c);
    } catch (const std::exception& e) {
      ADD_FAILURE() << describe(c, seed)
                    << ": the CPU kernel ran, the reference refused: " << e.what();
      continue;
    }
    ASSERT_EQ(got.size(), want.size()) << describe(c, seed);
    for (size_t k = 0; k < got.size(); ++k) {
      if (!got[k].defined() || !want[k].defined()) {
        EXPECT_EQ(got[k].defined(), want[k].defined()) << describe(c, seed) << " output " << k;
        continue;
      }
      ASSERT_EQ(got[k].sizes(), want[k].sizes()) << describe(c, seed) << " output " << k;
      ASSERT_EQ(got[k].dtype(), want[k].dtype()) << describe(c, seed) << " output " << k;
      if (got[k].numel() > (int64_t{1} << 20)) continue;  // a broadcast view: its source was
      if (c.schema->id == ops::OpId::empty) continue;     // values never written
      // Random values make some calls ill-conditioned (norm with p = 0.001):
      // float32 gets the bound the op cases give such ops.
      const DType t = got[k].dtype();
      const double bound = t == kFloat32 ? 1e-8 : default_max_nmse(t);
      const Comparison cmp = compare(want[k], got[k], bound);
      EXPECT_TRUE(cmp.ok) << describe(c, seed) << " output " << k << ": " << cmp.message;
    }
    ++compared;
  }
  backend::CpuAllocator::instance().set_limit(0);
  debug::set_print_handler(previous_print);
  // Both kinds of outcome are exercised, or the draw is broken.
  EXPECT_GT(refused, calls / 10);
  EXPECT_GT(compared, calls / 10);
  std::printf("random ops: %lld calls, %lld refused, %lld compared with the reference\n",
              static_cast<long long>(calls), static_cast<long long>(refused),
              static_cast<long long>(compared));
}

}  // namespace
}  // namespace kiln::testing
