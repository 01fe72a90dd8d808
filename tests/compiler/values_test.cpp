// What compiled functions take and return (kiln/compile_args.h): structs of
// tensors, optionals, maps, undefined tensors, strings and enums; and a
// compiled function called by another while it is traced (inlined).
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <string>

#include "compiler/compiler_testing.h"
#include "kiln/kiln.h"
#include "kiln/models.h"

namespace kiln {
namespace {

using compiler::testing::same;

struct Pair {
  Tensor sum;
  Tensor product;
};

struct Nested {
  Pair pair;
  std::optional<Tensor> extra;
  std::vector<Tensor> parts;
  std::map<std::string, Tensor> named;
};

enum class Act { kRelu, kTanh };

TEST(CompileValues, AStructIsReturnedAsEagerReturnsIt) {
  int calls = 0;
  const auto f = [&](const Tensor& a, const Tensor& b) {
    ++calls;
    return Pair{a + b, a * b};
  };
  const auto fast = compile(f);
  const Tensor a = randn({3}), b = randn({3});
  for (int i = 0; i < 3; ++i) {
    const Pair got = fast(a, b), want = f(a, b);
    EXPECT_TRUE(same(got.sum, want.sum));
    EXPECT_TRUE(same(got.product, want.product));
  }
  EXPECT_EQ(fast.stats().traces, 1);
  EXPECT_EQ(calls, 1 + 3);
}

TEST(CompileValues, NestedValuesWithAbsentPartsRoundTrip) {
  const auto f = [](const Pair& in, std::optional<Tensor> scale,
                    const std::map<std::string, Tensor>& named, const Tensor& maybe) {
    Nested out;
    out.pair = {in.sum * 2.0, in.product + 1.0};
    if (scale) out.extra = *scale * in.sum;
    out.parts = {in.sum, in.product.neg()};
    for (const auto& [name, t] : named) out.named[name + "_out"] = t.relu();
    if (maybe.defined()) out.parts.push_back(maybe.exp());
    return out;
  };
  const auto fast = compile(f);
  const Pair in{randn({2, 2}), randn({2, 2})};
  const std::map<std::string, Tensor> named{{"a", randn({4})}, {"bb", randn({2})}};
  for (const bool with : {true, false, true}) {
    const std::optional<Tensor> scale = with ? std::optional<Tensor>(randn({2, 2})) : std::nullopt;
    const Tensor maybe = with ? Tensor() : randn({1});
    const Nested got = fast(in, scale, named, maybe), want = f(in, scale, named, maybe);
    EXPECT_TRUE(same(got.pair.sum, want.pair.sum));
    EXPECT_TRUE(same(got.pair.product, want.pair.product));
    ASSERT_EQ(got.extra.has_value(), with);
    if (with) EXPECT_TRUE(same(*got.extra, *want.extra));
    ASSERT_EQ(got.parts.size(), want.parts.size());
    for (size_t i = 0; i < got.parts.size(); ++i) EXPECT_TRUE(same(got.parts[i], want.parts[i]));
    ASSERT_EQ(got.named.size(), 2u);
    EXPECT_TRUE(same(got.named.at("a_out"), want.named.at("a_out")));
    EXPECT_TRUE(same(got.named.at("bb_out"), want.named.at("bb_out")));
  }
  // An optional present or absent, an undefined tensor or not: two keys.
  EXPECT_EQ(fast.stats().traces, 2);
  const ExplainReport r = fast.explain();
  ASSERT_EQ(r.recompiles.size(), 1u);
  EXPECT_NE(r.recompiles[0].find("argument 1 present was true, now false"), std::string::npos)
      << r.recompiles[0];
}

TEST(CompileValues, StringsAndEnumsAreGuardedByValue) {
  const auto f = [](const Tensor& x, const std::string& how, Act act) {
    Tensor y = how == "double" ? x * 2.0 : x + 1.0;
    return act == Act::kRelu ? y.relu() : y.tanh();
  };
  const auto fast = compile(f);
  const Tensor x = randn({5});
  for (const std::string how : {"double", "inc", "double"})
    for (const Act act : {Act::kRelu, Act::kTanh})
      EXPECT_TRUE(same(fast(x, how, act), f(x, how, act)));
  EXPECT_EQ(fast.stats().traces, 4);
  const ExplainReport r = fast.explain();
  EXPECT_NE(r.to_string().find("recompile: argument 1 value was \"double\", now \"inc\""),
            std::string::npos)
      << r.to_string();
}

// kiln's modules whose forward returns a struct compile as they are.
TEST(CompileValues, ModulesReturningStructsCompile) {
  manual_seed(2);
  nn::MultiheadAttention mha(8, 2, {.batch_first = true});
  mha.eval();
  const auto fast = compile(mha);
  const Tensor q = randn({2, 5, 8}), kv = randn({2, 7, 8});
  for (const bool weights : {true, false}) {
    const nn::AttentionForwardOptions options{.need_weights = weights};
    const nn::AttentionResult got = fast(q, kv, kv, options),
                              want = mha.forward(q, kv, kv, options);
    EXPECT_TRUE(same(got.output, want.output));
    ASSERT_EQ(got.weights.defined(), weights);
    if (weights) EXPECT_TRUE(same(got.weights, want.weights));
  }
  const auto bert = compiler::testing::small_bert();
  const auto fast_bert = compile(*bert);
  const Tensor ids = randint(0, 100, {2, 9});
  const models::BertOutput got = fast_bert(ids), want = bert->forward(ids);
  EXPECT_TRUE(same(got.last_hidden_state, want.last_hidden_state));
  EXPECT_EQ(got.pooler_output.defined(), want.pooler_output.defined());
  if (want.pooler_output.defined()) EXPECT_TRUE(same(got.pooler_output, want.pooler_output));
}

// A compiled function called while another is traced runs inline: its ops
// join the caller's graph, and the call is no error.
TEST(CompileValues, ACompiledFunctionCalledByAnotherIsInlined) {
  nn::Linear fc(4, 4);
  const auto inner = compile([&](const Tensor& x) { return fc(x).relu(); }, {.name = "inner"});
  const auto outer =
      compile([&](const Tensor& x) { return inner(x) * 2.0 + inner(x + 1.0); }, {.name = "outer"});
  const Tensor x = randn({3, 4});
  const Tensor want = (fc(x).relu() * 2.0) + fc(x + 1.0).relu();
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(same(outer(x), want));
  EXPECT_EQ(outer.stats().traces, 1);
  EXPECT_EQ(outer.explain().graphs.size(), 1u);
  EXPECT_EQ(inner.stats().inlined_calls, 2);
  EXPECT_EQ(inner.stats().traces, 0);
  // Called on its own, the inner function compiles as usual.
  EXPECT_TRUE(same(inner(x), fc(x).relu()));
  EXPECT_EQ(inner.stats().traces, 1);
}

}  // namespace
}  // namespace kiln
