// Loading Hugging Face state dicts into the reference models (BertModel,
// Llama): each model says how a key maps to its own names; the checks and the
// one-line error are shared.
//
//   return load_hf_checkpoint(*this, dict, state_dict(), "BertModel.load_hf_state_dict", strict,
//                             [](const std::string& key, const StateDict&) { return key; });
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "kiln/nn/module.h"
#include "kiln/state_dict.h"

namespace kiln::models {

// The name a dict's key has in the model (own: the model's state dict), or
// nullopt for a key to skip without a word (a buffer old checkpoints saved).
using CheckpointKeyName =
    std::function<std::optional<std::string>(const std::string& key, const StateDict& own)>;

// Copies dict's tensors into model under the names name_of gives. A key whose
// name own lacks (or repeats) is returned in unexpected_keys. Missing keys
// (when strict) and tensors of another shape (always) are a ValueError that
// starts with who and names what the dict holds and what the model is, when
// they differ, then a few of the keys: a checkpoint of another size gives a
// line, not every key. Nothing is copied then.
nn::LoadResult load_hf_checkpoint(nn::Module& model, const StateDict& dict, const StateDict& own,
                                  std::string_view who, bool strict,
                                  const CheckpointKeyName& name_of);

}  // namespace kiln::models
