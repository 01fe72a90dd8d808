// kiln::debug (include/kiln/debug.h): the debug_tensor op, its shape rule and
// its kernel (the same on every backend: the values are read on the host).
#include "kiln/debug.h"

#include <cmath>
#include <cstdio>
#include <mutex>

#include "kiln/autograd.h"
#include "kiln/error.h"
#include "ops/debug.h"
#include "ops/dispatch.h"

namespace kiln::debug {
namespace {

std::mutex& handler_mutex() {
  static std::mutex m;
  return m;
}

PrintHandler& handler() {
  static PrintHandler* h = new PrintHandler();  // alive for prints at exit
  return *h;
}

void emit(const std::string& text) {
  std::lock_guard lock(handler_mutex());
  if (handler()) {
    handler()(text);
  } else {
    std::fputs(text.c_str(), stderr);
  }
}

// The index of flat element i of a tensor of these sizes, as "[1, 0, 2]".
std::string index_text(const Shape& sizes, int64_t i) {
  Shape index(sizes.size());
  for (size_t d = sizes.size(); d-- > 0;) {
    index[d] = i % sizes[d];
    i /= sizes[d];
  }
  return detail::str_cat(index);
}

void check_values(const Tensor& host, const std::string& label) {
  if (!is_floating(host.dtype()) || host.numel() == 0) return;
  const std::vector<double> values = host.to_vector<double>();
  int64_t bad = 0, first = -1;
  for (size_t i = 0; i < values.size(); ++i) {
    if (std::isfinite(values[i])) continue;
    if (first < 0) first = static_cast<int64_t>(i);
    ++bad;
  }
  if (bad == 0) return;
  const double v = values[static_cast<size_t>(first)];
  throw ValueError(detail::str_cat("check_finite: ", label, ": ", bad, " of ", values.size(),
                                   " values are not finite (the first, ",
                                   std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf"), ", at ",
                                   index_text(host.sizes(), first), ")"));
}

}  // namespace

void print(const Tensor& t, std::string_view label) {
  ops::dispatch(ops::OpId::debug_tensor, std::span<const Tensor>(&t, 1),
                ops::Attrs{std::string(label), false});
}

void check_finite(const Tensor& t, std::string_view label) {
  ops::dispatch(ops::OpId::debug_tensor, std::span<const Tensor>(&t, 1),
                ops::Attrs{std::string(label), true});
}

PrintHandler set_print_handler(PrintHandler h) {
  std::lock_guard lock(handler_mutex());
  std::swap(handler(), h);
  return h;
}

}  // namespace kiln::debug

namespace kiln::ops {

template <class Ctx>
void infer_debug_tensor(Ctx& ctx) {
  (void)ctx;  // any tensor; no outputs
}
KILN_SHAPE_RULE_INSTANCES(infer_debug_tensor)

void run_debug_tensor(const backend::KernelCall& call) {
  NoGradGuard no_grad;
  const Tensor& t = call.in(0);
  const Tensor host = t.device().is_cpu() ? t : t.to(Device::cpu());
  const std::string& label = call.attrs.str(0);
  if (call.attrs.b(1)) {
    debug::check_values(host, label);
  } else {
    debug::emit(detail::str_cat(label, ": ", to_string(host), "\n"));
  }
}

}  // namespace kiln::ops
