#include "kiln/state_dict.h"

#include <gtest/gtest.h>

#include "core/state_dict_diff.h"
#include "kiln/kiln.h"
#include "unit/expect_error.h"

namespace kiln {
namespace {
using testing::expect_error_with;

TEST(StateDict, KeepsInsertionOrderAndReplacesInPlace) {
  StateDict sd;
  sd.set("b", zeros({2}));
  sd.set("a", ones({3}));
  sd.set("c", zeros({1}));
  sd.set("a", full({4}, 2.0));
  EXPECT_EQ(sd.keys(), (std::vector<std::string>{"b", "a", "c"}));
  EXPECT_EQ(sd.at("a").sizes(), (Shape{4}));
  EXPECT_EQ(sd.size(), 3u);
}

TEST(StateDict, EraseKeepsTheOrderOfTheRest) {
  StateDict sd;
  for (const char* name : {"w", "x", "y", "z"}) sd.set(name, zeros({1}));
  EXPECT_TRUE(sd.erase("x"));
  EXPECT_FALSE(sd.erase("x"));
  EXPECT_EQ(sd.keys(), (std::vector<std::string>{"w", "y", "z"}));
  EXPECT_TRUE(sd.contains("z"));
  EXPECT_EQ(sd.find("x"), nullptr);
  sd.set("x", zeros({1}));
  EXPECT_EQ(sd.keys().back(), "x");
}

TEST(StateDict, AtNamesTheMissingKey) {
  StateDict sd;
  sd.set("fc.weight", zeros({1}));
  expect_error_with<ValueError>([&] { sd.at("fc.bias"); }, {"state dict", "fc.bias"});
}

TEST(StateDictDiff, KeyListsStopAfterAFewAndSayHowManyMore) {
  std::vector<std::string> keys;
  for (int i = 0; i < 200; ++i) keys.push_back("layer." + std::to_string(i) + ".weight");
  EXPECT_EQ(summarize_keys(keys),
            "'layer.0.weight', 'layer.1.weight', 'layer.2.weight' and 197 more");
  EXPECT_EQ(summarize_keys(std::vector<std::string>(keys.begin(), keys.begin() + 2)),
            "'layer.0.weight', 'layer.1.weight'");
  EXPECT_EQ(summarize_keys({}), "");
  EXPECT_EQ(capped_list(keys, 1, "; "), "layer.0.weight and 199 more");
}

TEST(StateDictDiff, SummarizesMissingUnexpectedAndShapesInOneShortLine) {
  StateDict expected, given;
  for (int i = 0; i < 300; ++i) expected.set("a." + std::to_string(i), zeros({768}));
  for (int i = 0; i < 300; ++i) given.set("b." + std::to_string(i), zeros({1}));
  given.set("a.0", zeros({384}));
  given.set("a.1", zeros({768}));
  const StateDictDiff diff = diff_state_dicts(given, expected);
  EXPECT_EQ(diff.missing_keys.size(), 298u);
  EXPECT_EQ(diff.unexpected_keys.size(), 300u);
  ASSERT_EQ(diff.wrong_shapes.size(), 1u);
  EXPECT_EQ(diff.wrong_shapes[0].given, Shape{384});
  const std::string line = diff.summary("the file");
  EXPECT_LT(line.size(), 250u) << line;
  EXPECT_NE(line.find("298 missing keys ('a.2', 'a.3', 'a.4' and 295 more)"), std::string::npos)
      << line;
  EXPECT_NE(line.find("300 unexpected keys ('b.0', 'b.1', 'b.2' and 297 more)"), std::string::npos)
      << line;
  EXPECT_NE(line.find("1 tensor of another shape (a.0: [384] in the file, [768] expected)"),
            std::string::npos)
      << line;
  EXPECT_TRUE(diff_state_dicts(expected, expected).empty());
}

}  // namespace
}  // namespace kiln
