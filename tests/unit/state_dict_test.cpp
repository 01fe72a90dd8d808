#include "kiln/state_dict.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace kiln
