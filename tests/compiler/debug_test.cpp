// kiln::debug::print and check_finite (include/kiln/debug.h): eagerly, and as
// nodes of a compiled graph that fire at every replay (pinned counts: no
// graph break, one trace), also in a program with dynamic sizes.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "compiler/compiler_testing.h"
#include "kiln/debug.h"
#include "kiln/kiln.h"
#include "unit/expect_error.h"

namespace kiln {
namespace {

using compiler::testing::same;
using kiln::testing::expect_error_with;

// Collects what debug::print writes while alive.
class Printed {
 public:
  Printed()
      : previous_(debug::set_print_handler([this](const std::string& t) { lines_.push_back(t); })) {
  }
  ~Printed() { debug::set_print_handler(previous_); }
  const std::vector<std::string>& lines() const { return lines_; }

 private:
  std::vector<std::string> lines_;
  debug::PrintHandler previous_;
};

TEST(Debug, PrintWritesTheLabelAndTheTensorEagerly) {
  Printed printed;
  debug::print(from_vector<float>({1.5f, -2}), "pair");
  ASSERT_EQ(printed.lines().size(), 1u);
  EXPECT_EQ(printed.lines()[0], "pair: " + to_string(from_vector<float>({1.5f, -2})) + "\n");
}

TEST(Debug, CheckFiniteNamesTheLabelTheCountAndTheFirstIndex) {
  debug::check_finite(ones({3}), "fine");
  debug::check_finite(from_vector<int32_t>({1, 2}), "integers");
  const float inf = std::numeric_limits<float>::infinity();
  const Tensor x = from_vector<float>({0, 1, inf, 2, -inf, NAN}).reshape({2, 3});
  expect_error_with<ValueError>(
      [&] { debug::check_finite(x, "logits"); },
      {"check_finite: logits", "3 of 6 values are not finite", "the first, inf, at [0, 2]"});
}

Tensor program(const Tensor& x) {
  const Tensor h = (x * 2).relu();
  debug::print(h, "h");
  debug::check_finite(h.log(), "log h");
  return h.sum({-1});
}

TEST(Debug, PrintsAndChecksFireAtEveryReplayWithoutAGraphBreak) {
  int calls = 0;
  const auto fast = compile(
      [&](const Tensor& x) {
        ++calls;
        return program(x);
      },
      {.name = "debugged"});
  Printed printed;
  std::vector<std::string> expected;
  for (int i = 0; i < 3; ++i) {
    const Tensor x = rand({2, 3}) + 0.5;
    EXPECT_TRUE(same(fast(x), (x * 2).relu().sum({-1})));
    expected.push_back("h: " + to_string((x * 2).relu()) + "\n");
  }
  EXPECT_EQ(printed.lines(), expected);
  // A zero makes log(h) -inf: the check of the compiled graph throws.
  const Tensor zero = from_vector<float>({1, 0, 2, 3, 4, 5}).reshape({2, 3});
  expect_error_with<ValueError>([&] { fast(zero); }, {"check_finite: log h", "-inf", "[0, 1]"});
  EXPECT_EQ(calls, 1);
  const ExplainReport r = fast.explain();
  EXPECT_EQ(r.stats.traces, 1);
  EXPECT_EQ(r.stats.graph_breaks, 0);
  EXPECT_EQ(r.stats.replays, 3);  // the call that threw finished no replay
  ASSERT_EQ(r.graphs.size(), 1u);
  EXPECT_NE(r.graphs[0].text.find("debug_tensor(%"), std::string::npos) << r.graphs[0].text;
  EXPECT_NE(r.graphs[0].text.find("{label=\"log h\", check_finite=true}"), std::string::npos)
      << r.graphs[0].text;
}

TEST(Debug, PrintsFireInADynamicProgramsInstances) {
  int calls = 0;
  const auto fast = compile(
      [&](const Tensor& x) {
        ++calls;
        debug::print(x.sum(), "total");
        return x * 3;
      },
      {.dynamic = Dynamic::On, .name = "dynamic_debug"});
  Printed printed;
  for (int64_t n : {2, 5, 9}) {
    const Tensor x = ones({n});
    EXPECT_TRUE(same(fast(x), x * 3));
  }
  EXPECT_EQ(calls, 1);
  ASSERT_EQ(printed.lines().size(), 3u);
  EXPECT_EQ(printed.lines()[2], "total: " + to_string(ones({9}).sum()) + "\n");
  EXPECT_EQ(fast.explain().stats.dynamic_instances, 2);
}

}  // namespace
}  // namespace kiln
