"""Makes the PyTorch reference data of kiln's parity tests.

    python3 tests/parity/make_reference.py                  # small cases -> tests/data/parity
    python3 tests/parity/make_reference.py --full --out DIR # resnet50, bert_base, lstm -> DIR

Each case NAME is built with a fixed seed (reference_models.py) and saved as
its users save it:
  NAME.safetensors      safetensors.torch.save_file(model.state_dict(), ...)
  NAME/                 for BERT: save_pretrained(..., safe_serialization=True),
                        i.e. model.safetensors + config.json (Hugging Face's format)
  NAME.io.safetensors   input.<k>          the inputs
                        eval.<out>         outputs in eval mode
                        train.<out>, train.buffer.<name>
                                           ResNet: outputs of one training-mode forward
                                           and the running statistics after it
                        loss.weight.<out>, grad.<param>
                                           small cases: gradients of
                                           sum(out * loss.weight.out) over the outputs
                                           (ResNet in training mode, the others in eval mode)
With --device cuda (on the GPU machine) the models, built on the CPU with the
same seeds and weights, run on the GPU with TF32 off for matmuls and cuDNN, and
NAME.io.safetensors goes to OUT/cuda/ (the weights to OUT, as without it).

kiln's side: tests/models/parity_test.cpp (set KILN_PARITY_DIR=DIR for --full).
"""
import argparse
import os
import sys

import torch
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference_models as rm  # noqa: E402

SMALL = ["resnet_small", "resnet_basic_small", "bert_small", "lstm_small"]
FULL = ["resnet50", "bert_base", "lstm"]


def plain(tensors):
    return {k: v.detach().cpu().contiguous().clone() for k, v in tensors.items()}


def save_weights(model, name, out_dir):
    if name.startswith("bert"):
        model.save_pretrained(os.path.join(out_dir, name), safe_serialization=True)
    else:
        save_file(plain(model.state_dict()), os.path.join(out_dir, name + ".safetensors"))


def make_case(name, out_dir, with_grads, device):
    torch.manual_seed(0)
    model = rm.build(name)
    g = torch.Generator().manual_seed(1)
    x = rm.inputs(name, g)
    io = {f"input.{k}": v for k, v in x.items()}
    save_weights(model, name, out_dir)  # before any training-mode forward moves the statistics
    if device != "cpu":
        model.to(device)
        x = {k: v.to(device) for k, v in x.items()}
        out_dir = os.path.join(out_dir, device)
        os.makedirs(out_dir, exist_ok=True)

    model.eval()
    with torch.no_grad():
        io.update({f"eval.{k}": v for k, v in rm.outputs(model, name, x).items()})

    is_resnet = name.startswith("resnet")
    if is_resnet:
        model.train()
    elif name.startswith("lstm") and device != "cpu":
        model.train()  # cuDNN's LSTM backward needs it; without dropout the model is the same
    if with_grads:
        out = rm.outputs(model, name, x)
        loss = 0
        for k, v in out.items():
            w = torch.randn(v.shape, generator=g)
            io[f"loss.weight.{k}"] = w
            w = w.to(device)
            loss = loss + (v * w).sum()
        loss.backward()
        for pname, p in rm.encoder(model).named_parameters():
            io[f"grad.{pname}"] = p.grad
    elif is_resnet:
        with torch.no_grad():
            out = rm.outputs(model, name, x)
    if is_resnet:
        io.update({f"train.{k}": v for k, v in out.items()})
        for bname, b in model.named_buffers():
            io[f"train.buffer.{bname}"] = b
    save_file(plain(io), os.path.join(out_dir, name + ".io.safetensors"))
    print(f"{name}: {sum(p.numel() for p in model.parameters())} parameters, "
          f"{len(io)} reference tensors", flush=True)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--full", action="store_true", help="the full-size models instead of the small ones")
    ap.add_argument("--out", default=os.path.join(here, "..", "data", "parity"))
    ap.add_argument("--cases", nargs="*", help="only these cases")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                    help="where PyTorch runs the models (cuda: with TF32 off)")
    args = ap.parse_args()
    torch.set_num_threads(min(os.cpu_count() or 1, 16))
    if args.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    os.makedirs(args.out, exist_ok=True)
    for name in args.cases or (FULL if args.full else SMALL):
        make_case(name, args.out, with_grads=not args.full, device=args.device)


if __name__ == "__main__":
    main()
