// describe_checkpoint: recognizes the reference models' state dicts by their
// names (torchvision's, Hugging Face's, nn.LSTM's) and reads their sizes off
// the tensors' shapes.
#include "kiln/models/checkpoint.h"

#include <array>
#include <optional>
#include <string_view>

#include "core/state_dict_diff.h"
#include "hf_checkpoint.h"
#include "kiln/error.h"
#include "kiln/models/bert.h"

namespace kiln::models {
namespace {

using detail::str_cat;

// "a" or "an" before a number as it is spoken: an 8-, 11-, 18- or 800-wide.
std::string_view article(int64_t n) {
  while (n >= 1000) n /= 1000;
  const bool vowel = n == 8 || n == 11 || n == 18 || (n >= 80 && n < 90) || (n >= 800 && n < 900);
  return vowel ? "an" : "a";
}

const Tensor* find_2d(const StateDict& dict, std::string_view name) {
  const Tensor* t = dict.find(name);
  return t && t->dim() >= 2 ? t : nullptr;
}

// How many of prefix0..., prefix1..., ... exist, counting up from 0.
int64_t count_numbered(const StateDict& dict, std::string_view prefix, std::string_view suffix) {
  int64_t n = 0;
  while (dict.contains(str_cat(prefix, n, suffix))) ++n;
  return n;
}

std::optional<std::string> describe_bert(const StateDict& dict) {
  if (!find_2d(dict, "embeddings.word_embeddings.weight") &&
      !find_2d(dict, "bert.embeddings.word_embeddings.weight")) {
    return std::nullopt;
  }
  try {
    // The heads are not in the tensors; one head divides every hidden size.
    const BertConfig c = BertConfig::from_state_dict(dict, {.num_attention_heads = 1});
    const std::string intermediate =
        c.num_hidden_layers > 0 ? str_cat("intermediate ", c.intermediate_size, ", ") : "";
    return str_cat(article(c.hidden_size), " ", c.hidden_size, "-wide, ", c.num_hidden_layers,
                   "-layer BERT (", intermediate, "vocab ", c.vocab_size, ", ",
                   c.max_position_embeddings, " positions)");
  } catch (const ValueError&) {
    return "an incomplete BERT";
  }
}

std::optional<std::string> describe_llama(const StateDict& dict) {
  const std::string prefix = dict.contains("model.embed_tokens.weight") ? "model." : "";
  const Tensor* embed = find_2d(dict, prefix + "embed_tokens.weight");
  if (!embed || !dict.contains(prefix + "norm.weight")) return std::nullopt;
  const std::string layer0 = prefix + "layers.0.";
  const int64_t layers = count_numbered(dict, prefix + "layers.", ".input_layernorm.weight");
  const int64_t hidden = embed->size(1);
  std::string details;
  if (const Tensor* up = find_2d(dict, layer0 + "mlp.up_proj.weight"))
    details += str_cat("intermediate ", up->size(0), ", ");
  details += str_cat("vocab ", embed->size(0));
  // Grouped-query attention shows as narrower keys and values.
  if (const Tensor* k = find_2d(dict, layer0 + "self_attn.k_proj.weight");
      k && k->size(0) != hidden)
    details += str_cat(", keys and values ", k->size(0), " wide");
  return str_cat(article(hidden), " ", hidden, "-wide, ", layers, "-layer Llama (", details, ")");
}

std::optional<std::string> describe_resnet(const StateDict& dict) {
  const Tensor* stem = find_2d(dict, "conv1.weight");
  const Tensor* fc = find_2d(dict, "fc.weight");
  if (!stem || !fc || !dict.contains("layer1.0.conv1.weight")) return std::nullopt;
  const bool bottleneck = dict.contains("layer1.0.conv3.weight");
  std::array<int64_t, 4> blocks{}, widths{};
  for (int s = 0; s < 4; ++s) {
    const std::string stage = str_cat("layer", s + 1, ".");
    blocks[s] = count_numbered(dict, stage, ".conv1.weight");
    const Tensor* first = find_2d(dict, stage + (bottleneck ? "0.conv3.weight" : "0.conv1.weight"));
    widths[s] = first ? first->size(0) / (bottleneck ? 4 : 1) : 0;
  }
  struct Known {
    std::array<int64_t, 4> blocks;
    bool bottleneck;
    int depth;
  };
  constexpr Known kKnown[] = {{{2, 2, 2, 2}, false, 18},
                              {{3, 4, 6, 3}, false, 34},
                              {{3, 4, 6, 3}, true, 50},
                              {{3, 4, 23, 3}, true, 101},
                              {{3, 8, 36, 3}, true, 152}};
  std::string name = str_cat("a ResNet with ", bottleneck ? "bottleneck" : "basic", " blocks ",
                             std::vector<int64_t>(blocks.begin(), blocks.end()));
  for (const Known& k : kKnown)
    if (k.blocks == blocks && k.bottleneck == bottleneck) name = str_cat("a ResNet-", k.depth);
  std::string details = str_cat(fc->size(0), " classes");
  if (widths != std::array<int64_t, 4>{64, 128, 256, 512}) {
    details += str_cat(", widths ", std::vector<int64_t>(widths.begin(), widths.end()));
  }
  return str_cat(name, " (", details, ")");
}

std::optional<std::string> describe_lstm(const StateDict& dict) {
  const Tensor* first = find_2d(dict, "lstm.weight_ih_l0");
  const Tensor* hh = find_2d(dict, "lstm.weight_hh_l0");
  if (!first || !hh) return std::nullopt;
  const int64_t layers = count_numbered(dict, "lstm.weight_ih_l", "");
  std::string out = str_cat(article(layers), " ", layers, "-layer LSTM (", first->size(1),
                            " inputs, ", hh->size(1), " hidden");
  if (const Tensor* head = find_2d(dict, "head.weight"))
    out += str_cat(", ", head->size(0), " classes");
  return out + ")";
}

}  // namespace

std::string describe_checkpoint(const StateDict& dict) {
  for (auto describe : {describe_bert, describe_llama, describe_resnet, describe_lstm}) {
    if (std::optional<std::string> d = describe(dict)) return *d;
  }
  if (dict.empty()) return "no tensors";
  const std::vector<std::string> keys = dict.keys();
  return str_cat(keys.size(), keys.size() == 1 ? " tensor" : " tensors", " of no reference model (",
                 summarize_keys(keys), ")");
}

nn::LoadResult load_hf_checkpoint(nn::Module& model, const StateDict& dict, const StateDict& own,
                                  std::string_view who, bool strict,
                                  const CheckpointKeyName& name_of) {
  StateDict mapped;
  nn::LoadResult result;
  for (const auto& [key, tensor] : dict) {
    std::optional<std::string> name = name_of(key, own);
    if (!name) continue;
    if (own.contains(*name) && !mapped.contains(*name))
      mapped.set(std::move(*name), tensor);
    else
      result.unexpected_keys.push_back(key);
  }
  StateDictDiff diff = diff_state_dicts(mapped, own);
  result.missing_keys = diff.missing_keys;
  if (!strict) diff.missing_keys.clear();
  if (!diff.empty()) {
    const std::string holds = describe_checkpoint(dict), is = describe_checkpoint(own);
    throw ValueError(str_cat(
        who, ": ",
        holds == is ? "" : str_cat("the state dict holds ", holds, ", this model is ", is, ": "),
        diff.summary("the dict", holds == is ? 3 : 1)));
  }
  model.load_state_dict(mapped, /*strict=*/false);
  return result;
}

}  // namespace kiln::models
