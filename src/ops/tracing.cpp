#include "ops/tracing.h"

namespace kiln::ops {
namespace {

thread_local TraceRecorder* t_active = nullptr;
thread_local int t_paused = 0;

}  // namespace

TraceRecorder* TraceRecorder::active() noexcept { return t_active; }

void TraceRecorder::activate() {
  if (t_active != nullptr) throw Error("compiler: a trace is already running on this thread");
  previous_ = t_active;
  t_active = this;
}

void TraceRecorder::deactivate() noexcept { t_active = previous_; }

TracePause::TracePause() noexcept : paused_(t_active) {
  t_active = nullptr;
  if (paused_) ++t_paused;
}

TracePause::~TracePause() {
  if (paused_) --t_paused;
  t_active = paused_;
}

bool TracePause::pausing_a_tracer() noexcept { return t_paused > 0; }

std::string HostRead::describe(const Tensor& proxy) const {
  std::string at;
  if (known_where) {
    std::string file = where.file_name();
    if (const size_t slash = file.find_last_of('/'); slash != std::string::npos)
      file = file.substr(slash + 1);
    at = detail::str_cat(" at ", file, ":", where.line());
  }
  return detail::str_cat("the function reads the values of a ", proxy.dtype(), proxy.sizes(),
                         " tensor on the host (", what, at, ")");
}

}  // namespace kiln::ops

namespace kiln::detail {

void note_layout_read(const TensorImpl& impl, LayoutField field, int64_t dim,
                      const std::source_location& where) {
  if (ops::TraceRecorder* recorder = ops::TraceRecorder::active())
    recorder->note_layout_read(impl, field, dim, where);
}

void note_size_compare(const TensorImpl& impl, int64_t dim, SizeCmp cmp, int64_t n, bool result,
                       const std::source_location& where) {
  if (ops::TraceRecorder* recorder = ops::TraceRecorder::active())
    recorder->note_size_compare(impl, dim, cmp, n, result, where);
}

void note_size_relation(const TensorImpl& impl, int64_t dim, SizeCmp cmp, const TensorImpl& other,
                        int64_t other_dim, bool result, const std::source_location& where) {
  if (ops::TraceRecorder* recorder = ops::TraceRecorder::active())
    recorder->note_size_relation(impl, dim, cmp, other, other_dim, result, where);
}

}  // namespace kiln::detail
