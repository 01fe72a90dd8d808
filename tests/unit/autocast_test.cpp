// amp::Autocast (include/kiln/amp.h): the op lists checked op by op against
// PyTorch's documented behaviour (torch.amp, "Autocast Op Reference": CUDA's
// float16 and float32 lists, the CPU's lower-precision and float32 lists),
// nesting and disabled scopes, threads, backward outside the region, and
// compiled autocast against eager autocast with the state in the guards.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "kiln/amp.h"
#include "kiln/kiln.h"
#include "ops/dispatch.h"
#include "unit/expect_error.h"

namespace kiln {
namespace {

namespace F = kiln::nn::functional;

// A tensor of no values (shape rules only), on either kind of device, so
// that CUDA's lists are checked on any machine.
Tensor meta(const Shape& s, DType t, Device d) { return ops::make_tensor(s, t, d, true); }

struct Row {
  const char* op;
  DType input;     // the floating inputs' dtype
  DType expected;  // the result's under autocast
  std::function<Tensor(DType, Device)> call;
};

// What PyTorch's documentation says each op gives under autocast with
// `lower` (float16 on CUDA, bfloat16 on the CPU), written out op by op.
std::vector<Row> rows(Device d, DType lower) {
  auto t = [d](const Shape& s, DType dt) { return meta(s, dt, d); };
  const Tensor target = meta({4}, kInt64, d);
  std::vector<Row> r = {
      {"matmul", kFloat32, lower,
       [=](DType dt, Device) {
         return matmul(t({4, 8}, dt), t({8, 3}, dt));
       }},
      {"bmm", kFloat32, lower,
       [=](DType dt, Device) {
         return bmm(t({2, 4, 8}, dt), t({2, 8, 3}, dt));
       }},
      {"addmm", kFloat32, lower,
       [=](DType dt, Device) {
         return addmm(t({4, 3}, dt), t({4, 8}, dt), t({8, 3}, dt));
       }},
      {"linear", kFloat32, lower,
       [=](DType dt, Device) {
         return linear(t({4, 8}, dt), t({3, 8}, dt), t({3}, dt));
       }},
      {"conv1d", kFloat32, lower,
       [=](DType dt, Device) {
         return conv1d(t({1, 2, 9}, dt), t({4, 2, 3}, dt));
       }},
      {"conv2d", kFloat32, lower,
       [=](DType dt, Device) {
         return conv2d(t({1, 2, 9, 9}, dt), t({4, 2, 3, 3}, dt), t({4}, dt));
       }},
      {"conv_transpose2d", kFloat32, lower,
       [=](DType dt, Device) {
         return conv_transpose2d(t({1, 4, 5, 5}, dt), t({4, 2, 3, 3}, dt), t({2}, dt));
       }},
      {"scaled_dot_product_attention", kFloat32, lower,
       [=](DType dt, Device) {
         return F::scaled_dot_product_attention(t({1, 2, 5, 8}, dt), t({1, 2, 5, 8}, dt),
                                                t({1, 2, 5, 8}, dt));
       }},
      // float64 is never cast.
      {"matmul (float64)", kFloat64, kFloat64,
       [=](DType dt, Device) {
         return matmul(t({4, 8}, dt), t({8, 3}, dt));
       }},
      // Float32 on both devices.
      {"prod", lower, kFloat32,
       [=](DType dt, Device) {
         return prod(t({4, 8}, dt));
       }},
      {"nll_loss", lower, kFloat32,
       [=](DType dt, Device) {
         return F::nll_loss(t({4, 5}, dt), target);
       }},
      {"cross_entropy", lower, kFloat32,
       [=](DType dt, Device) {
         return F::cross_entropy(t({4, 5}, dt), target);
       }},
      {"mse_loss", lower, kFloat32,
       [=](DType dt, Device) { return F::mse_loss(t({4}, dt), t({4}, dt)); }},
      {"smooth_l1_loss", lower, kFloat32,
       [=](DType dt, Device) { return F::smooth_l1_loss(t({4}, dt), t({4}, dt)); }},
      {"huber_loss", lower, kFloat32,
       [=](DType dt, Device) { return F::huber_loss(t({4}, dt), t({4}, dt)); }},
      {"kl_div", lower, kFloat32,
       [=](DType dt, Device) { return F::kl_div(t({4}, dt), t({4}, dt)); }},
      {"binary_cross_entropy_with_logits", lower, kFloat32,
       [=](DType dt, Device) {
         return F::binary_cross_entropy_with_logits(t({4}, dt), t({4}, dt));
       }},
      // Not on any list: as they are.
      {"relu", lower, lower, [=](DType dt, Device) { return relu(t({4}, dt)); }},
      {"add", kFloat32, kFloat32, [=](DType dt, Device) { return t({4}, dt) + t({4}, dt); }},
      {"mean", lower, lower, [=](DType dt, Device) { return mean(t({4}, dt)); }},
  };
  // CUDA's float32 list has the ops that need range; the CPU's does not.
  const DType range = d.is_cuda() ? kFloat32 : lower;
  const std::vector<Row> ranged = {
      {"softmax", lower, range,
       [=](DType dt, Device) {
         return softmax(t({4, 8}, dt), -1);
       }},
      {"log_softmax", lower, range,
       [=](DType dt, Device) {
         return log_softmax(t({4, 8}, dt), -1);
       }},
      {"layer_norm", lower, range,
       [=](DType dt, Device) {
         return F::layer_norm(t({4, 8}, dt), {8});
       }},
      {"group_norm", lower, range,
       [=](DType dt, Device) {
         return F::group_norm(t({2, 4, 3}, dt), 2);
       }},
      {"exp", lower, range, [=](DType dt, Device) { return exp(t({4}, dt)); }},
      {"log", lower, range, [=](DType dt, Device) { return log(t({4}, dt)); }},
      {"pow", lower, range, [=](DType dt, Device) { return pow(t({4}, dt), t({4}, dt)); }},
      {"sum", lower, range, [=](DType dt, Device) { return sum(t({4}, dt)); }},
      {"cumsum", lower, range, [=](DType dt, Device) { return cumsum(t({4}, dt), 0); }},
      {"norm", lower, range, [=](DType dt, Device) { return norm(t({4}, dt)); }},
      {"rsqrt", lower, range, [=](DType dt, Device) { return rsqrt(t({4}, dt)); }},
      {"softplus", lower, range, [=](DType dt, Device) { return softplus(t({4}, dt)); }},
  };
  r.insert(r.end(), ranged.begin(), ranged.end());
  return r;
}

void check_lists(Device d, DType lower) {
  for (const Row& row : rows(d, lower)) {
    amp::Autocast on(d, lower);
    EXPECT_EQ(row.call(row.input, d).dtype(), row.expected) << row.op << " on " << d;
  }
}

TEST(Autocast, CpuOpsFollowPyTorchsCpuLists) { check_lists(Device::cpu(), kBFloat16); }

TEST(Autocast, CudaOpsFollowPyTorchsCudaLists) { check_lists(Device::cuda(), kFloat16); }

TEST(Autocast, ScatterAddTakesTheWiderDtypeOnCuda) {
  const Device d = Device::cuda();
  amp::Autocast on(d, kFloat16);
  const Tensor out =
      scatter_add(meta({4}, kFloat16, d), 0, meta({2}, kInt64, d), meta({2}, kFloat32, d));
  EXPECT_EQ(out.dtype(), kFloat32);
}

TEST(Autocast, ScopesNestPerDeviceAndPerThread) {
  const Tensor a = randn({4, 8}), b = randn({8, 3});
  EXPECT_FALSE(amp::is_autocast_enabled(Device::cpu()));
  {
    amp::Autocast on(Device::cpu());  // bfloat16 on the CPU
    EXPECT_TRUE(amp::is_autocast_enabled(Device::cpu()));
    EXPECT_EQ(amp::autocast_dtype(Device::cpu()), kBFloat16);
    EXPECT_EQ(matmul(a, b).dtype(), kBFloat16);
    {
      amp::Autocast off(Device::cpu(), kBFloat16, false);
      EXPECT_EQ(matmul(a, b).dtype(), kFloat32);
      amp::Autocast half(Device::cpu(), kFloat16);
      EXPECT_EQ(matmul(a, b).dtype(), kFloat16);
    }
    EXPECT_EQ(matmul(a, b).dtype(), kBFloat16);
    // Another device's scope leaves the CPU's alone, and another thread sees none.
    amp::Autocast cuda(Device::cuda(), kFloat16, false);
    EXPECT_EQ(matmul(a, b).dtype(), kBFloat16);
    DType other = kInt8;
    std::thread([&] { other = matmul(a, b).dtype(); }).join();
    EXPECT_EQ(other, kFloat32);
  }
  EXPECT_EQ(matmul(a, b).dtype(), kFloat32);
  kiln::testing::expect_error<ValueError>([] { amp::Autocast bad(Device::cpu(), kInt32); },
                                          "Autocast", "int32");
}

TEST(Autocast, GradientsFlowBackInTheParametersDtype) {
  manual_seed(2);
  nn::Linear layer(8, 3);
  const Tensor x = randn({4, 8});
  Tensor loss;
  {
    amp::Autocast on(Device::cpu());
    const Tensor y = layer(x);
    EXPECT_EQ(y.dtype(), kBFloat16);
    loss = F::mse_loss(y, zeros({4, 3}));
    EXPECT_EQ(loss.dtype(), kFloat32);
    loss.backward();  // inside the region too: the backward ops run in their forward's dtypes
  }
  EXPECT_EQ(layer.weight.grad().dtype(), kFloat32);
  // Within bfloat16's rounding of the float32 gradient.
  const Tensor g = layer.weight.grad();
  layer.weight.set_grad(Tensor());
  F::mse_loss(layer(x), zeros({4, 3})).backward();
  const double scale = layer.weight.grad().abs().max().item<double>();
  EXPECT_LT((g - layer.weight.grad()).abs().max().item<double>(), 0.02 * scale);
}

TEST(Autocast, CompiledAutocastEqualsEagerAutocastAndIsAGuard) {
  manual_seed(4);
  nn::Linear a(8, 16), b(16, 4);
  const auto f = [&](const Tensor& x) {
    return F::cross_entropy(b(a(x).relu()), zeros({6}, {.dtype = kInt64}));
  };
  const auto fast = compile(f, {.name = "amp"});
  NoGradGuard no_grad;
  for (int i = 0; i < 3; ++i) {
    const Tensor x = randn({6, 8});
    amp::Autocast on(Device::cpu());
    const Tensor got = fast(x), want = f(x);
    EXPECT_EQ(got.dtype(), kFloat32);
    EXPECT_EQ(got.to_vector<float>(), want.to_vector<float>()) << i;
  }
  const Tensor x = randn({6, 8});
  EXPECT_EQ(fast(x).to_vector<float>(), f(x).to_vector<float>());  // autocast off: another graph
  const ExplainReport r = fast.explain();
  EXPECT_EQ(r.stats.traces, 2);
  ASSERT_EQ(r.recompiles.size(), 1u);
  EXPECT_NE(r.recompiles[0].find("autocast was cpu bfloat16, now off"), std::string::npos)
      << r.recompiles[0];
}

}  // namespace
}  // namespace kiln
