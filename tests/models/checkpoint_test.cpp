// describe_checkpoint: a state dict of a reference model says which model and
// sizes it holds, whatever its size, in one short phrase.
#include "kiln/models/checkpoint.h"

#include <gtest/gtest.h>

#include "kiln/models.h"
#include "kiln/ops/factory.h"

namespace kiln::models {
namespace {

TEST(DescribeCheckpoint, NamesTorchvisionResNetsByDepthAndClasses) {
  EXPECT_EQ(describe_checkpoint(resnet18()->state_dict()), "a ResNet-18 (1000 classes)");
  EXPECT_EQ(describe_checkpoint(resnet50()->state_dict()), "a ResNet-50 (1000 classes)");
  EXPECT_EQ(
      describe_checkpoint(resnet18({.num_classes = 10, .widths = {8, 8, 8, 8}})->state_dict()),
      "a ResNet-18 (10 classes, widths [8, 8, 8, 8])");
}

TEST(DescribeCheckpoint, ReadsBertSizesWithOrWithoutThePrefix) {
  BertConfig c;
  c.vocab_size = 50;
  c.hidden_size = 8;
  c.num_hidden_layers = 3;
  c.num_attention_heads = 2;
  c.intermediate_size = 20;
  c.max_position_embeddings = 16;
  BertModel bert(c);
  const std::string want = "an 8-wide, 3-layer BERT (intermediate 20, vocab 50, 16 positions)";
  EXPECT_EQ(describe_checkpoint(bert.state_dict()), want);
  StateDict prefixed;
  for (const auto& [name, t] : bert.state_dict()) prefixed.set("bert." + name, t);
  EXPECT_EQ(describe_checkpoint(prefixed), want);
}

TEST(DescribeCheckpoint, ReadsTheLstmModelsSizes) {
  EXPECT_EQ(describe_checkpoint(LSTMNet().state_dict()),
            "a 2-layer LSTM (256 inputs, 512 hidden, 10 classes)");
  EXPECT_EQ(describe_checkpoint(LSTMCellLoop().state_dict()),
            "a 2-layer LSTM (256 inputs, 512 hidden, 10 classes)");
}

TEST(DescribeCheckpoint, ListsAFewKeysOfAnyOtherDict) {
  StateDict dict;
  for (const char* name : {"w", "x", "y", "z", "v"}) dict.set(name, zeros({1}));
  EXPECT_EQ(describe_checkpoint(dict),
            "5 tensors of no reference model ('w', 'x', 'y' and 2 more)");
  EXPECT_EQ(describe_checkpoint(StateDict()), "no tensors");
}

}  // namespace
}  // namespace kiln::models
