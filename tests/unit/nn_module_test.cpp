// nn::Module: registration, dotted names and order, sharing, modes, in-place
// conversion, state dicts and printing. The modules here are written in the
// test so that these checks do not depend on the layers.
#include <gtest/gtest.h>

#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/nn/module.h"
#include "ops/dispatch.h"
#include "unit/expect_error.h"

namespace kiln {
namespace {

using testing::expect_error;
using testing::expect_error_with;

// A layer with one parameter, an optional bias, a buffer and an extra_repr.
struct Affine : nn::Module {
  Tensor weight, bias, count;
  int64_t n;
  explicit Affine(int64_t n_, bool with_bias = true) : n(n_) {
    weight = ones({n});
    if (with_bias) bias = zeros({n});
    count = zeros({}, {.dtype = kInt64});
    register_parameter("weight", weight);
    register_parameter("bias", bias);
    register_buffer("count", count);
  }
  Tensor forward(const Tensor& x) { return bias.defined() ? x * weight + bias : x * weight; }
  std::string extra_repr() const override {
    return "n=" + std::to_string(n) + ", bias=" + nn::repr::boolean(bias.defined());
  }
};

struct Block : nn::Module {
  Affine first{2}, second{3, false};
  Tensor scratch = zeros({3});
  Block() {
    register_module("first", first);
    register_module("second", second);
    register_buffer("scratch", scratch, /*persistent=*/false);
  }
};

struct Net : nn::Module {
  Tensor scale = ones({1});
  Block block;
  Affine head{4};
  Net() {
    register_parameter("scale", scale);
    register_module("block", block);
    register_module("head", head);
  }
};

std::vector<std::string> names_of(const auto& named) {
  std::vector<std::string> out;
  for (const auto& [name, value] : named) out.push_back(name);
  return out;
}

using Names = std::vector<std::string>;

TEST(Module, NamedParametersAreDottedInRegistrationOrderDepthFirst) {
  Net net;
  EXPECT_EQ(names_of(net.named_parameters()),
            (Names{"scale", "block.first.weight", "block.first.bias", "block.second.weight",
                   "head.weight", "head.bias"}));
  EXPECT_EQ(net.parameters().size(), 6u);
  EXPECT_EQ(names_of(net.named_parameters(/*recurse=*/false)), (Names{"scale"}));
  for (const Tensor& p : net.parameters()) EXPECT_TRUE(p.requires_grad());
}

TEST(Module, BuffersModulesAndChildrenListLikePyTorch) {
  Net net;
  EXPECT_EQ(names_of(net.named_buffers()),
            (Names{"block.scratch", "block.first.count", "block.second.count", "head.count"}));
  EXPECT_EQ(names_of(net.named_modules()),
            (Names{"", "block", "block.first", "block.second", "head"}));
  EXPECT_EQ(net.modules().front(), &net);
  EXPECT_EQ(names_of(net.named_children()), (Names{"block", "head"}));
  ASSERT_EQ(net.children().size(), 2u);
  EXPECT_EQ(net.children()[1], &net.head);
  EXPECT_EQ(names_of(net.block.named_parameters()),
            (Names{"first.weight", "first.bias", "second.weight"}));
}

TEST(Module, ListingsHandOutTheMemberTensorsThemselves) {
  Net net;
  Tensor w = net.named_parameters()[1].second;
  EXPECT_EQ(w.impl_ptr(), net.block.first.weight.impl_ptr());
}

TEST(Module, RegistryFollowsAReassignedMember) {
  Affine a(2);
  a.weight = full({2}, 5.0);
  auto params = a.named_parameters();
  EXPECT_EQ(params[0].second.to_vector<float>(), (std::vector<float>{5, 5}));
}

TEST(Module, RegisterParameterCanLeaveRequiresGradOff) {
  struct Frozen : nn::Module {
    Tensor w = ones({2});
    Frozen() { register_parameter("w", w, /*requires_grad=*/false); }
  } frozen;
  EXPECT_FALSE(frozen.w.requires_grad());
  EXPECT_EQ(frozen.parameters().size(), 1u);
}

TEST(Module, RegisterParameterDetachesATensorWithHistory) {
  Tensor x = ones({2}).requires_grad_();
  struct Holder : nn::Module {
    Tensor w;
    explicit Holder(const Tensor& x) : w(x * 2) { register_parameter("w", w); }
  } holder(x);
  EXPECT_TRUE(holder.w.is_leaf());
  EXPECT_TRUE(holder.w.requires_grad());
}

TEST(Module, SharedParametersAndModulesAreListedOnce) {
  struct Tied : nn::Module {
    Affine enc{3}, dec{3};
    Tied() {
      dec.weight = enc.weight;  // the registry points at the member: it now sees enc's tensor
      register_module("enc", enc);
      register_module("dec", dec);
      register_module("again", enc);
    }
  } tied;
  EXPECT_EQ(names_of(tied.named_parameters()), (Names{"enc.weight", "enc.bias", "dec.bias"}));
  EXPECT_EQ(names_of(tied.named_modules()), (Names{"", "enc", "dec"}));
  // state_dict keeps every name, as PyTorch's does.
  EXPECT_EQ(tied.state_dict().keys(),
            (Names{"enc.weight", "enc.bias", "enc.count", "dec.weight", "dec.bias", "dec.count",
                   "again.weight", "again.bias", "again.count"}));
}

TEST(Module, BadNamesAreValueErrorsNamingTheModuleAndTheName) {
  struct Bad : nn::Module {
    Tensor a = ones({1}), b = ones({1});
    Affine child{1};
  } bad;
  bad.register_parameter("a", bad.a);
  expect_error_with<ValueError>([&] { bad.register_parameter("a", bad.b); },
                                {"register_parameter", "Bad", "\"a\"", "already"});
  expect_error_with<ValueError>([&] { bad.register_buffer("a", bad.b); },
                                {"register_buffer", "Bad", "\"a\""});
  expect_error_with<ValueError>([&] { bad.register_module("x.y", bad.child); },
                                {"register_module", "Bad", "\"x.y\"", "'.'"});
  expect_error_with<ValueError>([&] { bad.register_parameter("", bad.b); },
                                {"register_parameter", "Bad", "empty"});
  expect_error_with<ValueError>([&] { bad.register_module("me", bad); },
                                {"register_module", "own child"});
  expect_error_with<ValueError>([&] { bad.register_module("none", std::shared_ptr<Affine>()); },
                                {"register_module", "\"none\"", "null"});
}

TEST(Module, OwnedSubmodulesLiveAsLongAsTheParent) {
  struct Dynamic : nn::Module {
    Dynamic() {
      for (int i = 0; i < 3; ++i)
        register_module("layer" + std::to_string(i), std::make_shared<Affine>(i + 1));
    }
  } dynamic;
  EXPECT_EQ(names_of(dynamic.named_parameters()),
            (Names{"layer0.weight", "layer0.bias", "layer1.weight", "layer1.bias", "layer2.weight",
                   "layer2.bias"}));
  EXPECT_EQ(dynamic.parameters()[4].sizes(), (Shape{3}));
}

TEST(Module, TrainAndEvalReachEveryDescendant) {
  Net net;
  EXPECT_TRUE(net.is_training());
  net.eval();
  for (nn::Module* m : net.modules()) EXPECT_FALSE(m->is_training()) << m->name();
  net.block.train();
  EXPECT_FALSE(net.is_training());
  EXPECT_TRUE(net.block.second.is_training());
  EXPECT_FALSE(net.head.is_training());
}

TEST(Module, ToDTypeConvertsInPlaceSoEarlierHandlesSeeIt) {
  Net net;
  TensorList held = net.parameters();  // what an optimizer built before to() holds
  const auto impl = net.head.weight.impl_ptr();
  net.head.weight.set_grad(full({4}, 2.0));
  net.to(kFloat64);
  EXPECT_EQ(net.head.weight.impl_ptr(), impl);
  for (const Tensor& p : held) {
    EXPECT_EQ(p.dtype(), kFloat64);
    EXPECT_TRUE(p.requires_grad());
    EXPECT_TRUE(p.is_leaf());
  }
  EXPECT_EQ(net.head.weight.grad().dtype(), kFloat64);
  EXPECT_EQ(net.block.scratch.dtype(), kFloat64);
  EXPECT_EQ(net.head.count.dtype(), kInt64);  // integer buffers keep their dtype
  // The converted parameters still take part in autograd.
  net.head.forward(ones({4}, {.dtype = kFloat64})).sum().backward();
  EXPECT_EQ(held[4].grad().to_vector<double>(), (std::vector<double>{3, 3, 3, 3}));
}

TEST(Module, ToKeepsValuesAndRejectsIntegerDTypes) {
  Affine a(3);
  {
    NoGradGuard no_grad;
    a.weight.copy_(from_vector<float>({1.5f, -2, 3}));
  }
  a.to(Device::cpu(), kFloat64);
  EXPECT_EQ(a.weight.to_vector<double>(), (std::vector<double>{1.5, -2, 3}));
  a.to(Device::cpu());
  EXPECT_EQ(a.weight.dtype(), kFloat64);
  expect_error_with<DTypeError>([&] { a.to(kInt32); }, {"to", "Affine", "int32"});
}

TEST(Module, ZeroGradClearsOrZeroesEveryGradient) {
  Net net;
  net.head.forward(ones({4})).sum().backward();
  ASSERT_TRUE(net.head.weight.grad().defined());
  net.zero_grad(/*set_to_none=*/false);
  EXPECT_EQ(net.head.weight.grad().to_vector<float>(), (std::vector<float>(4, 0)));
  net.zero_grad();
  EXPECT_FALSE(net.head.weight.grad().defined());
  EXPECT_FALSE(net.head.bias.grad().defined());
}

TEST(Module, RequiresGradFreezesEveryParameter) {
  Net net;
  net.block.requires_grad_(false);
  EXPECT_FALSE(net.block.first.weight.requires_grad());
  EXPECT_FALSE(net.block.second.weight.requires_grad());
  EXPECT_TRUE(net.head.weight.requires_grad());
  EXPECT_TRUE(net.scale.requires_grad());
}

TEST(Module, ApplyVisitsChildrenBeforeParents) {
  Net net;
  std::vector<std::string> order;
  net.apply([&](nn::Module& m) {
    order.push_back(m.name());
    if (auto* affine = dynamic_cast<Affine*>(&m)) affine->n *= 10;
  });
  EXPECT_EQ(order, (Names{"Affine", "Affine", "Block", "Affine", "Net"}));
  EXPECT_EQ(net.head.n, 40);
}

TEST(Module, StateDictHoldsParametersAndPersistentBuffersDetached) {
  Net net;
  StateDict sd = net.state_dict();
  EXPECT_EQ(sd.keys(), (Names{"scale", "block.first.weight", "block.first.bias",
                              "block.first.count", "block.second.weight", "block.second.count",
                              "head.weight", "head.bias", "head.count"}));
  EXPECT_FALSE(sd.at("head.weight").requires_grad());
  EXPECT_TRUE(sd.at("head.weight").shares_storage(net.head.weight));
}

TEST(Module, LoadStateDictCopiesValuesIntoTheSameTensors) {
  Net source, target;
  {
    NoGradGuard no_grad;
    source.head.weight.fill_(7);
    source.head.count.fill_(3);
  }
  const auto impl = target.head.weight.impl_ptr();
  nn::LoadResult result = target.load_state_dict(source.state_dict());
  EXPECT_TRUE(result.missing_keys.empty());
  EXPECT_TRUE(result.unexpected_keys.empty());
  EXPECT_EQ(target.head.weight.impl_ptr(), impl);
  EXPECT_FALSE(target.head.weight.shares_storage(source.head.weight));
  EXPECT_EQ(target.head.weight.to_vector<float>(), (std::vector<float>(4, 7)));
  EXPECT_EQ(target.head.count.item<int64_t>(), 3);
  EXPECT_TRUE(target.head.weight.requires_grad());
}

TEST(Module, LoadStateDictConvertsDTypes) {
  Affine a(2);
  StateDict sd = a.state_dict();
  sd.set("weight", from_vector<double>({0.5, -1.5}));
  a.load_state_dict(sd);
  EXPECT_EQ(a.weight.dtype(), kFloat32);
  EXPECT_EQ(a.weight.to_vector<float>(), (std::vector<float>{0.5f, -1.5f}));
}

TEST(Module, StrictLoadListsEveryMissingUnexpectedAndMisshapenKey) {
  Net net;
  StateDict sd = net.state_dict();
  sd.erase("scale");
  sd.erase("head.bias");
  sd.set("extra", zeros({1}));
  sd.set("block.first.weight", zeros({5}));
  expect_error_with<ValueError>([&] { net.load_state_dict(sd); },
                                {"load_state_dict", "Net", "missing keys: \"scale\", \"head.bias\"",
                                 "unexpected keys: \"extra\"", "block.first.weight", "[5]", "[2]"});
  // Nothing was copied.
  EXPECT_EQ(net.block.first.weight.to_vector<float>(), (std::vector<float>{1, 1}));
}

// A dict entry with no values (undefined, or a meta tensor) is refused naming
// the call, the module and the key, strict or not, and nothing is copied; it
// used to fail without a key (undefined) or "load" nothing (meta).
TEST(Module, LoadRefusesEntriesWithoutValuesNamingTheKey) {
  for (const bool strict : {true, false}) {
    Net net;
    StateDict sd = net.state_dict();
    sd.set("head.weight", full({4}, 5.0));
    sd.set("block.first.weight", Tensor());
    expect_error_with<ValueError>(
        [&] { net.load_state_dict(sd, strict); },
        {"load_state_dict", "Net", "block.first.weight: an undefined tensor"});
    sd.set("block.first.weight", ops::make_tensor({2}, kFloat32, Device::cpu(), /*meta=*/true));
    expect_error_with<ValueError>([&] { net.load_state_dict(sd, strict); },
                                  {"load_state_dict", "block.first.weight: a meta tensor"});
    EXPECT_EQ(net.head.weight.to_vector<float>(), (std::vector<float>(4, 1)));
  }
}

TEST(Module, NonStrictLoadReturnsTheUnmatchedKeys) {
  Net net;
  StateDict sd;
  sd.set("head.weight", full({4}, 2.0));
  sd.set("stray", zeros({1}));
  nn::LoadResult result = net.load_state_dict(sd, /*strict=*/false);
  EXPECT_EQ(result.unexpected_keys, (Names{"stray"}));
  EXPECT_EQ(result.missing_keys.size(), 8u);
  EXPECT_EQ(result.missing_keys.front(), "scale");
  EXPECT_EQ(net.head.weight.to_vector<float>(), (std::vector<float>(4, 2)));
  sd.set("head.bias", zeros({2}));
  expect_error_with<ValueError>([&] { net.load_state_dict(sd, false); },
                                {"load_state_dict", "head.bias", "[2]", "[4]"});
}

TEST(Module, PrintsLikePyTorch) {
  Net net;
  std::ostringstream os;
  os << net;
  EXPECT_EQ(os.str(),
            "Net(\n"
            "  (block): Block(\n"
            "    (first): Affine(n=2, bias=True)\n"
            "    (second): Affine(n=3, bias=False)\n"
            "  )\n"
            "  (head): Affine(n=4, bias=True)\n"
            ")");
  struct Empty : nn::Module {};
  EXPECT_EQ(Empty().repr(), "Empty()");
}

TEST(Module, ExtraReprSitsAboveTheChildren) {
  struct Wrapper : nn::Module {
    Affine inner{1};
    Wrapper() { register_module("inner", inner); }
    std::string extra_repr() const override { return "mode=fast"; }
  } wrapper;
  EXPECT_EQ(wrapper.repr(), "Wrapper(\n  mode=fast\n  (inner): Affine(n=1, bias=True)\n)");
}

TEST(ModuleRepr, NumbersPrintAsPythonDoes) {
  EXPECT_EQ(nn::repr::number(1e-5), "1e-05");
  EXPECT_EQ(nn::repr::number(0.1), "0.1");
  EXPECT_EQ(nn::repr::number(1.0), "1.0");
  EXPECT_EQ(nn::repr::number(0.0001), "0.0001");
  EXPECT_EQ(nn::repr::number(1234.5), "1234.5");
  EXPECT_EQ(nn::repr::number(-2.5e-7), "-2.5e-07");
  EXPECT_EQ(nn::repr::number(1e16), "1e+16");
  EXPECT_EQ(nn::repr::number(0.01), "0.01");
  EXPECT_EQ(nn::repr::tuple({3}), "(3,)");
  EXPECT_EQ(nn::repr::tuple({3, 3}), "(3, 3)");
}

}  // namespace
}  // namespace kiln
