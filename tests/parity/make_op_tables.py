"""Makes the PyTorch-valued op tables of kiln's unit test tests/unit/op_tables_test.cpp.

    python3 tests/parity/make_op_tables.py        # -> tests/data/op_tables/*.json

kiln's CPU and reference kernels share their shape rules and the pad and
interpolate index formulas, so the op-consistency test cannot catch a bug in
those. These tables are an oracle of their own, with PyTorch's answers:

  shapes.json    one op call a line: {"op", "inputs": [{"shape", "dtype"} or
                 null, ...], "attrs": {...}} and either "out": [output
                 shapes] or "error": true when PyTorch refuses the call.
                 Only refusals kiln must share are tabled (sizes that do not
                 fit, shapes that do not match, dims out of range).
  resample.json  pad and interpolate of torch.arange(numel, dtype=float64)
                 reshaped to "shape": "out_shape" and all the output "values"
                 (17 significant digits; nearest and pad values are the
                 source indices themselves).

Where kiln differs from PyTorch on purpose (docs/ops.md) the table follows
kiln's documented semantics: interpolate with scale_factor samples with
in / out, as PyTorch's recompute_scale_factor=True; an empty dims list of
any/all reduces every dim (PyTorch's dim=None). Calls that kiln accepts on
purpose and PyTorch refuses are left out: linear with a 1-D weight (kiln's
weight is [out, in]), reflect and replicate pads of dims PyTorch's kernels do
not pad (kiln pads any trailing dims), an attention mask of fewer than 2 dims
that broadcasts to the scores, and logsumexp over an empty dims list without
keepdim (PyTorch's own output check fails there).

The output is the same on every run: rerun the script after changing a case
and commit both files.
"""
import itertools
import json
import math
import os
import warnings

import torch
import torch.nn.functional as F

DTYPES = {"float32": torch.float32, "float64": torch.float64, "int64": torch.int64,
          "bool": torch.bool}


def spec(shape, dtype="float32"):
    """A tensor input: its shape and, when not float32, its dtype."""
    s = {"shape": list(shape)}
    if dtype != "float32":
        s["dtype"] = dtype
    return s


def tensor_of(s):
    """The zeros tensor of a spec (zeros are valid indices, classes and targets)."""
    if s is None:
        return None
    return torch.zeros(s["shape"], dtype=DTYPES[s.get("dtype", "float32")])


class Table:
    def __init__(self):
        self.entries = []

    def add(self, op, inputs, attrs, call):
        """Runs call(*tensors) in PyTorch and records its output shapes or its refusal."""
        entry = {"op": op, "inputs": inputs, "attrs": attrs}
        try:
            with torch.no_grad():
                out = call(*[tensor_of(s) for s in inputs])
        # NotImplementedError is a RuntimeError; F.embedding refuses a padding_idx by assert.
        except (RuntimeError, ValueError, IndexError, AssertionError) as e:
            entry["error"] = True
            entry["why"] = str(e).splitlines()[0][:100]
        else:
            outs = list(out) if isinstance(out, (tuple, list)) else [out]
            entry["out"] = [list(o.shape) for o in outs]
        self.entries.append(entry)


def sizes_of(v):
    return list(v) if isinstance(v, (list, tuple)) else [v]


def torch_arg(v):
    """An int or a list attribute as PyTorch's functions take it."""
    return tuple(v) if isinstance(v, list) else v


# --- elementwise ops with broadcasting -----------------------------------------------------

BROADCAST_PAIRS = [
    ([2, 3], [3]), ([2, 1, 4], [3, 1]), ([], [2, 3]), ([5, 1, 1], [1, 4, 1]), ([0, 3], [1, 3]),
    ([0], [1]), ([4, 1], [0]), ([2, 3, 4], [3, 4]), ([1], []), ([7, 1, 5], [1, 6, 1]),
    ([6, 1, 3], [1, 1, 1, 1]), ([3, 1, 2], [3, 2]), ([2, 3], [2]), ([3], [4]), ([2, 0], [3, 1]),
    ([2, 3, 4], [2, 4]), ([5, 4], [4, 5]),
]


def pointwise_cases(t):
    for a, b in BROADCAST_PAIRS:
        t.add("add", [spec(a), spec(b)], {}, torch.add)
        t.add("mul", [spec(a), spec(b, "float64")], {}, torch.mul)
        t.add("eq", [spec(a), spec(b)], {}, torch.eq)
        t.add("maximum", [spec(a), spec(b)], {}, torch.maximum)
        t.add("masked_fill", [spec(a), spec(b, "bool")], {"value": 1.5},
              lambda x, m: torch.masked_fill(x, m, 1.5))
    for c, a, b in [([2, 1], [3], [1, 1, 3]), ([4], [4], [4]), ([], [2, 3], [3]),
                    ([3, 1, 1], [1, 5, 1], [1, 1, 2]), ([0, 1], [1, 4], [4]), ([2], [3], [1]),
                    ([2, 3], [2, 1], [4, 1, 3]), ([1, 2], [2, 2], [3, 2])]:
        t.add("where", [spec(c, "bool"), spec(a), spec(b)], {}, torch.where)
    for shape in [[2, 3], [], [0, 5], [4, 1, 3]]:
        for lo, hi in [(-1.0, 1.0), (None, 0.5), (0.0, None)]:
            t.add("clamp", [spec(shape)], {"min": lo, "max": hi},
                  lambda x, lo=lo, hi=hi: torch.clamp(x, lo, hi))


# --- matrix products -----------------------------------------------------------------------

def linalg_cases(t):
    for a, b in [([3], [3]), ([2, 3], [3]), ([3], [3, 4]), ([2, 3], [3, 4]), ([5, 2, 3], [3, 4]),
                 ([3], [5, 3, 4]), ([5, 2, 3], [3]), ([2, 1, 2, 3], [4, 3, 5]), ([3], [4]),
                 ([2, 3], [4, 5]), ([2, 2, 3], [3, 3, 4]), ([0, 3], [3, 4]), ([2, 0], [0, 4]),
                 ([], [3]), ([3], []), ([1, 2, 3], [7, 3, 4]), ([3], [2, 1, 3, 4]),
                 ([6, 1, 2, 3], [1, 5, 3, 2]), ([4, 2, 3], [4, 3, 0]), ([2, 3], [2, 3]),
                 ([1, 1, 3], [3]), ([7, 3], [2, 3, 7])]:
        t.add("matmul", [spec(a), spec(b)], {}, torch.matmul)
    for a, b in [([2, 3, 4], [2, 4, 5]), ([1, 3, 4], [2, 4, 5]), ([2, 3, 4], [2, 3, 5]),
                 ([3, 4], [4, 5]), ([0, 3, 4], [0, 4, 2]), ([2, 0, 4], [2, 4, 0]),
                 ([2, 3, 4, 1], [2, 4, 5])]:
        t.add("bmm", [spec(a), spec(b)], {}, torch.bmm)
    for self_shape in [[], [5], [1, 5], [3, 5], [3, 1], [2], [4, 3, 5], [3, 4], [1]]:
        t.add("addmm", [spec(self_shape), spec([3, 4]), spec([4, 5])], {"beta": 1, "alpha": 1},
              torch.addmm)
    t.add("addmm", [spec([3, 5]), spec([3, 4]), spec([3, 5])], {"beta": 1, "alpha": 1},
          torch.addmm)
    t.add("addmm", [spec([3, 5]), spec([4]), spec([4, 5])], {"beta": 1, "alpha": 1}, torch.addmm)
    for x in [[3], [2, 3], [4, 2, 3], [0, 3], [2, 4], [1, 1, 2, 3]]:
        for bias in [None, [5], [4]]:
            t.add("linear", [spec(x), spec([5, 3]), None if bias is None else spec(bias)], {},
                  F.linear)


# --- convolution and pooling ---------------------------------------------------------------

def conv_cases(t):
    def conv(op, x, w, b, stride=1, padding=0, dilation=1, groups=1, mode=None):
        attrs = {"stride": sizes_of(stride), "padding": sizes_of(padding),
                 "dilation": sizes_of(dilation), "groups": groups}
        if mode is not None:
            del attrs["padding"]
            attrs["padding_mode"] = mode
        fn = F.conv1d if op == "conv1d" else F.conv2d
        t.add(op, [spec(x), spec(w), None if b is None else spec(b)], attrs,
              lambda xx, ww, bb: fn(xx, ww, bb, stride=torch_arg(stride),
                                    padding=mode or torch_arg(padding),
                                    dilation=torch_arg(dilation), groups=groups))

    for stride, padding, dilation in itertools.product([1, 2, 3], [0, 1, 2], [1, 2]):
        conv("conv1d", [2, 4, 10], [6, 4, 3], [6], stride, padding, dilation)
    for x in [[4, 10], [1, 4, 1], [3, 4, 5], [0, 4, 7], [2, 4, 2]]:
        conv("conv1d", x, [6, 4, 3], None, 1, 0, 1)
    conv("conv1d", [2, 4, 10], [6, 2, 3], [6], 1, 1, 1, groups=2)
    conv("conv1d", [2, 4, 10], [6, 4, 3], [6], 1, 1, 1, groups=2)
    conv("conv1d", [2, 4, 10], [6, 1, 5], None, 2, 2, 1, groups=4)
    conv("conv1d", [2, 6, 10], [4, 2, 3], None, 1, 0, 1, groups=3)
    conv("conv1d", [2, 4, 10], [6, 4, 3], [5], 1, 0, 1)
    conv("conv1d", [2, 4, 10], [6, 4, 12], None, 1, 0, 1)
    conv("conv1d", [2, 4, 10], [6, 4, 12], None, 1, 1, 1)
    conv("conv1d", [2, 4, 10], [6, 4, 4], None, 1, 0, 4)
    for k, d in [(3, 1), (4, 1), (4, 2), (1, 1), (5, 3), (2, 1)]:
        conv("conv1d", [2, 4, 9], [6, 4, k], None, 1, 0, d, mode="same")
        conv("conv1d", [2, 4, 9], [6, 4, k], None, 1, 0, d, mode="valid")
    conv("conv1d", [2, 4, 9], [6, 4, 3], None, 2, 0, 1, mode="same")
    conv("conv1d", [2, 4, 9], [6, 4, 3], None, 2, 0, 1, mode="valid")

    for stride, padding, dilation in itertools.product([1, 2, [2, 1], 3], [0, 1, [2, 0]],
                                                       [1, 2, [1, 3]]):
        conv("conv2d", [1, 3, 9, 11], [4, 3, 3, 3], [4], stride, padding, dilation)
    for w in [[4, 3, 2, 5], [4, 3, 1, 1], [4, 3, 9, 11], [4, 3, 10, 1], [4, 3, 5, 4]]:
        conv("conv2d", [2, 3, 9, 11], w, None, 1, 0, 1)
        conv("conv2d", [3, 9, 11], w, None, [1, 2], [1, 0], 1)
    for groups, w in [(3, [6, 1, 3, 3]), (3, [6, 3, 3, 3]), (2, [4, 3, 3, 3]), (1, [4, 2, 3, 3]),
                      (6, [6, 1, 3, 3]), (0, [6, 3, 3, 3])]:
        conv("conv2d", [2, 3 if groups != 6 else 6, 8, 8], w, None, 1, 1, 1, groups=groups)
    conv("conv2d", [2, 3, 8], [4, 3, 3, 3], None, 1, 0, 1)
    conv("conv2d", [2, 3, 8, 8], [4, 3, 3], None, 1, 0, 1)
    conv("conv2d", [2, 3, 8, 8], [4, 3, 3, 3], [4], 0, 0, 1)
    conv("conv2d", [2, 3, 8, 8], [4, 3, 3, 3], [4], 1, -1, 1)
    for k, d in [([3, 3], [1, 1]), ([2, 4], [1, 1]), ([4, 5], [2, 1]), ([1, 2], [1, 3]),
                 ([6, 6], [2, 2])]:
        conv("conv2d", [1, 3, 7, 10], [2, 3] + k, None, 1, 0, d, mode="same")
        conv("conv2d", [1, 3, 7, 10], [2, 3] + k, None, 1, 0, d, mode="valid")
    conv("conv2d", [1, 3, 7, 10], [2, 3, 3, 3], None, [1, 2], 0, 1, mode="same")

    for x in [[1, 2, 9, 11], [3, 5, 6]]:
        for k, s, p, d, ceil in itertools.product([2, 3, [3, 2]], [None, 1, 2, [2, 3]], [0, 1],
                                                  [1, 2], [False, True]):
            attrs = {"kernel_size": sizes_of(k), "stride": [] if s is None else sizes_of(s),
                     "padding": sizes_of(p), "dilation": sizes_of(d), "ceil_mode": ceil}
            t.add("max_pool2d", [spec(x)], attrs,
                  lambda xx, k=k, s=s, p=p, d=d, ceil=ceil: F.max_pool2d(
                      xx, torch_arg(k), torch_arg(s), torch_arg(p), torch_arg(d), ceil_mode=ceil))
    # Ceil mode whose last window would start in the right padding, and windows that don't fit.
    for x, k, s, p, d in [([1, 1, 5, 5], 2, 2, 1, 1), ([1, 1, 6, 6], 3, 2, 1, 1),
                          ([1, 1, 4, 4], 2, 3, 1, 1), ([1, 1, 7, 7], 3, 3, 1, 1),
                          ([1, 1, 8, 8], 4, 3, 2, 1), ([1, 1, 2, 2], 3, 1, 0, 1),
                          ([1, 1, 3, 3], 2, 1, 0, 3), ([1, 1, 4, 4], 2, 2, 2, 1),
                          ([1, 1, 5, 5], 3, 2, 1, 2), ([1, 1, 1, 1], 1, 2, 0, 1),
                          ([1, 1, 0, 4], 2, 2, 0, 1), ([1, 1, 4, 4], 0, 1, 0, 1),
                          ([1, 4, 4], 2, 0, 0, 1), ([4, 4], 2, 2, 0, 1)]:
        for ceil in [False, True]:
            attrs = {"kernel_size": [k], "stride": [s], "padding": [p], "dilation": [d],
                     "ceil_mode": ceil}
            t.add("max_pool2d", [spec(x)], attrs,
                  lambda xx, k=k, s=s, p=p, d=d, ceil=ceil: F.max_pool2d(xx, k, s, p, d, ceil))
            t.add("max_pool2d_with_indices", [spec(x)], attrs,
                  lambda xx, k=k, s=s, p=p, d=d, ceil=ceil: F.max_pool2d(
                      xx, k, s, p, d, ceil, return_indices=True))
            if d == 1:
                avg = {"kernel_size": [k], "stride": [s], "padding": [p], "ceil_mode": ceil,
                       "count_include_pad": True}
                t.add("avg_pool2d", [spec(x)], avg,
                      lambda xx, k=k, s=s, p=p, ceil=ceil: F.avg_pool2d(xx, k, s, p, ceil))
    for x in [[1, 2, 9, 11], [3, 5, 6]]:
        for k, s, p, ceil, include in itertools.product([2, 3, [3, 2]], [None, 2, [2, 3]],
                                                        [0, 1, [1, 0]], [False, True],
                                                        [True, False]):
            attrs = {"kernel_size": sizes_of(k), "stride": [] if s is None else sizes_of(s),
                     "padding": sizes_of(p), "ceil_mode": ceil, "count_include_pad": include}
            t.add("avg_pool2d", [spec(x)], attrs,
                  lambda xx, k=k, s=s, p=p, ceil=ceil, include=include: F.avg_pool2d(
                      xx, torch_arg(k), torch_arg(s), torch_arg(p), ceil, include))
    for x in [[1, 2, 5, 7], [3, 4, 4], [2, 1, 1, 1]]:
        for size in [[1], [3], [2, 5], [7, 3], [4, 1]]:
            t.add("adaptive_avg_pool2d", [spec(x)], {"output_size": size},
                  lambda xx, size=size: F.adaptive_avg_pool2d(
                      xx, size[0] if len(size) == 1 else tuple(size)))
    t.add("adaptive_avg_pool2d", [spec([5, 7])], {"output_size": [2]},
          lambda xx: F.adaptive_avg_pool2d(xx, 2))
    t.add("adaptive_avg_pool2d", [spec([1, 2, 5, 7])], {"output_size": [2, 2, 2]},
          lambda xx: F.adaptive_avg_pool2d(xx, (2, 2, 2)))


# --- pad and interpolate shapes ------------------------------------------------------------

def interpolate_call(size, scale, mode, align):
    """The attrs of an interpolate entry and the PyTorch call that makes its answer."""
    attrs = {"mode": mode}
    if size is not None:
        attrs["size"] = sizes_of(size)
    if scale is not None:
        attrs["scale_factor"] = sizes_of(scale)
    if align is not None:
        attrs["align_corners"] = align
    # kiln samples a scale_factor with in / out (docs/ops.md): recompute_scale_factor.
    return attrs, lambda x: F.interpolate(
        x, size=size, scale_factor=scale, mode=mode, align_corners=align,
        recompute_scale_factor=True if scale is not None else None)


def resample_shape_cases(t):
    pads = [[1, 2], [0, 0], [-1, 2], [-2, -3], [2, 1, 3, 0], [-1, -1, 1, 1], [1, 1, 1, 1, 1, 1],
            [-4, -3], [-5, 0], [3, 3], [4, 0], [0, 5], [1, 2, -3, -1], [1, 1, 1, 1, 1, 1, 1, 1],
            [1], [1, 1, 1]]
    for x in [[7], [2, 5, 7], [1, 2, 4, 7], [1, 1, 3, 4, 7], [0, 3, 7]]:
        for pad in pads:
            t.add("pad", [spec(x)], {"pad": pad, "mode": "constant", "value": 0.5},
                  lambda xx, pad=pad: F.pad(xx, pad, "constant", 0.5))
    for mode in ["reflect", "replicate"]:
        for x, pad in [([2, 5, 7], [1, 2]), ([2, 5, 7], [6, 0]), ([2, 5, 7], [7, 0]),
                       ([2, 5, 7], [0, 6]), ([2, 5, 7], [3, 2, 4, 1]), ([1, 2, 4, 7], [3, 3, 3, 3]),
                       ([1, 2, 4, 7], [3, 3, 4, 3]), ([1, 2, 4, 7], [0, 6, 3, 0]),
                       ([1, 1, 3, 4, 7], [1, 1, 2, 2, 2, 2]), ([1, 1, 3, 4, 7], [1, 1, 2, 2, 3, 2]),
                       ([5, 7], [2, 2]), ([3, 4, 7], [1, 1, 1, 1]),
                       ([2, 5, 1], [1, 1]), ([2, 5, 1], [0, 0]), ([2, 5, 0], [1, 1])]:
            t.add("pad", [spec(x)], {"pad": pad, "mode": mode, "value": 0.0},
                  lambda xx, pad=pad, mode=mode: F.pad(xx, pad, mode))

    def interp(x, size=None, scale=None, mode="nearest", align=None):
        t.add("interpolate", [spec(x)], *interpolate_call(size, scale, mode, align))

    for x in [[1, 2, 5, 7], [2, 1, 3, 4]]:
        for size in [[10, 14], [3, 4], [1, 1], [5, 7], [6], [2, 11]]:
            interp(x, size=size if len(size) > 1 else size[0])
            for align in [None, False, True]:
                interp(x, size=size if len(size) > 1 else size[0], mode="bilinear", align=align)
        for scale in [2, 0.5, 1.5, 0.7, 2.3, 1 / 3, [1.5, 0.7], [2, 3], [0.99, 1.01], 3.999]:
            interp(x, scale=scale)
            for align in [None, True]:
                interp(x, scale=scale, mode="bilinear", align=align)
    for x in [[2, 3, 7], [1, 1, 3, 4, 5]]:
        for size in [[4], [11], [2, 9, 3], [1]]:
            if len(size) == 1 or len(size) == len(x) - 2:
                interp(x, size=size if len(size) > 1 else size[0])
        for scale in [2, 0.5, 1.5, 0.7, 2.3]:
            interp(x, scale=scale)
    interp([2, 3, 7], size=5, mode="bilinear")
    interp([1, 1, 3, 4, 5], size=5, mode="bilinear")
    interp([1, 2, 5, 7], scale=0.1)
    interp([1, 2, 5, 7], scale=[1.0, 0.1])
    interp([1, 2, 5, 7], size=[3, 4, 5])
    interp([1, 2, 5, 7], scale=0.1, mode="bilinear")
    interp([1, 2, 5, 7], size=[0, 3])
    interp([7], size=3)


# --- reductions ----------------------------------------------------------------------------

def reduce_cases(t):
    dims_lists = [[], [0], [-1], [0, 2], [1, -1], [2, -1], [3], [-4], [-3, 1, 2]]
    ops = {
        "sum": lambda x, d, k: torch.sum(x, d, k),
        "mean": lambda x, d, k: torch.mean(x, d, k),
        "amax": lambda x, d, k: torch.amax(x, d, k),
        "amin": lambda x, d, k: torch.amin(x, d, k),
        "var": lambda x, d, k: torch.var(x, d, correction=1, keepdim=k),
        "norm": lambda x, d, k: torch.linalg.vector_norm(x, 2, d, k),
        "logsumexp": lambda x, d, k: torch.logsumexp(x, d, k),
        # kiln's empty dims list is every dim: PyTorch's dim=None here (its dim=() reduces none).
        "any": lambda x, d, k: torch.any(x, tuple(d) if d else None, k),
        "all": lambda x, d, k: torch.all(x, tuple(d) if d else None, k),
    }
    for x in [[2, 3, 4], [2, 0, 3], [], [5]]:
        for op, fn in ops.items():
            for dims in dims_lists:
                if not x and dims not in ([], [0], [-1], [1, -1]):
                    continue
                if x == [5] and dims not in ([], [0], [-1], [0, 2], [-3, 1, 2]):
                    continue
                for keepdim in [False, True]:
                    if op == "logsumexp" and not dims and not keepdim:
                        continue  # PyTorch fails its own output check there (and keepdim works)
                    t.add(op, [spec(x)], {"dims": dims, "keepdim": keepdim},
                          lambda xx, fn=fn, dims=dims, keepdim=keepdim: fn(xx, dims, keepdim))
    for p in [1, 0, math.inf, -math.inf, 3.0]:
        for x, dims in [([2, 3, 4], [1]), ([2, 0, 3], [1]), ([2, 0, 3], [0, 2]), ([4], [])]:
            t.add("norm", [spec(x)], {"p": p if math.isfinite(p) else str(p), "dims": dims,
                                      "keepdim": False},
                  lambda xx, p=p, dims=dims: torch.linalg.vector_norm(xx, p, dims))
    for x in [[2, 3, 4], [], [2, 0, 3], [6]]:
        for dim in [None, 0, 1, -1, 3, -4]:
            for keepdim in [False, True]:
                t.add("argmax", [spec(x)], {"dim": dim, "keepdim": keepdim},
                      lambda xx, dim=dim, keepdim=keepdim: torch.argmax(xx, dim, keepdim))
        for dim in [0, -1, 2, 3]:
            for keepdim in [False, True]:
                t.add("max_dim", [spec(x)], {"dim": dim, "keepdim": keepdim},
                      lambda xx, dim=dim, keepdim=keepdim: torch.max(xx, dim, keepdim))
        for dim in [0, 1, 2, -1, -3, 3, -4]:
            t.add("cumsum", [spec(x)], {"dim": dim}, lambda xx, dim=dim: torch.cumsum(xx, dim))
            t.add("softmax", [spec(x)], {"dim": dim}, lambda xx, dim=dim: torch.softmax(xx, dim))
            t.add("log_softmax", [spec(x)], {"dim": dim},
                  lambda xx, dim=dim: torch.log_softmax(xx, dim))


# --- views ---------------------------------------------------------------------------------

def view_cases(t):
    for x, shapes in [([2, 3, 4], [[24], [-1], [4, -1], [-1, 6], [2, 3, 2, 2], [3, -1, 2],
                                   [1, 24, 1], [5, -1], [-1, -1], [25], [2, -2, 6], [0, -1],
                                   [4, 6, 1, 1, -1]]),
                      ([2, 0, 3], [[0], [-1], [6, 0], [0, -1], [-1, 0], [3, 0, 5], [1, -1, 3]]),
                      ([], [[1], [-1], [1, 1, -1], [], [2]]),
                      ([1], [[], [-1], [1, 1]])]:
        for shape in shapes:
            t.add("view", [spec(x)], {"shape": shape}, lambda xx, shape=shape: xx.view(shape))
            t.add("reshape", [spec(x)], {"shape": shape},
                  lambda xx, shape=shape: torch.reshape(xx, shape))
    for x in [[2, 3, 4, 5], [7], []]:
        for s, e in [(0, -1), (1, 2), (0, 0), (-3, -2), (2, 1), (1, 3), (0, 4), (-5, 0), (-1, -1)]:
            t.add("flatten", [spec(x)], {"start_dim": s, "end_dim": e},
                  lambda xx, s=s, e=e: torch.flatten(xx, s, e))
    for x, dim, sizes in [([2, 12, 5], 1, [3, 4]), ([2, 12, 5], 1, [-1, 2]),
                          ([2, 12, 5], -2, [2, 2, 3]), ([2, 12, 5], 1, [5, -1]),
                          ([2, 12, 5], 0, [1, 2]), ([2, 12, 5], 2, [5]), ([2, 12, 5], 3, [1, 5]),
                          ([2, 12, 5], -1, [1, -1, 1]), ([2, 12, 5], 1, [-1, -1]),
                          ([2, 0, 5], 1, [0, 3]), ([2, 0, 5], 1, [-1, 3]), ([2, 12, 5], 1, [])]:
        t.add("unflatten", [spec(x)], {"dim": dim, "sizes": sizes},
              lambda xx, dim=dim, sizes=sizes: torch.unflatten(xx, dim, sizes))
    for x in [[1, 3, 1, 2], [3, 4], [], [1]]:
        for dims in [None, [0], [1], [0, 2], [-1], [-2, 0], [4], [2]]:
            attrs = {} if dims is None else {"dims": dims}
            t.add("squeeze", [spec(x)], attrs,
                  lambda xx, dims=dims: torch.squeeze(xx) if dims is None else torch.squeeze(
                      xx, tuple(dims)))
        for dim in range(-len(x) - 2, len(x) + 2):
            t.add("unsqueeze", [spec(x)], {"dim": dim},
                  lambda xx, dim=dim: torch.unsqueeze(xx, dim))
    for x, perms in [([2, 3, 4], [[2, 0, 1], [0, 1, 2], [-1, 0, 1], [0, 0, 1], [0, 1], [0, 1, 3],
                                  [1, -3, 2]]),
                     ([], [[]]), ([5], [[0], [-1], [1]])]:
        for dims in perms:
            t.add("permute", [spec(x)], {"dims": dims}, lambda xx, dims=dims: xx.permute(dims))
    for x in [[2, 3, 4], [5], []]:
        for a, b in [(0, 1), (-1, 0), (2, 2), (1, -2), (0, 3), (-4, 0), (0, -1)]:
            t.add("transpose", [spec(x)], {"dim0": a, "dim1": b},
                  lambda xx, a=a, b=b: torch.transpose(xx, a, b))
    for x, shapes in [([3, 1], [[2, 3, 4], [-1, 4], [3, 0], [4, 4], [3], [1, -1, -1], [-1, 3, 1],
                                [3, 1], [2, -1, 5]]),
                      ([], [[2, 3], [], [-1]]), ([1, 0], [[2, 0], [2, 5], [0, 0]])]:
        for shape in shapes:
            t.add("expand", [spec(x)], {"shape": shape},
                  lambda xx, shape=shape: xx.expand(shape))
    starts = [None, 0, 2, -3, -10, 10, 7]
    stops = [None, 3, -1, 100, -100, 0, 5]
    for dim, start, stop, step in itertools.product([0, -1], starts, stops, [1, 2, 3]):
        if dim == -1 and step == 3:
            continue
        t.add("slice", [spec([7, 5])], {"dim": dim, "start": start, "stop": stop, "step": step},
              lambda xx, dim=dim, start=start, stop=stop, step=step:
              xx[(slice(None),) * (dim % 2) + (slice(start, stop, step),)])
    for dim, step in [(0, 0), (0, -1), (2, 1), (-3, 1)]:
        t.add("slice", [spec([7, 5])], {"dim": dim, "start": 0, "stop": 3, "step": step},
              lambda xx, dim=dim, step=step: torch.ops.aten.slice(xx, dim, 0, 3, step))
    t.add("slice", [spec([])], {"dim": 0, "start": 0, "stop": 1, "step": 1},
          lambda xx: torch.ops.aten.slice(xx, 0, 0, 1, 1))
    for x in [[4, 5, 6], [3], []]:
        for dim, index in [(0, 0), (0, 3), (1, -1), (-1, 5), (2, -6), (0, 4), (1, 5), (0, -5),
                           (3, 0), (-4, 0)]:
            t.add("select", [spec(x)], {"dim": dim, "index": index},
                  lambda xx, dim=dim, index=index: torch.select(xx, dim, index))
    for x in [[4, 5, 6], [0]]:
        for dim, start, length in [(0, 0, 2), (0, 2, 2), (1, -2, 2), (2, 6, 0), (2, 0, 6),
                                   (2, 4, 3), (0, -5, 1), (-1, 3, 3), (1, 5, 1), (0, 0, -1),
                                   (3, 0, 1), (0, 0, 0), (1, -5, 5)]:
            t.add("narrow", [spec(x)], {"dim": dim, "start": start, "length": length},
                  lambda xx, dim=dim, start=start, length=length: torch.narrow(
                      xx, dim, start, length))
    t.add("narrow", [spec([])], {"dim": 0, "start": 0, "length": 1},
          lambda xx: torch.narrow(xx, 0, 0, 1))


# --- shape and indexing ops that make new tensors ------------------------------------------

def shape_cases(t):
    for shapes, dim in [([[2, 3], [4, 3]], 0), ([[2, 3], [2, 5]], 1), ([[2, 3], [2, 5]], -1),
                        ([[2, 3], [2, 3], [2, 3]], 0), ([[2, 3], [0]], 0), ([[0], [2, 3]], 1),
                        ([[0], [0]], 0), ([[2, 3], [3, 3]], 1), ([[2, 3], [2, 3, 1]], 0),
                        ([[2, 3], []], 0), ([[2, 3]], 2), ([[2, 3]], -3), ([[0, 3], [2, 3]], 0),
                        ([[2, 0, 4], [2, 5, 4]], 1), ([[2, 3, 4], [2, 3, 4]], -2),
                        ([[1, 2], [0]], -1), ([[0], [0]], -1)]:
        t.add("cat", [spec(s) for s in shapes], {"dim": dim},
              lambda *xs, dim=dim: torch.cat(xs, dim))
    for shapes in [[[2, 3], [2, 3]], [[2, 3]], [[], []], [[0, 4], [0, 4], [0, 4]],
                   [[2, 3], [3, 2]], [[2, 3], [2, 3, 1]]]:
        for dim in range(-len(shapes[0]) - 2, len(shapes[0]) + 2):
            t.add("stack", [spec(s) for s in shapes], {"dim": dim},
                  lambda *xs, dim=dim: torch.stack(xs, dim))
    for x, split, dim in [([7, 4], 3, 0), ([7, 4], 2, 1), ([7, 4], 7, 0), ([7, 4], 10, 0),
                          ([0, 4], 2, 0), ([7, 4], [2, 5], 0), ([7, 4], [1, 1, 2], 1),
                          ([7, 4], [2, 2], 0), ([7, 4], [7, 0], -2), ([7, 4], 3, 2)]:
        attrs = {"sizes" if isinstance(split, list) else "split_size": split, "dim": dim}
        t.add("split", [spec(x)], attrs,
              lambda xx, split=split, dim=dim: torch.split(xx, split, dim))
    for x, chunks, dim in [([7, 4], 3, 0), ([7, 4], 2, 1), ([6, 4], 4, 0), ([7, 4], 10, 0),
                           ([0, 4], 2, 0), ([5], 3, 0), ([7, 4], 3, -1), ([7, 4], 0, 0),
                           ([7, 4], 3, 2)]:
        t.add("chunk", [spec(x)], {"chunks": chunks, "dim": dim},
              lambda xx, chunks=chunks, dim=dim: torch.chunk(xx, chunks, dim))
    for x, dim, index in [([4, 5, 6], 0, [3]), ([4, 5, 6], 1, [0]), ([4, 5, 6], -1, []),
                          ([4, 5, 6], 2, [7]), ([4, 5, 6], 3, [2]), ([4, 5, 6], 0, [2, 2]),
                          ([], 0, []), ([], 0, [1]), ([5], 0, [1, 1]), ([5], -1, [9])]:
        t.add("index_select", [spec(x), spec(index, "int64")], {"dim": dim},
              lambda xx, ii, dim=dim: torch.index_select(xx, dim, ii))
    for x, dim, index in [([4, 5], 0, [2, 5]), ([4, 5], 1, [4, 9]), ([4, 5], 0, [7, 5]),
                          ([4, 5], 0, [2, 6]), ([4, 5], 1, [5, 1]), ([4, 5], -1, [1, 1]),
                          ([4, 5], 0, [2]), ([4, 5], 2, [2, 2]), ([4, 5, 6], 1, [2, 8, 3]),
                          ([4, 5, 6], 2, [4, 5, 0]), ([4, 5], 0, [0, 5]), ([], 0, []),
                          ([5], 0, [9])]:
        t.add("gather", [spec(x), spec(index, "int64")], {"dim": dim},
              lambda xx, ii, dim=dim: torch.gather(xx, dim, ii))
    for x, dim, index, src in [([4, 5], 0, [2, 5], [2, 5]), ([4, 5], 0, [2, 3], [3, 4]),
                               ([4, 5], 1, [4, 7], [4, 7]), ([4, 5], 0, [6, 5], [6, 5]),
                               ([4, 5], 0, [2, 6], [2, 6]), ([4, 5], 0, [2, 5], [2, 4]),
                               ([4, 5], 1, [4, 2], [5, 3]), ([4, 5], 0, [2], [2]),
                               ([4, 5], -1, [0, 0], [0, 0]), ([4, 5], 2, [1, 1], [1, 1]),
                               ([4, 5, 6], 2, [4, 5, 9], [4, 5, 9]), ([5], 0, [9], [9])]:
        for op, fn in [("scatter", torch.scatter), ("scatter_add", torch.scatter_add)]:
            t.add(op, [spec(x), spec(index, "int64"), spec(src)], {"dim": dim},
                  lambda xx, ii, ss, fn=fn, dim=dim: fn(xx, dim, ii, ss))
    for x, repeats in [([2, 3], [1, 1]), ([2, 3], [2, 3]), ([2, 3], [2, 1, 1]), ([2, 3], [0, 2]),
                       ([2, 3], [2]), ([], [3]), ([], []), ([0, 3], [2, 2]),
                       ([2, 3], [1, 2, 3, 4]), ([2, 3], [-1, 2])]:
        t.add("repeat", [spec(x)], {"repeats": repeats},
              lambda xx, repeats=repeats: xx.repeat(repeats))
    for x, dims in [([2, 3, 4], [0]), ([2, 3, 4], [0, 2]), ([2, 3, 4], [-1]), ([2, 3, 4], []),
                    ([2, 3, 4], [3]), ([2, 3, 4], [0, 0]), ([2, 3, 4], [0, -3]), ([], [0]),
                    ([], [])]:
        t.add("flip", [spec(x)], {"dims": dims}, lambda xx, dims=dims: torch.flip(xx, dims))
    for op, fn in [("tril", torch.tril), ("triu", torch.triu)]:
        for x in [[3, 4], [2, 3, 4], [0, 5], [5], []]:
            for diagonal in [0, 1, -2, 10]:
                t.add(op, [spec(x)], {"diagonal": diagonal},
                      lambda xx, fn=fn, diagonal=diagonal: fn(xx, diagonal))
    for x in [[], [3], [2, 3], [0, 4]]:
        for classes in [1, 5]:
            t.add("one_hot", [spec(x, "int64")], {"num_classes": classes},
                  lambda ii, classes=classes: F.one_hot(ii, classes))
    for index, weight, padding_idx in [([2, 3], [10, 4], None), ([], [10, 4], None),
                                       ([5], [10, 4], 3), ([2, 3], [10, 4], -1),
                                       ([2, 3], [10, 4], 10), ([2, 3], [10, 4], -11),
                                       ([2, 3], [10], None), ([2, 3], [10, 4, 1], None),
                                       ([0, 2], [10, 0], None), ([4, 1, 2], [3, 7], None)]:
        t.add("embedding", [spec(index, "int64"), spec(weight)], {"padding_idx": padding_idx},
              lambda ii, ww, padding_idx=padding_idx: F.embedding(ii, ww, padding_idx))


# --- network ops ---------------------------------------------------------------------------

def nn_cases(t):
    for q, k, v, mask, causal in [
            ([2, 3, 5, 8], [2, 3, 7, 8], [2, 3, 7, 6], None, False),
            ([2, 3, 5, 8], [2, 3, 7, 8], [2, 3, 7, 6], None, True),
            ([5, 8], [7, 8], [7, 6], None, False),
            ([4, 5, 8], [4, 7, 8], [4, 7, 8], None, False),
            ([2, 3, 5, 8], [2, 3, 7, 8], [2, 3, 7, 6], ([5, 7], "bool"), False),
            ([2, 3, 5, 8], [2, 3, 7, 8], [2, 3, 7, 6], ([1, 1, 5, 7], "float32"), False),
            ([2, 3, 5, 8], [2, 3, 7, 8], [2, 3, 7, 6], ([2, 3, 5, 7], "bool"), False),
            ([2, 3, 5, 8], [2, 3, 7, 8], [2, 3, 7, 6], ([5, 1], "bool"), False),
            ([2, 3, 5, 8], [2, 3, 7, 8], [2, 3, 7, 6], ([5, 6], "bool"), False),
            ([2, 3, 5, 8], [2, 3, 7, 8], [2, 3, 7, 6], ([3, 5, 7], "bool"), False),
            ([2, 3, 5, 8], [2, 3, 7, 9], [2, 3, 7, 6], None, False),
            ([2, 3, 5, 8], [2, 3, 7, 8], [2, 3, 6, 6], None, False),
            ([8], [7, 8], [7, 6], None, False),
            ([2, 3, 0, 8], [2, 3, 7, 8], [2, 3, 7, 6], None, False),
            ([2, 3, 5, 8], [2, 3, 0, 8], [2, 3, 0, 6], None, False)]:
        inputs = [spec(q), spec(k), spec(v), None if mask is None else spec(*mask)]
        t.add("scaled_dot_product_attention", inputs, {"is_causal": causal},
              lambda qq, kk, vv, mm, causal=causal: F.scaled_dot_product_attention(
                  qq, kk, vv, mm, is_causal=causal))
    for x, shape, param in [([2, 3, 4], [4], True), ([2, 3, 4], [3, 4], False),
                            ([2, 3, 4], [2, 3, 4], True), ([2, 3, 4], [3], False),
                            ([2, 3, 4], [2, 2, 3, 4], False), ([4], [4], True),
                            ([2, 3, 4], [4, 3], False), ([0, 4], [4], True)]:
        inputs = [spec(x)] + ([spec(shape), spec(shape)] if param else [None, None])
        t.add("layer_norm", inputs, {"normalized_shape": shape},
              lambda xx, w, b, shape=shape: F.layer_norm(xx, shape, w, b))
    t.add("layer_norm", [spec([2, 3, 4]), spec([3]), None], {"normalized_shape": [4]},
          lambda xx, w, b: F.layer_norm(xx, [4], w, b))
    for x in [[2, 6, 5], [2, 6], [1, 6, 2, 3]]:
        for groups in [1, 2, 3, 6, 4]:
            t.add("group_norm", [spec(x), spec([6]), spec([6])], {"num_groups": groups},
                  lambda xx, w, b, groups=groups: F.group_norm(xx, groups, w, b))
    t.add("group_norm", [spec([2, 6, 5]), spec([3]), None], {"num_groups": 3},
          lambda xx, w, b: F.group_norm(xx, 3, w, b))
    t.add("group_norm", [spec([6]), None, None], {"num_groups": 3},
          lambda xx, w, b: F.group_norm(xx, 3, w, b))
    for x, c, training in [([4, 3], 3, False), ([4, 3], 3, True), ([2, 3, 5], 3, True),
                           ([2, 3, 4, 4], 3, False), ([1, 3], 3, True), ([1, 3], 3, False),
                           ([2, 3, 5], 4, False), ([1, 3, 1, 1], 3, True), ([3], 3, False)]:
        inputs = [spec(x), spec([c]), spec([c]), spec([c]), spec([c])]
        t.add("batch_norm", inputs, {"training": training},
              lambda xx, rm, rv, w, b, training=training: F.batch_norm(
                  xx, rm, rv.add(1), w, b, training))
    for x, target, weight in [([4, 5], [4], None), ([5], [], None), ([2, 5, 3, 3], [2, 3, 3], [5]),
                              ([4, 5], [3], None), ([4, 5], [4], [4]), ([4, 5], [4, 1], None),
                              ([2, 5, 3], [2, 3], [5]), ([0, 5], [0], None)]:
        for reduction in ["none", "mean", "sum"]:
            inputs = [spec(x), spec(target, "int64"), None if weight is None else spec(weight)]
            t.add("nll_loss", inputs, {"reduction": reduction},
                  lambda xx, tt, w, reduction=reduction: F.nll_loss(
                      xx, tt, w, reduction=reduction))
    for cls, op in [(torch.nn.LSTM, "lstm"), (torch.nn.GRU, "gru")]:
        for x, input_size, hidden, layers, batch_first, bidirectional in [
                ([5, 2, 4], 4, 3, 1, False, False), ([5, 2, 4], 4, 3, 2, False, True),
                ([2, 5, 4], 4, 6, 1, True, False), ([5, 4], 4, 3, 2, False, False),
                ([5, 4], 4, 3, 1, True, True), ([5, 2, 3], 4, 3, 1, False, False)]:
            attrs = {"input_size": input_size, "hidden_size": hidden, "num_layers": layers,
                     "batch_first": batch_first, "bidirectional": bidirectional}
            module = cls(input_size, hidden, layers, batch_first=batch_first,
                         bidirectional=bidirectional)
            t.add(op, [spec(x)], attrs,
                  lambda xx, module=module: flatten_rnn(module(xx)))


def flatten_rnn(result):
    output, state = result
    return [output] + (list(state) if isinstance(state, tuple) else [state])


# --- factories -----------------------------------------------------------------------------

def factory_cases(t):
    for args in [(10,), (0,), (2.5,), (0, 10, 3), (0, 1, 0.1), (1, 2.5, 0.5), (0, -5, -2),
                 (-1.5, 2.3, 0.7), (0, 10, -1), (0, 10, 0), (5, 5, 1), (0.0, 1.0, 0.3),
                 (1, 0.0, -0.25), (0, 1, 1 / 3), (-3, 4, 7), (-3, 4, 8), (0.5, 1e3, 1.5),
                 (10, 0, 1), (0, 1, 0.25)]:
        start, end, step = (0, args[0], 1) if len(args) == 1 else args
        t.add("arange", [], {"start": start, "end": end, "step": step},
              lambda: torch.arange(start, end, step))
    for start, end, steps in [(0, 1, 5), (0, 1, 0), (0, 1, 1), (3, -2, 7), (0, 1, -1)]:
        t.add("linspace", [], {"start": float(start), "end": float(end), "steps": steps},
              lambda: torch.linspace(start, end, steps))
    for n, m in [(3, None), (2, 5), (0, None), (4, 0), (-1, None), (2, -3)]:
        attrs = {"n": n} if m is None else {"n": n, "m": m}
        t.add("eye", [], attrs, lambda: torch.eye(n) if m is None else torch.eye(n, m))
    for sizes in [[2, 3], [], [0, 4], [-1], [2, -3]]:
        t.add("full", [], {"sizes": sizes, "value": 1.5}, lambda: torch.full(sizes, 1.5))


# --- pad and interpolate values ------------------------------------------------------------

def resample_values():
    entries = []

    def add(op, shape, attrs, call):
        x = torch.arange(math.prod(shape), dtype=torch.float64).reshape(shape)
        y = call(x)
        entries.append({"op": op, "shape": shape, "attrs": attrs, "out_shape": list(y.shape),
                        "values": y.flatten().tolist()})

    for shape, pads in [([7], [[2, 3], [-2, 1], [-3, -2], [0, -7]]),
                        ([3, 7], [[2, 3], [6, 6], [0, 1]]),
                        ([2, 3, 7], [[2, 3], [6, 5], [1, 0], [3, 3, 2, 2], [-1, 2, 1, -2]]),
                        ([1, 2, 5, 7], [[2, 3, 1, 4], [6, 6, 4, 4], [-2, 1, 3, -1],
                                        [1, 1, 1, 1, 1, 1]]),
                        ([2, 1, 3, 4], [[3, 0, 2, 2], [1, 2, 0, 1]]),
                        ([1, 1, 3, 4, 5], [[1, 2, 2, 1, 1, 2], [4, 4, 3, 3, 2, 2]])]:
        for pad in pads:
            for mode in ["constant", "reflect", "replicate"]:
                n = len(shape)
                if mode != "constant":
                    if min(pad) < 0 or len(pad) // 2 not in (n - 1, n - 2) or n < 2:
                        continue
                    if mode == "reflect" and any(
                            p >= shape[-1 - i // 2] for i, p in enumerate(pad)):
                        continue
                value = -1.5 if mode == "constant" else 0.0
                add("pad", shape, {"pad": pad, "mode": mode, "value": value},
                    lambda x, pad=pad, mode=mode, value=value: F.pad(
                        x, pad, mode, value if mode == "constant" else None))

    def interp(shape, size=None, scale=None, mode="nearest", align=None):
        add("interpolate", shape, *interpolate_call(size, scale, mode, align))

    for shape in [[1, 2, 5, 7], [2, 1, 3, 4]]:
        for size in [[10, 14], [3, 4], [7, 5], [11, 9], [1, 1]]:
            interp(shape, size=size)
            for align in [False, True]:
                interp(shape, size=size, mode="bilinear", align=align)
        for scale in [2, 0.5, 1.5, 0.7, 2.3, [1.5, 0.7]]:
            interp(shape, scale=scale)
            for align in [False, True]:
                interp(shape, scale=scale, mode="bilinear", align=align)
    for shape in [[2, 3, 7], [1, 1, 3, 4, 5]]:
        for size in [[4], [11]]:
            interp(shape, size=size[0])
        for scale in [1.5, 0.7, 2.3]:
            interp(shape, scale=scale)
    return entries


# --- writing -------------------------------------------------------------------------------

def number(v):
    """A float64 as a JSON number that reads back exactly: an integer, or 17 digits."""
    if v == int(v) and abs(v) < 2 ** 53:
        return str(int(v))
    return "%.17g" % v


def entry_line(entry):
    values = entry.pop("values", None)
    line = json.dumps(entry, separators=(",", ":"))
    if values is not None:
        line = line[:-1] + ',"values":[' + ",".join(number(v) for v in values) + "]}"
    return line


def write_table(path, entries):
    with open(path, "w") as f:
        f.write("[\n" + ",\n".join(entry_line(e) for e in entries) + "\n]\n")
    print(f"{path}: {len(entries)} entries, {os.path.getsize(path)} bytes")


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")  # PyTorch's notes on even "same" kernels and var of one value
    here = os.path.dirname(os.path.abspath(__file__))
    out_dir = os.path.normpath(os.path.join(here, "..", "data", "op_tables"))
    os.makedirs(out_dir, exist_ok=True)
    t = Table()
    for make in [pointwise_cases, linalg_cases, conv_cases, resample_shape_cases, reduce_cases,
                 view_cases, shape_cases, nn_cases, factory_cases]:
        make(t)
    write_table(os.path.join(out_dir, "shapes.json"), t.entries)
    write_table(os.path.join(out_dir, "resample.json"), resample_values())


if __name__ == "__main__":
    main()
