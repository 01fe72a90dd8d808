// BertModel: transformers' parameter names and shapes, initialization, the
// semantics that can be checked by hand (embedding sums, masks, pooler),
// loading Hugging Face state dicts and config.json files, and errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "kiln/autograd.h"
#include "kiln/models/bert.h"
#include "kiln/ops/factory.h"
#include "kiln/ops/linalg.h"
#include "kiln/ops/nn.h"
#include "kiln/ops/pointwise.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape.h"
#include "unit/expect_error.h"

namespace kiln::models {
namespace {

using Values = std::vector<double>;

Values values(const Tensor& t) { return t.to(kFloat64).contiguous().to_vector<double>(); }

void expect_near(const Tensor& got, const Tensor& want, double tol = 1e-5) {
  ASSERT_EQ(got.sizes(), want.sizes());
  const Values g = values(got), w = values(want);
  for (size_t i = 0; i < g.size(); ++i) ASSERT_NEAR(g[i], w[i], tol) << "at " << i;
}

// The config of transformers' small test model: 2 layers, hidden 128, 2 heads.
BertConfig small_config() {
  BertConfig c;
  c.num_hidden_layers = 2;
  c.hidden_size = 128;
  c.num_attention_heads = 2;
  c.intermediate_size = 512;
  return c;
}

// A tiny model for semantics tests (vocab 50, hidden 8, 2 heads, 2 layers).
BertConfig tiny_config() {
  BertConfig c;
  c.vocab_size = 50;
  c.hidden_size = 8;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 2;
  c.intermediate_size = 16;
  c.max_position_embeddings = 12;
  return c;
}

Tensor ids(const std::vector<int64_t>& v, const Shape& shape) { return from_vector(v, shape); }

// Weights drawn with std 1 instead of 0.02, so that attention and the
// feed-forward blocks change the output visibly.
void randomize(BertModel& model, uint64_t seed = 7) {
  Generator gen(seed);
  NoGradGuard no_grad;
  for (auto& [name, p] : model.named_parameters()) p.copy_(randn(p.sizes(), {}, &gen));
}

// transformers.BertModel(BertConfig(num_hidden_layers=2, hidden_size=128,
// num_attention_heads=2, intermediate_size=512)).state_dict(), printed by
// transformers 5.24.
const std::vector<std::pair<std::string, Shape>> kSmallStateDict = {
    {"embeddings.word_embeddings.weight", {30522, 128}},
    {"embeddings.position_embeddings.weight", {512, 128}},
    {"embeddings.token_type_embeddings.weight", {2, 128}},
    {"embeddings.LayerNorm.weight", {128}},
    {"embeddings.LayerNorm.bias", {128}},
    {"encoder.layer.0.attention.self.query.weight", {128, 128}},
    {"encoder.layer.0.attention.self.query.bias", {128}},
    {"encoder.layer.0.attention.self.key.weight", {128, 128}},
    {"encoder.layer.0.attention.self.key.bias", {128}},
    {"encoder.layer.0.attention.self.value.weight", {128, 128}},
    {"encoder.layer.0.attention.self.value.bias", {128}},
    {"encoder.layer.0.attention.output.dense.weight", {128, 128}},
    {"encoder.layer.0.attention.output.dense.bias", {128}},
    {"encoder.layer.0.attention.output.LayerNorm.weight", {128}},
    {"encoder.layer.0.attention.output.LayerNorm.bias", {128}},
    {"encoder.layer.0.intermediate.dense.weight", {512, 128}},
    {"encoder.layer.0.intermediate.dense.bias", {512}},
    {"encoder.layer.0.output.dense.weight", {128, 512}},
    {"encoder.layer.0.output.dense.bias", {128}},
    {"encoder.layer.0.output.LayerNorm.weight", {128}},
    {"encoder.layer.0.output.LayerNorm.bias", {128}},
    {"encoder.layer.1.attention.self.query.weight", {128, 128}},
    {"encoder.layer.1.attention.self.query.bias", {128}},
    {"encoder.layer.1.attention.self.key.weight", {128, 128}},
    {"encoder.layer.1.attention.self.key.bias", {128}},
    {"encoder.layer.1.attention.self.value.weight", {128, 128}},
    {"encoder.layer.1.attention.self.value.bias", {128}},
    {"encoder.layer.1.attention.output.dense.weight", {128, 128}},
    {"encoder.layer.1.attention.output.dense.bias", {128}},
    {"encoder.layer.1.attention.output.LayerNorm.weight", {128}},
    {"encoder.layer.1.attention.output.LayerNorm.bias", {128}},
    {"encoder.layer.1.intermediate.dense.weight", {512, 128}},
    {"encoder.layer.1.intermediate.dense.bias", {512}},
    {"encoder.layer.1.output.dense.weight", {128, 512}},
    {"encoder.layer.1.output.dense.bias", {128}},
    {"encoder.layer.1.output.LayerNorm.weight", {128}},
    {"encoder.layer.1.output.LayerNorm.bias", {128}},
    {"pooler.dense.weight", {128, 128}},
    {"pooler.dense.bias", {128}},
};

// --- structure -------------------------------------------------------------------

TEST(BertModel, StateDictKeysAndShapesMatchTransformers) {
  BertModel model(small_config());
  std::vector<std::pair<std::string, Shape>> got;
  for (const auto& [name, t] : model.state_dict()) got.emplace_back(name, t.sizes());
  EXPECT_EQ(got, kSmallStateDict);
}

TEST(BertModel, WithoutPoolerHasNoPoolerKeysOrOutput) {
  BertModel model(tiny_config(), /*add_pooling_layer=*/false);
  for (const auto& name : model.state_dict().keys()) EXPECT_FALSE(name.starts_with("pooler"));
  EXPECT_EQ(model.pooler, nullptr);
  const BertOutput out = model(ids({1, 2, 3}, {1, 3}));
  EXPECT_EQ(out.last_hidden_state.sizes(), (Shape{1, 3, 8}));
  EXPECT_FALSE(out.pooler_output.defined());
}

TEST(BertModel, BaseHasTransformersParameterCount) {
  BertModel base;
  int64_t count = 0;
  for (const Tensor& p : base.parameters()) count += p.numel();
  EXPECT_EQ(count, 109'482'240);
}

TEST(BertModel, PrintsTransformersModuleNames) {
  BertModel model(tiny_config());
  const std::string repr = model.repr();
  for (const char* part :
       {"BertModel(", "(embeddings): BertEmbeddings(", "(LayerNorm): LayerNorm(",
        "(self): BertSelfAttention(", "(output): BertSelfOutput(",
        "(intermediate): BertIntermediate(", "(output): BertOutput(", "(pooler): BertPooler("}) {
    EXPECT_NE(repr.find(part), std::string::npos) << part << " not in\n" << repr;
  }
}

TEST(BertModel, InitializesAsTransformers) {
  BertConfig c = small_config();
  c.pad_token_id = 3;
  BertModel model(c);
  const Tensor& words = model.embeddings.word_embeddings.weight;
  EXPECT_EQ(values(words.select(0, 3)), Values(128, 0.0));
  EXPECT_NEAR(stddev(words).item<float>(), 0.02, 0.001);
  const Tensor& query = model.encoder.layer.at<BertLayer>(1).attention.self_attention.query.weight;
  EXPECT_NEAR(query.mean().item<float>(), 0.0, 0.002);
  EXPECT_NEAR(stddev(query).item<float>(), 0.02, 0.001);
  EXPECT_EQ(values(model.pooler->dense.bias), Values(128, 0.0));
  EXPECT_EQ(values(model.embeddings.layer_norm.weight), Values(128, 1.0));
  EXPECT_EQ(values(model.encoder.layer.at<BertLayer>(0).output.layer_norm.bias), Values(128, 0.0));
}

// --- semantics -------------------------------------------------------------------

TEST(BertModel, WithoutLayersOutputsNormalizedEmbeddingSum) {
  BertConfig c = tiny_config();
  c.num_hidden_layers = 0;
  c.layer_norm_eps = 1e-5;
  BertModel model(c);
  model.eval();
  randomize(model);
  const Tensor input = ids({5, 9, 2, 7, 7, 1}, {2, 3});
  const Tensor types = ids({0, 1, 1, 1, 0, 0}, {2, 3});
  const Tensor out = model(input, {}, types).last_hidden_state;
  auto& e = model.embeddings;
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t s = 0; s < 3; ++s) {
      const Tensor sum = e.word_embeddings.weight[input[b][s].item<int64_t>()] +
                         e.token_type_embeddings.weight[types[b][s].item<int64_t>()] +
                         e.position_embeddings.weight[s];
      const Tensor centered = sum - sum.mean();
      const Tensor normalized = centered / (centered.square().mean() + 1e-5).sqrt();
      expect_near(out[b][s], normalized * e.layer_norm.weight + e.layer_norm.bias);
    }
  }
}

TEST(BertModel, DefaultTypeAndPositionIdsAreZerosAndArange) {
  BertModel model(tiny_config());
  model.eval();
  randomize(model);
  const Tensor input = ids({5, 9, 2, 7, 7, 1, 4, 4}, {2, 4});
  const BertOutput implicit = model(input);
  const BertOutput explicit_ids =
      model(input, ones({2, 4}, {.dtype = kInt64}), zeros({2, 4}, {.dtype = kInt64}),
            arange(4, {.dtype = kInt64}));
  expect_near(implicit.last_hidden_state, explicit_ids.last_hidden_state, 1e-6);
  expect_near(implicit.pooler_output, explicit_ids.pooler_output, 1e-6);
  const BertOutput batched_positions =
      model(input, {}, {}, arange(4, {.dtype = kInt64}).unsqueeze(0).expand({2, 4}));
  expect_near(implicit.last_hidden_state, batched_positions.last_hidden_state, 1e-6);
}

TEST(BertModel, PaddedKeysDoNotChangeTheRealTokens) {
  BertModel model(tiny_config());
  model.eval();
  randomize(model);
  const Tensor real = model(ids({5, 9, 2}, {1, 3})).last_hidden_state;
  const Tensor padded =
      model(ids({5, 9, 2, 0, 0}, {1, 5}), ids({1, 1, 1, 0, 0}, {1, 5})).last_hidden_state;
  expect_near(padded.narrow(1, 0, 3), real, 1e-5);
  // Without the mask the padding is attended and the outputs move.
  const Tensor unmasked = model(ids({5, 9, 2, 0, 0}, {1, 5})).last_hidden_state;
  EXPECT_GT((unmasked.narrow(1, 0, 3) - real).abs().max().item<float>(), 1e-3);
}

TEST(BertModel, AcceptsBoolIntAndFloatMasksAlike) {
  BertModel model(tiny_config());
  model.eval();
  randomize(model);
  const Tensor input = ids({5, 9, 2, 7, 7, 1, 4, 4}, {2, 4});
  const Tensor mask = ids({1, 1, 1, 0, 1, 1, 0, 0}, {2, 4});
  const Tensor want = model(input, mask).last_hidden_state;
  for (DType dtype : {kBool, kInt32, kFloat32, kFloat64}) {
    expect_near(model(input, mask.to(dtype)).last_hidden_state, want, 1e-6);
  }
}

// transformers adds (1 - mask) * lowest: a fully masked row shifts every score
// by the same amount and so attends uniformly. With zero queries every score is
// equal anyway, so masking every key must change nothing.
TEST(BertModel, FullyMaskedRowAttendsUniformlyAsTransformers) {
  BertModel model(tiny_config());
  model.eval();
  randomize(model);
  for (nn::Module* m : model.encoder.layer) {
    auto& self = static_cast<BertLayer*>(m)->attention.self_attention;
    NoGradGuard no_grad;
    self.query.weight.zero_();
    self.query.bias.zero_();
  }
  const Tensor input = ids({5, 9, 2, 7}, {1, 4});
  const Tensor all = model(input, ones({1, 4})).last_hidden_state;
  const Tensor none = model(input, zeros({1, 4})).last_hidden_state;
  expect_near(none, all, 1e-5);
  EXPECT_FALSE(any(isnan(none)).item<bool>());
}

TEST(BertModel, PoolerIsTanhOfDenseOfFirstToken) {
  BertModel model(tiny_config());
  model.eval();
  randomize(model);
  const BertOutput out = model(ids({5, 9, 2, 7, 7, 1}, {2, 3}));
  const Tensor cls = out.last_hidden_state.select(1, 0);
  expect_near(out.pooler_output,
              tanh(linear(cls, model.pooler->dense.weight, model.pooler->dense.bias)));
}

TEST(BertModel, TanhGeluActivationMatchesItsFormula) {
  BertConfig c = tiny_config();
  c.hidden_act = "gelu_new";
  BertIntermediate block(c);
  {
    NoGradGuard no_grad;  // std 1 weights reach the range where the approximations differ
    block.dense.weight.copy_(randn(block.dense.weight.sizes()));
  }
  const Tensor x = randn({3, 8});
  const Tensor h = linear(x, block.dense.weight, block.dense.bias);
  const double k = std::sqrt(2.0 / M_PI);
  const Tensor want = 0.5 * h * (1 + tanh(k * (h + 0.044715 * h * h * h)));
  expect_near(block.forward(x), want, 1e-5);
  c.hidden_act = "relu";
  BertIntermediate relu_block(c);
  expect_near(relu_block.forward(x),
              relu(linear(x, relu_block.dense.weight, relu_block.dense.bias)));
}

TEST(BertModel, RunsInFloat64) {
  BertModel model(tiny_config());
  model.eval();
  randomize(model);
  const Tensor input = ids({5, 9, 2, 7, 7, 1, 4, 4}, {2, 4});
  const Tensor mask = ids({1, 1, 1, 0, 1, 1, 1, 1}, {2, 4});
  const BertOutput single = model(input, mask);
  model.to(kFloat64);
  const BertOutput twice = model(input, mask);
  EXPECT_EQ(twice.last_hidden_state.dtype(), kFloat64);
  expect_near(twice.last_hidden_state, single.last_hidden_state, 1e-4);
  expect_near(twice.pooler_output, single.pooler_output, 1e-4);
}

TEST(BertModel, DropoutActsOnlyWhenTraining) {
  BertModel model(tiny_config());
  randomize(model);
  const Tensor input = ids({5, 9, 2, 7, 7, 1, 4, 4}, {2, 4});
  const Tensor mask = ids({1, 1, 1, 0, 1, 1, 1, 1}, {2, 4});
  model.eval();
  const Tensor first = model(input, mask).last_hidden_state;
  expect_near(model(input, mask).last_hidden_state, first, 0);
  model.train();
  const BertOutput trained = model(input, mask);
  EXPECT_GT((trained.last_hidden_state - first).abs().max().item<float>(), 1e-3);
  (trained.last_hidden_state.sum() + trained.pooler_output.sum()).backward();
  const Tensor grad =
      model.encoder.layer.at<BertLayer>(0).attention.self_attention.query.weight.grad();
  ASSERT_TRUE(grad.defined());
  EXPECT_GT(grad.abs().sum().item<float>(), 0);
}

TEST(BertModel, TrainsWithoutDropoutThroughFusedAttention) {
  BertConfig c = tiny_config();
  c.hidden_dropout_prob = 0;
  c.attention_probs_dropout_prob = 0;
  BertModel model(c);
  randomize(model);
  const Tensor input = ids({5, 9, 2, 7}, {1, 4});
  model.eval();
  const Tensor eval_out = model(input).last_hidden_state;
  model.train();
  const Tensor train_out = model(input).last_hidden_state;
  expect_near(train_out, eval_out, 1e-6);
  train_out.square().sum().backward();
  EXPECT_GT(model.encoder.layer.at<BertLayer>(1)
                .attention.self_attention.key.weight.grad()
                .abs()
                .sum()
                .item<float>(),
            0);
}

// --- loading ---------------------------------------------------------------------

// model's state dict as a BertForPreTraining checkpoint names it, with a head.
StateDict pretraining_checkpoint(const BertModel& model) {
  StateDict dict;
  for (const auto& [name, t] : model.state_dict()) dict.set("bert." + name, t.clone());
  dict.set("bert.embeddings.position_ids", arange(12, {.dtype = kInt64}).unsqueeze(0));
  dict.set("cls.predictions.bias", zeros({50}));
  return dict;
}

TEST(BertModel, LoadsPrefixedCheckpointAndReportsOtherHeads) {
  BertModel source(tiny_config());
  randomize(source);
  BertModel target(tiny_config());
  const nn::LoadResult result = target.load_hf_state_dict(pretraining_checkpoint(source));
  EXPECT_TRUE(result.missing_keys.empty());
  EXPECT_EQ(result.unexpected_keys, std::vector<std::string>{"cls.predictions.bias"});
  for (const auto& [name, t] : source.state_dict()) expect_near(target.state_dict().at(name), t, 0);
}

TEST(BertModel, LoadsOldGammaBetaNames) {
  BertModel source(tiny_config());
  randomize(source);
  StateDict dict;
  for (auto [name, t] : source.state_dict()) {
    if (name.ends_with("LayerNorm.weight")) name.replace(name.size() - 6, 6, "gamma");
    if (name.ends_with("LayerNorm.bias")) name.replace(name.size() - 4, 4, "beta");
    dict.set(name, t);
  }
  ASSERT_TRUE(dict.contains("embeddings.LayerNorm.gamma"));
  BertModel target(tiny_config());
  EXPECT_TRUE(target.load_hf_state_dict(dict).unexpected_keys.empty());
  expect_near(target.embeddings.layer_norm.weight, source.embeddings.layer_norm.weight, 0);
  expect_near(target.encoder.layer.at<BertLayer>(1).output.layer_norm.bias,
              source.encoder.layer.at<BertLayer>(1).output.layer_norm.bias, 0);
}

TEST(BertModel, StrictLoadRejectsMissingKeysAndCopiesNothing) {
  BertModel source(tiny_config());
  randomize(source);
  StateDict dict = pretraining_checkpoint(source);
  dict.erase("bert.pooler.dense.bias");
  BertModel target(tiny_config());
  const Values before = values(target.embeddings.word_embeddings.weight);
  testing::expect_error<ValueError>([&] { target.load_hf_state_dict(dict); },
                                    "BertModel.load_hf_state_dict", "pooler.dense.bias");
  EXPECT_EQ(values(target.embeddings.word_embeddings.weight), before);
  const nn::LoadResult loose = target.load_hf_state_dict(dict, /*strict=*/false);
  EXPECT_EQ(loose.missing_keys, std::vector<std::string>{"pooler.dense.bias"});
  expect_near(target.embeddings.word_embeddings.weight, source.embeddings.word_embeddings.weight,
              0);
}

TEST(BertModel, PoolerKeysAreUnexpectedWithoutPooler) {
  BertModel source(tiny_config());
  BertModel target(tiny_config(), /*add_pooling_layer=*/false);
  const nn::LoadResult result = target.load_hf_state_dict(source.state_dict());
  EXPECT_EQ(result.unexpected_keys,
            (std::vector<std::string>{"pooler.dense.weight", "pooler.dense.bias"}));
}

TEST(BertModel, LoadRejectsWrongShapes) {
  BertConfig other = tiny_config();
  other.hidden_size = 10;
  BertModel source(other);
  BertModel target(tiny_config());
  EXPECT_THROW(target.load_hf_state_dict(source.state_dict()), ValueError);
}

TEST(BertModel, CheckpointOfAnotherSizeSaysBothSizesInOneShortLine) {
  BertConfig other = tiny_config();
  other.hidden_size = 12;
  other.num_hidden_layers = 3;
  other.intermediate_size = 24;
  BertModel source(other);
  BertModel target(tiny_config());
  try {
    target.load_hf_state_dict(pretraining_checkpoint(source));
    FAIL() << "no error";
  } catch (const ValueError& e) {
    const std::string what = e.what();
    EXPECT_LT(what.size(), 400u) << what;
    EXPECT_NE(what.find("holds a 12-wide, 3-layer BERT (intermediate 24, vocab 50, 12 positions)"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("this model is an 8-wide, 2-layer BERT"), std::string::npos) << what;
    EXPECT_NE(what.find(" expected and 38 more"), std::string::npos) << what;
  }
}

TEST(BertModel, StrictLoadListsAFewOfManyMissingKeys) {
  BertModel source(tiny_config());
  StateDict dict;
  for (const auto& [name, t] : source.state_dict())
    if (name.starts_with("embeddings.")) dict.set(name, t);
  BertModel target(tiny_config());
  try {
    target.load_hf_state_dict(dict);
    FAIL() << "no error";
  } catch (const ValueError& e) {
    const std::string what = e.what();
    EXPECT_LT(what.size(), 300u) << what;
    EXPECT_NE(what.find("the state dict holds an 8-wide, 0-layer BERT (vocab 50, 12 positions), "
                        "this model is an 8-wide, 2-layer BERT"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("34 missing keys ('encoder.layer.0.attention.self.query.weight' and 33 "
                        "more)"),
              std::string::npos)
        << what;
  }
}

// --- config.json -----------------------------------------------------------------

// A file in the temporary directory, removed at the end of the test.
class TempFile {
 public:
  explicit TempFile(const std::string& text)
      : path_((std::filesystem::temp_directory_path() /
               ("kiln_bert_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
                "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".json"))
                  .string()) {
    std::ofstream(path_) << text;
  }
  ~TempFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(BertConfig, ReadsTransformersConfigJson) {
  TempFile file(R"({"architectures": ["BertForMaskedLM"], "attention_probs_dropout_prob": 0.05,
    "hidden_act": "gelu_new", "hidden_dropout_prob": 0.2, "hidden_size": 256,
    "initializer_range": 0.01, "intermediate_size": 1024, "layer_norm_eps": 1e-07,
    "max_position_embeddings": 128, "model_type": "bert", "num_attention_heads": 4,
    "num_hidden_layers": 3, "pad_token_id": 1, "position_embedding_type": "absolute",
    "type_vocab_size": 1, "vocab_size": 1000, "use_cache": true})");
  const BertConfig c = BertConfig::from_json_file(file.path());
  EXPECT_EQ(c.vocab_size, 1000);
  EXPECT_EQ(c.hidden_size, 256);
  EXPECT_EQ(c.num_hidden_layers, 3);
  EXPECT_EQ(c.num_attention_heads, 4);
  EXPECT_EQ(c.intermediate_size, 1024);
  EXPECT_EQ(c.max_position_embeddings, 128);
  EXPECT_EQ(c.type_vocab_size, 1);
  EXPECT_EQ(c.pad_token_id, 1);
  EXPECT_EQ(c.hidden_act, "gelu_new");
  EXPECT_DOUBLE_EQ(c.hidden_dropout_prob, 0.2);
  EXPECT_DOUBLE_EQ(c.attention_probs_dropout_prob, 0.05);
  EXPECT_DOUBLE_EQ(c.layer_norm_eps, 1e-7);
  EXPECT_DOUBLE_EQ(c.initializer_range, 0.01);
}

TEST(BertConfig, KeepsDefaultsForAbsentKeysAndReadsNullPadding) {
  TempFile file(R"({"hidden_size": 64, "num_attention_heads": 2, "pad_token_id": null})");
  const BertConfig c = BertConfig::from_json_file(file.path());
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.vocab_size, 30522);
  EXPECT_EQ(c.pad_token_id, -1);
  EXPECT_EQ(c.hidden_act, "gelu");
  BertConfig tiny = tiny_config();
  tiny.pad_token_id = -1;
  BertModel model(tiny);
  EXPECT_FALSE(model.embeddings.word_embeddings.padding_idx.has_value());
}

TEST(BertConfig, RejectsBadFilesAndValuesNamingFileAndKey) {
  testing::expect_error<IOError>([] { BertConfig::from_json_file("/nonexistent/config.json"); },
                                 "BertConfig.from_json_file", "/nonexistent/config.json");
  TempFile broken(R"({"hidden_size": )");
  testing::expect_error<ValueError>([&] { BertConfig::from_json_file(broken.path()); },
                                    broken.path(), "JSON");
  TempFile wrong_type(R"({"hidden_size": "768"})");
  testing::expect_error_with<ValueError>([&] { BertConfig::from_json_file(wrong_type.path()); },
                                         {wrong_type.path(), "hidden_size", "\"768\""});
  TempFile fractional(R"({"num_hidden_layers": 2.5})");
  testing::expect_error<ValueError>([&] { BertConfig::from_json_file(fractional.path()); },
                                    fractional.path(), "num_hidden_layers");
  TempFile indivisible(R"({"hidden_size": 100})");
  testing::expect_error_with<ValueError>([&] { BertConfig::from_json_file(indivisible.path()); },
                                         {indivisible.path(), "hidden_size 100", "12"});
  TempFile relative(R"({"position_embedding_type": "relative_key"})");
  testing::expect_error<ValueError>([&] { BertConfig::from_json_file(relative.path()); },
                                    relative.path(), "position_embedding_type");
  TempFile array(R"([1, 2])");
  testing::expect_error<ValueError>([&] { BertConfig::from_json_file(array.path()); }, array.path(),
                                    "object");
}

// --- BertConfig::from_state_dict ------------------------------------------------

TEST(BertConfig, ReadsTheSizesOfAPrefixedCheckpoint) {
  BertConfig want = tiny_config();
  want.vocab_size = 40;
  want.num_hidden_layers = 3;
  want.intermediate_size = 20;
  want.type_vocab_size = 3;
  BertModel source(want);
  BertConfig rest;
  rest.num_attention_heads = 4;
  rest.hidden_act = "relu";
  const BertConfig c = BertConfig::from_state_dict(pretraining_checkpoint(source), rest);
  EXPECT_EQ(c.vocab_size, 40);
  EXPECT_EQ(c.hidden_size, 8);
  EXPECT_EQ(c.num_hidden_layers, 3);
  EXPECT_EQ(c.intermediate_size, 20);
  EXPECT_EQ(c.max_position_embeddings, 12);
  EXPECT_EQ(c.type_vocab_size, 3);
  // What no tensor says comes from rest.
  EXPECT_EQ(c.num_attention_heads, 4);
  EXPECT_EQ(c.hidden_act, "relu");
  BertModel target(c);
  EXPECT_TRUE(target.load_hf_state_dict(pretraining_checkpoint(source)).missing_keys.empty());
}

TEST(BertConfig, FromStateDictSaysWhatItCannotRead) {
  BertConfig odd = tiny_config();
  odd.hidden_size = 10;
  testing::expect_error_with<ValueError>(
      [&] { BertConfig::from_state_dict(BertModel(odd).state_dict()); },
      {"BertConfig.from_state_dict", "hidden size 10 is not divisible by num_attention_heads 12",
       "config.json"});
  StateDict lstm;
  lstm.set("lstm.weight_ih_l0", zeros({8, 3}));
  lstm.set("lstm.weight_hh_l0", zeros({8, 2}));
  testing::expect_error_with<ValueError>([&] { BertConfig::from_state_dict(lstm); },
                                         {"'embeddings.word_embeddings.weight'", "absent",
                                          "a 1-layer LSTM (3 inputs, 2 hidden)", "not a BERT"});
}

TEST(BertModel, RejectsConfigsItCannotBuild) {
  BertConfig c = tiny_config();
  c.num_attention_heads = 3;
  testing::expect_error_with<ValueError>([&] { BertModel m(c); },
                                         {"BertModel", "hidden_size 8", "num_attention_heads 3"});
  c = tiny_config();
  c.hidden_act = "swishy";
  testing::expect_error<ValueError>([&] { BertModel m(c); }, "BertModel", "swishy");
  c = tiny_config();
  c.vocab_size = 0;
  testing::expect_error<ValueError>([&] { BertModel m(c); }, "BertModel", "vocab_size");
}

// --- errors ----------------------------------------------------------------------

TEST(BertModel, RejectsBadInputs) {
  BertModel model(tiny_config());
  const Tensor good = ids({1, 2, 3}, {1, 3});
  testing::expect_error<ShapeError>([&] { model(ids({1, 2, 3}, {3})); }, "BertModel", "[3]");
  testing::expect_error<DTypeError>([&] { model(good.to(kFloat32)); }, "BertModel", "input_ids");
  testing::expect_error<ShapeError>(
      [&] {
        model(zeros({2, 0}, {.dtype = kInt64}));
      },
      "BertModel", "[2, 0]");
  testing::expect_error_with<ValueError>(
      [&] {
        model(zeros({1, 13}, {.dtype = kInt64}));
      },
      {"BertModel", "13", "max_position_embeddings 12"});
  testing::expect_error<ShapeError>(
      [&] {
        model(good, ones({1, 4}));
      },
      "BertModel", "attention_mask");
  testing::expect_error<ShapeError>([&] { model(good, {}, zeros({3}, {.dtype = kInt64})); },
                                    "BertModel", "token_type_ids");
  testing::expect_error<DTypeError>(
      [&] {
        model(good, {}, zeros({1, 3}));
      },
      "BertModel", "token_type_ids");
  testing::expect_error<ShapeError>(
      [&] {
        model(good, {}, {}, zeros({2, 3}, {.dtype = kInt64}));
      },
      "BertModel", "position_ids");
}

TEST(BertModel, RejectsIdsOutsideTheirTables) {
  BertModel model(tiny_config());
  testing::expect_error_with<IndexError>(
      [&] {
        model(ids({1, 50, 3}, {1, 3}));
      },
      {"BertModel", "input_ids", "[0, 50)", "50"});
  testing::expect_error_with<IndexError>(
      [&] {
        model(ids({1, -1, 3}, {1, 3}));
      },
      {"BertModel", "input_ids", "-1"});
  testing::expect_error_with<IndexError>(
      [&] {
        model(ids({1, 2, 3}, {1, 3}), {}, ids({0, 2, 0}, {1, 3}));
      },
      {"BertModel", "token_type_ids", "[0, 2)"});
  testing::expect_error_with<IndexError>(
      [&] {
        model(ids({1, 2, 3}, {1, 3}), {}, {}, ids({0, 1, 12}, {3}));
      },
      {"BertModel", "position_ids", "12"});
}

}  // namespace
}  // namespace kiln::models
