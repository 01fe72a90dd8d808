#include "compiler/dump.h"

#include <cstdlib>

#include "compiler/capture/capture.h"
#include "compiler/ir/graph.h"
#include "io/atomic_file.h"
#include "kiln/compile.h"

namespace kiln::compiler {
namespace {

thread_local KernelSourceCollector* t_collector = nullptr;

std::string two_digits(size_t i) { return (i < 10 ? "0" : "") + std::to_string(i); }

}  // namespace

std::optional<std::filesystem::path> dump_root() {
  const char* dir = std::getenv("KILN_DUMP_DIR");
  if (!dir || !*dir) return std::nullopt;
  return std::filesystem::path(dir);
}

std::filesystem::path function_dump_dir(const std::filesystem::path& root,
                                        std::string_view function) {
  std::string name(function.empty() ? "unnamed" : function);
  for (char& c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-' || c == '.';
    if (!ok) c = '_';
  }
  if (name == "." || name == "..") name = "_";
  return root / name;
}

void write_dump_file(const std::filesystem::path& file, std::string_view text) {
  std::error_code ec;
  std::filesystem::create_directories(file.parent_path(), ec);
  io::AtomicFileWriter out(file.string(), "KILN_DUMP_DIR");
  out.write(text.data(), text.size());
  out.commit();
}

void write_graph_dump(const std::filesystem::path& function_dir, int64_t number, const Trace& trace,
                      const GraphDump& dump) {
  const std::filesystem::path dir = function_dir / ("graph" + std::to_string(number));
  write_dump_file(dir / "graph.txt", to_text(trace.graph));
  write_dump_file(dir / "graph.dot", to_dot(trace.graph));
  for (size_t i = 0; i < dump.passes.size(); ++i) {
    write_dump_file(dir / "passes" / (two_digits(i) + "_" + dump.passes[i].first + ".txt"),
                    dump.passes[i].second);
  }
  for (const auto& [name, source] : dump.kernels) write_dump_file(dir / "kernels" / name, source);
}

void write_explain_dump(const std::filesystem::path& function_dir, const ExplainReport& report) {
  write_dump_file(function_dir / "explain.txt", report.to_string());
  write_dump_file(function_dir / "explain.json", report.to_json());
  for (size_t i = 0; i < report.graphs.size(); ++i) {
    std::string text;
    for (const auto& [guard, value] : report.graphs[i].guards)
      text += guard + " == " + value + "\n";
    write_dump_file(function_dir / ("graph" + std::to_string(i + 1)) / "guards.txt", text);
  }
}

KernelSourceCollector::KernelSourceCollector() noexcept : previous_(t_collector) {
  t_collector = this;
}
KernelSourceCollector::~KernelSourceCollector() { t_collector = previous_; }
KernelSourceCollector* KernelSourceCollector::active() noexcept { return t_collector; }

}  // namespace kiln::compiler
