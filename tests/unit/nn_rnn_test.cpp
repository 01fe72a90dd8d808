// LSTM, GRU and their cells against a per-step reference in plain double loops.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "expect_error.h"
#include "kiln/autograd.h"
#include "kiln/nn/rnn.h"
#include "kiln/ops/factory.h"
#include "kiln/ops/reduce.h"
#include "kiln/state_dict.h"
#include "ops/dispatch.h"

namespace kiln {
namespace {

using Values = std::vector<double>;

Values values(const Tensor& t) { return t.to(kFloat64).to_vector<double>(); }

Tensor parameter(const nn::Module& module, const std::string& name) {
  for (const auto& [n, p] : module.named_parameters())
    if (n == name) return p;
  ADD_FAILURE() << "no parameter " << name;
  return {};
}

std::vector<std::pair<std::string, Shape>> names_and_shapes(const nn::Module& module) {
  std::vector<std::pair<std::string, Shape>> out;
  for (const auto& [n, p] : module.named_parameters()) out.emplace_back(n, p.sizes());
  return out;
}

void expect_near(const Values& got, const Values& want, double tol = 1e-5) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "at " << i;
}

double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

// The weights of one layer and direction as flat row-major doubles.
struct RefWeights {
  Values w_ih, w_hh, b_ih, b_hh;  // biases empty when the module has none
  int64_t in = 0;
};

RefWeights ref_weights(const nn::Module& m, const std::string& suffix, bool bias) {
  RefWeights w;
  const Tensor w_ih = parameter(m, "weight_ih" + suffix);
  w.w_ih = values(w_ih);
  w.in = w_ih.size(1);
  w.w_hh = values(parameter(m, "weight_hh" + suffix));
  if (bias) {
    w.b_ih = values(parameter(m, "bias_ih" + suffix));
    w.b_hh = values(parameter(m, "bias_hh" + suffix));
  }
  return w;
}

// rows of W [R, n] times v [n] plus b (if any): R values.
Values affine(const Values& w, const Values& b, const double* v, int64_t n, int64_t rows) {
  Values out(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    double s = b.empty() ? 0 : b[static_cast<size_t>(r)];
    for (int64_t k = 0; k < n; ++k) s += w[static_cast<size_t>(r * n + k)] * v[k];
    out[static_cast<size_t>(r)] = s;
  }
  return out;
}

// One step for one batch row: updates h (and c for the LSTM) of size H.
void ref_step(bool lstm, const RefWeights& w, const double* x, int64_t H, double* h, double* c) {
  const int64_t gates = lstm ? 4 : 3;
  const Values gx = affine(w.w_ih, w.b_ih, x, w.in, gates * H);
  const Values gh = affine(w.w_hh, w.b_hh, h, H, gates * H);
  auto at = [&](const Values& v, int64_t gate, int64_t j) {
    return v[static_cast<size_t>(gate * H + j)];
  };
  for (int64_t j = 0; j < H; ++j) {
    if (lstm) {
      const double i = sigmoid(at(gx, 0, j) + at(gh, 0, j));
      const double f = sigmoid(at(gx, 1, j) + at(gh, 1, j));
      const double g = std::tanh(at(gx, 2, j) + at(gh, 2, j));
      const double o = sigmoid(at(gx, 3, j) + at(gh, 3, j));
      c[j] = f * c[j] + i * g;
      h[j] = o * std::tanh(c[j]);
    } else {
      const double r = sigmoid(at(gx, 0, j) + at(gh, 0, j));
      const double z = sigmoid(at(gx, 1, j) + at(gh, 1, j));
      const double n = std::tanh(at(gx, 2, j) + r * at(gh, 2, j));
      h[j] = (1 - z) * n + z * h[j];
    }
  }
}

struct RefResult {
  Values output;  // [T, B, D * H]
  Values h, c;    // [L * D, B, H]
};

// The whole multi-layer, maybe bidirectional network over x [T, B, I] from
// h0, c0 [L * D, B, H]; a layer whose input is zeroed models dropout with p = 1.
RefResult ref_network(bool lstm, const nn::Module& m, const nn::RNNOptions& o, int64_t H, Values x,
                      int64_t T, int64_t B, Values h, Values c,
                      int64_t zeroed_input_from_layer = -1) {
  const int64_t D = o.bidirectional ? 2 : 1;
  for (int64_t layer = 0; layer < o.num_layers; ++layer) {
    if (layer >= zeroed_input_from_layer && zeroed_input_from_layer >= 0)
      std::fill(x.begin(), x.end(), 0.0);
    Values out(static_cast<size_t>(T * B * D * H));
    for (int64_t d = 0; d < D; ++d) {
      const std::string suffix = "_l" + std::to_string(layer) + (d ? "_reverse" : "");
      const RefWeights w = ref_weights(m, suffix, o.bias);
      const int64_t slot = layer * D + d;
      for (int64_t b = 0; b < B; ++b) {
        double* hb = &h[static_cast<size_t>((slot * B + b) * H)];
        double* cb = lstm ? &c[static_cast<size_t>((slot * B + b) * H)] : nullptr;
        for (int64_t i = 0; i < T; ++i) {
          const int64_t t = d ? T - 1 - i : i;
          ref_step(lstm, w, &x[static_cast<size_t>((t * B + b) * w.in)], H, hb, cb);
          for (int64_t j = 0; j < H; ++j)
            out[static_cast<size_t>(((t * B + b) * D + d) * H + j)] = hb[j];
        }
      }
    }
    x = std::move(out);
  }
  return {std::move(x), std::move(h), std::move(c)};
}

// A configuration of input layout and initial state to run LSTM or GRU on.
struct Case {
  nn::RNNOptions options;
  bool unbatched = false;
  bool with_initial_state = false;
};

constexpr int64_t kT = 4, kB = 3, kI = 5, kH = 6;

template <typename Net>
void check_against_reference(const Case& k) {
  const bool lstm = std::is_same_v<Net, nn::LSTM>;
  manual_seed(7);
  Net net(kI, kH, k.options);
  const int64_t D = k.options.bidirectional ? 2 : 1, L = k.options.num_layers;
  const int64_t B = k.unbatched ? 1 : kB;
  const Tensor x_seq = randn({kT, B, kI});  // canonical [T, B, I]
  Tensor x = k.unbatched ? x_seq.squeeze(1)
                         : (k.options.batch_first ? x_seq.transpose(0, 1).contiguous() : x_seq);
  const Tensor h0 = randn({L * D, B, kH}), c0 = randn({L * D, B, kH});
  Values h_init(static_cast<size_t>(L * D * B * kH), 0.0), c_init = h_init;
  if (k.with_initial_state) h_init = values(h0), c_init = values(c0);
  const RefResult want =
      ref_network(lstm, net, k.options, kH, values(x_seq), kT, B, h_init, c_init);

  auto state_arg = [&](const Tensor& s) {
    if (!k.with_initial_state) return Tensor();
    return k.unbatched ? s.squeeze(1) : s;
  };
  Tensor output, h_n, c_n;
  if constexpr (std::is_same_v<Net, nn::LSTM>) {
    auto [out, state] = net(x, {state_arg(h0), state_arg(c0)});
    output = out, h_n = state.h, c_n = state.c;
  } else {
    auto [out, h] = net(x, state_arg(h0));
    output = out, h_n = h;
  }
  const Shape out_shape = k.unbatched             ? Shape{kT, D * kH}
                          : k.options.batch_first ? Shape{B, kT, D * kH}
                                                  : Shape{kT, B, D * kH};
  const Shape state_shape = k.unbatched ? Shape{L * D, kH} : Shape{L * D, B, kH};
  ASSERT_EQ(output.sizes(), out_shape);
  ASSERT_EQ(h_n.sizes(), state_shape);
  const Tensor out_seq =
      k.unbatched ? output.unsqueeze(1) : (k.options.batch_first ? output.transpose(0, 1) : output);
  expect_near(values(out_seq), want.output);
  expect_near(values(h_n), want.h);
  if (lstm) {
    ASSERT_EQ(c_n.sizes(), state_shape);
    expect_near(values(c_n), want.c);
  }
}

const std::vector<Case> kCases = {
    {{}},
    {{.bidirectional = true}},
    {{.num_layers = 2}},
    {{.num_layers = 2, .bidirectional = true}, false, true},
    {{.num_layers = 3, .bias = false, .bidirectional = true}},
    {{.batch_first = true}},
    {{.num_layers = 2, .batch_first = true, .bidirectional = true}, false, true},
    {{}, false, true},
    {{}, true, false},
    {{.num_layers = 2, .bidirectional = true}, true, true},
};

TEST(LSTM, MatchesPerStepReferenceInEveryConfiguration) {
  for (size_t i = 0; i < kCases.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i));
    check_against_reference<nn::LSTM>(kCases[i]);
  }
}

// Without anything to record, a float32 LSTM runs the fused lstm_sequence op;
// with parameters that require grad, the step loop. Both must agree.
TEST(LSTM, FusedInferencePathMatchesTheStepLoop) {
  struct FusedCase {
    int64_t input, hidden;
    nn::RNNOptions options;
    bool with_initial_state;
    int64_t batch = kB;  // 1 and 2 take the CPU kernel's step loop, 3+ oneDNN's primitive
  };
  const std::vector<FusedCase> cases = {
      {kI, kH, {}, false},
      {kI, kH, {.num_layers = 2, .batch_first = true}, true},
      {7, 7, {.num_layers = 3}, true},
      {kI, kH, {.num_layers = 2, .bias = false, .batch_first = true}, false},
      {9, 4, {.num_layers = 2, .dropout = 0.5}, true},  // eval: dropout is off
      {kI, kH, {.num_layers = 2, .batch_first = true}, true, 1},
      {kI, kH, {.num_layers = 2}, false, 2},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i));
    const FusedCase& k = cases[i];
    manual_seed(21);
    nn::LSTM lstm(k.input, k.hidden, k.options);
    lstm.eval();
    const int64_t L = k.options.num_layers;
    const int64_t B = k.batch;
    const Tensor x = k.options.batch_first ? randn({B, kT, k.input}) : randn({kT, B, k.input});
    nn::LSTMState start;
    if (k.with_initial_state) start = {randn({L, B, k.hidden}), randn({L, B, k.hidden})};
    const nn::LSTMResult loop = lstm(x, start);
    ASSERT_TRUE(loop.output.requires_grad());  // recorded: the step loop ran
    nn::LSTMResult fused;
    {
      NoGradGuard no_grad;
      fused = lstm(x, start);
    }
    EXPECT_FALSE(fused.output.requires_grad());
    ASSERT_EQ(fused.output.sizes(), loop.output.sizes());
    ASSERT_EQ(fused.state.h.sizes(), loop.state.h.sizes());
    ASSERT_EQ(fused.state.c.sizes(), loop.state.c.sizes());
    expect_near(values(fused.output), values(loop.output));
    expect_near(values(fused.state.h), values(loop.state.h));
    expect_near(values(fused.state.c), values(loop.state.c));
  }
}

// A weight updated in place between inference calls is seen by the next call
// (the CPU kernel caches reordered weights by tensor identity and version).
TEST(LSTM, FusedInferenceSeesInPlaceWeightUpdates) {
  manual_seed(22);
  nn::LSTM lstm(kI, kH, {.num_layers = 2});
  const Tensor x = randn({kT, kB, kI});
  Tensor before, after;
  {
    NoGradGuard no_grad;
    before = lstm(x).output;
    lstm.named_parameters()[4].second.mul_(2.0);  // weight_ih_l1
    after = lstm(x).output;
  }
  const Tensor want = lstm(x).output;  // the step loop, from the updated weights
  EXPECT_GT((after - before).abs().max().item<double>(), 1e-4);
  expect_near(values(after), values(want));
}

TEST(GRU, MatchesPerStepReferenceInEveryConfiguration) {
  for (size_t i = 0; i < kCases.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i));
    check_against_reference<nn::GRU>(kCases[i]);
  }
}

TEST(LSTM, RunsInFloat64AfterConversion) {
  manual_seed(11);
  const nn::RNNOptions o{.num_layers = 2, .bidirectional = true};
  nn::LSTM lstm(kI, kH, o);
  lstm.to(kFloat64);
  const Tensor x = randn({kT, kB, kI}, {.dtype = kFloat64});
  const Tensor h0 = randn({4, kB, kH}, {.dtype = kFloat64});
  const Tensor c0 = randn({4, kB, kH}, {.dtype = kFloat64});
  const RefResult want = ref_network(true, lstm, o, kH, values(x), kT, kB, values(h0), values(c0));
  auto [output, state] = lstm(x, {h0, c0});
  EXPECT_EQ(output.dtype(), kFloat64);
  expect_near(values(output), want.output, 1e-12);
  expect_near(values(state.c), want.c, 1e-12);
}

TEST(LSTM, LoadsAStateDictUnderPyTorchsNames) {
  manual_seed(12);
  nn::LSTM source(kI, kH, {.bidirectional = true});
  nn::LSTM target(kI, kH, {.bidirectional = true});
  const StateDict dict = source.state_dict();
  target.load_state_dict(dict);
  const Tensor x = randn({kT, kB, kI});
  expect_near(values(target(x).output), values(source(x).output), 0);
}

TEST(LSTM, ListsParametersInPyTorchsOrderAndShapes) {
  nn::LSTM lstm(3, 5, {.num_layers = 2, .bidirectional = true});
  const std::vector<std::pair<std::string, Shape>> want = {
      {"weight_ih_l0", {20, 3}},
      {"weight_hh_l0", {20, 5}},
      {"bias_ih_l0", {20}},
      {"bias_hh_l0", {20}},
      {"weight_ih_l0_reverse", {20, 3}},
      {"weight_hh_l0_reverse", {20, 5}},
      {"bias_ih_l0_reverse", {20}},
      {"bias_hh_l0_reverse", {20}},
      {"weight_ih_l1", {20, 10}},
      {"weight_hh_l1", {20, 5}},
      {"bias_ih_l1", {20}},
      {"bias_hh_l1", {20}},
      {"weight_ih_l1_reverse", {20, 10}},
      {"weight_hh_l1_reverse", {20, 5}},
      {"bias_ih_l1_reverse", {20}},
      {"bias_hh_l1_reverse", {20}},
  };
  EXPECT_EQ(names_and_shapes(lstm), want);
}

TEST(GRU, ListsParametersInPyTorchsOrderAndShapes) {
  nn::GRU gru(3, 5, {.num_layers = 2, .bidirectional = true});
  const std::vector<std::pair<std::string, Shape>> want = {
      {"weight_ih_l0", {15, 3}},
      {"weight_hh_l0", {15, 5}},
      {"bias_ih_l0", {15}},
      {"bias_hh_l0", {15}},
      {"weight_ih_l0_reverse", {15, 3}},
      {"weight_hh_l0_reverse", {15, 5}},
      {"bias_ih_l0_reverse", {15}},
      {"bias_hh_l0_reverse", {15}},
      {"weight_ih_l1", {15, 10}},
      {"weight_hh_l1", {15, 5}},
      {"bias_ih_l1", {15}},
      {"bias_hh_l1", {15}},
      {"weight_ih_l1_reverse", {15, 10}},
      {"weight_hh_l1_reverse", {15, 5}},
      {"bias_ih_l1_reverse", {15}},
      {"bias_hh_l1_reverse", {15}},
  };
  EXPECT_EQ(names_and_shapes(gru), want);
}

TEST(LSTM, WithoutBiasHasOnlyWeights) {
  nn::LSTM lstm(3, 5, {.num_layers = 2, .bias = false});
  const std::vector<std::pair<std::string, Shape>> want = {{"weight_ih_l0", {20, 3}},
                                                           {"weight_hh_l0", {20, 5}},
                                                           {"weight_ih_l1", {20, 5}},
                                                           {"weight_hh_l1", {20, 5}}};
  EXPECT_EQ(names_and_shapes(lstm), want);
}

TEST(RNNCells, ListParametersInPyTorchsOrderAndShapes) {
  const std::vector<std::pair<std::string, Shape>> lstm_want = {
      {"weight_ih", {16, 3}}, {"weight_hh", {16, 4}}, {"bias_ih", {16}}, {"bias_hh", {16}}};
  EXPECT_EQ(names_and_shapes(nn::LSTMCell(3, 4)), lstm_want);
  const std::vector<std::pair<std::string, Shape>> gru_want = {{"weight_ih", {12, 3}},
                                                               {"weight_hh", {12, 4}}};
  EXPECT_EQ(names_and_shapes(nn::GRUCell(3, 4, {.bias = false})), gru_want);
}

TEST(LSTM, InitializesEveryParameterUniformlyWithinOneOverSqrtHidden) {
  nn::LSTM lstm(8, 16, {.num_layers = 2, .bidirectional = true});
  const double bound = 0.25;
  for (const auto& [name, p] : lstm.named_parameters()) {
    SCOPED_TRACE(name);
    EXPECT_LE(p.abs().max().item<double>(), bound);
    EXPECT_GT(p.abs().max().item<double>(), 0.8 * bound);  // spread over the range, not constant
    EXPECT_TRUE(p.requires_grad());
  }
}

TEST(LSTMCell, MatchesExplicitFormulasBatchedAndUnbatched) {
  manual_seed(3);
  nn::LSTMCell cell(kI, kH);
  const RefWeights w = ref_weights(cell, "", true);
  const Tensor x = randn({kB, kI}), h = randn({kB, kH}), c = randn({kB, kH});
  Values xv = values(x), hv = values(h), cv = values(c);
  for (int64_t b = 0; b < kB; ++b) ref_step(true, w, &xv[b * kI], kH, &hv[b * kH], &cv[b * kH]);
  const auto next = cell(x, {h, c});
  expect_near(values(next.h), hv);
  expect_near(values(next.c), cv);

  // Unbatched, from the default zero state.
  Values h1(kH, 0.0), c1(kH, 0.0);
  ref_step(true, w, xv.data(), kH, h1.data(), c1.data());
  const auto single = cell(x[0]);
  ASSERT_EQ(single.h.sizes(), Shape{kH});
  expect_near(values(single.h), h1);
  expect_near(values(single.c), c1);
}

TEST(GRUCell, MatchesExplicitFormulasBatchedAndUnbatched) {
  manual_seed(4);
  nn::GRUCell cell(kI, kH);
  const RefWeights w = ref_weights(cell, "", true);
  const Tensor x = randn({kB, kI}), h = randn({kB, kH});
  Values xv = values(x), hv = values(h);
  for (int64_t b = 0; b < kB; ++b) ref_step(false, w, &xv[b * kI], kH, &hv[b * kH], nullptr);
  expect_near(values(cell(x, h)), hv);

  Values h1(kH, 0.0);
  ref_step(false, w, xv.data(), kH, h1.data(), nullptr);
  const Tensor single = cell(x[0]);
  ASSERT_EQ(single.sizes(), Shape{kH});
  expect_near(values(single), h1);
}

TEST(LSTM, DropsOutBetweenLayersOnlyWhenTraining) {
  manual_seed(5);
  // p = 1 zeroes every input of the second layer, which the reference can model.
  nn::LSTM lstm(kI, kH, {.num_layers = 2, .dropout = 1.0});
  const Tensor x = randn({kT, kB, kI});
  const Values zero_state(static_cast<size_t>(2 * kB * kH), 0.0);
  const nn::RNNOptions o{.num_layers = 2};
  const RefResult plain = ref_network(true, lstm, o, kH, values(x), kT, kB, zero_state, zero_state);
  const RefResult dropped =
      ref_network(true, lstm, o, kH, values(x), kT, kB, zero_state, zero_state, 1);

  lstm.train();
  auto trained = lstm(x);
  trained.output.sum().backward();  // dropout between layers is differentiated too
  for (const Tensor& p : lstm.parameters()) EXPECT_TRUE(p.grad().defined());
  expect_near(values(trained.output), dropped.output);
  expect_near(values(trained.state.h), dropped.h);
  lstm.eval();
  auto evaluated = lstm(x);
  expect_near(values(evaluated.output), plain.output);
  expect_near(values(evaluated.state.c), plain.c);
}

TEST(GRU, AppliesNoDropoutAfterTheLastLayer) {
  manual_seed(6);
  nn::GRU gru(kI, kH, {.dropout = 1.0});
  const Tensor x = randn({kT, kB, kI});
  const Values zero_state(static_cast<size_t>(kB * kH), 0.0);
  const RefResult want = ref_network(false, gru, {}, kH, values(x), kT, kB, zero_state, {});
  gru.train();
  expect_near(values(gru(x).output), want.output);
}

TEST(LSTM, BackwardReachesEveryParameter) {
  manual_seed(8);
  nn::LSTM lstm(kI, kH, {.num_layers = 2, .batch_first = true, .bidirectional = true});
  const Tensor x = randn({kB, kT, kI}).requires_grad_();
  auto [output, state] = lstm(x);
  (output.sum() + state.h.square().sum() + state.c.sum()).backward();
  for (const auto& [name, p] : lstm.named_parameters()) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(p.grad().defined());
    EXPECT_EQ(p.grad().sizes(), p.sizes());
    EXPECT_GT(p.grad().abs().sum().item<double>(), 0);
  }
  ASSERT_TRUE(x.grad().defined());
  EXPECT_EQ(x.grad().sizes(), x.sizes());
}

TEST(GRU, BackwardReachesEveryParameterAndMatchesFiniteDifferences) {
  manual_seed(9);
  nn::GRU gru(2, 3, {.num_layers = 2, .bidirectional = true});
  const Tensor x = randn({3, 2, 2});
  auto loss = [&] {
    auto [output, h_n] = gru(x);
    return (output.square().sum() + h_n.sum()).to(kFloat64);
  };
  loss().backward();
  for (const auto& [name, p] : gru.named_parameters()) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(p.grad().defined());
    // Central difference on the first element, in float32: a loose bound suffices
    // to tell a right gradient from a wrong one.
    const double eps = 1e-2;
    Tensor first = p.view({-1}).narrow(0, 0, 1);
    const double analytic = p.grad().view({-1})[0].item<double>();
    double plus = 0, minus = 0;
    {
      NoGradGuard no_grad;
      first.add_(eps);
      plus = loss().item<double>();
      first.sub_(2 * eps);
      minus = loss().item<double>();
      first.add_(eps);
    }
    EXPECT_NEAR(analytic, (plus - minus) / (2 * eps), 2e-2 * (1 + std::abs(analytic)));
  }
}

TEST(RNNCells, GradientsReachEveryParameterAndTheState) {
  manual_seed(10);
  nn::LSTMCell lstm_cell(kI, kH);
  nn::GRUCell gru_cell(kI, kH);
  const Tensor x = randn({kB, kI});
  const Tensor h = randn({kB, kH}).requires_grad_();
  const auto next = lstm_cell(x, {h, zeros({kB, kH})});
  (next.h.sum() + next.c.sum() + gru_cell(x, h).sum()).backward();
  for (const nn::Module* m :
       {static_cast<const nn::Module*>(&lstm_cell), static_cast<const nn::Module*>(&gru_cell)}) {
    for (const auto& [name, p] : m->named_parameters()) {
      SCOPED_TRACE(name);
      ASSERT_TRUE(p.grad().defined());
      EXPECT_GT(p.grad().abs().sum().item<double>(), 0);
    }
  }
  ASSERT_TRUE(h.grad().defined());
}

TEST(LSTM, RejectsInputOfWrongRankOrFeatureCount) {
  nn::LSTM lstm(4, 3);
  testing::expect_error<ShapeError>([&] { lstm(randn({2, 3, 4, 1})); }, "LSTM", "[2, 3, 4, 1]");
  testing::expect_error<ShapeError>([&] { lstm(randn({4})); }, "LSTM", "[4]");
  testing::expect_error_with<ShapeError>(
      [&] {
        lstm(randn({5, 2, 7}));
      },
      {"LSTM", "7 features", "expected 4"});
  testing::expect_error<ShapeError>([&] { lstm(randn({0, 2, 4})); }, "LSTM", "no time steps");
  nn::GRU gru(4, 3, {.batch_first = true});
  testing::expect_error_with<ShapeError>(
      [&] {
        gru(randn({2, 5, 6}));
      },
      {"GRU", "6 features", "expected 4"});
}

TEST(LSTM, RejectsInitialStateOfWrongShape) {
  nn::LSTM lstm(4, 3, {.num_layers = 2, .bidirectional = true});
  const Tensor x = randn({5, 2, 4});
  const Tensor good = zeros({4, 2, 3});
  testing::expect_error_with<ShapeError>(
      [&] {
        lstm(x, {zeros({2, 2, 3}), good});
      },
      {"LSTM", "h0", "[4, 2, 3]", "[2, 2, 3]"});
  testing::expect_error_with<ShapeError>(
      [&] {
        lstm(x, {good, zeros({4, 3})});
      },
      {"LSTM", "c0", "[4, 2, 3]", "[4, 3]"});
  // Unbatched input takes an unbatched state.
  testing::expect_error_with<ShapeError>(
      [&] {
        lstm(randn({5, 4}), {good, good});
      },
      {"LSTM", "h0", "[4, 3]", "[4, 2, 3]"});
  testing::expect_error<ValueError>([&] { lstm(x, {good, Tensor()}); }, "LSTM", "c0");
  nn::GRU gru(4, 3, {.batch_first = true});
  testing::expect_error_with<ShapeError>(
      [&] {
        gru(randn({2, 5, 4}), zeros({1, 5, 3}));
      },
      {"GRU", "h0", "[1, 2, 3]", "[1, 5, 3]"});
}

// lstm_sequence's list: input [T, B, I], h0, c0 [L, B, H], per layer W_ih, W_hh.
TensorList lstm_sequence_inputs(int64_t layers, int64_t input, int64_t hidden) {
  TensorList in = {zeros({3, 2, input}), zeros({layers, 2, hidden}), zeros({layers, 2, hidden})};
  for (int64_t l = 0; l < layers; ++l) {
    in.push_back(zeros({4 * hidden, l == 0 ? input : hidden}));
    in.push_back(zeros({4 * hidden, hidden}));
  }
  return in;
}

TEST(LstmSequence, RejectsWrongListsShapesAndDTypes) {
  using ops::OpId;
  const auto call = [](TensorList in, int64_t layers) {
    ops::dispatch(OpId::lstm_sequence, in, {layers, false});
  };
  testing::expect_error<ValueError>([&] { call(lstm_sequence_inputs(1, 5, 4), 0); },
                                    "lstm_sequence", "num_layers must be at least 1, got 0");
  testing::expect_error<ValueError>([&] { call(lstm_sequence_inputs(1, 5, 4), 2); },
                                    "lstm_sequence",
                                    "expected 3 tensors and 2 per layer for 2 layers without "
                                    "biases, got 5");
  // A count that 3 + layers * 2 would wrap to the list's length (it crashed).
  testing::expect_error_with<ValueError>(
      [&] {
        call(TensorList{zeros({1, 2, 5})}, std::numeric_limits<int64_t>::max());
      },
      {"lstm_sequence", "for 9223372036854775807 layers", "got 1"});
  TensorList in = lstm_sequence_inputs(2, 5, 4);
  in[5] = zeros({16, 5});  // layer 1 takes the hidden size, 4
  testing::expect_error<ShapeError>([&] { call(in, 2); }, "lstm_sequence",
                                    "weight_ih of layer 1 must have shape [16, 4], got [16, 5]");
  in = lstm_sequence_inputs(1, 5, 4);
  in[2] = zeros({1, 3, 4});
  testing::expect_error<ShapeError>([&] { call(in, 1); }, "lstm_sequence",
                                    "c0 of layer 0 must have shape [1, 2, 4], got [1, 3, 4]");
  in = lstm_sequence_inputs(1, 5, 4);
  in[0] = zeros({3, 5});
  testing::expect_error<ShapeError>([&] { call(in, 1); }, "lstm_sequence", "[3, 5]");
  in = lstm_sequence_inputs(1, 5, 4);
  in[4] = zeros({16, 4}, {.dtype = kFloat64});
  testing::expect_error<DTypeError>([&] { call(in, 1); }, "lstm_sequence",
                                    "weight_hh of layer 0 must be float32, got float64");
}

TEST(LstmStepOp, RejectsMismatchedShapesAndDTypes) {
  using ops::OpId;
  const auto call = [](TensorList in) { ops::dispatch(OpId::lstm_step, in, {}); };
  // input [2, 5], hx, cx [2, 3]: weights [12, 5] and [12, 3], biases [12].
  const auto good = [] {
    return TensorList{zeros({2, 5}), zeros({2, 3}), zeros({2, 3}), zeros({12, 5}), zeros({12, 3}), zeros({12}),
                      zeros({12})};
  };
  TensorList in = good();
  in[4] = zeros({12, 5});
  testing::expect_error<ShapeError>([&] { call(in); }, "lstm_step",
                                    "weight_hh must be [12, 3] for input [2, 5] and hx [2, 3], got [12, 5]");
  in = good();
  in[6] = zeros({3});
  testing::expect_error<ShapeError>([&] { call(in); }, "lstm_step", "bias_hh must be [12]");
  in = good();
  in[0] = zeros({5});
  testing::expect_error<ShapeError>([&] { call(in); }, "lstm_step", "input must be [B, I]");
  in = good();
  in[2] = zeros({2, 3}, {.dtype = kFloat64});
  testing::expect_error<DTypeError>([&] { call(in); }, "lstm_step", "cx is float64");
}

TEST(LstmStepOp, AnLSTMCellStepWithoutGradientsEqualsTheDifferentiableOne) {
  manual_seed(3);
  nn::LSTMCell cell(6, 5);
  for (bool bias : {true, false}) {
    nn::LSTMCell no_bias(6, 5, {.bias = false});
    nn::LSTMCell& c = bias ? cell : no_bias;
    const Tensor x = randn({4, 6}), h = randn({4, 5}), s = randn({4, 5});
    const nn::LSTMState with_grad = c(x, {h, s});  // linear, linear, lstm_cell
    ASSERT_TRUE(with_grad.h.requires_grad());
    NoGradGuard no_grad;
    const nn::LSTMState step = c(x, {h, s});  // lstm_step
    EXPECT_FALSE(step.h.requires_grad());
    EXPECT_LT((step.h - with_grad.h.detach()).abs().max().item<double>(), 1e-5) << bias;
    EXPECT_LT((step.c - with_grad.c.detach()).abs().max().item<double>(), 1e-5) << bias;
  }
}

TEST(LstmCellOp, RejectsMismatchedShapesAndDTypes) {
  using ops::OpId;
  const auto call = [](const Tensor& a, const Tensor& b, const Tensor& c) {
    ops::dispatch(OpId::lstm_cell, TensorList{a, b, c}, {});
  };
  testing::expect_error<ShapeError>([&] { call(zeros({2, 8}), zeros({2, 8}), zeros({2, 3})); },
                                    "lstm_cell", "must be [2, 12] for cx [2, 3], got [2, 8] and [2, 8]");
  testing::expect_error<ShapeError>([&] { call(zeros({2, 8}), zeros({1, 8}), zeros({2, 2})); },
                                    "lstm_cell", "got [2, 8] and [1, 8]");
  testing::expect_error<ShapeError>([&] { call(zeros({1, 2, 8}), zeros({1, 2, 8}), zeros({1, 2, 2})); },
                                    "lstm_cell", "cx must be [B, H] or [H]");
  testing::expect_error<DTypeError>(
      [&] { call(zeros({2, 8}), zeros({2, 8}, {.dtype = kFloat64}), zeros({2, 2})); }, "lstm_cell",
      "one dtype, got float32, float64 and float32");
  testing::expect_error<DTypeError>(
      [&] { call(zeros({8}, {.dtype = kInt32}), zeros({8}, {.dtype = kInt32}), zeros({2}, {.dtype = kInt32})); },
      "lstm_cell", "must be a floating tensor");
}

TEST(RNNCells, RejectWrongInputAndStateShapes) {
  nn::LSTMCell lstm_cell(4, 3);
  testing::expect_error_with<ShapeError>(
      [&] {
        lstm_cell(randn({2, 5}));
      },
      {"LSTMCell", "5 features", "expected 4"});
  testing::expect_error<ShapeError>([&] { lstm_cell(randn({1, 2, 4})); }, "LSTMCell", "[1, 2, 4]");
  testing::expect_error_with<ShapeError>(
      [&] {
        lstm_cell(randn({2, 4}), {zeros({2, 3}), zeros({3, 3})});
      },
      {"LSTMCell", "c", "[2, 3]", "[3, 3]"});
  testing::expect_error<ValueError>(
      [&] {
        lstm_cell(randn({2, 4}), {zeros({2, 3}), Tensor()});
      },
      "LSTMCell");
  nn::GRUCell gru_cell(4, 3);
  testing::expect_error_with<ShapeError>(
      [&] {
        gru_cell(randn({2, 4}), zeros({2, 4}));
      },
      {"GRUCell", "hidden", "[2, 3]", "[2, 4]"});
  testing::expect_error_with<ShapeError>(
      [&] {
        gru_cell(randn({4}), zeros({1, 3}));
      },
      {"GRUCell", "hidden", "[3]", "[1, 3]"});
}

TEST(RNNBase, RejectsInvalidOptions) {
  testing::expect_error<ValueError>([] { nn::LSTM(4, 0); }, "LSTM", "0");
  testing::expect_error<ValueError>([] { nn::GRU(4, 3, {.num_layers = 0}); }, "GRU", "num_layers");
  testing::expect_error<ValueError>([] { nn::LSTM(4, 3, {.dropout = 1.5}); }, "LSTM", "1.5");
  testing::expect_error<ValueError>([] { nn::GRUCell(-1, 3); }, "GRUCell", "-1");
}

TEST(RNNBase, PrintsOptionsLikePyTorch) {
  EXPECT_EQ(nn::LSTM(4, 3).extra_repr(), "4, 3");
  EXPECT_EQ(nn::GRU(4, 3,
                    {.num_layers = 2,
                     .bias = false,
                     .batch_first = true,
                     .dropout = 0.5,
                     .bidirectional = true})
                .extra_repr(),
            "4, 3, num_layers=2, bias=False, batch_first=True, dropout=0.5, bidirectional=True");
  EXPECT_EQ(nn::LSTMCell(4, 3, {.bias = false}).extra_repr(), "4, 3, bias=False");
  EXPECT_EQ(nn::LSTM(4, 3, {.num_layers = 2}).repr(), "LSTM(4, 3, num_layers=2)");
  EXPECT_EQ(nn::GRUCell(4, 3).repr(), "GRUCell(4, 3)");
}

}  // namespace
}  // namespace kiln
