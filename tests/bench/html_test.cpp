// kiln::bench::Report::to_html: the page is self-contained, keeps hostile
// strings out of its markup, and draws every chart without a JavaScript
// error in headless Chromium (Debian's chromium; skipped without it). The
// page and a screenshot are left in <build>/test-artifacts/.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <sstream>
#include <string>
#include <system_error>

#include "kiln/bench.h"

namespace kiln::bench {
namespace {

namespace fs = std::filesystem;

Result result(std::string framework, std::string mode, double median) {
  Result r;
  r.framework = std::move(framework);
  r.mode = std::move(mode);
  r.latency_ms = {.median = median,
                  .p10 = median * 0.96,
                  .p90 = median * 1.08,
                  .p99 = median * 1.3,
                  .min = median * 0.94,
                  .max = median * 1.5,
                  .mean = median * 1.02,
                  .stddev = median * 0.03,
                  .samples = 50};
  r.throughput = 1000 / median;
  r.first_call = {.total_ms = 40 + 30 * median};
  r.peak_bytes = static_cast<int64_t>(median * (8 << 20));
  return r;
}

// A compiled kiln mode: a first call split into its parts, one graph.
Result compiled(std::string mode, double median, double build_ms) {
  Result r = result("kiln", std::move(mode), median);
  r.first_call = {.total_ms = 35 + build_ms + 200,
                  .trace_ms = 20,
                  .passes_ms = 15,
                  .build_ms = build_ms,
                  .run_ms = 200};
  r.graphs = 1;
  r.launches_per_call = 1;
  r.max_abs_error = 1.2e-6;
  r.max_rel_error = 3e-7;
  return r;
}

// A PyTorch mode that failed: no timed calls, a note saying why.
Result failed_torch_mode(std::string mode) {
  Result r;
  r.framework = "pytorch";
  r.mode = std::move(mode);
  r.first_call = {-1, -1, -1, -1, -1};
  r.peak_bytes = -1;
  r.note = "FirstCallTimeout: the first call was not done after 60 s (--torch-timeout); stopped";
  return r;
}

// Three cases: CUDA with every kiln mode and three PyTorch rows and every
// field; the CPU with kiln eager and default only, some figures not measured;
// ResNet-50 on the CPU where PyTorch eager beats torch.compile, which is a
// slow outlier (410 ms against about 50).
Report synthetic_report() {
  Report report;
  report.environment = {.kiln_version = "kiln 0.1.0 (commit abc1234)",
                        .commit = "abc1234",
                        .date = "2026-12-04T20:00:00Z",
                        .host = "bench-host",
                        .cpu = "Intel(R) Xeon(R) Platinum 8480+",
                        .cpu_cores = 16,
                        .threads = 16,
                        .gpu = "NVIDIA H200",
                        .driver = "13.0",
                        .cuda = "13.0",
                        .cudnn = "9.19.0",
                        .onednn = "3.0.0",
                        .precision = "fp32; TF32 matmul off, conv on",
                        .torch = "2.9.0",
                        .iters = 50,
                        .warmup = 5};
  Case cuda;
  cuda.model = "resnet50";
  cuda.batch = 1;
  cuda.dtype = "fp32";
  cuda.device = "cuda:0";
  cuda.weights_bytes = 102228128;
  cuda.input_bytes = 602112;
  cuda.results = {result("kiln", "eager", 4.1),
                  compiled("default", 2.0, 45),
                  compiled("reduce-overhead", 0.8, 60),
                  compiled("max-autotune", 0.74, 2070),
                  result("pytorch", "eager", 4.9),
                  result("pytorch", "default", 2.8),
                  result("pytorch", "reduce-overhead", 0.84),
                  failed_torch_mode("max-autotune")};
  cuda.results[0].launches_per_call = 161;
  cuda.results[3].note = "torch.compile max-autotune was not measured";
  for (Result& r : cuda.results) {
    if (r.framework == "pytorch") {
      if (r.mode != "eager") r.first_call.total_ms = 21000;  // torch.compile compiling
      r.graph_breaks = r.recompiles = -1;
      r.max_abs_error = 2.1e-6;
      r.max_rel_error = 4.4e-7;
    } else {
      r.max_abs_error_vs_torch = 2e-6;
      r.max_rel_error_vs_torch = 4e-7;
    }
  }
  cuda.compute_speedups();

  Case cpu;
  cpu.model = "mlp";
  cpu.batch = 64;
  cpu.dtype = "fp32";
  cpu.device = "cpu";
  cpu.weights_bytes = 1200000;
  cpu.input_bytes = 200704;
  cpu.results = {result("kiln", "eager", 0.9), compiled("default", 0.6, 30)};
  cpu.results[0].launches_per_call = -1;
  cpu.results[1].max_rel_error = -1;
  cpu.results[1].peak_bytes = -1;
  cpu.compute_speedups();

  Case outlier;
  outlier.model = "resnet50";
  outlier.batch = 1;
  outlier.dtype = "fp32";
  outlier.device = "cpu";
  outlier.weights_bytes = 102228128;
  outlier.input_bytes = 602112;
  outlier.results = {result("kiln", "eager", 60), compiled("default", 52, 30),
                     result("pytorch", "eager", 48), result("pytorch", "default", 410)};
  outlier.compute_speedups();

  report.cases = {cuda, cpu, outlier};
  return report;
}

// The charts synthetic_report() needs: latency, speed-up, memory and first
// call for each case.
constexpr int kSyntheticCharts = 12;

// <build>/test-artifacts: this binary is <build>/tests/kiln_bench_test.
fs::path artifacts_dir() {
  const fs::path dir =
      fs::read_symlink("/proc/self/exe").parent_path().parent_path() / "test-artifacts";
  fs::create_directories(dir);
  return dir;
}

// A directory of its own under the system's temporary directory, removed
// with everything in it.
struct ScratchDir {
  fs::path path = fs::temp_directory_path() / ("kiln-html-test-" + std::to_string(::getpid()));
  ScratchDir() { fs::create_directories(path); }
  ~ScratchDir() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
};

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

bool on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    if (!dir.empty() && ::access((fs::path(dir) / program).c_str(), X_OK) == 0) return true;
  }
  return false;
}

// A path as one word for /bin/sh.
std::string shell_quoted(const fs::path& path) {
  std::string out = "'";
  for (char c : path.string()) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Runs headless Chromium on the page with `args`; its stdout goes to `out`,
// its stderr (D-Bus and GPU chatter, harmless) to `out` + ".stderr".
int run_chromium(const fs::path& page, const std::string& args, const fs::path& out,
                 const fs::path& profile) {
  const std::string command =
      "timeout 120 chromium --headless --no-sandbox --disable-gpu --disable-dev-shm-usage "
      "--hide-scrollbars --user-data-dir=" +
      shell_quoted(profile) + " " + args + " " + shell_quoted("file://" + page.string()) + " >" +
      shell_quoted(out) + " 2>" + shell_quoted(out.string() + ".stderr");
  return std::system(command.c_str());
}

// The script element that holds the report: `const REPORT = <json>;`.
std::string report_script(const std::string& html) {
  const std::string start = "<script>const REPORT = ";
  const size_t begin = html.find(start);
  if (begin == std::string::npos) return "";
  const size_t end = html.find("</script", begin);
  return html.substr(begin + start.size(), end - begin - start.size());
}

// A src=, href=, url() or @import that reaches for the network.
const std::regex kNetworkLoad(
    R"((src|href|action|poster|srcset)\s*=\s*["']?\s*(https?:)?//|url\(\s*["']?\s*(https?:)?//|@import)",
    std::regex::icase);

TEST(HtmlReport, InlinesChartJsAndLoadsNothingFromTheNetwork) {
  const std::string html = synthetic_report().to_html();
  EXPECT_NE(html.find("Chart.js v"), std::string::npos) << "Chart.js is not inlined";
  EXPECT_EQ(html.find("<script src"), std::string::npos);
  std::smatch load;
  EXPECT_FALSE(std::regex_search(html, load, kNetworkLoad)) << "the page loads " << load.str();
  EXPECT_EQ(html.find("@KILN_"), std::string::npos) << "a placeholder was left in the page";
}

TEST(HtmlReport, KeepsHostileStringsInsideTheReportScript) {
  Report report = synthetic_report();
  report.cases[0].model = "<script>alert(1)</script>";
  report.cases[0].results[1].note = "</script><script>alert(2)</script><!--";
  const std::string html = report.to_html();
  const std::string json = report_script(html);
  // Unescaped, the first "</script" would end the element inside the model's
  // name and the note would follow it as markup.
  EXPECT_NE(json.find("alert(1)"), std::string::npos);
  EXPECT_NE(json.find("alert(2)"), std::string::npos);
  EXPECT_EQ(json.find("</"), std::string::npos);
  EXPECT_EQ(json.find("<!--"), std::string::npos);
  ASSERT_FALSE(json.empty());
  ASSERT_EQ(json.back(), ';');
  // The escaped JSON still reads back to the same strings.
  const Report back = Report::from_json(json.substr(0, json.size() - 1));
  EXPECT_EQ(back.cases[0].model, report.cases[0].model);
  EXPECT_EQ(back.cases[0].results[1].note, report.cases[0].results[1].note);
}

struct SelfCheck {
  int charts = -1, canvases = -1, drawn = -1, errors = -1;
  std::string text;
};

// #kiln-selfcheck of the dumped DOM: "charts=N canvases=C drawn=M errors=K",
// then the errors, one a line.
SelfCheck parse_selfcheck(const std::string& dom) {
  SelfCheck check;
  const std::regex element(R"re(<pre id="kiln-selfcheck"[^>]*>([^<]*)</pre>)re");
  std::smatch m;
  if (!std::regex_search(dom, m, element)) return check;
  check.text = m[1];
  const std::regex counts(R"(charts=(\d+) canvases=(\d+) drawn=(\d+) errors=(\d+))");
  if (std::regex_search(check.text, m, counts)) {
    check.charts = std::stoi(m[1]);
    check.canvases = std::stoi(m[2]);
    check.drawn = std::stoi(m[3]);
    check.errors = std::stoi(m[4]);
  }
  return check;
}

// #kiln-clipped of the dumped DOM: one line per bar drawn cut at the top.
std::string clipped_bars(const std::string& dom) {
  const std::regex element(R"re(<pre id="kiln-clipped"[^>]*>([^<]*)</pre>)re");
  std::smatch m;
  return std::regex_search(dom, m, element) ? std::string(m[1]) : "(no #kiln-clipped)";
}

TEST(HtmlReport, DrawsEveryChartInHeadlessChromiumWithoutErrors) {
  if (!on_path("chromium"))
    GTEST_SKIP() << "chromium not installed (Debian: apt-get install chromium)";
  const fs::path dir = artifacts_dir();
  const fs::path page = dir / "bench_report.html";
  const ScratchDir scratch;  // Chromium's profile, the DOM and the logs
  const fs::path profile = scratch.path / "profile";
  Report report = synthetic_report();
  report.cases[1].model = "<b>mlp</b>";  // must show as text, not markup
  write_file(page.string(), report.to_html());

  const fs::path dom_file = scratch.path / "dom.html";
  ASSERT_EQ(run_chromium(page, "--dump-dom", dom_file, profile), 0)
      << read_text(dom_file.string() + ".stderr");
  const std::string dom = read_text(dom_file);
  const SelfCheck check = parse_selfcheck(dom);
  ASSERT_GE(check.charts, 0) << "#kiln-selfcheck holds no counts: \"" << check.text << "\"\n"
                             << read_text(dom_file.string() + ".stderr");
  EXPECT_EQ(check.errors, 0) << check.text;
  EXPECT_GE(check.charts, kSyntheticCharts) << check.text;
  EXPECT_EQ(check.canvases, check.charts) << check.text;
  EXPECT_EQ(check.drawn, check.charts) << check.text;
  // The data went into the DOM as text: the name shows escaped, never as an element.
  EXPECT_NE(dom.find("&lt;b&gt;mlp&lt;/b&gt;"), std::string::npos);
  EXPECT_EQ(dom.find("<b>mlp</b>"), std::string::npos);
  EXPECT_NE(dom.find("<dd>NVIDIA H200</dd>"), std::string::npos) << "no environment block";

  // The headline holds kiln's fastest mode against PyTorch's, eager included.
  EXPECT_NE(dom.find("vs PyTorch's fastest"), std::string::npos);
  EXPECT_NE(dom.find("kiln default 52.0 ms against PyTorch eager 48.0 ms"), std::string::npos)
      << dom;
  EXPECT_NE(dom.find("kiln max-autotune 0.740 ms against PyTorch reduce-overhead 0.840 ms"),
            std::string::npos);
  // The slow PyTorch mode is cut at the top of its charts, not the scale of them;
  // case 0's latencies, within a few times of each other, are not cut.
  const std::string clipped = clipped_bars(dom);
  for (const std::string bar :
       {"case 2: Latency per call: PyTorch default 410", "case 2: Peak memory: PyTorch default",
        "case 2: First call: PyTorch total default 12340",
        "case 2: Speed-up over PyTorch: vs torch.compile, same mode default 7.88",
        "case 0: First call: PyTorch total default 21000"}) {
    EXPECT_NE(clipped.find(bar), std::string::npos) << bar << " not in:\n" << clipped;
  }
  EXPECT_EQ(clipped.find("case 0: Latency"), std::string::npos) << clipped;
  EXPECT_EQ(clipped.find("case 2: Latency per call: kiln"), std::string::npos) << clipped;
  std::smatch load;
  EXPECT_FALSE(std::regex_search(dom, load, kNetworkLoad))
      << "the rendered page loads " << load.str();

  const fs::path screenshot = dir / "bench_report.png";
  fs::remove(screenshot);
  EXPECT_EQ(
      run_chromium(page, "--screenshot=" + shell_quoted(screenshot) + " --window-size=1400,3000",
                   scratch.path / "screenshot.log", profile),
      0);
  ASSERT_TRUE(fs::exists(screenshot));
  EXPECT_EQ(read_text(screenshot).substr(0, 8), "\x89PNG\r\n\x1a\n");
}

}  // namespace
}  // namespace kiln::bench
