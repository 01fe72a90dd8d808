"""Makes PyTorch's answers for kiln's composite functions, the oracle of
tests/unit/composites_test.cpp.

    python3 tests/parity/make_composite_references.py   # -> tests/data/composites/torch.safetensors

kiln writes rms_norm, the rotary embeddings, instance_norm, the transposed
convolutions, the 1-D and adaptive max pools, pixel (un)shuffle, einsum and
the losses smooth_l1, huber and kl_div as compositions of its ops. The
op-consistency test checks the ops' kernels against the reference kernels;
this file checks the compositions themselves against PyTorch, which shares no
code with them: for each case its float64 inputs "<case>.in<i>", PyTorch's
outputs "<case>.out<j>" and the gradients "<case>.grad<i>" of
sum_j sum(out_j * <case>.w<j>) with respect to each floating input (the
weights "<case>.w<j>" are stored too).

The output is the same on every run: rerun the script after changing a case
and commit the file.
"""
import os

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

torch.manual_seed(20261207)
OUT = {}


def rand(*shape):
    return torch.rand(shape, dtype=torch.float64) * 4 - 2


def case(name, inputs, fn, constant=()):
    """Records inputs, fn's outputs and the gradients of a weighted sum of them
    with respect to the floating inputs whose indices are not in constant."""
    leaves = [t.clone().requires_grad_(t.is_floating_point() and i not in constant)
              for i, t in enumerate(inputs)]
    outs = fn(*leaves)
    outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
    loss = 0
    for j, o in enumerate(outs):
        OUT[f"{name}.out{j}"] = o.detach().contiguous()
        if o.is_floating_point() and o.requires_grad:
            w = rand(*o.shape)
            OUT[f"{name}.w{j}"] = w
            loss = loss + (o * w).sum()
    grads = torch.autograd.grad(loss, [t for t in leaves if t.requires_grad], allow_unused=True) \
        if torch.is_tensor(loss) else []
    g = iter(grads)
    for i, t in enumerate(leaves):
        OUT[f"{name}.in{i}"] = inputs[i].contiguous()
        if t.requires_grad:
            gi = next(g)
            OUT[f"{name}.grad{i}"] = (gi if gi is not None else torch.zeros_like(t)).contiguous()


# --- normalizations -----------------------------------------------------------------------
case("rms_norm_weight", [rand(3, 5, 8), rand(8)], lambda x, w: F.rms_norm(x, (8,), w, 1e-6))
case("rms_norm_two_dims", [rand(4, 5, 6)], lambda x: F.rms_norm(x, (5, 6)))


def instance_norm_with_stats(x, w, b):
    rm = torch.zeros(3, dtype=torch.float64)
    rv = torch.ones(3, dtype=torch.float64)
    y = F.instance_norm(x, rm, rv, w, b, use_input_stats=True, momentum=0.2, eps=1e-5)
    return y, rm, rv


case("instance_norm", [rand(2, 3, 5, 4), rand(3), rand(3)], instance_norm_with_stats)
case("instance_norm_eval", [rand(2, 3, 7), rand(3).abs() + 0.5, rand(3)],
     lambda x, rm, rv: F.instance_norm(x, rm, rv, use_input_stats=False), constant=(1, 2))


# --- rotary embeddings, written as the Llama checkpoints' code computes them -------------------
def rotary(x, positions):
    dim = x.shape[-1]
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    freqs = positions.float()[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    x1, x2 = x[..., : dim // 2], x[..., dim // 2:]
    rotated = torch.cat((-x2, x1), dim=-1)
    return cos, sin, x * cos.to(x.dtype) + rotated * sin.to(x.dtype)


case("rotary", [rand(2, 3, 7, 8), torch.tensor([0, 1, 2, 3, 9, 100, 4095])], rotary)

# --- losses -------------------------------------------------------------------------------
case("smooth_l1", [rand(6, 7), rand(6, 7)],
     lambda a, b: (F.smooth_l1_loss(a, b, beta=0.5), F.smooth_l1_loss(a, b, reduction="none"),
                   F.smooth_l1_loss(a, b, beta=0.0, reduction="sum")))
case("huber", [rand(6, 7), rand(7)],
     lambda a, b: (F.huber_loss(a, b.expand(6, 7), delta=0.7),
                   F.huber_loss(a, b.expand(6, 7), reduction="none", delta=2.5)))
case("kl_div", [F.log_softmax(rand(5, 9), -1), F.softmax(rand(5, 9), -1).index_fill(1, torch.tensor([2]), 0.0)],
     lambda i, t: (F.kl_div(i, t, reduction="batchmean"), F.kl_div(i, t, reduction="none"),
                   F.kl_div(i, t.clamp_min(1e-9).log(), reduction="sum", log_target=True)))

# --- convolution family -------------------------------------------------------------------
case("conv_transpose2d", [rand(2, 4, 5, 6), rand(4, 3, 3, 3), rand(3)],
     lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1))
case("conv_transpose2d_groups", [rand(2, 4, 5, 6), rand(4, 2, 3, 2)],
     lambda x, w: F.conv_transpose2d(x, w, stride=(2, 1), padding=(0, 1), groups=2,
                                     dilation=(1, 2)))
case("conv_transpose2d_unbatched", [rand(3, 4, 4), rand(3, 5, 2, 2), rand(5)],
     lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2))
case("conv_transpose1d", [rand(2, 4, 9), rand(4, 3, 5), rand(3)],
     lambda x, w, b: F.conv_transpose1d(x, w, b, stride=3, padding=2, output_padding=1))
case("pools_1d", [rand(2, 3, 11)],
     lambda x: (F.max_pool1d(x, 3, 2, 1), F.max_pool1d(x, 4, 3, 2, dilation=1, ceil_mode=True),
                F.avg_pool1d(x, 3, 2, 1), F.avg_pool1d(x, 4, 3, 1, ceil_mode=True,
                                                       count_include_pad=False)))
case("adaptive_max_pool2d", [rand(2, 3, 7, 9)],
     lambda x: (F.adaptive_max_pool2d(x, (3, 4)), F.adaptive_max_pool2d(x, (7, 2)),
                F.adaptive_max_pool2d(x, 1), F.adaptive_max_pool2d(x[..., :6, :6], (3, 2))))
case("pixel_shuffle", [rand(2, 18, 3, 4), rand(5, 2, 6, 9)],
     lambda a, b: (F.pixel_shuffle(a, 3), F.pixel_unshuffle(b, 3), F.pixel_shuffle(a[0], 3)))

# --- scans, einsum and indexing --------------------------------------------------------------
def with_zeros(t):
    t = t.clone()
    t.view(-1)[::5] = 0
    return t


case("cumprod", [with_zeros(rand(3, 13)), rand(5, 2, 3), torch.arange(-3, 9).reshape(3, 4)],
     lambda a, b, c: (torch.cumprod(a, 1), torch.cumprod(b, 0), torch.cumprod(c, -1),
                      torch.cumprod(a, 0)))
case("einsum", [rand(3, 4), rand(4, 5), rand(2, 3, 6, 4), rand(2, 3, 7, 4), rand(5, 5), rand(6),
                rand(5, 2)],
     lambda a, b, q, k, sq, v, c: (torch.einsum("ij,jk->ik", a, b), torch.einsum("ij,jk", a, b),
                                torch.einsum("bhqd,bhkd->bhqk", q, k),
                                torch.einsum("ii->i", sq), torch.einsum("ii", sq),
                                torch.einsum("...ij->...ji", q), torch.einsum("i,j->ij", v, v),
                                torch.einsum("ij,ij->", a, a), torch.einsum("hqd,hkd->qk", q[0], k[0]),
                                torch.einsum("ab, bc , cd -> ad", a, b, c)))
case("index_ops", [rand(5, 4), rand(3, 4), torch.tensor([4, 0, 2]), rand(5, 3)],
     lambda x, src, idx, cols: (torch.index_add(x, 0, idx, src, alpha=2.0),
                                torch.index_copy(x, 0, idx, src),
                                torch.index_add(x, 1, torch.tensor([3, 3, 1]), cols)))
case("advanced_index", [rand(4, 5, 6), torch.tensor([[0, 3], [2, 2]]), torch.tensor([1, -1]),
                        rand(4, 5, 6) > 0.5],
     lambda x, i, j, m: (x[i], x[:, j], x[i, :, j], x[:, i, j], x[m], x[m[:, :, 0]],
                         x[:, 1:3][:, j]))
def put_columns(x, row):
    y = x.clone()
    y[:, torch.tensor([1, 2])] = row.reshape(1, 1, 6) * 2
    return y


case("advanced_index_put", [rand(4, 5, 6), torch.tensor([1, 3, 1]), rand(3, 6), rand(6)],
     lambda x, i, v, row: (torch.index_put(x, (i, torch.tensor([0, 4, 0])), v, accumulate=True),
                           torch.index_put(x, (torch.tensor([2]), ), row),
                           torch.index_put(x, (x > 1.0,), torch.tensor(0.0, dtype=torch.float64)),
                           put_columns(x, row)))
case("nonzero", [torch.tensor([[0, 1, 0], [2, 0, 3]]), rand(3, 4), rand(3, 4) > 0],
     lambda a, x, m: (torch.nonzero(a), torch.nonzero(a[0]), torch.masked_select(x, m),
                      torch.masked_select(x, m[0]), torch.nonzero(torch.zeros(2, 3)),
                      torch.repeat_interleave(x, torch.tensor([2, 0, 1]), 0),
                      torch.repeat_interleave(x, torch.tensor([3]))))

os.makedirs("tests/data/composites", exist_ok=True)
save_file(OUT, "tests/data/composites/torch.safetensors")
print(f"{len(OUT)} tensors")
