"""Round 24 of the differential fuzzer against PyTorch: zero-size tensors through every family
of ops, second derivatives through non-contiguous views and through random compositions, all
under every checkpointing strategy. Each generator takes a ``numpy`` generator and returns a
:class:`fuzz12_cases.Trial` written once against a namespace ``lib`` (``torch`` or
``retrograd``); :func:`check` runs it on both and raises :class:`fuzz_cases.Mismatch` on the
first difference in raising or not, dtype, shape or value (gradients included), then runs
retrograd's side under every checkpointing strategy, whose results must be bit-identical to
NoCheckpointing's.

- ``empty``: tensors with a zero-size dimension (float64 leaves, float32, int64, bool)
  through reductions with dims and ``keepdim`` (sum, mean, prod, amax, max, argmax,
  logsumexp, var, std, norm at several orders, all, any, median, mode, kthvalue,
  quantile), scans, sorting and ``topk``, softmax, ``cat``/``stack``/``split``/``chunk``
  with empty pieces (the legacy 1-d empty ``cat`` operand included), products (``matmul``,
  ``mm``, ``bmm``, ``mv``, ``outer``, ``einsum``, ``tensordot``, ``linalg`` of 0x0 matrices),
  indexing with empty index tensors and all-false masks, ``gather``/``scatter``/
  ``index_select``/``index_add``, ``reshape`` with ``-1`` (ambiguous: both refuse),
  ``repeat``/``tile``/``expand``/``flip``/``roll``/``diff``/``unfold``, losses over an empty
  batch and the ``nn.functional`` layers over an empty batch: values, refusals and gradients,
  each read plainly, transposed or expanded from a smaller leaf;
- ``empty_nn``: 1-3d ``nn.functional`` layers (every pool, adaptive pools to empty and
  non-empty outputs, ``interpolate`` in every mode, ``F.pad`` in every mode, ``unfold``,
  norms, softmax over channels, ``linear``, a convolution with no output channels) over
  batched and unbatched inputs whose batch, channel or a spatial dimension is empty: the
  refusals torch makes (an input without channels) and its results otherwise. (No
  convolution of zero input channels: torch's result has no output channels, a torch bug; no
  ``pixel_unshuffle``: torch returns an empty input unchanged);
- ``views``: a float64 leaf read through a chain of 1-3 non-contiguous views (``transpose``,
  ``permute``, ``expand``, ``narrow``, stepped slices, ``diagonal``, ``unfold`` with
  overlapping windows, ``movedim``, ``select``, ``mT``; no ``as_strided``: retrograd has none,
  and torch's surface list does not name it), then a consumer (reductions with
  dims, ``gather``/``index_select``/advanced indexing, an in-place op on a clone of the view,
  ``matmul``, ``sort``, scans, ``softmax``, ``where``, or ``add_``/``mul_``/``copy_``
  through the view into the non-leaf it views, whose every other element must see the write
  as torch's does, or be refused as torch refuses it): values, gradients and second
  derivatives;
- ``grad2``: compositions of 2-4 smooth ops of one or two leaves (elementwise binaries with
  broadcasting, ``lerp``, ``addcdiv``, ``atan2``, ``hypot``, ``logaddexp``, ``where``,
  ``clamp`` with tensor bounds, activations, special functions, norms, ``cosine_similarity``,
  softmax, ``var``, scans, ``matmul``, losses): the gradient with ``create_graph=True`` and
  the gradient of a weighted sum of it, against ``torch.autograd.grad``;
- ``promote``: ``lerp`` (0-d weights of other dtypes), ``addcmul``/``addcdiv``, ``logaddexp``,
  ``igamma``/``gammaincc``, ``xlog1py``, ``zeta``, ``fmin``, ``heaviside``, ``nextafter``,
  ``ldexp``, ``float_power``, ``copysign``, the fills (``masked_fill``, ``index_fill``,
  ``fill_``), ``clamp_``, ``where`` and ``isclose`` across int64/bool/float32/float64 tensors,
  0-d tensors and Python numbers: result dtypes, values, refusals and float gradients.

Known differences are left out of the draws and named where they are.
"""

from __future__ import annotations

import numpy as np

from fuzz12_cases import Trial, _leaves, _pick
from fuzz14_cases import _grads, _weight_fn
from fuzz17_cases import _array
from fuzz17_cases import check as _check17

__all__ = ["GENERATORS", "check"]

GENERATORS: dict = {}


def gen(name):
    def register(fn):
        GENERATORS[name] = fn
        return fn

    return register


def check(trial: Trial) -> None:
    """Against torch, then retrograd's results under every strategy against NoCheckpointing."""
    _check17(trial, strategies=True)


def _is_float(lib, t) -> bool:
    return isinstance(t, lib.Tensor) and t.dtype in (lib.float64, lib.float32)


def _trial(name, body, weight, rtol=1e-9, second=False):
    """body(lib) -> (results, leaves); the results, their gradients, and with ``second`` the
    gradient of a weighted sum of those gradients (``create_graph``)."""

    def fn(lib):
        results, leaves = body(lib)
        results = _leaves(results)
        tensors = [r for r in results if isinstance(r, lib.Tensor)]
        if not second:
            return [*results, *_grads(lib, tensors, leaves, weight)]
        outs = [(k, o) for k, o in enumerate(tensors) if _is_float(lib, o) and o.requires_grad]
        if not outs:
            return results
        total = 0
        for k, o in outs:
            w = lib.tensor(np.asarray(weight(tuple(o.shape))) * (k + 1), dtype=o.dtype)
            total = total + (o * w).sum()
        grads = lib.autograd.grad(total, leaves, create_graph=True, allow_unused=True)
        grads = [lib.zeros_like(x) if g is None else g for g, x in zip(grads, leaves)]
        tracked = [g for g in grads if g.requires_grad]
        if not tracked:  # (piecewise linear: retrograd's graph may end where torch's does not)
            return [*results, *grads, *[lib.zeros_like(x) for x in leaves]]
        gsum = 0
        for k, g in enumerate(tracked):
            w = lib.tensor(np.asarray(weight(tuple(g.shape)))[::-1].copy() * (k + 2), dtype=g.dtype)
            gsum = gsum + (g * w).sum()
        second_grads = lib.autograd.grad(gsum, leaves, allow_unused=True)
        second_grads = [lib.zeros_like(x) if g is None else g for g, x in zip(second_grads, leaves)]
        return [*results, *grads, *second_grads]

    return Trial(name, fn, rtol=rtol)


# ---- zero-size tensors -------------------------------------------------------------------


def _dim(rng, x_ndim_hint):
    return int(rng.integers(-x_ndim_hint, x_ndim_hint)) if x_ndim_hint else 0


def _empty_shape(rng):
    """A shape of rank 1-3 with at least one zero-size dimension."""
    n = int(rng.integers(1, 4))
    shape = [int(s) for s in rng.integers(1, 4, size=n)]
    for d in rng.permutation(n)[: int(rng.integers(1, n + 1))]:
        shape[int(d)] = 0
    return tuple(shape)


def _empty_ops(rng, shape):
    """fn(lib, x) -> results for an input of ``shape``, drawn once (both libraries alike)."""
    n = len(shape)
    d = int(rng.integers(-n, n))
    keep = bool(rng.random() < 0.5)
    nonzero_dims = [i for i, s in enumerate(shape) if s]
    c = lambda *v: _pick(rng, *v)  # noqa: E731
    i64 = lambda lib, v: lib.tensor(v, dtype=lib.int64)  # noqa: E731
    idx_shape = list(shape)
    ord_ = float(c(1, 3, float("inf"), 0, -1))
    size = int(c(1, 2))
    minlength = int(c(0, 2))
    matrix_ord = c("fro", "nuc", 1, -1, 2, -2, float("inf"), -float("inf"))
    return {
        "sum": lambda lib, x: x.sum(d, keepdim=keep),
        "sum_all": lambda lib, x: x.sum(),
        "sum_dims": lambda lib, x: x.sum(tuple(range(n)), keepdim=keep),
        "mean": lambda lib, x: x.mean(d, keepdim=keep),
        "mean_all": lambda lib, x: x.mean(),
        "nanmean": lambda lib, x: x.nanmean(d, keepdim=keep),
        "prod": lambda lib, x: x.prod(d, keepdim=keep),
        "prod_all": lambda lib, x: x.prod(),
        "amax": lambda lib, x: x.amax(d, keepdim=keep),
        "amin_all": lambda lib, x: x.amin(),
        "max_dim": lambda lib, x: x.max(d, keepdim=keep),
        "min_all": lambda lib, x: x.min(),
        "argmax": lambda lib, x: x.argmax(d, keepdim=keep),
        "argmin_all": lambda lib, x: x.argmin(),
        "aminmax": lambda lib, x: lib.aminmax(x, dim=d, keepdim=keep),
        "logsumexp": lambda lib, x: x.logsumexp(d, keepdim=keep),
        "var": lambda lib, x: x.var(d, keepdim=keep),
        "var_all": lambda lib, x: x.var(),
        "std_c0": lambda lib, x: x.std(d, correction=0, keepdim=keep),
        "var_mean": lambda lib, x: lib.var_mean(x, d, keepdim=keep),
        "norm": lambda lib, x: x.norm(dim=d, keepdim=keep),
        "norm_all": lambda lib, x: x.norm(),
        "vector_norm": lambda lib, x: lib.linalg.vector_norm(x, ord_, dim=d),
        "vector_norm_inf_all": lambda lib, x: lib.linalg.vector_norm(x, float("inf")),
        "all": lambda lib, x: x.all(d, keepdim=keep),
        "any_all": lambda lib, x: x.any(),
        "count_nonzero": lambda lib, x: lib.count_nonzero(x, dim=d),
        "median_dim": lambda lib, x: x.median(d, keepdim=keep),
        "median_all": lambda lib, x: x.median(),
        "mode": lambda lib, x: x.mode(d, keepdim=keep),
        "kthvalue": lambda lib, x: x.kthvalue(1, d, keepdim=keep),
        "quantile": lambda lib, x: lib.quantile(x, 0.5, dim=d, keepdim=keep),
        "quantile_all": lambda lib, x: lib.quantile(x, 0.5),
        "cumsum": lambda lib, x: x.cumsum(d),
        "cumprod": lambda lib, x: x.cumprod(d),
        "logcumsumexp": lambda lib, x: x.logcumsumexp(d),
        "cummax": lambda lib, x: x.cummax(d),
        "sort": lambda lib, x: x.sort(dim=d, descending=keep, stable=True),
        "argsort": lambda lib, x: x.argsort(d),
        "topk0": lambda lib, x: x.topk(0, d),
        "topk1": lambda lib, x: x.topk(1, d),
        "msort": lambda lib, x: lib.msort(x),
        "unique": lambda lib, x: lib.unique(x, return_inverse=True, return_counts=True),
        "softmax": lambda lib, x: lib.softmax(x, d),
        "log_softmax": lambda lib, x: lib.log_softmax(x, d),
        "flip": lambda lib, x: x.flip(d),
        "roll": lambda lib, x: x.roll(2, d),
        "roll_flat": lambda lib, x: x.roll(1),
        "diff": lambda lib, x: x.diff(dim=d),
        "repeat": lambda lib, x: x.repeat(*([2] * n)),
        "tile": lambda lib, x: x.tile((3,)),
        "repeat_interleave": lambda lib, x: x.repeat_interleave(2, dim=d),
        "expand": lambda lib, x: x.unsqueeze(0).expand(2, *shape),
        "unfold": lambda lib, x: x.unfold(d, 1, 1),
        "reshape_neg": lambda lib, x: x.reshape(-1),
        "reshape_ambiguous": lambda lib, x: x.reshape(0, -1),
        "reshape_neg_last": lambda lib, x: x.reshape(*shape[:-1], -1, 1),
        "view_flat": lambda lib, x: x.view(-1),
        "flatten": lambda lib, x: x.flatten(),
        "squeeze": lambda lib, x: x.squeeze(),
        "transpose": lambda lib, x: x.transpose(0, -1).contiguous(),
        "split": lambda lib, x: x.split(size, d),
        "split_sizes": lambda lib, x: x.split([0, shape[d]], d),
        "chunk": lambda lib, x: x.chunk(2, d),
        "unbind": lambda lib, x: x.unbind(d),
        "cat_self": lambda lib, x: lib.cat([x, x], d),
        "cat_other": lambda lib, x: lib.cat([x, lib.ones(*[s or 2 for s in shape]).double()], d),
        "cat_legacy": lambda lib, x: lib.cat([lib.zeros(0, dtype=x.dtype), x], d),
        "stack": lambda lib, x: lib.stack([x, x * 2], d),
        "hstack": lambda lib, x: lib.hstack([x, x]),
        "vstack": lambda lib, x: lib.vstack([x, x]),
        "matmul_T": lambda lib, x: x @ x.transpose(-1, -2) if n > 1 else x @ x,
        "matmul_ones": lambda lib, x: x @ lib.ones(shape[-1], 2, dtype=x.dtype),
        "mm": lambda lib, x: lib.mm(
            x.reshape(shape[0], -1) if n > 1 else x[None],
            lib.ones(int(np.prod(shape[1:])) if n > 1 else shape[0], 3, dtype=x.dtype),
        ),
        "bmm": lambda lib, x: lib.bmm(x, x.transpose(1, 2)) if n == 3 else lib.bmm(x, x),
        "mv": lambda lib, x: lib.mv(x, lib.ones(shape[-1], dtype=x.dtype)),
        "outer": lambda lib, x: lib.outer(x.flatten(), lib.arange(3.0, dtype=x.dtype)),
        "dot": lambda lib, x: lib.dot(x.flatten(), x.flatten()),
        "einsum": lambda lib, x: lib.einsum("i...,i...->...", x, x),
        "tensordot": lambda lib, x: lib.tensordot(x, x, dims=n),
        "det": lambda lib, x: lib.linalg.det(x[..., :0, :0] if n > 1 else x[:0, None][:, :0]),
        "inv": lambda lib, x: lib.linalg.inv(x.reshape(0, 0) if x.numel() == 0 else x),
        "trace": lambda lib, x: lib.trace(x) if n == 2 else lib.trace(x.reshape(shape[0], -1)),
        "index_empty_list": lambda lib, x: x[i64(lib, [])],
        "index_empty_2": lambda lib, x: x[i64(lib, []), ..., i64(lib, [])] if n > 1 else x[[]],
        "index_false_mask": lambda lib, x: x[lib.zeros(*shape[:1], dtype=lib.bool)],
        "index_mask_all": lambda lib, x: x[lib.ones(*shape, dtype=lib.bool)],
        "index_oob": lambda lib, x: x[i64(lib, [0])],
        "index_slice": lambda lib, x: x[1:],
        "masked_select": lambda lib, x: lib.masked_select(x, x > 0),
        "masked_fill": lambda lib, x: x.masked_fill(lib.zeros(*shape, dtype=lib.bool), 1.0),
        "where": lambda lib, x: lib.where(x > 0, x, 2.0),
        "nonzero": lambda lib, x: lib.nonzero(x),
        "argwhere": lambda lib, x: lib.argwhere(x),
        "gather": lambda lib, x: x.gather(d, lib.zeros(*idx_shape, dtype=lib.int64)),
        "gather_small": lambda lib, x: x.gather(
            d, lib.zeros(*[0 if i == d % n else s for i, s in enumerate(shape)], dtype=lib.int64)
        ),
        "index_select": lambda lib, x: x.index_select(d, i64(lib, [])),
        "index_select_oob": lambda lib, x: x.index_select(d, i64(lib, [0])),
        "take": lambda lib, x: lib.take(x, i64(lib, [])),
        "take_oob": lambda lib, x: lib.take(x, i64(lib, [0])),
        "scatter_add": lambda lib, x: x.scatter_add(d, lib.zeros(*shape, dtype=lib.int64), x * 2),
        "index_add": lambda lib, x: x.index_add(d, i64(lib, []), x.narrow(d, 0, 0)),
        "index_fill": lambda lib, x: x.index_fill(d, i64(lib, []), 3.0),
        "clone_setitem": lambda lib, x: _setitem(lib, x),
        "clamp": lambda lib, x: x.clamp(min=lib.zeros(*shape[-1:], dtype=x.dtype)),
        "add_bcast": lambda lib, x: x + lib.ones(*[1] * n, 2, dtype=x.dtype)[..., :1],
        "add_bcast_bad": lambda lib, x: x + lib.ones(2, dtype=x.dtype),
        "mul_scalar0d": lambda lib, x: x * lib.tensor(2.5),
        "pow": lambda lib, x: x.pow(2),
        "sigmoid": lambda lib, x: x.sigmoid() if x.is_floating_point() else x + 1,
        "mse_loss": lambda lib, x: lib.nn.functional.mse_loss(x, x.detach() * 0.5),
        "l1_loss_sum": lambda lib, x: lib.nn.functional.l1_loss(x, x.detach(), reduction="sum"),
        "bce_logits": lambda lib, x: lib.nn.functional.binary_cross_entropy_with_logits(
            x, lib.zeros(*shape, dtype=x.dtype)
        ),
        "cross_entropy": lambda lib, x: lib.nn.functional.cross_entropy(
            x.reshape(0, 3) if x.numel() == 0 else x, lib.zeros(0, dtype=lib.int64)
        ),
        "nll_loss_sum": lambda lib, x: lib.nn.functional.nll_loss(
            x.reshape(0, 4), lib.zeros(0, dtype=lib.int64), reduction="sum"
        ),
        "linear": lambda lib, x: lib.nn.functional.linear(
            x, lib.ones(2, shape[-1], dtype=x.dtype), lib.ones(2, dtype=x.dtype)
        ),
        "layer_norm": lambda lib, x: lib.nn.functional.layer_norm(x, shape[-1:]),
        "normalize": lambda lib, x: lib.nn.functional.normalize(x, dim=d),
        "cosine_similarity": lambda lib, x: lib.nn.functional.cosine_similarity(x, x + 1, dim=d),
        "pad": lambda lib, x: lib.nn.functional.pad(x, (1, 1)),
        "one_hot": lambda lib, x: lib.nn.functional.one_hot(lib.zeros(*shape, dtype=lib.int64), 3),
        "embedding": lambda lib, x: lib.nn.functional.embedding(
            lib.zeros(*shape, dtype=lib.int64), lib.ones(3, 2, dtype=lib.float64)
        ),
        "conv1d_batch": lambda lib, x: lib.nn.functional.conv1d(
            x.reshape(0, 1, 3) if x.numel() == 0 else x, lib.ones(2, 1, 2, dtype=x.dtype)
        ),
        "max_pool1d": lambda lib, x: lib.nn.functional.max_pool1d(
            x.reshape(0, 2, 4) if x.numel() == 0 else x, 2
        ),
        "avg_pool1d": lambda lib, x: lib.nn.functional.avg_pool1d(
            x.reshape(0, 2, 4) if x.numel() == 0 else x, 2
        ),
        "adaptive_avg_pool1d": lambda lib, x: lib.nn.functional.adaptive_avg_pool1d(
            x.reshape(0, 2, 4) if x.numel() == 0 else x, 2
        ),
        "interpolate": lambda lib, x: lib.nn.functional.interpolate(
            x.reshape(0, 2, 4) if x.numel() == 0 else x, scale_factor=2.0
        ),
        "tril": lambda lib, x: x.tril(1) if n >= 2 else x.reshape(0, 2).tril(),
        "diagonal": lambda lib, x: x.diagonal(0, 0, -1) if n >= 2 else x.diag(),
        "diag_embed": lambda lib, x: lib.diag_embed(x),
        "searchsorted": lambda lib, x: lib.searchsorted(
            lib.arange(3.0, dtype=lib.float64), x.double()
        ),
        "bincount": lambda lib, x: lib.bincount(lib.zeros(0, dtype=lib.int64), minlength=minlength),
        "histc": lambda lib, x: lib.histc(x.double().flatten(), bins=3, min=0, max=1),
        "cdist": lambda lib, x: lib.cdist(
            x.reshape(-1, shape[-1]) if shape[-1] else x.reshape(-1, 0) if n > 1 else x[:, None],
            lib.ones(2, shape[-1] if n > 1 else 1, dtype=x.dtype),
        ),
        "std_all_c0": lambda lib, x: x.std(correction=0),
        "nonzero_dims": lambda lib, x: x.sum(nonzero_dims[0]) if nonzero_dims else x.sum(0),
        "amax_nonzero_dims": lambda lib, x: x.amax(tuple(nonzero_dims), keepdim=keep),
        "logsumexp_nonzero_dims": lambda lib, x: x.logsumexp(tuple(nonzero_dims) or 0),
        "std_nonzero_dims": lambda lib, x: x.std(tuple(nonzero_dims) or None, keepdim=keep),
        "cummin": lambda lib, x: lib.cummin(x, d),
        "index_put": lambda lib, x: x.index_put(
            (i64(lib, []),), lib.ones((), dtype=x.dtype), accumulate=keep
        ),
        "setitem_empty_index": lambda lib, x: _setitem_index(lib, x),
        "scatter_reduce": lambda lib, x: lib.zeros(3, dtype=x.dtype).scatter_reduce(
            0, lib.zeros(x.numel(), dtype=lib.int64), x.flatten(), "amax", include_self=keep
        ),
        "index_reduce": lambda lib, x: (
            lib.ones(*[s or 2 for s in shape], dtype=x.dtype)
            .narrow(d, 0, shape[d])
            .index_reduce(d, i64(lib, [0] * shape[d]), x, "prod")
        ),
        "masked_scatter": lambda lib, x: x.masked_scatter(
            lib.ones(*shape, dtype=lib.bool), lib.zeros(3, dtype=x.dtype)
        ),
        "nan_to_num": lambda lib, x: lib.nan_to_num(x, nan=1.0),
        "addmm": lambda lib, x: lib.addmm(
            lib.ones(2, 3, dtype=x.dtype),
            lib.ones(2, 0, dtype=x.dtype),
            x.reshape(0, 3) if x.numel() == 0 and n == 1 else lib.ones(0, 3, dtype=x.dtype),
            beta=0.5,
        ),
        "sum_to_empty_dtype": lambda lib, x: x.sum(d, dtype=lib.float32),
        "prod_dtype": lambda lib, x: x.prod(d, dtype=lib.float64),
        "cumsum_dtype": lambda lib, x: x.cumsum(d, dtype=lib.int64),
        "mean_dtype": lambda lib, x: x.mean(d, dtype=lib.float64),
        "argsort_desc": lambda lib, x: x.argsort(d, descending=True),
        "searchsorted_in_empty": lambda lib, x: lib.searchsorted(
            x.flatten().double().detach(), lib.tensor([0.5, -1.0], dtype=lib.float64)
        ),
        "bucketize": lambda lib, x: lib.bucketize(x, lib.tensor([0.0, 1.0], dtype=x.dtype)),
        "isin": lambda lib, x: lib.isin(x, lib.tensor([0, 1], dtype=x.dtype)),
        "triu_indices_fill": lambda lib, x: x.masked_fill(x != x, 2),
        "max_binary": lambda lib, x: lib.maximum(x, lib.zeros((), dtype=x.dtype)),
        "eq_scalar": lambda lib, x: x == 0,
        "allclose": lambda lib, x: lib.allclose(x.double(), x.double() + 1),
        "equal": lambda lib, x: lib.equal(x, x.clone()),
        "matrix_norm": lambda lib, x: lib.linalg.matrix_norm(
            x if n > 1 else x[:, None], ord=matrix_ord, keepdim=keep
        ),
        "item": lambda lib, x: x.item(),
        "tolist": lambda lib, x: str(x.tolist()),
    }


def _setitem_index(lib, x):
    y = x.clone() if x.is_floating_point() else x.double()
    y[lib.tensor([], dtype=lib.int64)] = 5.0
    y[..., :0] = y[..., :0] * 2
    return y


def _setitem(lib, x):
    y = x.clone() if x.is_floating_point() else x.double()
    y[y > 0] = 1.0
    y[...] = y * 2
    return y


EMPTY_DTYPES = ("float64", "float64", "float64", "float32", "int64", "bool")
#: drawn on float inputs only: torch's products and layers skip their dtype checks on an empty
#: operand (a bool ``mm`` of an empty matrix returns, of any other refuses); its losses take
#: int64 tensors where retrograd's refuse them (a deliberate difference: a DTypeError)
FLOAT_ONLY = {
    "mm", "bmm", "mv", "matmul_T", "matmul_ones", "outer", "dot", "einsum", "tensordot",
    "linear", "conv1d_batch", "max_pool1d", "avg_pool1d", "adaptive_avg_pool1d", "interpolate",
    "mse_loss", "l1_loss_sum", "bce_logits", "cross_entropy", "nll_loss_sum", "layer_norm",
    "normalize", "cosine_similarity", "det", "inv", "cdist", "histc",
}  # fmt: skip
#: (torch has no derivative of unique: its result is read, not differentiated. An integer
#: ``dtype=`` of a reduction or scan over a tensor that requires grad: torch refuses, "Autograd
#: not support dtype"; retrograd casts first, dropping the graph as ``x.long()`` does in both,
#: a deliberate difference: ``detach()`` keeps a leaf's requirement in retrograd (Burn's), and
#: ``x.detach().cumsum(0, dtype=int64)`` must work. A matrix norm of an empty matrix: torch
#: returns 0 for the largest-type orders, then refuses their backward)
NO_GRAD = {"unique", "cumsum_dtype", "matrix_norm"}


@gen("empty")
def _empty(rng):
    shape = _empty_shape(rng)
    ops = _empty_ops(rng, shape)
    op = str(_pick(rng, *sorted(ops)))
    dtype = str(_pick(rng, *EMPTY_DTYPES))
    if op in FLOAT_ONLY and dtype in ("int64", "bool"):
        dtype = "float64"
    grad = dtype == "float64" and op not in NO_GRAD
    fn = ops[op]
    weight = _weight_fn(rng)

    # (read through a view: the op sees the leaf's shape, permuted back or expanded into it)
    view = str(_pick(rng, "plain", "plain", "T", "expand"))
    if view == "T" and len(shape) < 2:
        view = "plain"
    stored = shape[:-2] + (shape[-1], shape[-2]) if view == "T" else shape
    stored = tuple(1 if view == "expand" and s else s for s in stored)

    def body(lib):
        x = lib.tensor(np.zeros(stored), dtype=getattr(lib, dtype))
        if grad:
            x.requires_grad_(True)
        if view == "T":
            read = x.transpose(-1, -2)
        elif view == "expand":
            read = x.expand(*shape)
        else:
            read = x
        return fn(lib, read), [x] if grad else []

    return _trial(f"empty {op} of {dtype}{shape} ({view})", body, weight, rtol=1e-9)


# ---- zero-size tensors through the nn.functional layers ---------------------------------


def _nn_shape(rng, spatial):
    """[N, C, *spatial] (or unbatched [C, *spatial]) with a zero-size dimension somewhere."""
    shape = [int(rng.integers(1, 3)), int(rng.integers(1, 3))] + [4] * spatial
    shape[int(rng.integers(len(shape)))] = 0
    if rng.random() < 0.3:
        shape = shape[1:]
    return tuple(shape)


def _nn_ops(rng, spatial):
    F = lambda lib: lib.nn.functional  # noqa: E731, N806 (torch's spelling)
    c = lambda *v: _pick(rng, *v)  # noqa: E731
    k = int(c(1, 2))
    out = int(c(0, 1, 2, 3))
    linear_mode = {1: "linear", 2: c("bilinear", "bicubic"), 3: "trilinear"}[spatial]
    mode = str(c("nearest", "nearest-exact", "area", linear_mode))
    pad_mode = str(c("reflect", "replicate", "circular", "constant"))
    d = f"{spatial}d"
    return {
        "max_pool": lambda lib, x: getattr(F(lib), f"max_pool{d}")(x, k),
        "max_pool_indices": lambda lib, x: getattr(F(lib), f"max_pool{d}")(
            x, k, return_indices=True
        ),
        "avg_pool": lambda lib, x: getattr(F(lib), f"avg_pool{d}")(x, k),
        "lp_pool": lambda lib, x: getattr(F(lib), f"lp_pool{d}")(x, 2.0, k),
        "adaptive_max_pool": lambda lib, x: getattr(F(lib), f"adaptive_max_pool{d}")(x, out),
        "adaptive_avg_pool": lambda lib, x: getattr(F(lib), f"adaptive_avg_pool{d}")(x, out),
        "interpolate": lambda lib, x: F(lib).interpolate(x, size=max(out, 1), mode=mode),
        "interpolate_scale": lambda lib, x: F(lib).interpolate(x, scale_factor=2.0, mode=mode),
        "pad": lambda lib, x: F(lib).pad(x, (1, 1) * spatial, mode=pad_mode),
        "pad_one": lambda lib, x: F(lib).pad(x, (1, 0), mode=pad_mode),
        "unfold": lambda lib, x: F(lib).unfold(x, k) if spatial == 2 else x.unfold(-1, k, 1),
        "softmax_channels": lambda lib, x: F(lib).softmax(x, -spatial - 1),
        "log_softmax_last": lambda lib, x: F(lib).log_softmax(x, -1),
        "group_norm": lambda lib, x: F(lib).group_norm(x, 1),
        "instance_norm": lambda lib, x: F(lib).instance_norm(x),
        "batch_norm": lambda lib, x: F(lib).batch_norm(x, None, None, training=True),
        "layer_norm": lambda lib, x: F(lib).layer_norm(x, x.shape[-1:]),
        "local_response_norm": lambda lib, x: F(lib).local_response_norm(x, 2),
        "dropout_eval": lambda lib, x: F(lib).dropout(x, 0.5, training=False),
        "glu": lambda lib, x: F(lib).glu(x, -1),
        "normalize": lambda lib, x: F(lib).normalize(x, dim=1 if x.ndim > 1 else 0),
        "linear": lambda lib, x: F(lib).linear(x, lib.ones(3, x.shape[-1], dtype=x.dtype)),
        "flatten": lambda lib, x: x.flatten(1).sum(-1),
        "repeat_interleave_fn": lambda lib, x: lib.repeat_interleave(
            lib.tensor([0, 2, 1][: x.shape[0]], dtype=lib.int64)
        ),
        "conv_out0": lambda lib, x: getattr(F(lib), f"conv{d}")(
            x, lib.ones(0, x.shape[-spatial - 1], *[1] * spatial, dtype=x.dtype)
        ),
    }


#: results only: torch's adaptive pools (and area interpolation, one of them) return an
#: empty result their backward then refuses ("Expected grad_output to have non-zero size")
NN_NO_GRAD = {"adaptive_max_pool", "adaptive_avg_pool", "interpolate", "interpolate_scale"}


@gen("empty_nn")
def _empty_nn(rng):
    spatial = int(_pick(rng, 1, 1, 2, 3))
    shape = _nn_shape(rng, spatial)
    ops = _nn_ops(rng, spatial)
    op = str(_pick(rng, *sorted(ops)))
    fn = ops[op]
    weight = _weight_fn(rng)
    grad = op not in NN_NO_GRAD

    def body(lib):
        x = lib.tensor(np.zeros(shape), dtype=lib.float64).requires_grad_(grad)
        return fn(lib, x), [x] if grad else []

    return _trial(f"empty_nn {op} {spatial}d of {shape}", body, weight)


# ---- second derivatives through non-contiguous views -------------------------------------


def _torch_shape(fn, shape):
    from fuzz_cases import _torch

    torch = _torch()
    return tuple(fn(torch, torch.zeros(shape, dtype=torch.float64)).shape)


def _view(rng, shape):
    """(name, fn(lib, t)): a non-contiguous view of a tensor of ``shape``."""
    n = len(shape)
    kinds = ["transpose", "permute", "expand", "narrow", "step", "movedim", "unfold", "select"]
    kinds += ["diagonal", "mT"] if n >= 2 else []
    kind = str(_pick(rng, *kinds)) if n else "expand"
    d = int(rng.integers(-n, n)) if n else 0
    size = shape[d] if n else 1
    if kind == "transpose":
        e = int(rng.integers(-n, n))
        return f"transpose({d},{e})", lambda lib, t: t.transpose(d, e)
    if kind == "permute":
        perm = tuple(int(i) for i in rng.permutation(n))
        return f"permute{perm}", lambda lib, t: t.permute(*perm)
    if kind == "expand":
        k = int(rng.integers(0, n + 1))
        reps = int(rng.integers(1, 3))
        target = shape[:k] + (reps,) + shape[k:]
        return f"unsqueeze({k}).expand{target}", lambda lib, t: t.unsqueeze(k).expand(*target)
    if kind == "narrow":
        start = int(rng.integers(0, size))
        length = int(rng.integers(1, size - start + 1))
        return f"narrow({d},{start},{length})", lambda lib, t: t.narrow(d, start, length)
    if kind == "step":
        start = int(rng.integers(0, min(2, size)))
        idx = (slice(None),) * (d % n) + (slice(start, None, 2),)
        return f"[{d % n}:{start}::2]", lambda lib, t: t[idx]
    if kind == "movedim":
        e = int(rng.integers(-n, n))
        return f"movedim({d},{e})", lambda lib, t: t.movedim(d, e)
    if kind == "unfold":
        width = int(rng.integers(1, size + 1))
        step = int(rng.integers(1, 3))
        return f"unfold({d},{width},{step})", lambda lib, t: t.unfold(d, width, step)
    if kind == "select":
        i = int(rng.integers(-size, size))
        if n == 1:
            return f"[{i}:]", lambda lib, t: t[i:]
        return f"select({d},{i})", lambda lib, t: t.select(d, i)
    if kind == "diagonal":
        e = (d % n + int(rng.integers(1, n))) % n
        off = int(rng.integers(-1, 2))
        if shape[d] + max(0, off) < 1 or (shape[e] - max(0, off) < 1 and off > 0):
            off = 0
        return f"diagonal({off},{d},{e})", lambda lib, t: t.diagonal(off, d, e)
    return "mT", lambda lib, t: t.mT


def _consumer(rng, shape):
    """(name, fn(lib, v, base)): what reads the view (``base``: a non-leaf the view's values
    came from, for in-place writes through a view of it)."""
    n = len(shape)
    d = int(rng.integers(-n, n)) if n else 0
    size = shape[d] if n else 1
    keep = bool(rng.random() < 0.5)
    idx = rng.integers(-size, size, size=int(rng.integers(1, 5))).tolist() if size else []
    w = _array(rng, shape)
    kinds = [
        "sum", "mean", "prod", "amax", "logsumexp", "var", "norm", "softmax", "cumsum",
        "cumprod", "gather", "index_select", "take", "getitem", "mask", "clone_mul_",
        "clone_index_add", "clone_setitem", "where", "sort", "matmul", "base_add_",
        "base_mul_", "base_copy_", "contiguous_view", "reshape", "flip", "max_dim",
    ]  # fmt: skip
    if not n:
        kinds = ["sum", "mean", "where", "clone_mul_", "base_add_", "reshape"]
    kind = str(_pick(rng, *kinds))
    if kind == "sum":
        return f"sum({d},{keep})", lambda lib, v, b: v.sum(d, keepdim=keep)
    if kind == "mean":
        return "mean", lambda lib, v, b: (v * v).mean()
    if kind == "prod":
        return f"prod({d})", lambda lib, v, b: v.prod(d, keepdim=keep)
    if kind == "amax":
        return f"amax({d})", lambda lib, v, b: (v * lib.tensor(w)).amax(d, keepdim=keep)
    if kind == "logsumexp":
        return f"logsumexp({d})", lambda lib, v, b: v.logsumexp(d, keepdim=keep)
    if kind == "var":
        return f"var({d})", lambda lib, v, b: v.var(d, correction=0, keepdim=keep)
    if kind == "norm":
        return f"norm({d})", lambda lib, v, b: (v + 3.0).norm(dim=d, keepdim=keep)
    if kind == "softmax":
        return f"softmax({d})", lambda lib, v, b: lib.softmax(v, d)
    if kind == "cumsum":
        return f"cumsum({d})", lambda lib, v, b: v.cumsum(d)
    if kind == "cumprod":
        return f"cumprod({d})", lambda lib, v, b: v.cumprod(d)
    if kind == "gather":
        index = rng.integers(0, size, size=shape).tolist()
        return f"gather({d})", lambda lib, v, b: v.gather(d, lib.tensor(index))
    if kind == "index_select":
        pos = [i % size for i in idx]
        return f"index_select({d},{pos})", lambda lib, v, b: v.index_select(d, lib.tensor(pos))
    if kind == "take":
        flat = rng.integers(-int(np.prod(shape)), int(np.prod(shape)), size=4).tolist()
        return f"take({flat})", lambda lib, v, b: lib.take(v, lib.tensor(flat))
    if kind == "getitem":
        key = (slice(None),) * (d % n)
        return f"[{d}][{idx}]", lambda lib, v, b: v[key + (lib.tensor(idx),)]
    if kind == "mask":
        mask = (rng.random(shape) < 0.5).tolist()
        return "mask", lambda lib, v, b: v[lib.tensor(mask)]
    if kind == "clone_mul_":

        def clone_mul(lib, v, b):
            y = v.clone()
            y.mul_(v.sin())
            return y

        return "clone().mul_(sin)", clone_mul
    if kind == "clone_index_add":
        pos = [i % size for i in idx]
        src_shape = list(shape)
        src_shape[d] = len(pos)
        src = _array(rng, tuple(src_shape))

        def clone_index_add(lib, v, b):
            y = v.clone()
            y.index_add_(d, lib.tensor(pos), v.index_select(d, lib.tensor(pos)) * lib.tensor(src))
            return y

        return f"clone().index_add_({d},{pos})", clone_index_add
    if kind == "clone_setitem":
        key = (slice(None),) * (d % n) + (lib_free_index := idx[:1],)

        def clone_setitem(lib, v, b):
            y = v.clone()
            y[key[:-1] + (lib.tensor(lib_free_index),)] = v[key[:-1] + (lib.tensor(idx[-1:]),)] ** 2
            return y

        return f"clone()[{d}][{idx[:1]}] = v[{idx[-1:]}] ** 2", clone_setitem
    if kind == "where":
        return "where", lambda lib, v, b: lib.where(v > 0, v * v, v.exp())
    if kind == "sort":
        return f"sort({d})", lambda lib, v, b: (v * lib.tensor(w)).sort(dim=d, stable=True).values
    if kind == "matmul":
        m = _array(rng, (shape[-1], 2))
        return "matmul", lambda lib, v, b: v @ lib.tensor(m)
    if kind == "max_dim":
        return f"max({d})", lambda lib, v, b: (v + lib.tensor(w)).max(d, keepdim=keep)
    if kind in ("base_add_", "base_mul_", "base_copy_"):

        def write(lib, v, b):
            # (the write goes into ``b``'s storage through ``v``: torch refuses one through an
            # overlapping view, retrograd must refuse it too)
            if kind == "base_add_":
                v.add_(lib.tensor(w) * v)
            elif kind == "base_mul_":
                v.mul_(v.detach() + 1.5)
            else:
                v.copy_(lib.tensor(w).sin() * v.exp())
            return [b, v]

        return f"{kind}(through the view)", write
    if kind == "contiguous_view":
        return "contiguous().view(-1)", lambda lib, v, b: v.contiguous().view(-1)
    if kind == "reshape":
        return "reshape(-1)", lambda lib, v, b: v.reshape(-1)
    return f"flip({d})", lambda lib, v, b: v.flip(d)


#: smooth maps applied to the view before the consumer (second derivatives non-zero)
SMOOTH = {
    "sin": lambda lib, v: v.sin(),
    "cube": lambda lib, v: v**3,
    "exp": lambda lib, v: (v * 0.5).exp(),
    "tanh": lambda lib, v: v.tanh(),
    "square": lambda lib, v: v * v,
}


@gen("views")
def _views(rng):
    shape = tuple(int(s) for s in rng.integers(2, 5, size=int(rng.integers(1, 4))))
    chain, cur = [], shape
    for _ in range(int(rng.integers(1, 4))):
        name, fn = _view(rng, cur)
        chain.append((name, fn))
        cur = _torch_shape(
            lambda lib, t, fns=tuple(f for _, f in chain): _apply(lib, t, fns), shape
        )
    smooth = str(_pick(rng, *SMOOTH))
    cname, consume = _consumer(rng, cur)
    base_values = _array(rng, shape)
    weight = _weight_fn(rng)
    fns = tuple(f for _, f in chain)
    through_base = cname.startswith("base_")

    def body(lib):
        x = lib.tensor(base_values, dtype=lib.float64).requires_grad_(True)
        if through_base:  # (the views of a non-leaf the writes go into)
            b = SMOOTH[smooth](lib, x)
            return consume(lib, _apply(lib, b, fns), b), [x]
        v = SMOOTH[smooth](lib, _apply(lib, x, fns))
        return consume(lib, v, None), [x]

    names = " -> ".join(n for n, _ in chain)
    return _trial(f"views {shape} {names} {smooth} {cname}", body, weight, second=True)


def _apply(lib, t, fns):
    for fn in fns:
        t = fn(lib, t)
    return t


# ---- second derivatives of random compositions -------------------------------------------


def _pos(h):
    """A smooth positive map of ``h`` (for the ops defined on positive numbers only)."""
    return h * h + 0.5


def _unit(lib, h):
    """A smooth map of ``h`` into (-1, 1)."""
    return h.tanh() * 0.9


#: (h, y) -> same-shape tensor; ``y`` is the second leaf, a (3, 4) tensor. (No ``cdist``:
#: torch has no second derivative of it.)
STEPS = {
    "atan2": lambda lib, h, y: lib.atan2(h, y + 2.5),
    "hypot": lambda lib, h, y: lib.hypot(h, y),
    "lerp": lambda lib, h, y: lib.lerp(h, y, y.sigmoid()),
    "lerp_scalar": lambda lib, h, y: h.lerp(y, 0.3),
    "addcdiv": lambda lib, h, y: lib.addcdiv(h, y, _pos(h), value=0.5),
    "addcmul": lambda lib, h, y: h.addcmul(y, h, value=-0.25),
    "logaddexp": lambda lib, h, y: lib.logaddexp(h, y),
    "logaddexp2": lambda lib, h, y: lib.logaddexp2(h, y * 2),
    "xlogy": lambda lib, h, y: lib.xlogy(h, _pos(y)),
    "pow_tt": lambda lib, h, y: _pos(h) ** y,
    "rpow": lambda lib, h, y: 1.7**h,
    "float_power": lambda lib, h, y: lib.float_power(_pos(h), 1.5),
    "pow_neg": lambda lib, h, y: _pos(h) ** -0.5,
    "where": lambda lib, h, y: lib.where(y > 0, h * h, h.sin()),
    "clamp_tensor": lambda lib, h, y: (h * y).clamp(min=y - 0.5, max=y + 0.5) * h,
    "maximum": lambda lib, h, y: lib.maximum(h, y * 1.01) * h,
    "copysign": lambda lib, h, y: lib.copysign(h * h, y),
    "mul_bcast": lambda lib, h, y: h * y[:1] + h.sum(-1, keepdim=True) * y,
    "div": lambda lib, h, y: h / _pos(y),
    "sinc": lambda lib, h, y: lib.sinc(h),
    "erf": lambda lib, h, y: lib.erf(h) * y,
    "erfc": lambda lib, h, y: lib.special.erfc(h),
    "erfinv": lambda lib, h, y: lib.erfinv(_unit(lib, h)),
    "lgamma": lambda lib, h, y: lib.lgamma(_pos(h)),
    "digamma": lambda lib, h, y: lib.digamma(_pos(h) + 0.5),
    "polygamma": lambda lib, h, y: lib.polygamma(1, _pos(h) + 0.5),
    "i0": lambda lib, h, y: lib.i0(h),
    "logit": lambda lib, h, y: lib.logit(h.sigmoid() * 0.9 + 0.05),
    "expm1": lambda lib, h, y: lib.expm1(h * 0.5),
    "log1p": lambda lib, h, y: lib.log1p(_pos(h)),
    "rsqrt": lambda lib, h, y: _pos(h).rsqrt(),
    "reciprocal": lambda lib, h, y: _pos(h).reciprocal(),
    "sqrt": lambda lib, h, y: _pos(h).sqrt(),
    "abs": lambda lib, h, y: h.abs() * h,
    "sigmoid": lambda lib, h, y: lib.sigmoid(h),
    "softplus": lambda lib, h, y: lib.nn.functional.softplus(h, beta=2.0),
    "elu": lambda lib, h, y: lib.nn.functional.elu(h, alpha=0.7),
    "selu": lambda lib, h, y: lib.nn.functional.selu(h),
    "celu": lambda lib, h, y: lib.nn.functional.celu(h, alpha=1.3),
    "gelu_tanh": lambda lib, h, y: lib.nn.functional.gelu(h, approximate="tanh"),
    "gelu": lambda lib, h, y: lib.nn.functional.gelu(h),
    "silu": lambda lib, h, y: lib.nn.functional.silu(h),
    "mish": lambda lib, h, y: lib.nn.functional.mish(h),
    "logsigmoid": lambda lib, h, y: lib.nn.functional.logsigmoid(h),
    "softsign": lambda lib, h, y: lib.nn.functional.softsign(h),
    "tanhshrink": lambda lib, h, y: lib.nn.functional.tanhshrink(h),
    "hardswish": lambda lib, h, y: lib.nn.functional.hardswish(h * 4),
    "softmax": lambda lib, h, y: lib.softmax(h * y, -1),
    "log_softmax": lambda lib, h, y: lib.log_softmax(h, 0) * y,
    "normalize": lambda lib, h, y: lib.nn.functional.normalize(h + y, p=3.0, dim=-1),
    "cumsum": lambda lib, h, y: (h * y).cumsum(1),
    "cumprod": lambda lib, h, y: h.cumprod(0),
    "logcumsumexp": lambda lib, h, y: h.logcumsumexp(1),
    "matmul": lambda lib, h, y: h @ y.mT @ h,
    "einsum": lambda lib, h, y: lib.einsum("ij,kj,kl->il", h, y, h),
    "outer_sum": lambda lib, h, y: h + lib.outer(h.sum(1), y.sum(0)),
    "sub_mean": lambda lib, h, y: h - h.mean(0, keepdim=True),
    "standardize": lambda lib, h, y: (h - h.mean(-1, keepdim=True)) / h.std(-1, keepdim=True),
    "layer_norm": lambda lib, h, y: lib.nn.functional.layer_norm(h, (4,), y[0], y[1]),
    "group_norm": lambda lib, h, y: lib.nn.functional.group_norm(h.reshape(1, 3, 4), 1).reshape(
        3, 4
    ),
    "flip_mul": lambda lib, h, y: h * h.flip(0) + y.roll(1, 1) * h,
    "transpose_mul": lambda lib, h, y: (h.reshape(4, 3).mT * y) + h,
    "cosine_similarity": lambda lib, h, y: (
        h * lib.nn.functional.cosine_similarity(h, y + 0.1, dim=-1)[:, None]
    ),
}

#: (h, y) -> the program's result (reduced or not)
HEADS = {
    "identity": lambda lib, h, y: h,
    "sum": lambda lib, h, y: (h * h).sum(0),
    "logsumexp": lambda lib, h, y: h.logsumexp(-1),
    "var": lambda lib, h, y: h.var(0),
    "std": lambda lib, h, y: h.std(),
    "norm3": lambda lib, h, y: lib.linalg.vector_norm(h, 3.0, dim=1),
    "matrix_norm": lambda lib, h, y: lib.linalg.matrix_norm(h),
    "prod": lambda lib, h, y: h.prod(1),
    "mse": lambda lib, h, y: lib.nn.functional.mse_loss(h, y),
    "huber": lambda lib, h, y: lib.nn.functional.huber_loss(h, y, delta=0.7),
    "smooth_l1": lambda lib, h, y: lib.nn.functional.smooth_l1_loss(h, y, beta=0.6),
    "kl_div": lambda lib, h, y: lib.nn.functional.kl_div(
        lib.log_softmax(h, -1), lib.softmax(y, -1), reduction="batchmean"
    ),
    "bce_logits": lambda lib, h, y: lib.nn.functional.binary_cross_entropy_with_logits(
        h, y.sigmoid(), pos_weight=lib.tensor([0.5, 1.0, 2.0, 1.5], dtype=lib.float64)
    ),
    # (probabilities kept off 0 and 1: near them both libraries' second derivatives lose
    # every digit to the cancellation in 1 - p, each differently)
    "bce": lambda lib, h, y: lib.nn.functional.binary_cross_entropy(
        h.tanh() * 0.45 + 0.5, y.sigmoid()
    ),
    "cross_entropy_probs": lambda lib, h, y: lib.nn.functional.cross_entropy(
        h, lib.softmax(y, -1), label_smoothing=0.1
    ),
    "cross_entropy": lambda lib, h, y: lib.nn.functional.cross_entropy(
        h, lib.tensor([1, 0, 3]), label_smoothing=0.2
    ),
    "poisson_nll": lambda lib, h, y: lib.nn.functional.poisson_nll_loss(h, _pos(y)),
    "gaussian_nll": lambda lib, h, y: lib.nn.functional.gaussian_nll_loss(h, y, _pos(h)),
    "soft_margin": lambda lib, h, y: lib.nn.functional.soft_margin_loss(h, y.sign().detach()),
    "multilabel_soft_margin": lambda lib, h, y: lib.nn.functional.multilabel_soft_margin_loss(
        h, (y > 0).double()
    ),
    "cosine_embedding": lambda lib, h, y: lib.nn.functional.cosine_embedding_loss(
        h, y, lib.tensor([1.0, -1.0, 1.0], dtype=lib.float64), margin=-0.5
    ),
    "logdet": lambda lib, h, y: lib.logdet(h @ h.mT + lib.eye(3, dtype=lib.float64)),
}


@gen("grad2")
def _grad2(rng):
    steps = [str(_pick(rng, *sorted(STEPS))) for _ in range(int(rng.integers(1, 4)))]
    head = str(_pick(rng, *sorted(HEADS)))
    x_values = _array(rng, (3, 4))
    y_values = _array(rng, (3, 4))
    y_grad = bool(rng.random() < 0.7)
    weight = _weight_fn(rng)

    def body(lib):
        x = lib.tensor(x_values, dtype=lib.float64).requires_grad_(True)
        y = lib.tensor(y_values, dtype=lib.float64).requires_grad_(y_grad)
        h = x
        for step in steps:
            h = STEPS[step](lib, h, y)
        return HEADS[head](lib, h, y), [x, y] if y_grad else [x]

    return _trial(f"grad2 {' -> '.join(steps)} -> {head} (y grad {y_grad})", body, weight,
                  rtol=1e-6, second=True)  # fmt: skip


# ---- dtype promotion of the ops rounds 11-21 draw little ---------------------------------

PROMOTE_DTYPES = ("int64", "bool", "float32", "float64")

#: fn(lib, a, b): ``a`` a tensor, ``b`` a tensor, a 0-d tensor or a Python number
PROMOTE_OPS = {
    "lerp_weight": lambda lib, a, b: lib.lerp(a, a * 0.5 if a.is_floating_point() else a, b),
    "lerp_end": lambda lib, a, b: lib.lerp(a, b, 0.25),
    "lerp_": lambda lib, a, b: a.clone().lerp_(a.flip(-1), b),
    "addcmul": lambda lib, a, b: lib.addcmul(a, a, b, value=2),
    "addcmul_self": lambda lib, a, b: lib.addcmul(b, a, a),
    "addcdiv": lambda lib, a, b: lib.addcdiv(a, b, a * a + 1.5),
    "logaddexp": lambda lib, a, b: lib.logaddexp(a, b),
    "logaddexp2": lambda lib, a, b: lib.logaddexp2(b, a),
    "igamma": lambda lib, a, b: lib.igamma(a.abs() + 1, b),
    "gammaincc": lambda lib, a, b: lib.special.gammaincc(a.abs() + 1, b),
    "xlog1py": lambda lib, a, b: lib.special.xlog1py(a, b),
    "zeta": lambda lib, a, b: lib.special.zeta(a.abs() + 2, b),
    "fmin": lambda lib, a, b: lib.fmin(a, b),
    "heaviside": lambda lib, a, b: lib.heaviside(a, b),
    "nextafter": lambda lib, a, b: lib.nextafter(a, b),
    "ldexp": lambda lib, a, b: lib.ldexp(a, b),
    "float_power": lambda lib, a, b: lib.float_power(a, b),
    "copysign": lambda lib, a, b: lib.copysign(b, a),
    "masked_fill": lambda lib, a, b: a.masked_fill(a > 0, b),
    "index_fill": lambda lib, a, b: a.index_fill(-1, lib.tensor([0]), b),
    "fill_": lambda lib, a, b: a.clone().fill_(b),
    "clamp_": lambda lib, a, b: a.clone().clamp_(min=b),
    "where_other": lambda lib, a, b: lib.where(a > 0, a, b),
    "where_both": lambda lib, a, b: lib.where(a > 0, b, b * 2),
    "isclose": lambda lib, a, b: lib.isclose(a, b),
}
#: torch's signatures take tensors only: a Python number is drawn as a 0-d tensor
PROMOTE_TENSOR_ONLY = {
    "logaddexp", "logaddexp2", "igamma", "gammaincc", "fmin", "heaviside", "nextafter",
    "ldexp", "lerp_end", "zeta", "where_both",
}  # fmt: skip


#: no gradients: torch has no derivative of heaviside; its derivative of ldexp with an
#: integer exponent is 0 (``2 ** other`` in integers: 0 for a negative one), a torch bug
PROMOTE_NO_GRAD = {"heaviside", "ldexp"}
#: no gradients with a bool operand: torch's backward subtracts bool tensors and refuses
PROMOTE_NO_GRAD_BOOL = {"logaddexp", "logaddexp2", "lerp_weight", "lerp_", "lerp_end"}
#: a float value requiring grad written into an integer tensor: torch refuses ("Autograd not
#: support dtype"), retrograd casts it, as ``x.long()`` drops the graph (see NO_GRAD)
PROMOTE_FILLS = {"masked_fill", "index_fill", "fill_", "clamp_", "where_both"}


@gen("promote")
def _promote(rng):
    op = str(_pick(rng, *sorted(PROMOTE_OPS)))
    a_dtype = str(_pick(rng, *PROMOTE_DTYPES))
    shape = tuple(int(s) for s in rng.integers(1, 4, size=int(rng.integers(1, 3))))
    b_kind = str(_pick(rng, "tensor", "0d", "0d", "number"))
    if b_kind == "number" and op in PROMOTE_TENSOR_ONLY:
        b_kind = "0d"
    b_dtype = str(_pick(rng, *PROMOTE_DTYPES))
    b_shape = shape if b_kind == "tensor" else ()
    pool = [-1.5, -1.0, 0.0, 0.5, 1.0, 2.0, 3.0]
    a_values = _array(rng, shape, pool)
    b_values = _array(rng, b_shape, pool)
    number = None
    if b_kind == "number":
        value = float(b_values)
        number = int(value) if b_dtype == "int64" else bool(value) if b_dtype == "bool" else value
    weight = _weight_fn(rng)
    bools = "bool" in (a_dtype, b_dtype if b_kind != "number" else type(number).__name__)

    def body(lib):
        a = lib.tensor(a_values, dtype=getattr(lib, a_dtype))
        b = number if b_kind == "number" else lib.tensor(b_values, dtype=getattr(lib, b_dtype))
        leaves = [t for t in (a, b) if isinstance(t, lib.Tensor) and t.is_floating_point()]
        if op in PROMOTE_NO_GRAD or (op in PROMOTE_NO_GRAD_BOOL and bools):
            leaves = []
        if op in ("igamma", "gammaincc"):  # (torch: no derivative in the first argument)
            leaves = [t for t in leaves if t is not a]
        if op in PROMOTE_FILLS and a_dtype in ("int64", "bool"):
            leaves = [t for t in leaves if t is not b]
        for t in leaves:
            t.requires_grad_(True)
        return PROMOTE_OPS[op](lib, a, b), leaves

    name = (
        f"promote {op} {a_dtype}{shape} with {b_kind} {number if b_kind == 'number' else b_dtype}"
    )
    # (float32 arithmetic wherever an operand is not float64; zeta: scipy's and torch's series
    # agree to 1e-7)
    f64 = a_dtype == "float64" and (b_dtype == "float64" or b_kind == "number")
    return _trial(name, body, weight, rtol=1e-9 if f64 and op != "zeta" else 1e-5)
