// KILN_DUMP_DIR=dir (docs/debugging.md, "Dumps"): each compiled function
// writes what it compiled into dir/<function>/: per graph (graph<N>/) its
// text and Graphviz, the graph after each pass that changed it, and the
// generated kernels' sources; for the function, explain()'s text and JSON
// and each graph's guards, rewritten after each call that compiled a graph.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kiln {
struct ExplainReport;
}

namespace kiln::compiler {

struct Trace;

// $KILN_DUMP_DIR, or nothing when it is unset or empty.
std::optional<std::filesystem::path> dump_root();

// The function's folder under root: its name, with characters other than
// letters, digits, '_', '-' and '.' as '_' ("unnamed" for no name).
std::filesystem::path function_dump_dir(const std::filesystem::path& root,
                                        std::string_view function);

// Writes text to file (its folders made first), whole or not at all; an
// IOError names the file.
void write_dump_file(const std::filesystem::path& file, std::string_view text);

// What a graph's dump holds beside the graph itself: the graph's text after
// tracing and after each pass that changed it, and its kernels' sources.
struct GraphDump {
  std::vector<std::pair<std::string, std::string>> passes;   // pass name, graph text
  std::vector<std::pair<std::string, std::string>> kernels;  // file name, source
};

// Writes graph<number>/ of the function's folder.
void write_graph_dump(const std::filesystem::path& function_dir, int64_t number, const Trace& trace,
                      const GraphDump& dump);

// Writes the function's explain.txt, explain.json and each graph's guards.txt.
void write_explain_dump(const std::filesystem::path& function_dir, const ExplainReport& report);

// While alive on a thread, the generated kernels' sources (codegen) are
// collected here instead of written flat into KILN_DUMP_DIR.
class KernelSourceCollector {
 public:
  KernelSourceCollector() noexcept;
  ~KernelSourceCollector();
  KernelSourceCollector(const KernelSourceCollector&) = delete;
  KernelSourceCollector& operator=(const KernelSourceCollector&) = delete;
  static KernelSourceCollector* active() noexcept;
  void add(std::string name, std::string source) {
    sources.emplace_back(std::move(name), std::move(source));
  }
  std::vector<std::pair<std::string, std::string>> sources;

 private:
  KernelSourceCollector* previous_;
};

}  // namespace kiln::compiler
