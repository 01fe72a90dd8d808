"""Makes the PyTorch reference data of kiln's Llama tests (tests/models/llama_test.cpp).

    python3 tests/parity/make_llama_reference.py            # -> tests/data/parity

A small random transformers.LlamaForCausalLM (vocab 256, hidden 64, 2 layers,
4 heads sharing 2 key/value heads, intermediate 176, rope_theta 10000) is
saved as its users save it, save_pretrained(..., safe_serialization=True):
  llama_small/            model.safetensors + config.json (Hugging Face's format)
  llama_small.io.safetensors
    prompt.ids [1, 8]                     forward.logits [1, 8, 256]: one forward, no cache
    greedy.sequences [1, 8 + 16]          model.generate(do_sample=False), no EOS
    greedy.logits [16, 1, 256]            the logits each generation step chose from
    left.ids, left.mask [4, 8]            four prompts of 8, 5, 3 and 6 tokens, padded on the left
    left.forward.logits [4, 8, 256]       one forward of them with the mask
    left.sequences [4, 8 + 12], left.logits [12, 4, 256]: their greedy generation
    left_eos.sequences [4, <= 8 + 12]     the same with left_eos.eos as EOS (a token one row
                                          emits early) and pad id 0 after it
    right.ids, right.mask [4, 8]          the same prompts padded on the right
    right.forward.logits [4, 8, 256]      one forward of them with the mask

The weights are drawn with a larger scale than transformers' initialization
(std 0.02 gives logits too flat for greedy decoding to mean anything): linear
weights N(0, 1 / in_features), embeddings N(0, 1), RMSNorm weights U(0.5, 1.5).
Every greedy step's best logit leads the second by more than MIN_MARGIN, so that
float32 rounding cannot change which token kiln picks.
"""
import argparse
import os

import torch
from safetensors.torch import save_file
from transformers import LlamaConfig, LlamaForCausalLM

MIN_MARGIN = 1e-3
PROMPT_LENGTHS = [8, 5, 3, 6]


def draw_weights(model):
    """Linear weights N(0, 1 / in_features), embeddings N(0, 1), RMSNorm weights U(0.5, 1.5)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("layernorm.weight") or name == "model.norm.weight":
                p.uniform_(0.5, 1.5)
            elif "embed_tokens" in name:
                p.normal_(0, 1)
            else:
                p.normal_(0, p.shape[1] ** -0.5)


def build():
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=176,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=128, rms_norm_eps=1e-6, rope_theta=10000.0,
                         tie_word_embeddings=False, attn_implementation="eager")
    model = LlamaForCausalLM(config)
    draw_weights(model)
    model.eval()
    # No EOS unless a case asks for one: random weights emit token 2 as any other.
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model


def greedy(model, ids, mask, steps, eos=None):
    out = model.generate(ids, attention_mask=mask, max_new_tokens=steps, do_sample=False,
                         eos_token_id=eos, pad_token_id=0, return_dict_in_generate=True,
                         output_logits=True)
    logits = torch.stack(out.logits)  # [steps, B, V]
    top2 = logits.topk(2, dim=-1).values
    margin = (top2[..., 0] - top2[..., 1]).min().item()
    assert margin > MIN_MARGIN, f"a greedy step is nearly tied (margin {margin})"
    return out.sequences, logits


def padded(prompts, left):
    n = max(len(p) for p in prompts)
    ids = torch.zeros(len(prompts), n, dtype=torch.int64)
    mask = torch.zeros(len(prompts), n, dtype=torch.int64)
    for row, p in enumerate(prompts):
        span = slice(n - len(p), n) if left else slice(0, len(p))
        ids[row, span] = torch.tensor(p)
        mask[row, span] = 1
    return ids, mask


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(here, "..", "data", "parity"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    model = build()
    model.save_pretrained(os.path.join(args.out, "llama_small"), safe_serialization=True)

    g = torch.Generator().manual_seed(1)
    io = {}
    with torch.no_grad():
        prompt = torch.randint(3, 256, (1, 8), generator=g)
        io["prompt.ids"] = prompt
        io["forward.logits"] = model(prompt).logits
        io["greedy.sequences"], io["greedy.logits"] = greedy(model, prompt, None, 16)

        prompts = [torch.randint(3, 256, (n,), generator=g).tolist() for n in PROMPT_LENGTHS]
        ids, mask = padded(prompts, left=True)
        io["left.ids"], io["left.mask"] = ids, mask
        io["left.forward.logits"] = model(ids, attention_mask=mask).logits
        io["left.sequences"], io["left.logits"] = greedy(model, ids, mask, 12)
        # EOS: the token row 1 emits at its fourth step, unless an earlier step
        # of any row emits it too; that row stops there and is padded with 0.
        new = io["left.sequences"][:, ids.shape[1]:]
        eos = next(t for t in new[1, 3:].tolist() if t not in new[:, :3].flatten().tolist())
        io["left_eos.eos"] = torch.tensor([eos])
        io["left_eos.sequences"], _ = greedy(model, ids, mask, 12, eos=eos)

        ids, mask = padded(prompts, left=False)
        io["right.ids"], io["right.mask"] = ids, mask
        io["right.forward.logits"] = model(ids, attention_mask=mask).logits

    io = {k: v.detach().contiguous().clone() for k, v in io.items()}
    save_file(io, os.path.join(args.out, "llama_small.io.safetensors"))
    print(f"llama_small: {sum(p.numel() for p in model.parameters())} parameters, "
          f"{len(io)} reference tensors, EOS case token {eos}")


if __name__ == "__main__":
    main()
