"""Makes the PyTorch reference data of kiln's Llama 3 rope-scaling test
(tests/models/llama_test.cpp, LlamaParity.Llama3RopeScalingMatchesTransformers).

    python3 tests/parity/make_llama3_rope_reference.py      # -> tests/data/parity

A small random transformers.LlamaForCausalLM (vocab 256, hidden 64, 1 layer, 4
heads sharing 2 key/value heads, head_dim 16, rope_theta 10000) whose rotary
embedding is Llama 3's (rope_type "llama3": factor 8, low_freq_factor 1,
high_freq_factor 4, original_max_position_embeddings 64), so that its eight
frequencies fall in all three bands (wavelengths from 6 to 19869 against the
bands' bounds 16 and 64). Saved with save_pretrained:
  llama_rope_llama3/             model.safetensors + config.json
  llama_rope_llama3.io.safetensors
    prompt.ids [1, 48]           forward.logits [1, 48, 256]
It prints the rotary embedding's scaled inverse frequencies.
"""
import argparse
import os

import torch
from safetensors.torch import save_file
from transformers import LlamaConfig, LlamaForCausalLM

from make_llama_reference import draw_weights  # the same scales as llama_small's


def build():
    torch.manual_seed(3)
    config = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=176,
                         num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=512, rms_norm_eps=1e-6,
                         rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0,
                                          "factor": 8.0, "low_freq_factor": 1.0,
                                          "high_freq_factor": 4.0,
                                          "original_max_position_embeddings": 64},
                         tie_word_embeddings=False, attn_implementation="eager")
    model = LlamaForCausalLM(config)
    draw_weights(model)
    model.eval()
    return model


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(here, "..", "data", "parity"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    model = build()
    model.save_pretrained(os.path.join(args.out, "llama_rope_llama3"), safe_serialization=True)
    g = torch.Generator().manual_seed(4)
    io = {}
    with torch.no_grad():
        prompt = torch.randint(3, 256, (1, 48), generator=g)
        io["prompt.ids"] = prompt
        io["forward.logits"] = model(prompt).logits
    io = {k: v.detach().contiguous().clone() for k, v in io.items()}
    save_file(io, os.path.join(args.out, "llama_rope_llama3.io.safetensors"))
    print("inv_freq", model.model.rotary_emb.inv_freq.tolist())


if __name__ == "__main__":
    main()
