// kiln::bench::Report as JSON (docs/bench.md), CSV and a terminal table.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "bench/torch_results.h"
#include "kiln/bench.h"

namespace kiln::bench {
namespace {

using nlohmann::json;

// Optional figures are negative when not measured (JSON null); an error that
// is not finite is the string "inf" or "nan" (JSON has no such numbers).
json figure(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return "inf";
  if (v < 0) return nullptr;
  return v;
}
json count(int64_t v) { return v < 0 ? json(nullptr) : json(v); }

// Reads fields with errors that name the field's path (and the reader, `who`).
class Reader {
 public:
  Reader(const json& j, std::string path, std::string who = "kiln::bench::Report::from_json")
      : j_(j), path_(std::move(path)), who_(std::move(who)) {
    if (!j_.is_object()) fail("an object");
  }
  const json& at(const char* key) const {
    auto it = j_.find(key);
    if (it == j_.end()) {
      throw ValueError(kiln::detail::str_cat(who_, ": ", path_, " has no field '", key, "'"));
    }
    return *it;
  }
  bool has(const char* key) const { return j_.contains(key); }
  Reader child(const char* key) const { return Reader(at(key), path_ + "." + key, who_); }
  Reader element(const json& array, size_t i, const char* name) const {
    return Reader(array[i], kiln::detail::str_cat(path_, ".", name, "[", i, "]"), who_);
  }
  std::string str(const char* key) const {
    const json& v = at(key);
    if (!v.is_string()) fail_field(key, "a string");
    return v.get<std::string>();
  }
  double num(const char* key) const {
    const json& v = at(key);
    if (!v.is_number()) fail_field(key, "a number");
    return v.get<double>();
  }
  int64_t integer(const char* key) const {
    const json& v = at(key);
    if (!v.is_number_integer()) fail_field(key, "an integer");
    return v.get<int64_t>();
  }
  double opt_num(const char* key) const {
    const json& v = at(key);
    if (v.is_null()) return -1;
    if (v.is_string() && v.get<std::string>() == "inf")
      return std::numeric_limits<double>::infinity();
    if (v.is_string() && v.get<std::string>() == "nan")
      return std::numeric_limits<double>::quiet_NaN();
    if (!v.is_number()) fail_field(key, "a number, \"inf\", \"nan\" or null");
    return v.get<double>();
  }
  int64_t opt_integer(const char* key) const {
    const json& v = at(key);
    if (v.is_null()) return -1;
    if (!v.is_number_integer()) fail_field(key, "an integer or null");
    return v.get<int64_t>();
  }
  const json& array(const char* key) const {
    const json& v = at(key);
    if (!v.is_array()) fail_field(key, "an array");
    return v;
  }

 private:
  [[noreturn]] void fail(const char* what) const {
    throw ValueError(kiln::detail::str_cat(who_, ": ", path_, " must be ", what));
  }
  [[noreturn]] void fail_field(const char* key, const char* what) const {
    throw ValueError(kiln::detail::str_cat(who_, ": ", path_, ".", key, " must be ", what, ", got ",
                                           at(key).dump()));
  }
  const json& j_;
  std::string path_;
  std::string who_;
};

json parse(std::string_view text, const std::string& who) {
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    throw ValueError(kiln::detail::str_cat(who, ": not JSON: ", e.what()));
  }
}

json to_json(const Result& r) {
  const Latency& l = r.latency_ms;
  const FirstCall& f = r.first_call;
  return json{
      {"framework", r.framework},
      {"mode", r.mode},
      {"latency_ms",
       {{"median", l.median},
        {"p10", l.p10},
        {"p90", l.p90},
        {"p99", l.p99},
        {"min", l.min},
        {"max", l.max},
        {"mean", l.mean},
        {"stddev", l.stddev},
        {"samples", l.samples}}},
      {"throughput", r.throughput},
      {"first_call_ms",
       {{"total", figure(f.total_ms)},
        {"trace", figure(f.trace_ms)},
        {"passes", figure(f.passes_ms)},
        {"build", figure(f.build_ms)},
        {"run", figure(f.run_ms)},
        {"codegen", figure(f.codegen_ms)}}},
      {"peak_bytes", count(r.peak_bytes)},
      {"graphs", count(r.graphs)},
      {"graph_breaks", count(r.graph_breaks)},
      {"recompiles", count(r.recompiles)},
      {"launches_per_call", figure(r.launches_per_call)},
      {"generated_kernels", count(r.generated_kernels)},
      {"kernel_cache_hits", count(r.kernel_cache_hits)},
      {"max_abs_error", figure(r.max_abs_error)},
      {"max_rel_error", figure(r.max_rel_error)},
      {"max_abs_error_vs_torch", figure(r.max_abs_error_vs_torch)},
      {"max_rel_error_vs_torch", figure(r.max_rel_error_vs_torch)},
      {"speedup_vs_eager", figure(r.speedup_vs_eager)},
      {"speedup_vs_torch_eager", figure(r.speedup_vs_torch_eager)},
      {"speedup_vs_torch_mode", figure(r.speedup_vs_torch_mode)},
      {"speedup_vs_torch_best", figure(r.speedup_vs_torch_best)},
      {"note", r.note},
  };
}

Result result_from(const Reader& j) {
  Result r;
  r.framework = j.str("framework");
  r.mode = j.str("mode");
  const Reader l = j.child("latency_ms");
  r.latency_ms = {l.num("median"), l.num("p10"),    l.num("p90"),
                  l.num("p99"),    l.num("min"),    l.num("max"),
                  l.num("mean"),   l.num("stddev"), l.integer("samples")};
  r.throughput = j.num("throughput");
  const Reader f = j.child("first_call_ms");
  r.first_call = {f.opt_num("total"),  f.opt_num("trace"),
                  f.opt_num("passes"), f.opt_num("build"),
                  f.opt_num("run"),    f.has("codegen") ? f.opt_num("codegen") : -1};
  r.peak_bytes = j.opt_integer("peak_bytes");
  r.graphs = j.opt_integer("graphs");
  r.graph_breaks = j.opt_integer("graph_breaks");
  r.recompiles = j.opt_integer("recompiles");
  r.launches_per_call = j.opt_num("launches_per_call");
  // Reports saved before kiln generated kernels lack these: not measured.
  r.generated_kernels = j.has("generated_kernels") ? j.opt_integer("generated_kernels") : -1;
  r.kernel_cache_hits = j.has("kernel_cache_hits") ? j.opt_integer("kernel_cache_hits") : -1;
  r.max_abs_error = j.opt_num("max_abs_error");
  r.max_rel_error = j.opt_num("max_rel_error");
  r.max_abs_error_vs_torch = j.opt_num("max_abs_error_vs_torch");
  r.max_rel_error_vs_torch = j.opt_num("max_rel_error_vs_torch");
  r.speedup_vs_eager = j.opt_num("speedup_vs_eager");
  r.speedup_vs_torch_eager = j.opt_num("speedup_vs_torch_eager");
  r.speedup_vs_torch_mode = j.opt_num("speedup_vs_torch_mode");
  // Reports saved before kiln compared with PyTorch's fastest mode lack it:
  // from_json computes it from the medians.
  if (j.has("speedup_vs_torch_best")) r.speedup_vs_torch_best = j.opt_num("speedup_vs_torch_best");
  r.note = j.str("note");
  return r;
}

json to_json(const Environment& e) {
  return json{{"kiln_version", e.kiln_version},
              {"commit", e.commit},
              {"date", e.date},
              {"host", e.host},
              {"cpu", e.cpu},
              {"cpu_cores", e.cpu_cores},
              {"threads", e.threads},
              {"gpu", e.gpu},
              {"driver", e.driver},
              {"cuda", e.cuda},
              {"cudnn", e.cudnn},
              {"onednn", e.onednn},
              {"precision", e.precision},
              {"torch", e.torch},
              {"iters", e.iters},
              {"warmup", e.warmup}};
}

Environment environment_from(const Reader& j) {
  Environment e;
  e.kiln_version = j.str("kiln_version");
  e.commit = j.str("commit");
  e.date = j.str("date");
  e.host = j.str("host");
  e.cpu = j.str("cpu");
  e.cpu_cores = j.integer("cpu_cores");
  e.threads = static_cast<int>(j.integer("threads"));
  e.gpu = j.str("gpu");
  e.driver = j.str("driver");
  e.cuda = j.str("cuda");
  e.cudnn = j.str("cudnn");
  e.onednn = j.str("onednn");
  e.precision = j.str("precision");
  e.torch = j.str("torch");
  e.iters = j.integer("iters");
  e.warmup = j.integer("warmup");
  return e;
}

// A figure for people: "-" when not measured, else printf-formatted.
std::string fmt(const char* format, double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return "inf";
  if (v < 0) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

std::string fmt_speedup(double v) { return v < 0 ? "-" : fmt("%.2fx", v); }

std::string fmt_error(double v) { return v == 0 ? "0" : fmt("%.1e", v); }

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

std::string csv_number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return "inf";
  if (v < 0) return "";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

}  // namespace

std::string Report::to_json() const {
  json cs = json::array();
  for (const Case& c : cases) {
    json rs = json::array();
    for (const Result& r : c.results) rs.push_back(bench::to_json(r));
    cs.push_back(json{
        {"model", c.model},
        {"batch", c.batch},
        {"seq_len", c.seq_len},
        {"dtype", c.dtype},
        {"device", c.device},
        {"weights_bytes", c.weights_bytes},
        {"input_bytes", c.input_bytes},
        {"torch_best_mode", c.torch_best_mode.empty() ? json(nullptr) : json(c.torch_best_mode)},
        {"results", std::move(rs)}});
  }
  const json j{{"schema", "kiln-bench"},
               {"schema_version", schema_version},
               {"environment", bench::to_json(environment)},
               {"cases", std::move(cs)}};
  return j.dump(1) + "\n";
}

Report Report::from_json(std::string_view text) {
  const json j = parse(text, "kiln::bench::Report::from_json");
  const Reader root(j, "report");
  if (root.str("schema") != "kiln-bench") {
    throw ValueError(kiln::detail::str_cat("kiln::bench::Report::from_json: schema is '",
                                           root.str("schema"), "', not 'kiln-bench'"));
  }
  Report r;
  r.schema_version = static_cast<int>(root.integer("schema_version"));
  if (r.schema_version != kSchemaVersion) {
    throw ValueError(
        kiln::detail::str_cat("kiln::bench::Report::from_json: schema version ", r.schema_version,
                              " is not supported (this kiln reads version ", kSchemaVersion, ")"));
  }
  r.environment = environment_from(root.child("environment"));
  const json& cs = root.array("cases");
  for (size_t i = 0; i < cs.size(); ++i) {
    const Reader c = root.element(cs, i, "cases");
    Case out;
    out.model = c.str("model");
    out.batch = c.integer("batch");
    out.seq_len = c.integer("seq_len");
    out.dtype = c.str("dtype");
    out.device = c.str("device");
    out.weights_bytes = c.integer("weights_bytes");
    out.input_bytes = c.integer("input_bytes");
    const json& rs = c.array("results");
    for (size_t k = 0; k < rs.size(); ++k) {
      out.results.push_back(result_from(c.element(rs, k, "results")));
    }
    if (!c.has("torch_best_mode")) {
      out.compute_speedups();  // a report saved before the field: the same figures, recomputed
    } else if (!c.at("torch_best_mode").is_null()) {
      out.torch_best_mode = c.str("torch_best_mode");
    }
    r.cases.push_back(std::move(out));
  }
  return r;
}

std::string Report::to_csv() const {
  std::ostringstream out;
  out << "model,batch,seq_len,dtype,device,framework,mode,median_ms,p10_ms,p90_ms,p99_ms,min_ms,"
         "max_ms,mean_ms,"
         "stddev_ms,samples,throughput,first_call_ms,trace_ms,passes_ms,build_ms,run_ms,codegen_ms,"
         "peak_bytes,"
         "weights_bytes,"
         "graphs,graph_breaks,recompiles,launches_per_call,generated_kernels,kernel_cache_hits,"
         "max_abs_error,max_rel_error,max_abs_"
         "error_vs_torch,"
         "max_rel_error_vs_torch,speedup_vs_eager,speedup_vs_torch_eager,speedup_vs_torch_mode,"
         "speedup_vs_torch_best,torch_best_mode,note\n";
  for (const Case& c : cases) {
    for (const Result& r : c.results) {
      const Latency& l = r.latency_ms;
      const FirstCall& f = r.first_call;
      out << csv_field(c.model) << ',' << c.batch << ',' << c.seq_len << ',' << csv_field(c.dtype)
          << ',' << csv_field(c.device) << ',' << csv_field(r.framework) << ','
          << csv_field(r.mode);
      for (double v : {l.median, l.p10, l.p90, l.p99, l.min, l.max, l.mean, l.stddev})
        out << ',' << csv_number(v);
      out << ',' << l.samples << ',' << csv_number(r.throughput);
      for (double v : {f.total_ms, f.trace_ms, f.passes_ms, f.build_ms, f.run_ms, f.codegen_ms})
        out << ',' << csv_number(v);
      out << ',' << csv_number(static_cast<double>(r.peak_bytes)) << ',' << c.weights_bytes;
      for (int64_t v : {r.graphs, r.graph_breaks, r.recompiles})
        out << ',' << csv_number(static_cast<double>(v));
      out << ',' << csv_number(r.launches_per_call);
      for (int64_t v : {r.generated_kernels, r.kernel_cache_hits})
        out << ',' << csv_number(static_cast<double>(v));
      for (double v : {r.max_abs_error, r.max_rel_error, r.max_abs_error_vs_torch,
                       r.max_rel_error_vs_torch, r.speedup_vs_eager, r.speedup_vs_torch_eager,
                       r.speedup_vs_torch_mode, r.speedup_vs_torch_best})
        out << ',' << csv_number(v);
      out << ',' << csv_field(c.torch_best_mode) << ',' << csv_field(r.note) << '\n';
    }
  }
  return out.str();
}

std::string Report::to_table(bool color) const {
  static const std::vector<std::string> header = {
      "framework",          "mode",         "median ms", "p10-p90 ms", "samples/s",
      "first call",         "peak MiB",     "graphs",    "breaks",     "recomp.",
      "launches",           "generated",    "max err",   "vs eager",   "vs torch eager",
      "vs torch same mode", "vs torch best"};
  const size_t kVsEager =
      static_cast<size_t>(std::find(header.begin(), header.end(), "vs eager") - header.begin());
  std::ostringstream out;
  for (const Case& c : cases) {
    out << c.model << ", batch " << c.batch;
    if (c.seq_len > 0) out << ", sequence " << c.seq_len;
    out << ", " << c.dtype << ", " << c.device << ", weights "
        << fmt("%.1f", c.weights_bytes / 1048576.0) << " MiB\n";
    std::vector<std::vector<std::string>> rows = {header};
    std::vector<double> speedups;  // one per row, for colour
    std::vector<std::string> notes;
    for (const Result& r : c.results) {
      const Latency& l = r.latency_ms;
      const double first = r.first_call.total_ms;
      const bool timed = l.samples > 0;  // a mode that failed has no samples
      rows.push_back(
          {r.framework, r.mode, timed ? fmt("%.3f", l.median) : "-",
           timed ? fmt("%.3f", l.p10) + "-" + fmt("%.3f", l.p90) : "-",
           timed ? fmt("%.1f", r.throughput) : "-",
           first < 0       ? "-"
           : first >= 1000 ? fmt("%.2f s", first / 1e3)
                           : fmt("%.1f ms", first),
           r.peak_bytes < 0 ? "-" : fmt("%.1f", static_cast<double>(r.peak_bytes) / 1048576.0),
           r.graphs < 0 ? "-" : std::to_string(r.graphs),
           r.graph_breaks < 0 ? "-" : std::to_string(r.graph_breaks),
           r.recompiles < 0 ? "-" : std::to_string(r.recompiles), fmt("%.1f", r.launches_per_call),
           r.generated_kernels < 0   ? "-"
           : r.kernel_cache_hits > 0 ? std::to_string(r.generated_kernels) + " cached"
                                     : std::to_string(r.generated_kernels),
           fmt_error(r.max_abs_error), fmt_speedup(r.speedup_vs_eager),
           fmt_speedup(r.speedup_vs_torch_eager), fmt_speedup(r.speedup_vs_torch_mode),
           fmt_speedup(r.speedup_vs_torch_best)});
      speedups.push_back(r.mode == "eager" && r.framework == "kiln" ? -1 : r.speedup_vs_eager);
      if (!r.note.empty()) notes.push_back(r.framework + " " + r.mode + ": " + r.note);
    }
    std::vector<size_t> width(header.size(), 0);
    for (const auto& row : rows)
      for (size_t k = 0; k < row.size(); ++k) width[k] = std::max(width[k], row[k].size());
    for (size_t i = 0; i < rows.size(); ++i) {
      out << " ";
      for (size_t k = 0; k < rows[i].size(); ++k) {
        const std::string& cell = rows[i][k];
        const bool left = k < 2;
        const std::string pad(width[k] - cell.size(), ' ');
        const char* on = "";
        if (color && i == 0) on = "\033[1m";
        if (color && i > 0 && k == kVsEager && speedups[i - 1] >= 0)
          on = speedups[i - 1] >= 1 ? "\033[32m" : "\033[31m";
        out << ' ' << (left ? "" : pad) << on << cell << (*on ? "\033[0m" : "")
            << (left ? pad : "");
      }
      out << '\n';
    }
    if (const std::string line = c.headline(); !line.empty()) out << "  " << line << '\n';
    for (const std::string& n : notes) out << "  note: " << n << '\n';
    out << '\n';
  }
  return out.str();
}

detail::TorchResults detail::torch_results_from_json(std::string_view text,
                                                     const std::string& file) {
  const std::string who = "kiln bench: PyTorch's results '" + file + "'";
  const json j = parse(text, who);
  const Reader root(j, "results file", who);
  TorchResults out;
  out.torch = root.str("torch");
  out.device_name = root.str("device_name");
  const json& rs = root.array("results");
  for (size_t k = 0; k < rs.size(); ++k) {
    Result r = result_from(root.element(rs, k, "results"));
    if (r.framework != "pytorch") {
      throw ValueError(kiln::detail::str_cat(who, ": results[", k, "].framework is '", r.framework,
                                             "', not 'pytorch'"));
    }
    out.results.push_back(std::move(r));
  }
  return out;
}

}  // namespace kiln::bench
