"""Loads the safetensors files kiln wrote into the PyTorch reference models and
checks that PyTorch computes what kiln computed with them.

    python3 tests/parity/check_kiln_files.py DIR

DIR holds, per case NAME (as in reference_models.py), NAME.safetensors (kiln's
model.state_dict(); for BERT the BertModel's) and NAME.io.safetensors with
input.<k> and kiln.<out> (kiln's eval-mode outputs). Run by
tests/models/torch_loads_kiln_test.cpp; exits 77 when PyTorch is missing, 1 on
a mismatch or a file PyTorch refuses.
"""
import glob
import os
import sys

try:
    import torch
    from safetensors.torch import load_file
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import reference_models as rm
except ImportError as e:
    print(f"check_kiln_files: PyTorch is not installed here ({e})")
    sys.exit(77)


def check(directory):
    failures = 0
    cases = sorted(glob.glob(os.path.join(directory, "*.io.safetensors")))
    if not cases:
        print(f"check_kiln_files: no *.io.safetensors in {directory}")
        return 1
    for io_path in cases:
        name = os.path.basename(io_path)[: -len(".io.safetensors")]
        model = rm.build(name)
        # strict: every key kiln wrote is one PyTorch expects, and none is missing
        rm.encoder(model).load_state_dict(load_file(os.path.join(directory, name + ".safetensors")), strict=True)
        model.eval()
        io = load_file(io_path)
        x = {k[len("input."):]: v for k, v in io.items() if k.startswith("input.")}
        with torch.no_grad():
            outs = rm.outputs(model, name, x)
        for k, v in outs.items():
            want = io["kiln." + k]
            err, scale = (v - want).abs().max().item(), want.abs().max().item()
            ok = err <= 1e-4 * scale
            failures += not ok
            print(f"{name}.{k}: max error {err:.3g}, scale {scale:.3g}: {'ok' if ok else 'MISMATCH'}")
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__)
        sys.exit(2)
    sys.exit(check(sys.argv[1]))
