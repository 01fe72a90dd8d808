"""The PyTorch side of `kiln bench --vs-torch`: one model, on kiln's weights and
inputs, eagerly and through torch.compile in each mode asked for.

    python3 bench/torch/bench_torch.py JOB.json OUT.json

JOB.json (written by kiln):

    {"model": "resnet50|resnet18|bert|lstm|lstm_loop", "batch": 1, "seq_len": 128,
     "dtype": "fp32|bf16|fp16", "device": "cpu|cuda", "iters": 50, "warmup": 5, "threads": 2,
     "modes": ["eager", "default", "reduce-overhead", "max-autotune"],
     "weights": "W.safetensors", "inputs": "I.safetensors", "outputs_dir": "DIR",
     "first_call_timeout_s": 300, "freeze": false, "model_options": {}}

- weights: kiln's model.state_dict() under PyTorch's names (torchvision ResNet,
  transformers BertModel without "bert.", tests/parity/reference_models.LSTMNet;
  lstm_loop uses LSTMNet's names too). Loaded strictly: a missing or unexpected
  key fails the job, bar the harmless buffers named in HARMLESS_MISSING.
- inputs: input0, input1, ...: the forward's tensor arguments in order (BERT:
  int64 token ids, then optionally attention_mask, token_type_ids). They fix
  the shapes: seq_len is not read; input0's dim 0 must equal batch.
- device: cpu, cuda or cuda:N; modes run in the order given.
- freeze (optional, default false): torch.compile's modes freeze the weights
  (torch._inductor.config.freezing, as Inductor's published CPU figures
  do), as kiln's compiled modes do under `kiln bench --freeze on`.
- first_call_timeout_s (optional, 0 or absent: none): a mode whose first call
  (torch.compile's compiling, max-autotune's search) is not done by then is
  stopped and reported as failed with a note saying so; the next mode runs.
- The models are built with kiln's default options (include/kiln/models/*.h):
  torchvision resnet50/resnet18(weights=None); BertModel(BertConfig()) with its
  default attention; LSTMNet(); lstm_loop: the same network as a Python loop
  over nn.LSTMCells (bench/models/models_vs_torch.py's LSTMCellLoop).
- model_options (optional): what the model is beyond its name. BERT:
  {"config": {BertConfig's fields}, "add_pooling_layer": bool}, the config of
  the checkpoint kiln loaded (a BertModel without the pooling layer outputs
  last_hidden_state alone).

What is measured, per mode ("eager": the module itself; any other:
torch.compile(model, mode=MODE) after torch._dynamo.reset()), in eval mode
under torch.inference_mode(), with TF32 off for matmuls and on for
convolutions (kiln's defaults) and torch.set_num_threads(threads):
- first_call_ms.total: the first call, wall clock, device synchronized
  (compiling included; torch.compile's on-disk caches are left as they are);
- then `warmup` untimed calls and `iters` timed ones: CUDA events around each
  whole call on a GPU, time.perf_counter on the CPU; latency_ms summarizes all
  of them (percentile() says how);
- peak_bytes (CUDA only): torch.cuda.max_memory_allocated() over the mode's
  calls minus what was allocated before its first call (weights and inputs).
The last timed call's outputs go to outputs_dir/MODE.safetensors (output0,
output1, ...; BERT: last_hidden_state, pooler_output); kiln computes the
errors from them. A mode that raises gets a result with a note naming the
exception, 0 samples (latency and throughput 0) and null figures otherwise,
and the next mode runs.

OUT.json: {"torch": VERSION, "device_name": NAME, "results": [Result, ...]},
each Result as in docs/bench.md with framework "pytorch"; figures this side
does not measure (errors, speed-ups, graphs, launches) are null. Written
through a temporary file renamed into place.

Exit status: 0 when OUT.json was written (even if some modes failed), 2 for a
bad job (unreadable JSON, unknown model, missing file, weights that do not fit
the model), 1 when PyTorch or a model library is missing. Progress goes to
stderr; nothing is printed on stdout.
"""
import gc
import json
import math
import os
import re
import sys
import time

SCRIPT_DIR = os.path.dirname(os.path.abspath(__file__))
MODELS = ("resnet50", "resnet18", "bert", "lstm", "lstm_loop")
MODES = ("eager", "default", "reduce-overhead", "max-autotune")
DTYPES = ("fp32", "bf16", "fp16")
# Keys the weights file may lack although PyTorch's module has them, because
# they do not change an eval-mode forward: BatchNorm's batch counter (read only
# in training with momentum=None) and the position/token-type id buffers that
# some transformers versions keep in the state dict (their defaults are
# 0..max-1 and zeros, which kiln assumes too). Everything else is strict.
HARMLESS_MISSING = re.compile(r"(.*\.)?num_batches_tracked|embeddings\.(position_ids|token_type_ids)")


class JobError(Exception):
    """A job kiln should not have sent: reported on one line, exit status 2."""


def log(message):
    print(message, file=sys.stderr, flush=True)


# --- the job ---------------------------------------------------------------


def read_job(path):
    """The job as a dict, checked: JobError naming the file and field otherwise."""
    try:
        with open(path) as f:
            job = json.load(f)
    except OSError as e:
        raise JobError(f"cannot read the job {path}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise JobError(f"{path} is not JSON: {e}") from None
    if not isinstance(job, dict):
        raise JobError(f"{path}: expected a JSON object, got {type(job).__name__}")

    def field(name, kind, check=lambda v: True, why=""):
        if name not in job:
            raise JobError(f"{path}: missing field \"{name}\"")
        value = job[name]
        if not isinstance(value, kind) or isinstance(value, bool) or not check(value):
            raise JobError(f"{path}: field \"{name}\" {why or 'has the wrong type'}, got {value!r}")
        return value

    field("model", str, lambda v: v in MODELS, f"must be one of {', '.join(MODELS)}")
    field("dtype", str, lambda v: v in DTYPES, f"must be one of {', '.join(DTYPES)}")
    field("device", str, lambda v: re.fullmatch(r"cpu|cuda(:\d+)?", v), "must be cpu or cuda")
    field("modes", list, lambda v: v and all(m in MODES for m in v) and len(set(v)) == len(v),
          f"must list distinct modes from {', '.join(MODES)}")
    field("batch", int, lambda v: v >= 1, "must be a positive integer")
    field("iters", int, lambda v: v >= 1, "must be a positive integer")
    field("warmup", int, lambda v: v >= 0, "must be a non-negative integer")
    field("threads", int, lambda v: v >= 1, "must be a positive integer")
    for name in ("weights", "inputs"):
        if not os.path.isfile(field(name, str)):
            raise JobError(f"{path}: {name} file {job[name]} does not exist")
    field("outputs_dir", str, lambda v: v != "", "must be a directory path")
    job.setdefault("first_call_timeout_s", 0)
    field("first_call_timeout_s", (int, float), lambda v: v >= 0, "must be a non-negative number")
    if not isinstance(job.setdefault("freeze", False), bool):
        raise JobError(f"{path}: field \"freeze\" must be true or false, got {job['freeze']!r}")
    job.setdefault("model_options", {})
    field("model_options", dict, why="must be an object")
    return job


class FirstCallTimeout(BaseException):
    """Raised by SIGALRM in the first call of a mode. A BaseException, so that
    no `except Exception` inside torch.compile takes it for a compile error
    and falls back to eager."""


def call_with_timeout(fn, seconds):
    """fn(), stopped by FirstCallTimeout after `seconds` (0: no limit)."""
    import signal
    if not seconds:
        return fn()

    def expire(signum, frame):
        raise FirstCallTimeout(f"the first call was not done after {seconds:g} s (--torch-timeout); stopped")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return fn()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# --- the models ------------------------------------------------------------


def lstm_cell_loop_class():
    import torch.nn as nn

    class LSTMCellLoop(nn.Module):
        """LSTMNet as a Python loop over time and layers of nn.LSTMCells, as
        kiln's LSTMCellLoop (include/kiln/models/lstm.h): every state starts at
        zero; the head reads the top layer's last hidden state."""

        def __init__(self, input_size=256, hidden_size=512, num_layers=2, num_classes=10):
            super().__init__()
            self.hidden_size = hidden_size
            self.cells = nn.ModuleList(
                nn.LSTMCell(input_size if k == 0 else hidden_size, hidden_size) for k in range(num_layers))
            self.head = nn.Linear(hidden_size, num_classes)

        def forward(self, x):
            b, t, _ = x.shape
            h = [x.new_zeros(b, self.hidden_size) for _ in self.cells]
            c = [x.new_zeros(b, self.hidden_size) for _ in self.cells]
            for i in range(t):
                step = x[:, i]
                for k, cell in enumerate(self.cells):
                    h[k], c[k] = cell(step, (h[k], c[k]))
                    step = h[k]
            return self.head(step)

    return LSTMCellLoop


# nn.LSTM's names (kiln's file) <-> the loop's cells, both ways for messages.
def lstm_name_to_cell(key):
    return re.sub(r"^lstm\.(weight|bias)_(ih|hh)_l(\d+)$", r"cells.\3.\1_\2", key)


def cell_name_to_lstm(key):
    return re.sub(r"^cells\.(\d+)\.(weight|bias)_(ih|hh)$", r"lstm.\2_\3_l\1", key)


def build_model(name, options):
    """The PyTorch module for a job's model, with kiln's default options
    unless the job's model_options say otherwise."""
    if name in ("resnet50", "resnet18"):
        import torchvision
        return getattr(torchvision.models, name)(weights=None)
    if name == "bert":
        from transformers import BertConfig, BertModel
        try:
            config = BertConfig(**options.get("config", {}))
        except (TypeError, ValueError) as e:
            raise JobError(f"model_options.config is no BertConfig: {one_line(e)}") from None
        return BertModel(config, add_pooling_layer=options.get("add_pooling_layer", True))
    if name == "lstm":
        sys.path.insert(0, os.path.join(SCRIPT_DIR, "..", "..", "tests", "parity"))
        import reference_models
        return reference_models.LSTMNet()
    return lstm_cell_loop_class()()


def read_safetensors(path):
    from safetensors.torch import load_file
    try:
        return load_file(path)
    except Exception as e:  # noqa: BLE001 - safetensors' errors have no common base
        raise JobError(f"cannot read {path} as safetensors: {one_line(e)}") from None


def load_weights(model, model_name, path):
    """Loads kiln's state dict into model; JobError listing the keys that do
    not match or the shapes that differ (in the file's names)."""
    to_model, to_file = (lstm_name_to_cell, cell_name_to_lstm) if model_name == "lstm_loop" else (str, str)
    given = {to_model(k): v for k, v in read_safetensors(path).items()}
    expected = model.state_dict()
    missing = [to_file(k) for k in expected if k not in given and not HARMLESS_MISSING.fullmatch(k)]
    unexpected = [to_file(k) for k in given if k not in expected]
    if missing or unexpected:
        raise JobError(f"{path} does not fit PyTorch's {model_name}: missing keys {key_list(missing)}, "
                       f"unexpected keys {key_list(unexpected)}")
    wrong = [f"{to_file(k)} {list(v.shape)} (PyTorch: {list(expected[k].shape)})"
             for k, v in given.items() if v.shape != expected[k].shape]
    if wrong:
        raise JobError(f"{path} does not fit PyTorch's {model_name}: shapes differ for {key_list(wrong)}")
    model.load_state_dict(given, strict=False)  # strict above, bar HARMLESS_MISSING


def key_list(keys, most=20):
    shown = ", ".join(keys[:most])
    return f"[{shown}{f', ... ({len(keys) - most} more)' if len(keys) > most else ''}]"


def load_inputs(path, batch):
    """input0, input1, ... in order; JobError for a gap or a batch mismatch."""
    tensors = read_safetensors(path)
    names = [f"input{i}" for i in range(len(tensors))]
    if not tensors or sorted(tensors) != sorted(names):
        raise JobError(f"{path}: expected keys input0..input{len(tensors) - 1}, got {', '.join(sorted(tensors))}")
    inputs = [tensors[n] for n in names]
    if inputs[0].dim() == 0 or inputs[0].shape[0] != batch:
        raise JobError(f"{path}: input0 has shape {list(inputs[0].shape)}, expected batch {batch} in dim 0")
    return inputs


def flatten_outputs(out):
    """A forward's tensors in kiln's order (BERT: last_hidden_state, pooler_output)."""
    import torch
    if isinstance(out, torch.Tensor):
        return [out]
    if hasattr(out, "last_hidden_state"):
        return [out.last_hidden_state] + ([out.pooler_output] if out.pooler_output is not None else [])
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in flatten_outputs(o)]
    raise TypeError(f"cannot flatten a forward's output of type {type(out).__name__}")


# --- measuring -------------------------------------------------------------


def percentile(sorted_samples, p):
    """The p-th percentile (0..100) of ascending samples by linear interpolation
    between closest ranks (numpy's default "linear" method, as kiln's C++): at
    rank r = p/100 * (n-1), x[floor(r)] + (r - floor(r)) * (x[ceil(r)] - x[floor(r)])."""
    x = sorted_samples
    r = p / 100 * (len(x) - 1)
    lo, hi = math.floor(r), math.ceil(r)
    return x[lo] + (r - lo) * (x[hi] - x[lo])


def latency_stats(samples):
    """docs/bench.md's latency_ms over every sample (none dropped); stddev is the population's."""
    x = sorted(samples)
    mean = sum(x) / len(x)
    return {"median": percentile(x, 50), "p10": percentile(x, 10), "p90": percentile(x, 90),
            "p99": percentile(x, 99), "min": x[0], "max": x[-1], "mean": mean,
            "stddev": math.sqrt(sum((v - mean) ** 2 for v in x) / len(x)), "samples": len(x)}


def result_row(mode, latency=None, first_ms=None, peak_bytes=None, batch=1, note=""):
    """One docs/bench.md Result for PyTorch; figures not measured are null,
    except latency and throughput of a failed mode: 0 and 0 samples, as kiln's
    own results and its reader (src/bench/report.cpp) have them."""
    if latency is None:
        latency = dict.fromkeys(("median", "p10", "p90", "p99", "min", "max", "mean", "stddev", "samples"), 0)
    throughput = batch / (latency["median"] / 1e3) if latency["median"] > 0 else 0
    return {"framework": "pytorch", "mode": mode, "latency_ms": latency, "throughput": throughput,
            "first_call_ms": {"total": first_ms, "trace": None, "passes": None, "build": None, "run": None},
            "peak_bytes": peak_bytes, "graphs": None, "graph_breaks": None, "recompiles": None,
            "launches_per_call": None, "max_abs_error": None, "max_rel_error": None,
            "max_abs_error_vs_torch": None, "max_rel_error_vs_torch": None, "speedup_vs_eager": None,
            "speedup_vs_torch_eager": None, "speedup_vs_torch_mode": None,
            "speedup_vs_torch_best": None, "note": note}


def timed_calls(fn, iters, cuda):
    """iters calls of fn, each timed whole: (milliseconds, the last call's output)."""
    import torch
    ms, out = [], None
    for _ in range(iters):
        out = None  # CUDA graphs overwrite the previous call's outputs: hold none across a call
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            out = fn()
            end.record()
            torch.cuda.synchronize()
            ms.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            out = fn()
            ms.append((time.perf_counter() - t0) * 1e3)
    return ms, out


def measure_mode(model, inputs, job, mode):
    """One mode's Result, and its last outputs on the CPU; raises if the mode fails."""
    import torch
    cuda = job["device"] != "cpu"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    if mode != "eager":
        torch._dynamo.reset()
        torch._inductor.config.freezing = job["freeze"]
        model = torch.compile(model, mode=mode)
    fn = lambda: model(*inputs)  # noqa: E731
    label = f"pytorch {job['model']} {mode}"
    with torch.inference_mode():
        if cuda:
            sync()
            resident = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        call_with_timeout(lambda: (fn(), sync()), job["first_call_timeout_s"])
        first_ms = (time.perf_counter() - t0) * 1e3
        log(f"{label}: first call {first_ms / 1e3:.3g} s")
        for _ in range(job["warmup"]):
            fn()
        sync()
        ms, out = timed_calls(fn, job["iters"], cuda)
        outputs = [t.detach().to("cpu", copy=True).contiguous() for t in flatten_outputs(out)]
    peak = torch.cuda.max_memory_allocated() - resident if cuda else None
    latency = latency_stats(ms)
    log(f"{label}: median {latency['median']:.4g} ms of {len(ms)} calls")
    return result_row(mode, latency, first_ms, peak, job["batch"]), outputs


def save_outputs(outputs, path):
    from safetensors.torch import save_file
    tmp = f"{path}.tmp{os.getpid()}"
    save_file({f"output{i}": t for i, t in enumerate(outputs)}, tmp)
    os.replace(tmp, path)


def release_compiled_state(cuda):
    """Frees what the previous mode left (compiled code, CUDA-graph pools), so
    the next mode's peak memory starts from the weights and inputs."""
    import torch
    torch._dynamo.reset()
    gc.collect()
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def one_line(e):
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text[:500]}" if text else type(e).__name__


# --- the run ---------------------------------------------------------------


def set_up(job):
    """The model and inputs on the job's device and dtype, PyTorch configured."""
    import torch
    if job["device"] != "cpu" and not torch.cuda.is_available():
        raise JobError(f"device {job['device']} asked for, but this PyTorch sees no CUDA device")
    torch.set_num_threads(job["threads"])
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = True
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[job["dtype"]]
    device = torch.device(job["device"])
    if device.index is not None:
        torch.cuda.set_device(device)  # so the allocator statistics and events are this device's
    model = build_model(job["model"], job["model_options"])
    load_weights(model, job["model"], job["weights"])
    model = model.eval().to(device=device, dtype=dtype)
    inputs = [t.to(device=device, dtype=dtype if t.is_floating_point() else t.dtype)
              for t in load_inputs(job["inputs"], job["batch"])]
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name()
    return model, inputs, name


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform
    return platform.processor() or platform.machine()


def run(job):
    """Every mode of the job, in order: the OUT.json object."""
    import torch
    model, inputs, device_name = set_up(job)
    os.makedirs(job["outputs_dir"], exist_ok=True)
    cuda = job["device"] != "cpu"
    results = []
    for mode in job["modes"]:
        out_path = os.path.join(job["outputs_dir"], f"{mode}.safetensors")
        if os.path.exists(out_path):
            os.remove(out_path)  # never leave an earlier run's outputs beside this run's figures
        try:
            row, outputs = measure_mode(model, inputs, job, mode)
            save_outputs(outputs, out_path)
        except (Exception, FirstCallTimeout) as e:  # noqa: BLE001 - a mode's failure is a result, not the job's
            row = result_row(mode, batch=job["batch"], note=one_line(e))
            log(f"pytorch {job['model']} {mode}: failed: {row['note']}")
        results.append(row)
        release_compiled_state(cuda)
    return {"torch": torch.__version__, "device_name": device_name, "results": results}


def write_json(path, obj):
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def main(argv):
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        job = read_job(argv[1])
        try:
            import torch  # noqa: F401
            import safetensors  # noqa: F401
        except ImportError as e:
            log(f"bench_torch: PyTorch is not usable here: {e}")
            return 1
        write_json(argv[2], run(job))
    except JobError as e:
        log(f"bench_torch: {e}")
        return 2
    except ImportError as e:  # torchvision or transformers, found only when the model is built
        log(f"bench_torch: a library the model needs is missing: {e}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
