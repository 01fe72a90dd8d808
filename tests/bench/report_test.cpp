// kiln::bench's report: latency statistics, speed-ups, JSON (schema round
// trip and errors), CSV and the terminal table.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "bench/stats.h"
#include "bench/torch_results.h"
#include "kiln/bench.h"

namespace kiln::bench {
namespace {

Result row(std::string framework, std::string mode, double median) {
  Result r;
  r.framework = std::move(framework);
  r.mode = std::move(mode);
  r.latency_ms = latency_of({median * 0.9, median, median * 1.2});
  r.throughput = 1000 / median;
  r.first_call = {120.5, 10.25, 20.5, 30.75, 59};
  r.peak_bytes = 1 << 20;
  r.graphs = 1;
  r.launches_per_call = 12.5;
  r.first_call.codegen_ms = 7.5;
  r.generated_kernels = 4;
  r.kernel_cache_hits = 1;
  r.max_abs_error = 1.5e-6;
  r.max_rel_error = 2.5e-7;
  return r;
}

Report sample_report() {
  Report report;
  report.environment.kiln_version = "kiln 0.1.0 (commit abc1234)";
  report.environment.commit = "abc1234";
  report.environment.date = "2026-12-04T20:00:00Z";
  report.environment.cpu = "Some CPU, with \"quotes\"";
  report.environment.cpu_cores = 16;
  report.environment.threads = 8;
  report.environment.gpu = "NVIDIA H200";
  report.environment.torch = "2.9.0";
  report.environment.iters = 3;
  report.environment.warmup = 1;
  Case c;
  c.model = "resnet50";
  c.batch = 8;
  c.dtype = "fp32";
  c.device = "cuda:0";
  c.weights_bytes = 102228128;
  c.input_bytes = 4816896;
  c.results = {row("kiln", "eager", 4), row("kiln", "default", 2),
               row("kiln", "reduce-overhead", 1), row("pytorch", "eager", 5),
               row("pytorch", "reduce-overhead", 1.25)};
  c.results[0].first_call = {50, -1, -1, -1, -1};
  c.results[2].max_abs_error_vs_torch = 3e-6;
  c.results[2].max_rel_error_vs_torch = 4e-7;
  c.results[2].note = "a note, with a comma and \"quotes\"";
  c.results[3].peak_bytes = -1;
  c.results[3].graphs = c.results[3].graph_breaks = c.results[3].recompiles = -1;
  c.results[3].launches_per_call = -1;
  c.results[3].generated_kernels = c.results[3].kernel_cache_hits = -1;
  c.results[4].max_abs_error = std::numeric_limits<double>::infinity();
  c.compute_speedups();
  report.cases.push_back(c);
  Case cpu = c;
  cpu.model = "lstm_loop";
  cpu.seq_len = 32;
  cpu.device = "cpu";
  cpu.results.resize(2);
  report.cases.push_back(cpu);
  return report;
}

TEST(BenchStats, PercentilesInterpolateBetweenClosestRanks) {
  const std::vector<double> sorted = {1, 2, 3, 4, 10};
  EXPECT_DOUBLE_EQ(percentile(sorted, 0), 1);
  EXPECT_DOUBLE_EQ(percentile(sorted, 50), 3);
  EXPECT_DOUBLE_EQ(percentile(sorted, 90), 4 + 0.6 * 6);  // rank 3.6
  EXPECT_DOUBLE_EQ(percentile(sorted, 100), 10);
  EXPECT_DOUBLE_EQ(percentile({7}, 99), 7);
}

TEST(BenchStats, LatencyKeepsEverySample) {
  const Latency l = latency_of({5, 1, 3, 100});  // the outlier counts
  EXPECT_EQ(l.samples, 4);
  EXPECT_DOUBLE_EQ(l.min, 1);
  EXPECT_DOUBLE_EQ(l.max, 100);
  EXPECT_DOUBLE_EQ(l.median, 4);
  EXPECT_DOUBLE_EQ(l.mean, 27.25);
  EXPECT_NEAR(l.stddev,
              std::sqrt((26.25 * 26.25 + 24.25 * 24.25 + 22.25 * 22.25 + 72.75 * 72.75) / 4),
              1e-12);
  EXPECT_GT(l.p99, l.p90);
  EXPECT_EQ(latency_of({}).samples, 0);
}

TEST(BenchReport, SpeedupsAreMedianRatiosPerFramework) {
  const Report r = sample_report();
  const Case& c = r.cases[0];
  const Result* ro = c.find("kiln", "reduce-overhead");
  ASSERT_NE(ro, nullptr);
  EXPECT_DOUBLE_EQ(ro->speedup_vs_eager, 4.0);
  EXPECT_DOUBLE_EQ(ro->speedup_vs_torch_eager, 5.0);
  EXPECT_DOUBLE_EQ(ro->speedup_vs_torch_mode, 1.25);
  const Result* def = c.find("kiln", "default");
  EXPECT_DOUBLE_EQ(def->speedup_vs_torch_mode, -1);  // PyTorch's default mode was not measured
  const Result* torch_ro = c.find("pytorch", "reduce-overhead");
  EXPECT_DOUBLE_EQ(torch_ro->speedup_vs_eager, 4.0);
  EXPECT_DOUBLE_EQ(torch_ro->speedup_vs_torch_eager, -1);
  EXPECT_EQ(c.find("pytorch", "max-autotune"), nullptr);
}

// ResNet-50 on a CPU: PyTorch eager beats torch.compile, so kiln is held
// against eager, not against the slower compiled mode.
Case cpu_case_where_torch_eager_wins() {
  Case c;
  c.model = "resnet50";
  c.batch = 1;
  c.dtype = "fp32";
  c.device = "cpu";
  c.results = {row("kiln", "eager", 60), row("kiln", "default", 52), row("pytorch", "eager", 48),
               row("pytorch", "default", 410)};
  c.compute_speedups();
  return c;
}

TEST(BenchReport, HeadlineHoldsKilnAgainstPyTorchsFastestModeAndNamesIt) {
  const Case c = cpu_case_where_torch_eager_wins();
  EXPECT_EQ(c.torch_best_mode, "eager");
  const Result* def = c.find("kiln", "default");
  EXPECT_DOUBLE_EQ(def->speedup_vs_torch_best, 48.0 / 52);
  EXPECT_DOUBLE_EQ(def->speedup_vs_torch_mode, 410.0 / 52);
  EXPECT_DOUBLE_EQ(c.find("pytorch", "eager")->speedup_vs_torch_best, -1);
  EXPECT_EQ(c.headline(),
            "kiln default 52.000 ms against PyTorch's fastest, eager 48.000 ms (torch.compile "
            "default: 410.000 ms): 0.92x");
  Report r;
  r.cases = {c};
  const std::string table = r.to_table();
  EXPECT_NE(table.find("vs torch best"), std::string::npos) << table;
  EXPECT_NE(table.find("  " + c.headline() + "\n"), std::string::npos) << table;
  // Where torch.compile wins, it is the reference, and nothing more is said.
  const Case gpu = sample_report().cases[0];
  EXPECT_EQ(gpu.torch_best_mode, "reduce-overhead");
  EXPECT_EQ(gpu.headline(),
            "kiln reduce-overhead 1.000 ms against PyTorch's fastest, reduce-overhead 1.250 ms: "
            "1.25x");
  EXPECT_EQ(Case().headline(), "");
}

TEST(BenchReport, ReportsSavedBeforeTheFastestModeReadWithItComputed) {
  Report r;
  r.cases = {cpu_case_where_torch_eager_wins()};
  nlohmann::json old = nlohmann::json::parse(r.to_json());
  EXPECT_EQ(old["cases"][0]["torch_best_mode"], "eager");
  old["cases"][0].erase("torch_best_mode");
  for (auto& result : old["cases"][0]["results"]) result.erase("speedup_vs_torch_best");
  const Report back = Report::from_json(old.dump());
  EXPECT_EQ(back.cases[0].torch_best_mode, "eager");
  EXPECT_DOUBLE_EQ(back.cases[0].find("kiln", "default")->speedup_vs_torch_best, 48.0 / 52);
  EXPECT_EQ(back.to_json(), r.to_json());
}

TEST(BenchReport, JsonRoundTripKeepsEveryField) {
  const Report r = sample_report();
  const std::string text = r.to_json();
  const Report back = Report::from_json(text);
  EXPECT_EQ(back.to_json(), text);
  ASSERT_EQ(back.cases.size(), 2u);
  EXPECT_EQ(back.environment.cpu, "Some CPU, with \"quotes\"");
  const Result& eager = back.cases[0].results[0];
  EXPECT_EQ(eager.first_call.trace_ms, -1);  // null stays "not measured"
  EXPECT_DOUBLE_EQ(eager.first_call.total_ms, 50);
  EXPECT_EQ(back.cases[0].results[3].peak_bytes, -1);
  EXPECT_TRUE(std::isinf(back.cases[0].results[4].max_abs_error));
  EXPECT_DOUBLE_EQ(back.cases[0].results[2].latency_ms.p90, r.cases[0].results[2].latency_ms.p90);
  EXPECT_NE(text.find("\"schema_version\": 1"), std::string::npos);
  EXPECT_NE(text.find("\"peak_bytes\": null"), std::string::npos);
  EXPECT_NE(text.find("\"max_abs_error\": \"inf\""), std::string::npos);
  EXPECT_EQ(back.cases[0].results[1].generated_kernels, 4);
  EXPECT_EQ(back.cases[0].results[1].kernel_cache_hits, 1);
  EXPECT_DOUBLE_EQ(back.cases[0].results[1].first_call.codegen_ms, 7.5);
  EXPECT_EQ(back.cases[0].results[3].generated_kernels, -1);
}

TEST(BenchReport, ReportsSavedBeforeGeneratedKernelsReadThemAsNotMeasured) {
  nlohmann::json old = nlohmann::json::parse(sample_report().to_json());
  for (auto& result : old["cases"][0]["results"]) {
    result.erase("generated_kernels");
    result.erase("kernel_cache_hits");
    result["first_call_ms"].erase("codegen");
  }
  const Report back = Report::from_json(old.dump());
  const Result& r = back.cases[0].results[1];
  EXPECT_EQ(r.generated_kernels, -1);
  EXPECT_EQ(r.kernel_cache_hits, -1);
  EXPECT_EQ(r.first_call.codegen_ms, -1);
  EXPECT_NE(back.to_json().find("\"generated_kernels\": null"), std::string::npos);
}

TEST(BenchReport, FromJsonNamesWhatIsWrong) {
  const std::string good = sample_report().to_json();
  auto error_of = [](const std::string& text) {
    try {
      (void)Report::from_json(text);
    } catch (const ValueError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of("{not json").find("not JSON"), std::string::npos);
  std::string v2 = good;
  v2.replace(v2.find("\"schema_version\": 1"), 19, "\"schema_version\": 2");
  EXPECT_NE(error_of(v2).find("schema version 2 is not supported"), std::string::npos);
  std::string no_median = good;
  no_median.replace(no_median.find("\"median\""), 8, "\"medium\"");
  EXPECT_NE(error_of(no_median).find("report.cases[0].results[0].latency_ms has no field 'median'"),
            std::string::npos);
  std::string bad_batch = good;
  bad_batch.replace(bad_batch.find("\"batch\": 8"), 10, "\"batch\": \"8\"");
  EXPECT_NE(error_of(bad_batch).find("report.cases[0].batch must be an integer, got \"8\""),
            std::string::npos);
  EXPECT_NE(error_of("[]").find("report must be an object"), std::string::npos);
}

TEST(BenchReport, CsvHasOneQuotedRowPerResult) {
  const std::string csv = sample_report().to_csv();
  size_t lines = 0;
  for (char ch : csv) lines += ch == '\n';
  EXPECT_EQ(lines, 1u + 5u + 2u);
  EXPECT_EQ(csv.rfind("model,batch,seq_len,dtype,device,framework,mode,median_ms", 0), 0u);
  EXPECT_NE(csv.find("\"a note, with a comma and \"\"quotes\"\"\""), std::string::npos);
  EXPECT_NE(csv.find("resnet50,8,0,fp32,cuda:0,pytorch,eager,5,"), std::string::npos);
}

TEST(BenchReport, TableAlignsColumnsAndColoursOnlyWhenAsked) {
  const Report r = sample_report();
  const std::string plain = r.to_table(false);
  EXPECT_EQ(plain.find("\033["), std::string::npos);
  EXPECT_NE(plain.find("resnet50, batch 8, fp32, cuda:0"), std::string::npos);
  EXPECT_NE(plain.find("lstm_loop, batch 8, sequence 32"), std::string::npos);
  EXPECT_NE(plain.find("4.00x"), std::string::npos);
  EXPECT_NE(plain.find("note: kiln reduce-overhead: a note"), std::string::npos);
  EXPECT_NE(plain.find("4 cached"), std::string::npos);  // generated kernels, from the cache
  // Every row of a case's table is as wide as its header.
  const size_t start = plain.find("  framework");
  const size_t header_end = plain.find('\n', start);
  const size_t width = header_end - start;
  size_t pos = header_end + 1;
  for (int row = 0; row < 5; ++row) {
    const size_t end = plain.find('\n', pos);
    EXPECT_EQ(end - pos, width) << plain.substr(pos, end - pos);
    pos = end + 1;
  }
  const std::string coloured = r.to_table(true);
  EXPECT_NE(coloured.find("\033[32m4.00x\033[0m"), std::string::npos);
}

TEST(BenchReport, PyTorchResultsAreReadAndChecked) {
  const nlohmann::json report = nlohmann::json::parse(sample_report().to_json());
  const nlohmann::json torch_row = report["cases"][0]["results"][3];
  ASSERT_EQ(torch_row["framework"], "pytorch");
  nlohmann::json file{{"torch", "2.9.0"}, {"device_name", "cpu"}, {"results", {torch_row}}};
  const auto t = detail::torch_results_from_json(file.dump(), "out.json");
  EXPECT_EQ(t.torch, "2.9.0");
  ASSERT_EQ(t.results.size(), 1u);
  EXPECT_EQ(t.results[0].mode, "eager");
  EXPECT_DOUBLE_EQ(t.results[0].latency_ms.median, 5);
  EXPECT_EQ(t.results[0].peak_bytes, -1);
  file["results"][0]["framework"] = "kiln";
  EXPECT_THROW(detail::torch_results_from_json(file.dump(), "out.json"), ValueError);
  try {
    (void)detail::torch_results_from_json("{\"torch\": 2}", "out.json");
    FAIL() << "no error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("'out.json'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("torch must be a string"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kiln::bench
