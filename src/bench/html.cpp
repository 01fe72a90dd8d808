// Report::to_html: the report as one self-contained page. The page is
// src/bench/report_template.html with Chart.js and the report's JSON put in
// its two placeholders; cmake/bench_assets.cmake embeds both files in the
// library, so the page loads nothing from the network.
#include <cassert>
#include <string>
#include <string_view>

#include "kiln/bench.h"

namespace kiln::bench {
namespace detail {

// Generated at build time by cmake/bench_assets.cmake.
extern const std::string_view kChartJs;         // Chart.js, a UMD build: the global `Chart`
extern const std::string_view kReportTemplate;  // src/bench/report_template.html

}  // namespace detail

namespace {

constexpr std::string_view kChartJsSlot = "@KILN_CHART_JS@";
constexpr std::string_view kReportJsonSlot = "@KILN_REPORT_JSON@";

// JSON inside a <script> element: the HTML parser ends the element at the
// first "</script" and treats "<!--" specially, whatever the script means.
// '<' only occurs inside JSON strings, where \u003c is the same character.
std::string script_safe(std::string_view json) {
  std::string out;
  out.reserve(json.size() + json.size() / 64);
  for (char c : json) {
    if (c == '<') {
      out += "\\u003c";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::string Report::to_html() const {
  const std::string_view page = detail::kReportTemplate;
  const size_t chart_at = page.find(kChartJsSlot);
  const size_t json_at = page.find(kReportJsonSlot);
  assert(chart_at != std::string_view::npos && json_at != std::string_view::npos &&
         chart_at < json_at && "report_template.html lost a placeholder");
  const std::string json = script_safe(to_json());
  const size_t between = chart_at + kChartJsSlot.size();
  const size_t after = json_at + kReportJsonSlot.size();

  std::string html;
  html.reserve(page.size() + detail::kChartJs.size() + json.size());
  html += page.substr(0, chart_at);
  html += detail::kChartJs;
  html += page.substr(between, json_at - between);
  html += json;
  html += page.substr(after);
  return html;
}

}  // namespace kiln::bench
