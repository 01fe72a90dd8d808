// What a state dict holds, in a reader's words, for messages about
// checkpoints: a file of another model or size says what it is instead of
// listing its keys.
//
//   kiln::models::describe_checkpoint(kiln::load_safetensors("model.safetensors"));
//   // "a 384-wide, 6-layer BERT (intermediate 1536, vocab 30522, 512 positions)"
//   // "a ResNet-50 (1000 classes)", "a 2-layer LSTM (256 inputs, 512 hidden, 10 classes)"
//   // "a 64-wide, 2-layer Llama (intermediate 176, vocab 256, keys and values 32 wide)"
//   // "3 tensors of no reference model ('a', 'b', 'c')"
#pragma once

#include <string>

#include "kiln/state_dict.h"

namespace kiln::models {

// A noun phrase naming the reference model (and its sizes) whose state dict
// dict is, with or without Hugging Face's "bert." or "model." prefix; for any
// other dict its tensor count and first keys.
std::string describe_checkpoint(const StateDict& dict);

}  // namespace kiln::models
