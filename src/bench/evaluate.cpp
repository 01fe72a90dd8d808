// kiln::bench::evaluate: one case, eager and compiled in each mode.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <optional>

#include "bench/stats.h"
#include "io/atomic_file.h"
#include "kiln/bench.h"
#include "kiln/cuda.h"
#include "kiln/runtime.h"

namespace kiln::bench {
namespace {

constexpr const char* kOp = "kiln::bench::evaluate";

std::vector<std::string> resolve_modes(const Options& o, Device device) {
  static const std::vector<std::string> known = {"eager", "default", "reduce-overhead",
                                                 "max-autotune"};
  std::vector<std::string> modes;
  if (o.modes.empty()) modes = default_modes(device);
  for (const std::string& m : o.modes) {
    if (std::find(known.begin(), known.end(), m) == known.end()) {
      throw ValueError(kiln::detail::str_cat(kOp, ": unknown mode '", m,
                                             "' (eager, default, reduce-overhead, max-autotune)"));
    }
    if (needs_cuda(m) && !device.is_cuda()) {
      throw ValueError(kiln::detail::str_cat(
          kOp, ": mode '", m, "' runs CUDA graphs and needs inputs on a CUDA device; ",
          "the inputs are on ", device.str()));
    }
    if (std::find(modes.begin(), modes.end(), m) == modes.end()) modes.push_back(m);
  }
  // Eager is the reference of every error and speed-up: measured first.
  auto eager = std::find(modes.begin(), modes.end(), "eager");
  if (eager != modes.end()) modes.erase(eager);
  modes.insert(modes.begin(), "eager");
  return modes;
}

Mode mode_of(std::string_view m) {
  if (m == "reduce-overhead") return Mode::ReduceOverhead;
  if (m == "max-autotune") return Mode::MaxAutotune;
  return Mode::Default;
}

std::string dtype_label(DType t) {
  if (t == kFloat32) return "fp32";
  if (t == kBFloat16) return "bf16";
  if (t == kFloat16) return "fp16";
  if (t == kFloat64) return "fp64";
  return std::string(dtype_name(t));
}

// Times whole calls: CUDA events on a GPU (each call waited for), a steady
// clock on the CPU.
class CallTimer {
 public:
  explicit CallTimer(Device device) : device_(device) {
    if (device.is_cuda()) {
      start_.emplace(true, device.index());
      end_.emplace(true, device.index());
    }
  }
  template <typename F>
  double time_ms(F&& f) {
    if (!device_.is_cuda()) {
      const auto t0 = std::chrono::steady_clock::now();
      f();
      return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
          .count();
    }
    start_->record();
    f();
    end_->record();
    end_->synchronize();
    return static_cast<double>(start_->elapsed_ms(*end_));
  }

 private:
  Device device_;
  std::optional<cuda::Event> start_, end_;
};

void synchronize(Device device) {
  if (device.is_cuda()) cuda::synchronize(device.index());
}

std::vector<Tensor> keep(const std::vector<Tensor>& outputs) {
  std::vector<Tensor> kept;
  kept.reserve(outputs.size());
  for (const Tensor& t : outputs) kept.push_back(t.detach().clone());
  return kept;
}

// The first call's split into compile stages, from a compiled function's report.
void take_first_call(const ExplainReport& r, FirstCall& f) {
  for (const auto& g : r.graphs) {
    f.trace_ms += g.trace_ms + g.verify_ms;
    f.passes_ms += g.passes_ms;
    f.build_ms += g.lower_ms + g.record_ms + g.autotune_ms;
    f.codegen_ms += g.codegen_ms;
  }
  f.run_ms = std::max(0.0, f.total_ms - f.trace_ms - f.passes_ms - f.build_ms);
}

// Graphs, breaks and recompiles after all calls, and what to know about them.
void take_counts(const ExplainReport& r, Result& out) {
  out.graphs = static_cast<int64_t>(r.graphs.size());
  out.generated_kernels = out.kernel_cache_hits = 0;
  for (const auto& g : r.graphs) {
    out.generated_kernels += g.generated_kernels;
    if (g.generated_kernels > 0 && !g.codegen_compiled) ++out.kernel_cache_hits;
  }
  out.graph_breaks = r.stats.graph_breaks;
  out.recompiles = static_cast<int64_t>(r.recompiles.size());
  auto add_note = [&out](const std::string& n) { out.note += (out.note.empty() ? "" : "; ") + n; };
  if (r.stats.eager_calls > 0) {
    add_note(kiln::detail::str_cat(r.stats.eager_calls, " of ", r.stats.calls, " calls ran eagerly",
                                   r.graph_breaks.empty() ? "" : ": " + r.graph_breaks.front()));
  }
  if (!r.cuda_graph_skips.empty()) add_note("no CUDA graph: " + r.cuda_graph_skips.front());
  for (const auto& g : r.graphs) {
    if (g.generated_kernels == 0 && !g.codegen.empty()) {
      add_note(g.codegen);  // why the fused groups run on the library kernels
      break;
    }
  }
}

int64_t bytes_of(const Tensor& t) { return static_cast<int64_t>(t.numel() * t.element_size()); }

}  // namespace

std::vector<std::string> default_modes(Device device) {
  std::vector<std::string> modes = {"eager", "default"};
  if (device.is_cuda()) modes.insert(modes.end(), {"reduce-overhead", "max-autotune"});
  return modes;
}

bool needs_cuda(std::string_view mode) {
  return mode == "reduce-overhead" || mode == "max-autotune";
}

namespace detail {

Errors compare_outputs(const std::vector<Tensor>& got, const std::vector<Tensor>& want) {
  Errors e;
  if (got.size() != want.size()) {
    e.note = kiln::detail::str_cat(got.size(), " outputs, eager gave ", want.size());
    e.abs = e.rel = std::numeric_limits<double>::infinity();
    return e;
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i].sizes() != want[i].sizes()) {
      e.note = kiln::detail::str_cat("output ", i, " has shape ", got[i].sizes(), ", eager's ",
                                     want[i].sizes());
      e.abs = e.rel = std::numeric_limits<double>::infinity();
      return e;
    }
    if (got[i].numel() == 0) continue;
    const Tensor a = got[i].to(Device::cpu()).to(kFloat64);
    const Tensor b = want[i].to(Device::cpu()).to(kFloat64);
    const double diff = (a - b).abs().max().item<double>();
    const double scale = b.abs().max().item<double>();
    const double rel = diff == 0 ? 0 : diff / std::max(scale, std::numeric_limits<double>::min());
    e.abs = std::max(e.abs, std::isnan(diff) ? std::numeric_limits<double>::infinity() : diff);
    e.rel = std::max(e.rel, std::isnan(rel) ? std::numeric_limits<double>::infinity() : rel);
  }
  return e;
}

int64_t weights_bytes_of(const nn::Module& module) {
  int64_t bytes = 0;
  for (const auto& [name, t] : module.state_dict()) bytes += bytes_of(t);
  return bytes;
}

Case evaluate(const Subject& subject, const Options& o) {
  if (o.iters < 1)
    throw ValueError(kiln::detail::str_cat(kOp, ": iters must be >= 1, got ", o.iters));
  if (o.warmup < 0)
    throw ValueError(kiln::detail::str_cat(kOp, ": warmup must be >= 0, got ", o.warmup));
  if (o.batch < 0)
    throw ValueError(kiln::detail::str_cat(kOp, ": batch must be >= 0, got ", o.batch));
  const Device device = subject.inputs.empty() ? Device::cpu() : subject.inputs.front().device();
  for (const Tensor& t : subject.inputs) {
    if (t.device() != device) {
      throw DeviceError(kiln::detail::str_cat(kOp, ": the inputs are on ", device.str(), " and ",
                                              t.device().str(), "; put them on one device"));
    }
  }
  const std::vector<std::string> modes = resolve_modes(o, device);

  Case c;
  c.model = o.name;
  c.device = device.str();
  c.weights_bytes = o.weights_bytes;
  c.batch = o.batch;
  if (c.batch == 0)
    c.batch =
        !subject.inputs.empty() && subject.inputs[0].dim() > 0 ? subject.inputs[0].size(0) : 1;
  for (const Tensor& t : subject.inputs) c.input_bytes += bytes_of(t);
  for (const Tensor& t : subject.inputs) {
    if (is_floating(t.dtype())) {
      c.dtype = dtype_label(t.dtype());
      break;
    }
  }

  const double calls_per_mode = 1.0 + o.warmup + o.iters;
  const double total_calls = calls_per_mode * static_cast<double>(modes.size());
  double calls_done = 0;
  auto progress = [&](const std::string& stage) {
    if (o.on_progress) o.on_progress(Progress{stage, calls_done / total_calls});
  };

  std::vector<Tensor> reference;  // eager's outputs
  CallTimer timer(device);
  for (const std::string& mode : modes) {
    Result r;
    r.mode = mode;
    std::optional<Subject::Compiled> compiled;
    std::function<std::vector<Tensor>()> run = subject.eager;
    synchronize(device);
    // Each mode starts from empty caches: the weight copies an earlier mode
    // or model left (freed lazily, which would lower this mode's count) are
    // gone, and each mode's first call makes its own.
    empty_cache(device);
    const size_t resident = memory_stats(device).allocated_bytes;
    reset_peak_memory_stats(device);
    if (mode != "eager") {
      compiled = subject.compile(
          CompileOptions{.mode = mode_of(mode), .freeze = o.freeze, .name = o.name});
      run = compiled->run;
    }

    progress(mode + ": first call");
    std::vector<Tensor> outputs;
    r.first_call.total_ms = timer.time_ms([&] { outputs = run(); });
    calls_done += 1;
    if (compiled) {
      take_first_call(compiled->explain(), r.first_call);
    } else {
      r.first_call.trace_ms = r.first_call.passes_ms = r.first_call.build_ms = r.first_call.run_ms =
          r.first_call.codegen_ms = -1;
      r.generated_kernels = r.kernel_cache_hits = 0;
    }
    if (mode == "eager") {
      reference = keep(outputs);
      if (c.dtype.empty() && !reference.empty()) c.dtype = dtype_label(reference.front().dtype());
    }
    outputs.clear();

    progress(mode + ": warm-up");
    for (int i = 0; i < o.warmup; ++i) {
      timer.time_ms([&] { (void)run(); });
      calls_done += 1;
    }

    progress(mode + ": timing");
    std::vector<double> samples;
    samples.reserve(static_cast<size_t>(o.iters));
    const int64_t launches_before = kernel_launches();
    for (int i = 0; i < o.iters; ++i) {
      const bool last = i + 1 == o.iters;
      samples.push_back(timer.time_ms([&] {
        if (last) {
          outputs = run();
        } else {
          (void)run();
        }
      }));
      calls_done += 1;
      if ((i + 1) % std::max(1, o.iters / 20) == 0) progress(mode + ": timing");
    }
    r.launches_per_call = static_cast<double>(kernel_launches() - launches_before) / o.iters;
    const size_t peak = memory_stats(device).peak_allocated_bytes;
    r.peak_bytes = static_cast<int64_t>(peak > resident ? peak - resident : 0);
    r.latency_ms = latency_of(std::move(samples));
    r.throughput =
        r.latency_ms.median > 0 ? static_cast<double>(c.batch) * 1e3 / r.latency_ms.median : 0;
    if (o.on_outputs) o.on_outputs(mode, outputs);
    if (compiled) {
      const detail::Errors e = detail::compare_outputs(outputs, reference);
      r.max_abs_error = e.abs;
      r.max_rel_error = e.rel;
      if (!e.note.empty()) r.note = e.note;
      take_counts(compiled->explain(), r);
    }
    outputs.clear();
    compiled.reset();
    c.results.push_back(std::move(r));
  }
  calls_done = total_calls;
  progress("done");
  c.compute_speedups();
  return c;
}

}  // namespace detail

const Result* Case::find(std::string_view framework, std::string_view mode) const {
  for (const Result& r : results)
    if (r.framework == framework && r.mode == mode) return &r;
  return nullptr;
}

const Result* Case::fastest(std::string_view framework, bool compiled_only) const {
  const Result* best = nullptr;
  for (const Result& r : results) {
    if (r.framework != framework || (compiled_only && r.mode == "eager") ||
        r.latency_ms.samples == 0 || !(r.latency_ms.median > 0))
      continue;
    if (!best || r.latency_ms.median < best->latency_ms.median) best = &r;
  }
  return best;
}

void Case::compute_speedups() {
  auto median = [this](std::string_view framework, std::string_view mode) {
    const Result* r = find(framework, mode);
    return r && r->latency_ms.median > 0 ? r->latency_ms.median : -1.0;
  };
  const Result* torch_best = fastest("pytorch");
  torch_best_mode = torch_best ? torch_best->mode : "";
  const double torch_best_median = torch_best ? torch_best->latency_ms.median : -1;
  for (Result& r : results) {
    const double m = r.latency_ms.median;
    auto ratio = [m](double ref) { return ref > 0 && m > 0 ? ref / m : -1.0; };
    r.speedup_vs_eager = ratio(median(r.framework, "eager"));
    if (r.framework == "kiln") {
      r.speedup_vs_torch_eager = ratio(median("pytorch", "eager"));
      r.speedup_vs_torch_mode = ratio(median("pytorch", r.mode));
      r.speedup_vs_torch_best = ratio(torch_best_median);
    } else {
      r.speedup_vs_torch_eager = r.speedup_vs_torch_mode = r.speedup_vs_torch_best = -1;
    }
  }
}

std::string Case::headline() const {
  const Result* kiln = fastest("kiln");
  const Result* torch = fastest("pytorch");
  if (!kiln || !torch) return "";
  char ratio[32];
  std::snprintf(ratio, sizeof ratio, "%.2fx", torch->latency_ms.median / kiln->latency_ms.median);
  auto ms = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3f ms", v);
    return std::string(buf);
  };
  std::string line = "kiln " + kiln->mode + " " + ms(kiln->latency_ms.median) +
                     " against PyTorch's fastest, " + torch->mode + " " +
                     ms(torch->latency_ms.median);
  // Where eager won, say what torch.compile's fastest mode gave.
  if (const Result* compiled = torch->mode == "eager" ? fastest("pytorch", true) : nullptr) {
    line += " (torch.compile " + compiled->mode + ": " + ms(compiled->latency_ms.median) + ")";
  }
  return line + ": " + ratio;
}

void write_file(const std::string& path, std::string_view text) {
  io::AtomicFileWriter out(path, "kiln::bench::write_file");
  out.write(text.data(), text.size());
  out.commit();
}

}  // namespace kiln::bench
