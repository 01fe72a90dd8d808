"""kiln against PyTorch, side by side: forward latency of the reference models
on the CPU (same thread count) or a CUDA device, one run, alternating kiln and
PyTorch per configuration; eager, or compiled (kiln::compile against
torch.compile in the same mode).

    python3 bench/models/models_vs_torch.py --kiln-bin build-release/bench/kiln_bench_models \
        [--device cpu|cuda] [--threads N] [--iters 20] [--models resnet50 bert lstm lstm_loop] \
        [--batches 1 8] [--modes eager default reduce-overhead] [--out FILE.json]

Compiled modes also report each side's first call (compiling and the first
run; torch.compile's caches are left as they are) and the peak memory a call
needs beyond the weights and inputs (peak allocated during the run).

On CUDA both sides synchronize the device after each call and run fp32
without TF32 for matmul and with TF32 for convolutions (both frameworks'
defaults).

PyTorch side: torchvision resnet50, transformers BertModel(BertConfig()) (its
default attention), nn.LSTM(256, 512, 2, batch_first=True) + Linear, and the
same network as an LSTMCell loop; eval mode, torch.inference_mode(), random
weights; the median of --iters calls after 3 warm-up calls, as kiln's side.
Sequences: BERT and LSTM 128, the LSTMCell loop 32 (the defaults of kiln bench).
"""
import argparse
import json
import os
import subprocess
import sys
import time

import torch
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "parity"))
import reference_models as rm  # noqa: E402


class LSTMCellLoop(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1, self.c2 = nn.LSTMCell(256, 512), nn.LSTMCell(512, 512)
        self.head = nn.Linear(512, 10)

    def forward(self, x):
        b, t, _ = x.shape
        h1 = c1 = h2 = c2 = x.new_zeros(b, 512)
        for i in range(t):
            h1, c1 = self.c1(x[:, i], (h1, c1))
            h2, c2 = self.c2(h1, (h2, c2))
        return self.head(h2)


def torch_case(model, batch):
    torch.manual_seed(0)
    if model == "resnet50":
        import torchvision
        return torchvision.models.resnet50(weights=None), (torch.randn(batch, 3, 224, 224),)
    if model == "bert":
        from transformers import BertConfig, BertModel
        return BertModel(BertConfig()), (torch.randint(0, 30522, (batch, 128)),)
    if model == "lstm":
        return rm.LSTMNet(), (torch.randn(batch, 128, 256),)
    if model == "lstm_loop":
        return LSTMCellLoop(), (torch.randn(batch, 32, 256),)
    raise ValueError(model)


def time_torch(model, batch, iters, device, mode, warmup=3):
    net, args = torch_case(model, batch)
    net.eval()
    net.to(device)
    args = tuple(a.to(device) for a in args)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    if mode != "eager":
        torch._dynamo.reset()
        net = torch.compile(net, mode=mode)
    if device == "cuda":
        torch.cuda.synchronize()
        resident = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    with torch.inference_mode():
        t0 = time.perf_counter()
        net(*args)
        sync()
        first_ms = (time.perf_counter() - t0) * 1e3
        for _ in range(warmup):
            net(*args)
            sync()
        ms = []
        for _ in range(iters):
            t0 = time.perf_counter()
            net(*args)
            sync()
            ms.append((time.perf_counter() - t0) * 1e3)
    ms.sort()
    peak_extra_mb = (torch.cuda.max_memory_allocated() - resident) / 2**20 if device == "cuda" else None
    return {"framework": "pytorch", "model": model, "batch": batch, "threads": torch.get_num_threads(),
            "iters": iters, "mode": mode, "median_ms": ms[len(ms) // 2], "min_ms": ms[0],
            "p90_ms": ms[len(ms) * 9 // 10], "first_call_ms": first_ms, "peak_extra_mb": peak_extra_mb}


def time_kiln(binary, model, batch, threads, iters, device, mode):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    out = subprocess.run([binary, "--model", model, "--batch", str(batch), "--threads", str(threads),
                          "--iters", str(iters), "--device", device, "--mode", mode], env=env, check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln-bin", required=True)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--models", nargs="+", default=["resnet50", "bert", "lstm", "lstm_loop"])
    ap.add_argument("--batches", nargs="+", type=int, default=[1, 8])
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--modes", nargs="+", choices=["eager", "default", "reduce-overhead", "max-autotune"],
                    default=["eager"])
    ap.add_argument("--out", help="also write the rows as JSON here")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = True
    where = torch.cuda.get_device_name() if args.device == "cuda" else f"{os.cpu_count()} CPUs"
    print(f"PyTorch {torch.__version__}, {args.device} ({where}), {args.threads} threads, "
          f"median of {args.iters} calls", flush=True)
    print("| model | batch | mode | kiln ms | PyTorch ms | kiln / PyTorch | first call kiln / PyTorch s "
          "| peak extra MiB kiln / PyTorch |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |", flush=True)
    rows = []

    def mib(v):
        return "-" if v is None else f"{v:.1f}"

    for model in args.models:
        for batch in args.batches:
            for mode in args.modes:
                k = time_kiln(args.kiln_bin, model, batch, args.threads, args.iters, args.device, mode)
                t = time_torch(model, batch, args.iters, args.device, mode)
                ratio = k["median_ms"] / t["median_ms"]
                rows.append({"kiln": k, "pytorch": t, "ratio": ratio})
                print(f"| {model} | {batch} | {mode} | {k['median_ms']:.2f} | {t['median_ms']:.2f} | {ratio:.2f}x "
                      f"| {k['first_call_ms'] / 1e3:.3f} / {t['first_call_ms'] / 1e3:.2f} "
                      f"| {mib(k['peak_extra_mb'])} / {mib(t['peak_extra_mb'])} |", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"torch": torch.__version__, "device": args.device, "threads": args.threads, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
