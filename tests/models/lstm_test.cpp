#include "kiln/models/lstm.h"

#include <gtest/gtest.h>

#include <sstream>

#include "kiln/autograd.h"
#include "kiln/ops/factory.h"
#include "kiln/ops/pointwise.h"
#include "kiln/ops/reduce.h"
#include "models/model_testing.h"
#include "unit/expect_error.h"

namespace kiln::models {
namespace {

const LSTMNetOptions kSmall{.input_size = 5, .hidden_size = 7, .num_layers = 3, .num_classes = 4};

std::vector<std::pair<std::string, Shape>> names_and_shapes(const nn::Module& m) {
  std::vector<std::pair<std::string, Shape>> out;
  for (const auto& [name, t] : m.state_dict()) out.emplace_back(name, t.shape());
  return out;
}

TEST(LSTMNet, HasPyTorchsNamesAndShapes) {
  LSTMNet net;
  const std::vector<std::pair<std::string, Shape>> expected = {
      {"lstm.weight_ih_l0", {2048, 256}}, {"lstm.weight_hh_l0", {2048, 512}},
      {"lstm.bias_ih_l0", {2048}},        {"lstm.bias_hh_l0", {2048}},
      {"lstm.weight_ih_l1", {2048, 512}}, {"lstm.weight_hh_l1", {2048, 512}},
      {"lstm.bias_ih_l1", {2048}},        {"lstm.bias_hh_l1", {2048}},
      {"head.weight", {10, 512}},         {"head.bias", {10}}};
  EXPECT_EQ(names_and_shapes(net), expected);
  LSTMCellLoop loop;
  EXPECT_EQ(names_and_shapes(loop), expected);
}

TEST(LSTMNet, ReturnsLogitsOfTheLastStep) {
  manual_seed(1);
  LSTMNet net{kSmall};
  const Tensor x = randn({2, 6, 5});
  const Tensor y = net(x);
  EXPECT_EQ(y.shape(), (Shape{2, 4}));
  // The head sees only the top layer's output at the last step, and changing
  // that step changes the logits.
  const Tensor top = net.lstm(x).output.select(1, 5);
  EXPECT_TRUE(testing::within_scaled_bound(y, net.head(top), 1e-7));
  Tensor x2 = x.clone();
  x2.select(1, 5).fill_(3.0);
  EXPECT_FALSE(testing::within_scaled_bound(net(x2), y, 1e-3));
}

TEST(LSTMCellLoop, LoadsTheSequenceModelsStateDictAndAgreesWithIt) {
  manual_seed(2);
  LSTMNet net{kSmall};
  LSTMCellLoop loop{kSmall};
  loop.load_state_dict(net.state_dict());
  const Tensor x = randn({3, 9, 5});
  EXPECT_TRUE(testing::within_scaled_bound(loop(x), net(x), 1e-6));
  // And the other way round.
  manual_seed(3);
  LSTMCellLoop other{kSmall};
  net.load_state_dict(other.state_dict());
  EXPECT_TRUE(testing::within_scaled_bound(other(x), net(x), 1e-6));
}

TEST(LSTMCellLoop, GradientsEqualTheSequenceModels) {
  manual_seed(4);
  LSTMNet net{kSmall};
  LSTMCellLoop loop{kSmall};
  loop.load_state_dict(net.state_dict());
  const Tensor x = randn({2, 4, 5});
  net(x).square().sum().backward();
  loop(x).square().sum().backward();
  const auto a = net.named_parameters();
  const auto b = loop.named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].first, b[i].first);
    EXPECT_TRUE(testing::within_scaled_bound(b[i].second.grad(), a[i].second.grad(), 1e-5))
        << a[i].first;
  }
}

TEST(LSTMCellLoop, ConvertsItsCellsInPlace) {
  LSTMCellLoop loop{kSmall};
  loop.to(kFloat64);
  EXPECT_EQ(loop.lstm.cell(2).weight_hh.dtype(), kFloat64);
  EXPECT_EQ(loop(randn({1, 2, 5}, {.dtype = kFloat64})).dtype(), kFloat64);
}

TEST(LSTMNet, RejectsBadInputsAndOptions) {
  LSTMNet net{kSmall};
  LSTMCellLoop loop{kSmall};
  testing::expect_error<ShapeError>([&] { net(randn({2, 6, 4})); }, "LSTMNet", "[2, 6, 4]");
  testing::expect_error<ShapeError>([&] { loop(randn({6, 5})); }, "LSTMCellLoop", "[6, 5]");
  testing::expect_error<ShapeError>([&] { loop(randn({1, 0, 5})); }, "LSTMCellLoop", "time >= 1");
  testing::expect_error<ValueError>([] { LSTMNet{{.num_layers = 0}}; }, "LSTMNet", "num_layers=0");
  testing::expect_error<ValueError>([] { LSTMCellLoop{{.hidden_size = -1}}; }, "LSTMCellLoop",
                                    "hidden_size=-1");
  testing::expect_error<IndexError>([&] { loop.lstm.cell(3); }, "StackedLSTMCells", "3");
}

TEST(LSTMCellLoop, PrintsLikeAModuleTree) {
  LSTMCellLoop loop{kSmall};
  std::ostringstream s;
  s << loop;
  EXPECT_NE(s.str().find("(lstm): StackedLSTMCells(5, 7, num_layers=3)"), std::string::npos)
      << s.str();
}

}  // namespace
}  // namespace kiln::models
