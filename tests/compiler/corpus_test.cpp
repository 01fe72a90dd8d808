// The compile-equivalence corpus: programs of the kinds users write (control
// flow on values, loops, in-place writes, views, broadcasting, numbers,
// several results, modules with buffers, training-mode batch norm, an
// optimizer's update), each run compiled and eagerly from the same state on
// the same calls. Results, written arguments and module state must be equal
// bitwise, and each case pins how many times it is traced, how many graph
// breaks it meets and how many kernels are generated for it.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "compiler/compiler_testing.h"
#include "kiln/kiln.h"

namespace kiln {
namespace {

namespace F = nn::functional;
using compiler::testing::same;

using Args = std::vector<Tensor>;
using Fn = std::function<std::vector<Tensor>(const Args&, int64_t)>;

// A program with its state: the function, and the tensors (parameters,
// buffers) whose values it may change.
struct Instance {
  Fn fn;
  std::function<std::vector<Tensor>()> state = [] { return std::vector<Tensor>{}; };
  std::shared_ptr<void> keep = nullptr;  // owns the modules the function uses
};

struct Call {
  std::vector<Shape> shapes;  // random float32 arguments of these shapes
  int64_t k = 0;
  bool transposed = false;  // arguments given as transposes of contiguous tensors
};

struct Case {
  std::string name;
  std::function<Instance()> make;
  std::vector<Call> calls;
  int64_t traces, breaks;
  // Kernels generated for pointwise groups, over its graphs (a fusion
  // regression fails here).
  int64_t kernels = 0;
};

std::vector<Tensor> arguments(const Call& c, uint64_t seed) {
  Generator g(seed);
  std::vector<Tensor> args;
  for (const Shape& s : c.shapes) {
    if (c.transposed && s.size() == 2) {
      args.push_back(randn({s[1], s[0]}, {}, &g).t());
    } else {
      args.push_back(randn(s, {}, &g));
    }
  }
  return args;
}

template <typename M>
Instance with_module(std::shared_ptr<M> m, Fn fn) {
  Instance i;
  i.fn = std::move(fn);
  i.state = [m] {
    std::vector<Tensor> s;
    for (const auto& [name, p] : m->named_parameters()) s.push_back(p);
    for (const auto& [name, b] : m->named_buffers()) s.push_back(b);
    return s;
  };
  i.keep = m;
  return i;
}

std::vector<Case> corpus() {
  std::vector<Case> c;
  const Shape v{6}, m{3, 4};
  // 1-5: plain tensor programs.
  c.push_back({"pointwise_chain",
               [] {
                 return Instance{[](const Args& a, int64_t) {
                   return std::vector<Tensor>{((a[0] * 1.5).exp() - 1).tanh()};
                 }};
               },
               {{{m}}, {{m}}},
               1,
               0,
               1});
  c.push_back({"broadcasting", [] { return Instance{[](const Args& a, int64_t) { return std::vector<Tensor>{a[0] + a[1] * a[2]}; }}; },
               {{{{3, 1}, {1, 4}, {4}}}, {{{3, 1}, {1, 4}, {4}}}}, 1, 0});
  c.push_back({"number_argument", [] { return Instance{[](const Args& a, int64_t k) { return std::vector<Tensor>{a[0] * static_cast<double>(k)}; }}; },
               {{{v}, 2}, {{v}, 3}, {{v}, 2}}, 2, 0});
  c.push_back({"dim_argument", [] { return Instance{[](const Args& a, int64_t k) { return std::vector<Tensor>{a[0].sum({k}), a[0].softmax(k)}; }}; },
               {{{m}, 0}, {{m}, 1}, {{m}, 1}}, 2, 0});
  c.push_back({"branch_on_a_number", [] { return Instance{[](const Args& a, int64_t k) { return std::vector<Tensor>{k > 0 ? a[0].relu() : a[0].neg()}; }}; },
               {{{v}, 1}, {{v}, 0}, {{v}, 5}}, 3, 0});
  // 6-7: control flow on values: graph breaks. Each call reads new values:
  // a trace each, reusing the graphs already compiled.
  c.push_back({"branch_on_item", [] { return Instance{[](const Args& a, int64_t) {
                 return std::vector<Tensor>{a[0].sum().item<double>() > 0 ? a[0] * 2 : a[0] - 3};
               }}; },
               {{{v}}, {{v}}, {{v}}}, 3, 1});
  c.push_back({"loop_until_small",
               [] {
                 return Instance{[](const Args& a, int64_t) {
                   Tensor x = a[0];
                   while (x.abs().max().item<double>() > 0.5) x = x * 0.5;
                   return std::vector<Tensor>{x};
                 }};
               },
               // Kernels: |x| with its max; |x| with its max, storing |x| (returned
               // at the first read); x * 0.5 stored with its |.| (read by the max).
               {{{v}}},
               1,
               3,
               3});
  // 8-9: loops with fixed and varying trip counts.
  c.push_back({"fixed_loop",
               [] {
                 return Instance{[](const Args& a, int64_t) {
                   Tensor x = a[0];
                   for (int i = 0; i < 5; ++i) x = x * 0.9 + a[1];
                   return std::vector<Tensor>{x};
                 }};
               },
               {{{v, v}}, {{v, v}}},
               1,
               0,
               1});
  c.push_back({"trip_count_argument",
               [] {
                 return Instance{[](const Args& a, int64_t k) {
                   Tensor x = a[0];
                   for (int64_t i = 0; i < k; ++i) x = (x + 1).sqrt();
                   return std::vector<Tensor>{x};
                 }};
               },
               {{{v}, 1}, {{v}, 3}, {{v}, 1}, {{v}, 4}},
               3,
               0,
               3});
  // 10-13: in-place writes, views, aliasing.
  c.push_back({"inplace_on_a_copy",
               [] {
                 return Instance{[](const Args& a, int64_t) {
                   Tensor x = a[0].clone();
                   x.mul_(2).add_(a[1]).relu_();  // the clone and its writes: one kernel
                   return std::vector<Tensor>{x};
                 }};
               },
               {{{m, m}}, {{m, m}}},
               1,
               0,
               1});
  c.push_back({"inplace_on_an_argument",
               [] {
                 return Instance{[](const Args& a, int64_t) {
                   Tensor x = a[0];
                   x.add_(1.0);
                   return std::vector<Tensor>{x * 2};  // one kernel: x in place and x * 2
                 }};
               },
               {{{v}}, {{v}}},
               1,
               0,
               1});
  c.push_back({"write_through_a_view", [] { return Instance{[](const Args& a, int64_t) {
                 Tensor x = a[0].clone();
                 x.narrow(1, 1, 2).fill_(0.0);
                 x.select(0, 0).mul_(-1.0);
                 return std::vector<Tensor>{x, x.t()};
               }}; },
               {{{m}}, {{m}}}, 1, 0});
  c.push_back({"transposed_arguments", [] { return Instance{[](const Args& a, int64_t) {
                 return std::vector<Tensor>{a[0].contiguous().matmul(a[1].t()), a[0].t()};
               }}; },
               {{{m, m}}, {{m, m}, 0, true}, {{m, m}}}, 2, 0});
  // 14-16: several results, lists, returning arguments.
  c.push_back({"several_results", [] { return Instance{[](const Args& a, int64_t) {
                 return std::vector<Tensor>{amax(a[0], {1}), a[0].argmax(1), a[0].mean(), var(a[0], {0})};
               }}; },
               {{{m}}}, 1, 0});
  c.push_back({"list_of_any_length", [] { return Instance{[](const Args& a, int64_t) {
                 return std::vector<Tensor>{stack(a, 0).sum({0}), cat(a, 0)};
               }}; },
               {{{v, v}}, {{v, v, v}}, {{v, v}}}, 2, 0});
  c.push_back({"returns_its_argument", [] { return Instance{[](const Args& a, int64_t) { return std::vector<Tensor>{a[0], a[0].view({2, 3}), a[1]}; }}; },
               {{{v, v}}}, 1, 0});
  // 17-22: common ops.
  c.push_back(
      {"where_and_masks",
       [] {
         return Instance{[](const Args& a, int64_t) {
           const Tensor mask = a[0] > a[1];
           return std::vector<Tensor>{where(mask, a[0], a[1]), masked_fill(a[0], mask, -1.0), mask};
         }};
       },
       // One kernel makes the mask (stored: read after it) and the where.
       {{{m, m}}},
       1,
       0,
       1});
  c.push_back({"dtype_round_trip",
               [] {
                 return Instance{[](const Args& a, int64_t) {
                   return std::vector<Tensor>{(a[0].to(kFloat64) * 1e-3).exp().to(kFloat32),
                                              a[0].to(kInt64) * 3};
                 }};
               },
               {{{m}}},
               1,
               0,
               1});
  c.push_back({"integer_arithmetic", [] { return Instance{[](const Args& a, int64_t k) {
                 const Tensor i = arange(0, 12).view({3, 4});
                 return std::vector<Tensor>{(i * k + 1) * 2 - i, i.sum({1}), a[0] + i};
               }}; },
               {{{m}, 2}, {{m}, 2}}, 1, 0});
  c.push_back({"reductions_keepdim", [] { return Instance{[](const Args& a, int64_t) {
                 return std::vector<Tensor>{a[0] - a[0].mean({1}, true), logsumexp(a[0], {0}, true)};
               }}; },
               {{{m}}}, 1, 0});
  c.push_back({"cross_entropy", [] { return Instance{[](const Args& a, int64_t) {
                 const Tensor target = arange(0, 3);
                 return std::vector<Tensor>{F::cross_entropy(a[0], target), a[0].log_softmax(-1)};
               }}; },
               {{{m}}}, 1, 0});
  c.push_back({"empty_tensors", [] { return Instance{[](const Args& a, int64_t) { return std::vector<Tensor>{a[0] * 2, a[0].sum({0})}; }}; },
               {{{{0, 4}}}, {{{0, 4}}}}, 1, 0});
  // 23: random numbers, drawn as eager draws them.
  c.push_back({"dropout_and_randn", [] { return Instance{[](const Args& a, int64_t) {
                 return std::vector<Tensor>{F::dropout(a[0], 0.4), a[0] + randn({6})};
               }}; },
               {{{v}}, {{v}}}, 1, 0});
  // 24-30: modules, buffers, training state.
  c.push_back({"linear_relu", [] {
                 auto net = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(4, 5), std::make_shared<nn::ReLU>());
                 return with_module(net, [net](const Args& a, int64_t) { return std::vector<Tensor>{(*net)(a[0])}; });
               },
               {{{m}}, {{{5, 4}}}}, 2, 0});
  c.push_back({"batch_norm_training_updates_buffers", [] {
                 auto bn = std::make_shared<nn::BatchNorm1d>(4);
                 return with_module(bn, [bn](const Args& a, int64_t) { return std::vector<Tensor>{(*bn)(a[0])}; });
               },
               {{{m}}, {{m}}, {{m}}}, 1, 0});
  c.push_back({"cnn_eval", [] {
                 auto net = std::make_shared<nn::Sequential>(
                     std::make_shared<nn::Conv2d>(2, 3, 3, nn::Conv2d::Options{.padding = 1}), std::make_shared<nn::BatchNorm2d>(3),
                     std::make_shared<nn::ReLU>(), std::make_shared<nn::AdaptiveAvgPool2d>(1), std::make_shared<nn::Flatten>());
                 net->eval();
                 return with_module(net, [net](const Args& a, int64_t) { return std::vector<Tensor>{(*net)(a[0])}; });
               },
               {{{{2, 2, 5, 5}}}, {{{2, 2, 5, 5}}}}, 1, 0});
  c.push_back({"lstm", [] {
                 auto lstm = std::make_shared<nn::LSTM>(4, 5);
                 return with_module(lstm, [lstm](const Args& a, int64_t) {
                   auto r = (*lstm)(a[0]);
                   return std::vector<Tensor>{r.output, r.state.h, r.state.c};
                 });
               },
               {{{{3, 2, 4}}}, {{{5, 2, 4}}}}, 2, 0});
  c.push_back({"attention_block", [] {
                 auto mha = std::make_shared<nn::MultiheadAttention>(8, 2);
                 return with_module(mha, [mha](const Args& a, int64_t) {
                   const Tensor x = F::layer_norm(a[0], {8});
                   return std::vector<Tensor>{gelu(mha->forward(x, x, x).output) + a[0]};
                 });
               },
               {{{{4, 2, 8}}}}, 1, 0});
  c.push_back({"closure_tensor", [] {
                 auto bias = std::make_shared<Tensor>(arange(0, 4).to(kFloat32));
                 Instance i;
                 i.fn = [bias](const Args& a, int64_t) { return std::vector<Tensor>{a[0] + bias->expand({3, 4})}; };
                 i.keep = bias;
                 return i;
               },
               {{{m}}, {{m}}}, 1, 0});
  c.push_back({"sgd_update_of_captured_parameters",
               [] {
                 auto net = std::make_shared<nn::Linear>(4, 2);
                 for (const Tensor& p : net->parameters()) p.set_grad(ones_like(p) * 0.5);
                 return with_module(net, [net](const Args& a, int64_t) {
                   NoGradGuard no_grad;
                   for (const Tensor& p : net->parameters()) {
                     Tensor q = p;
                     q.sub_(p.grad() * 0.1);
                   }
                   return std::vector<Tensor>{(*net)(a[0])};
                 });
               },
               // All under NoGradGuard: an executable, each update one kernel (one IR).
               {{{m}}, {{m}}, {{m}}},
               1,
               0,
               1});
  c.push_back({"adamw_training_step",
               [] {
                 auto net = std::make_shared<nn::Sequential>(
                     std::make_shared<nn::Linear>(4, 8), std::make_shared<nn::GELU>(),
                     std::make_shared<nn::LayerNorm>(std::vector<int64_t>{8}),
                     std::make_shared<nn::Linear>(8, 3));
                 auto opt = std::make_shared<optim::AdamW>(net->parameters(),
                                                           optim::AdamWOptions{.lr = 1e-2});
                 Instance i = with_module(net, [net, opt](const Args& a, int64_t) {
                   opt->zero_grad();
                   Tensor loss = F::mse_loss((*net)(a[0]), a[1]);
                   loss.backward();
                   opt->step();
                   return std::vector<Tensor>{loss};
                 });
                 i.keep = std::make_shared<std::pair<std::shared_ptr<void>, std::shared_ptr<void>>>(
                     net, opt);
                 return i;
               },
               // Traced again once the parameters have gradients. Kernels: the
               // gelu's, layer_norm's and their backwards' groups, and the
               // update's, one IR for every parameter: the step count with both
               // bias corrections as one kernel, and the parameter's decay and
               // step with both moments as one kernel writing all three. The
               // gelu stored as the layer_norm reduces it (its backward reads it).
               {{{{5, 4}, {5, 3}}}, {{{5, 4}, {5, 3}}}, {{{5, 4}, {5, 3}}}, {{{5, 4}, {5, 3}}}},
               2,
               0,
               9});
  return c;
}

// Runs every program compiled and eagerly; with `check`, each compiled call
// also checks itself against an eager run from the same state (which must
// leave the state as one call does).
void run_corpus(bool check) {
  const std::vector<Case> cases = corpus();
  ASSERT_GE(cases.size(), 30u);
  for (const Case& cs : cases) {
    SCOPED_TRACE(cs.name);
    manual_seed(21);
    const Instance compiled_side = cs.make();
    manual_seed(21);
    const Instance eager_side = cs.make();
    const auto fast = compile(compiled_side.fn, {.check = check, .recompile_limit = 64, .name = cs.name});
    uint64_t seed = 100;
    for (const Call& call : cs.calls) {
      std::vector<Tensor> a = arguments(call, seed), b = arguments(call, seed);
      ++seed;
      manual_seed(seed);  // the same default-generator state for both sides' draws
      const std::vector<Tensor> got = fast(a, call.k);
      manual_seed(seed);
      const std::vector<Tensor> want = eager_side.fn(b, call.k);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_TRUE(same(got[i], want[i])) << "result " << i;
        EXPECT_EQ(got[i].strides(), want[i].strides()) << "result " << i;
      }
      for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(same(a[i], b[i])) << "argument " << i << " after the call";
      const auto sa = compiled_side.state(), sb = eager_side.state();
      ASSERT_EQ(sa.size(), sb.size());
      for (size_t i = 0; i < sa.size(); ++i) EXPECT_TRUE(same(sa[i], sb[i])) << "state " << i;
    }
    const CompileStats st = fast.stats();
    EXPECT_EQ(st.traces, cs.traces);
    EXPECT_EQ(st.graph_breaks, cs.breaks);
    EXPECT_EQ(st.calls, static_cast<int64_t>(cs.calls.size()));
    int64_t kernels = 0;
    for (const auto& g : fast.explain().graphs) kernels += g.generated_kernels;
    EXPECT_EQ(kernels, compiler::testing::can_generate_kernels() ? cs.kernels : 0);
  }
}

TEST(CompileCorpus, EveryProgramMatchesEager) { run_corpus(false); }

TEST(CompileCorpus, EveryProgramPassesItsOwnCheck) { run_corpus(true); }

}  // namespace
}  // namespace kiln
