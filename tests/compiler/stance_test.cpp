// The compile stance (compiler::set_stance): ForceEager runs the function on
// every call, EagerOnRecompile and FailOnRecompile keep what is compiled but
// refuse new traces, and explain() and the logs say so.
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "compiler_testing.h"
#include "unit/expect_error.h"

namespace kiln::compiler::testing {
namespace {

using kiln::testing::expect_error_with;

// A compiled function that counts the calls of the function it wraps.
struct Counted {
  std::shared_ptr<int> calls = std::make_shared<int>(0);
  Compiled<std::function<Tensor(const Tensor&)>> f{
      std::function<Tensor(const Tensor&)>([c = calls](const Tensor& x) {
        ++*c;
        return (x * 2 + 1).relu();
      }),
      {.name = "counted"}};
};

TEST(Stance, ForceEagerCallsTheFunctionEachTimeAndDefaultReplaysAgain) {
  Counted k;
  const Tensor x = from_vector<float>({-1, 2, 3});
  (void)k.f(x);
  (void)k.f(x);
  EXPECT_EQ(*k.calls, 1);  // traced once, then replayed
  {
    StanceGuard eager(Stance::ForceEager);
    EXPECT_EQ(stance(), Stance::ForceEager);
    LogCapture logs("recompiles");
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(same(k.f(x), (x * 2 + 1).relu()));
    EXPECT_EQ(*k.calls, 4);  // the function itself ran: breakpoints and prints inside work
    EXPECT_TRUE(logs.contains("counted: runs eagerly (stance force_eager)"));
    const ExplainReport r = k.f.explain();
    EXPECT_NE(r.to_string().find("stance: force_eager: 3 calls ran eagerly"), std::string::npos)
        << r.to_string();
    const auto json = nlohmann::json::parse(r.to_json());
    EXPECT_EQ(json["stats"]["stance_eager_calls"], 3);
    EXPECT_EQ(json["stance"], "force_eager: 3 calls ran eagerly by a stance");
  }
  EXPECT_EQ(stance(), Stance::Default);
  (void)k.f(x);
  EXPECT_EQ(*k.calls, 4);  // replayed again
  const CompileStats s = k.f.stats();
  EXPECT_EQ(s.stance_eager_calls, 3);
  EXPECT_EQ(s.eager_calls, 3);
  EXPECT_EQ(s.traces, 1);
}

TEST(Stance, DisableIsAScopeThatRunsEagerly) {
  Counted k;
  const Tensor x = ones({4});
  (void)k.f(x);
  {
    auto off = disable();
    (void)k.f(x);
    (void)k.f(randn({7}));  // a new shape: no trace either
  }
  EXPECT_EQ(*k.calls, 3);
  EXPECT_EQ(k.f.stats().traces, 1);
  (void)k.f(x);
  EXPECT_EQ(*k.calls, 3);
}

TEST(Stance, EagerOnRecompileReplaysWhatIsCompiledAndRunsTheRestEagerly) {
  Counted k;
  const Tensor a = randn({4}), b = randn({2, 3});
  (void)k.f(a);  // the first trace is made under any stance but ForceEager
  StanceGuard guard(Stance::EagerOnRecompile);
  LogCapture logs("recompiles");
  EXPECT_TRUE(same(k.f(b), (b * 2 + 1).relu()));
  EXPECT_TRUE(same(k.f(b), (b * 2 + 1).relu()));
  EXPECT_EQ(*k.calls, 3);  // b ran eagerly twice
  (void)k.f(a);
  EXPECT_EQ(*k.calls, 3);  // a replays
  const CompileStats s = k.f.stats();
  EXPECT_EQ(s.recompiles, 0);
  EXPECT_EQ(s.traces, 1);
  EXPECT_EQ(s.stance_eager_calls, 2);
  EXPECT_TRUE(logs.contains("runs eagerly instead of recompiling (stance eager_on_recompile)"));
}

TEST(Stance, FailOnRecompileNamesTheGuardThatFailed) {
  Counted k;
  (void)k.f(randn({4}));
  StanceGuard guard(Stance::FailOnRecompile);
  (void)k.f(randn({4}));  // a replay is fine
  expect_error_with<Error>([&] { (void)k.f(randn({4}, {.dtype = kFloat64})); },
                           {"counted", "fail_on_recompile", "float64"});
  EXPECT_EQ(k.f.stats().recompiles, 0);
}

TEST(Stance, TheEnvironmentStartsTheProcessForcedEager) {
  // Run by CTest with KILN_COMPILE=0 (tests/CMakeLists.txt); elsewhere it has nothing to check.
  const char* env = std::getenv("KILN_COMPILE");
  if (!env || std::string(env) != "0") GTEST_SKIP() << "KILN_COMPILE=0 is not set";
  EXPECT_EQ(stance(), Stance::ForceEager);
  Counted k;
  (void)k.f(ones({2}));
  (void)k.f(ones({2}));
  EXPECT_EQ(*k.calls, 2);
  EXPECT_EQ(k.f.stats().traces, 0);
}

}  // namespace
}  // namespace kiln::compiler::testing
