// Printing tensors the way PyTorch does: a shared number format chosen from
// all the values (integer-valued, fixed with 4 decimals, or scientific),
// nested brackets aligned under "tensor(", and summaries past 1000 elements.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "kiln/tensor.h"

namespace kiln {
namespace {

constexpr int64_t kSummarizeThreshold = 1000;
constexpr int64_t kEdgeItems = 3;
constexpr size_t kLineWidth = 80;

struct Format {
  enum class Kind { Bool, Integer, IntegerValued, Fixed, Scientific } kind;
  size_t width = 1;

  std::string raw(double v) const {
    char buf[64];
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    switch (kind) {
      case Kind::Bool: return v != 0 ? "True" : "False";
      case Kind::Integer: std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v)); break;
      case Kind::IntegerValued: std::snprintf(buf, sizeof buf, "%.0f.", v); break;
      case Kind::Fixed: std::snprintf(buf, sizeof buf, "%.4f", v); break;
      case Kind::Scientific: std::snprintf(buf, sizeof buf, "%.4e", v); break;
    }
    return buf;
  }
  std::string operator()(double v) const {
    std::string s = raw(v);
    return std::string(width > s.size() ? width - s.size() : 0, ' ') + s;
  }
};

// The values that will be shown (edges only when summarizing), row-major.
void collect(const Tensor& t, bool summarize, std::vector<double>& out) {
  if (t.dim() == 0) {
    out.push_back(t.item().to_double());
    return;
  }
  const int64_t n = t.sizes()[0];
  for (int64_t i = 0; i < n; ++i) {
    if (summarize && n > 2 * kEdgeItems && i == kEdgeItems) i = n - kEdgeItems;
    collect(t.select(0, i), summarize, out);
  }
}

Format choose_format(DType dtype, const std::vector<double>& values) {
  Format f{Format::Kind::Integer};
  if (dtype == kBool) f.kind = Format::Kind::Bool;
  if (is_floating(dtype)) {
    std::vector<double> finite;
    for (double v : values)
      if (std::isfinite(v) && v != 0) finite.push_back(std::fabs(v));
    bool integer_valued = true;
    for (double v : values)
      if (std::isfinite(v) && std::ceil(v) != v) integer_valued = false;
    f.kind = integer_valued ? Format::Kind::IntegerValued : Format::Kind::Fixed;
    if (!finite.empty()) {
      const double lo = *std::min_element(finite.begin(), finite.end());
      const double hi = *std::max_element(finite.begin(), finite.end());
      if (hi / lo > 1000.0 || hi > 1e8 || (!integer_valued && lo < 1e-4)) {
        f.kind = Format::Kind::Scientific;
      }
    }
  }
  for (double v : values) f.width = std::max(f.width, f.raw(v).size());
  return f;
}

void print_dims(std::ostream& os, const Tensor& t, const Format& f, bool summarize, size_t indent) {
  if (t.dim() == 0) {
    os << f(t.item().to_double());
    return;
  }
  const int64_t n = t.sizes()[0];
  os << '[';
  if (t.dim() == 1) {
    const size_t per_line = std::max<size_t>(1, (kLineWidth - indent) / (f.width + 2));
    size_t on_line = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (summarize && n > 2 * kEdgeItems && i == kEdgeItems) {
        os << "  ...,";
        i = n - kEdgeItems;
      }
      if (on_line == per_line) {
        os << '\n' << std::string(indent + 1, ' ');
        on_line = 0;
      } else if (i > 0) {
        os << (on_line ? " " : "");
      }
      os << f(t.select(0, i).item().to_double()) << (i + 1 < n ? "," : "");
      ++on_line;
    }
  } else {
    const std::string sep = std::string(",") + std::string(t.dim() - 1, '\n') +
                            std::string(indent + 1, ' ');
    for (int64_t i = 0; i < n; ++i) {
      if (summarize && n > 2 * kEdgeItems && i == kEdgeItems) {
        os << "..." << sep;
        i = n - kEdgeItems;
      }
      print_dims(os, t.select(0, i), f, summarize, indent + 1);
      if (i + 1 < n) os << sep;
    }
  }
  os << ']';
}

}  // namespace

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  if (!t.defined()) return os << "tensor(undefined)";
  if (t.is_meta()) {
    std::ostringstream size;
    size << "size=" << t.sizes();
    os << "tensor(..., " << size.str() << ", meta=true";
  } else if (t.numel() == 0) {
    os << "tensor([]";
    if (t.dim() != 1) os << ", size=" << t.sizes();
  } else {
    const bool summarize = t.numel() > kSummarizeThreshold;
    std::vector<double> shown;
    collect(t, summarize, shown);
    const Format f = choose_format(t.dtype(), shown);
    os << "tensor(";
    print_dims(os, t, f, summarize, 7);
  }
  if (!t.device().is_cpu()) os << ", device='" << t.device() << "'";
  if (t.dtype() != kFloat32 && t.dtype() != kInt64 && t.dtype() != kBool) {
    os << ", dtype=" << t.dtype();
  }
  return os << ')';
}

std::string to_string(const Tensor& t) {
  std::ostringstream os;
  os << t;
  return os.str();
}

}  // namespace kiln
