// amp::autocast_check (include/kiln/amp.h): a step in float32 and under
// autocast from the same state, compared layer by layer; a planted layer
// that bfloat16 cannot carry is named first; the user's gradients and random
// stream are given back; its errors.
#include <gtest/gtest.h>

#include <cmath>

#include "kiln/amp.h"
#include "kiln/kiln.h"
#include "unit/expect_error.h"

namespace kiln {
namespace {

using kiln::testing::expect_error;
namespace F = nn::functional;

struct Net : nn::Module {
  nn::Linear first{4, 8}, second{8, 3};
  nn::Dropout drop{0.5};
  Net() {
    register_module("first", first);
    register_module("drop", drop);
    register_module("second", second);
  }
  Tensor forward(const Tensor& x) { return second(drop(first(x).tanh())); }
};

TEST(AutocastCheck, ReportsEachLayerInForwardOrderWithinBfloat16sError) {
  manual_seed(1);
  Net net;  // training mode: the dropout draws from the default generator
  Generator gen(2);
  const Tensor x = randn({16, 4}, {}, &gen), y = randint(0, 3, {16}, {}, &gen);
  // Gradients the user had: given back as they were.
  const Tensor before = full({8, 4}, 7.0);
  net.first.weight.set_grad(before);
  const Generator stream = default_generator();
  const amp::AutocastCheckReport r = amp::autocast_check(
      net, [&] { return F::cross_entropy(net.forward(x), y); }, Device::cpu());
  EXPECT_EQ(r.dtype, kBFloat16);
  ASSERT_EQ(r.layers.size(), 2u);
  EXPECT_EQ(r.layers[0].layer, "first");
  EXPECT_EQ(r.layers[1].layer, "second");
  for (const amp::LayerCheck& l : r.layers) {
    // bfloat16 keeps 8 bits: errors of a few 1e-3, not 0 (autocast ran) and
    // not those of another dropout mask (the stream was the same for both).
    EXPECT_GT(l.activation_error, 0) << l.layer;
    EXPECT_LT(l.activation_error, 0.05) << l.layer;
    EXPECT_GT(l.gradient_error, 0) << l.layer;
    EXPECT_LT(l.gradient_error, 0.05) << l.layer;
    EXPECT_FALSE(l.above) << l.layer;
  }
  EXPECT_FALSE(r.first_above.has_value());
  EXPECT_NEAR(r.loss_autocast, r.loss_float32, 0.05 * std::abs(r.loss_float32));
  EXPECT_EQ(net.first.weight.grad().impl_ptr(), before.impl_ptr());
  EXPECT_FALSE(net.second.weight.grad().defined());
  Generator copy = stream;
  EXPECT_EQ(default_generator().advance(1), copy.advance(1)) << "the random stream moved";
  EXPECT_NE(r.to_string().find("no layer above the threshold"), std::string::npos) << r.to_string();
}

struct Plain : nn::Module {
  nn::Linear first{4, 8}, second{8, 3};
  Plain() {
    register_module("first", first);
    register_module("second", second);
  }
  Tensor forward(const Tensor& x) { return second(first(x)); }
};

TEST(AutocastCheck, NamesTheFirstLayerThatBfloat16CannotCarry) {
  manual_seed(3);
  Plain net;
  {
    // first's outputs sit near 1000, where bfloat16's step is 8; second
    // takes the difference of two of them: a few units, lost in bfloat16.
    NoGradGuard no_grad;
    net.first.weight.mul_(0.01);
    net.first.bias.fill_(1000);
    net.second.weight.zero_();
    net.second.weight.select(1, 0).fill_(1);
    net.second.weight.select(1, 1).fill_(-1);
  }
  Generator gen(4);
  const Tensor x = randn({16, 4}, {}, &gen) * 100;
  const amp::AutocastCheckReport r = amp::autocast_check(
      net, [&] { return net.forward(x).square().mean(); }, Device::cpu());
  ASSERT_EQ(r.layers.size(), 2u);
  // first's activation is within bfloat16's error; its gradient comes
  // through second's and inherits the loss: second is where it went wrong.
  EXPECT_LT(r.layers[0].activation_error, 0.05) << r.to_string();
  EXPECT_TRUE(r.layers[1].above) << r.to_string();
  EXPECT_GT(r.layers[1].activation_error, 0.1) << r.to_string();
  ASSERT_TRUE(r.first_above.has_value());
  EXPECT_EQ(*r.first_above, "second");
  EXPECT_NE(r.to_string().find("first layer above the threshold: second"), std::string::npos);
}

TEST(AutocastCheck, Errors) {
  Net net;
  const Tensor x = randn({2, 4});
  const auto loss = [&] { return net.forward(x).sum(); };
  expect_error<ValueError>([&] { amp::autocast_check(net, loss, Device::cpu(), kBFloat16, 0); },
                           "autocast_check", "threshold = 0");
  expect_error<ValueError>(
      [&] {
        amp::autocast_check(
            net, [&] { return net.forward(x); }, Device::cpu());
      },
      "autocast_check", "the step must return the loss, one value");
  const auto inside = compile([&](const Tensor& t) {
    amp::autocast_check(net, loss, Device::cpu());
    return t * 2;
  });
  expect_error<ValueError>([&] { inside(x); }, "autocast_check", "inside a compiled function");
}

}  // namespace
}  // namespace kiln
