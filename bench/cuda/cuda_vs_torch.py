"""kiln against PyTorch on a CUDA device, op-level figures side by side in one
run: host time per eager op on tiny tensors and per call of a compiled
function of tiny tensors (kiln::compile against torch.compile, both in
reduce-overhead mode), 4096^3 matmul in float32 (no
TF32) and bfloat16, an add of 64M floats, scaled_dot_product_attention at
BERT-base's shapes, batch_norm (eval) at ResNet-50's, and a residual block's
conv2d + bias + add + relu at ResNet-50's first stage (kiln compiled in
default mode, its ops apart and fused into one cuDNN call; PyTorch eager,
whose ops run apart, in both rows).

    python3 bench/cuda/cuda_vs_torch.py --kiln-bin build-release/bench/kiln_bench_cuda [--iters 20]

Both sides time device work with CUDA events around each call (median), and
host time per op as the wall time of 20000 queued adds of one element; the
compiled call also in bursts of 50 calls, each followed by an untimed
synchronize (the host's own cost, where the device keeps up).
"""
import argparse
import json
import subprocess
import time

import torch


def host_us(f, calls=20000, runs=5):
    """Median host microseconds per call of f over `runs` runs of `calls`
    queued calls, each run followed by an untimed synchronize (as kiln's side)."""
    for _ in range(1000):
        f()
    torch.cuda.synchronize()
    us = []
    for _ in range(runs):
        t0 = time.perf_counter()
        for _ in range(calls):
            f()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        us.append((t1 - t0) * 1e6 / calls)
    return sorted(us)[len(us) // 2]


def torch_figures(iters):
    dev = "cuda"
    torch.backends.cuda.matmul.allow_tf32 = False
    out = {}
    a = torch.ones(1, device=dev)
    b = torch.ones(1, device=dev)
    out["host_us_per_tiny_add"] = host_us(lambda: a + b)
    compiled = torch.compile(lambda x, y: (x + y) * 2.0, mode="reduce-overhead")
    with torch.inference_mode():
        out["host_us_per_compiled_call"] = host_us(lambda: compiled(a, b))
        out["host_us_per_compiled_call_in_bursts"] = host_us(lambda: compiled(a, b), 50, 200)
        # The same module as kiln's: 4 x (Linear 16 -> 16, BatchNorm1d), eval.
        layers = []
        for _ in range(4):
            layers += [torch.nn.Linear(16, 16), torch.nn.BatchNorm1d(16)]
        net = torch.nn.Sequential(*layers).to(dev).eval()
        module = torch.compile(net, mode="reduce-overhead")
        x = torch.ones(2, 16, device=dev)
        out["host_us_per_compiled_module_call_in_bursts"] = host_us(lambda: module(x), 50, 200)

    def device_ms(f):
        f()
        torch.cuda.synchronize()
        ms = []
        for _ in range(iters):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            f()
            e.record()
            e.synchronize()
            ms.append(s.elapsed_time(e))
        return sorted(ms)[len(ms) // 2]

    g = torch.Generator().manual_seed(0)
    for dtype, name in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
        x = torch.randn(4096, 4096, generator=g).to(dtype).to(dev)
        y = torch.randn(4096, 4096, generator=g).to(dtype).to(dev)
        out[f"matmul_4096_{name}"] = device_ms(lambda: x @ y)
    p = torch.ones(1 << 26, device=dev)
    q = torch.ones(1 << 26, device=dev)
    out["add_64M_fp32"] = device_ms(lambda: p + q)
    F = torch.nn.functional
    for batch in (1, 8, 32):
        qs = [torch.randn(batch, 12, 128, 64, generator=g).to(dev) for _ in range(3)]
        mask = torch.zeros(batch, 1, 1, 128, device=dev)
        out[f"sdpa_bert_b{batch}"] = device_ms(lambda: F.scaled_dot_product_attention(*qs, attn_mask=mask))
    for shape in ((32, 64, 112, 112), (32, 2048, 7, 7), (1, 2048, 7, 7)):
        x = torch.randn(*shape, generator=g).to(dev)
        ch = shape[1]
        stats = [torch.randn(ch, generator=g).to(dev), torch.rand(ch, generator=g).to(dev) + 0.5]
        wb = [torch.randn(ch, generator=g).to(dev) for _ in range(2)]
        name = "batch_norm_eval_" + "_".join(str(d) for d in shape)
        out[name] = device_ms(lambda: F.batch_norm(x, *stats, *wb, training=False))
    x, r = (torch.randn(1, 64, 56, 56, generator=g).to(dev) for _ in range(2))
    w, bias = torch.randn(64, 64, 3, 3, generator=g).to(dev), torch.randn(64, generator=g).to(dev)
    with torch.inference_mode():
        block = lambda: torch.relu_(F.conv2d(x, w, bias, padding=1).add_(r))
        for how in ("apart", "fused"):
            out[f"host_us_per_conv_add_relu_{how}_in_bursts"] = host_us(block, 50, 200)
            out[f"conv_add_relu_1_64_56_56_{how}"] = device_ms(block)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln-bin", required=True)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--out", help="also write the rows as JSON here")
    args = ap.parse_args()
    run = subprocess.run([args.kiln_bin, "--iters", str(args.iters)], check=True, capture_output=True, text=True)
    kiln = {}
    units = {}
    for line in run.stdout.splitlines():
        row = json.loads(line)
        kiln[row["name"]] = row["value"]
        units[row["name"]] = row["unit"]
    torch_rows = torch_figures(args.iters)
    print(f"PyTorch {torch.__version__}, {torch.cuda.get_device_name()}, median of {args.iters} calls")
    print("| figure | kiln | PyTorch | kiln / PyTorch |")
    print("| --- | --- | --- | --- |")
    rows = []
    for name, value in kiln.items():
        t = torch_rows[name]
        rows.append({"name": name, "unit": units[name], "kiln": value, "pytorch": t, "ratio": value / t})
        print(f"| {name} | {value:.4g} {units[name]} | {t:.4g} {units[name]} | {value / t:.2f}x |")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
