"""Random calls of every loss against PyTorch, round 69: losses with every option.

Each seed draws a few calls of a loss of ``nn.functional`` -- or of its module form
(``nn.CrossEntropyLoss(...)(input, target)``), with the same options -- and runs them on torch
and on retrograd from the same inputs: ``cross_entropy`` (class indices and probabilities,
``weight=``, ``ignore_index=`` with batches where every target is ignored,
``label_smoothing=``, K-dimensional inputs), ``nll_loss``, ``binary_cross_entropy`` and
``..._with_logits`` (``weight=`` and ``pos_weight=`` broadcast), ``mse``/``l1``/
``smooth_l1`` (``beta=``, 0 too)/``huber`` (``delta=``), ``kl_div`` (``log_target=``,
``"batchmean"``), ``poisson_nll`` (``log_input=``, ``full=``), ``gaussian_nll`` (``var=``
broadcast, ``full=``, ``eps=``), ``ctc_loss`` (``zero_infinity=``), ``margin_ranking``,
``hinge_embedding``, ``multilabel_margin``, ``multilabel_soft_margin``, ``multi_margin``
(``p=``, ``margin=``, ``weight=``), ``soft_margin``, ``cosine_embedding``, ``triplet_margin``
(``swap=``, ``p=``) and ``triplet_margin_with_distance``; every ``reduction``, float32 and
float64, empty batches, and targets of a wrong dtype or shape.

The value, its shape and dtype are compared (within a tolerance of the dtype), and in float64
the gradients of ``out.sum()`` in every float input; where torch raises, retrograd must raise
an error that is an instance of torch's exception class.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import retrograd as rg

torch = pytest.importorskip("torch")

#: relative tolerance per dtype: the two libraries sum the same terms in other orders
TOL = {"float32": 2e-5, "float64": 1e-10}
REDUCTIONS = ("none", "mean", "sum")


class Mismatch(AssertionError):  # noqa: N818 (read as "a mismatch with torch")
    """retrograd and torch disagree."""


class Leaf:
    """An array given to both libraries as a tensor (a leaf that requires grad when ``grad``;
    with ``log_softmax``, the call gets ``log_softmax(leaf, -1)``)."""

    def __init__(self, array: np.ndarray, grad: bool = False, log_softmax: bool = False):
        self.array, self.grad, self.log_softmax = array, grad, log_softmax

    def __repr__(self) -> str:
        return f"{self.array.dtype}{list(self.array.shape)}{'*' if self.grad else ''}"


def _make(lib, value, leaves):
    if isinstance(value, Leaf):
        t = lib.tensor(value.array.copy())
        if value.grad:
            t.requires_grad_(True)
            leaves.append(t)
        if value.log_softmax:
            return t.log_softmax(-1)
        return t
    return value


# -- the draws: (name, module, args, kwargs, differentiable) -----------------------------------
def _fdtype(rng):
    return str(rng.choice(["float32", "float64"]))


def _x(rng, shape, dtype, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(dtype)


def _batch(rng):
    return int(rng.choice([0, 1, 2, 3, 4], p=[0.1, 0.15, 0.3, 0.25, 0.2]))


#: the target dtypes drawn by default: torch refuses a bool or integer target of some losses
#: through its arithmetic only ("Subtraction ... with a bool tensor", an integer result),
#: which retrograd does not copy; those losses draw float targets (``FLOATS``) alone
ANY = ("int32", "float32", "float64", "int64", "bool")
FLOATS = ("float32", "float64")


def _bad_target(rng, target: np.ndarray, dtypes=ANY):
    """Sometimes a target of the wrong dtype or shape."""
    u = rng.random()
    if u < 0.06:
        return target.astype(str(rng.choice(dtypes)))
    if u < 0.1 and target.ndim:
        return target[..., :-1] if target.shape[-1] else target[None]
    return target


def draw_cross_entropy(rng, dtype, nll=False):
    n, c = _batch(rng), int(rng.integers(1, 5))
    spatial = tuple(int(s) for s in rng.integers(1, 4, size=int(rng.choice([0, 0, 1, 2]))))
    unbatched = rng.random() < 0.1
    shape = (c,) if unbatched else (n, c, *spatial)
    logits = _x(rng, shape, dtype, 2.0)
    class_dim = 0 if unbatched else 1
    if nll:
        logits = logits - np.log(np.exp(logits).sum(class_dim, keepdims=True))
    kwargs = {"reduction": str(rng.choice(REDUCTIONS))}
    tshape = () if unbatched else (n, *spatial)
    probs = not nll and rng.random() < 0.3
    if probs:
        p = np.exp(_x(rng, shape, "float64"))
        target = (p / p.sum(class_dim, keepdims=True)).astype(
            dtype if rng.random() < 0.85 else "float32"
        )
    else:
        target = rng.integers(0, c, size=tshape).astype(np.int64)
        if rng.random() < 0.4:
            ignore = int(rng.choice([-100, -1, 0, c - 1]))
            kwargs["ignore_index"] = ignore
            u = rng.random()
            if u < 0.3:
                target[...] = ignore  # all ignored
            elif u < 0.8 and target.size:
                target[rng.random(tshape) < 0.4] = ignore
    if rng.random() < 0.4:
        w = rng.uniform(0.1, 2.0, size=c).astype(dtype)
        if rng.random() < 0.2:
            w[int(rng.integers(c))] = 0.0
        if rng.random() < 0.1:
            w = w[:-1]
        kwargs["weight"] = Leaf(w)
    if not nll and rng.random() < 0.4:
        kwargs["label_smoothing"] = float(rng.choice([0.1, 0.25, 0.5, 1.0]))
    target = _bad_target(rng, target)
    name = "nll_loss" if nll else "cross_entropy"
    module = "NLLLoss" if nll else "CrossEntropyLoss"
    return name, module, [Leaf(logits, True), Leaf(target, target.dtype.kind == "f")], kwargs


def draw_nll(rng, dtype):
    return draw_cross_entropy(rng, dtype, nll=True)


def _shape(rng):
    return tuple(int(s) for s in rng.integers(0, 4, size=int(rng.integers(0, 4))))


def draw_bce(rng, dtype):
    shape = _shape(rng)
    logits = rng.random() < 0.5
    x = _x(rng, shape, dtype, 2.0)
    if not logits:
        x = (1 / (1 + np.exp(-x))).astype(dtype)
        if x.size and rng.random() < 0.1:
            x.flat[0] = float(rng.choice([0.0, 1.0]))
    y = rng.random(shape).astype(dtype)
    if rng.random() < 0.3:
        y = np.round(y).astype(dtype)
    kwargs = {"reduction": str(rng.choice(REDUCTIONS))}
    bshape = shape[int(rng.integers(0, len(shape) + 1)) :] if shape else ()
    if rng.random() < 0.4:
        kwargs["weight"] = Leaf(rng.uniform(0, 2, bshape).astype(dtype))
    if logits and rng.random() < 0.4:
        pshape = shape[-1:] if shape and rng.random() < 0.7 else ()
        kwargs["pos_weight"] = Leaf(rng.uniform(0.2, 3, pshape).astype(dtype))
    y = _bad_target(rng, y, FLOATS)
    if logits and y.dtype.kind == "f":  # torch's result has the target's dtype there: not copied
        y = y.astype(dtype)
    # at x of 0 or 1 torch's gradient in the target is infinite (its unclamped logs), which
    # retrograd leaves finite on purpose (loss.binary_cross_entropy): the target is a constant there
    y_grad = y.dtype.kind == "f" and (logits or not np.any((x == 0) | (x == 1)))
    if logits:
        name, module = "binary_cross_entropy_with_logits", "BCEWithLogitsLoss"
    else:
        name, module = "binary_cross_entropy", "BCELoss"
    return name, module, [Leaf(x, True), Leaf(y, y_grad)], kwargs


def draw_regression(rng, dtype):
    kind = str(rng.choice(["mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss"]))
    module = {
        "mse_loss": "MSELoss",
        "l1_loss": "L1Loss",
        "smooth_l1_loss": "SmoothL1Loss",
        "huber_loss": "HuberLoss",
    }[kind]
    shape = _shape(rng)
    x = _x(rng, shape, dtype, 1.5)
    y = _x(rng, shape, dtype, 1.5)
    if rng.random() < 0.1 and shape:  # a target that broadcasts (torch warns)
        y = y[..., :1]
    kwargs = {"reduction": str(rng.choice(REDUCTIONS))}
    if kind == "smooth_l1_loss" and rng.random() < 0.7:
        kwargs["beta"] = float(rng.choice([0.0, 0.5, 1.0, 2.0]))
    if kind == "huber_loss" and rng.random() < 0.7:
        kwargs["delta"] = float(rng.choice([0.3, 1.0, 2.5]))
    # (torch's huber backward fails on an integer target: "Found dtype Int but expected Double")
    # (and returns the input's dtype for a float64 target, then fails in its backward: the
    # target keeps the input's dtype)
    y = _bad_target(rng, y, ANY[1:4] if kind == "mse_loss" else FLOATS)
    if kind == "huber_loss" and y.dtype.kind == "f":
        y = y.astype(dtype)
    return kind, module, [Leaf(x, True), Leaf(y, y.dtype.kind == "f")], kwargs


def draw_kl(rng, dtype):
    shape = _shape(rng) or (3,)
    log_target = bool(rng.random() < 0.5)
    p = np.exp(_x(rng, shape, "float64"))
    x = np.log(p / p.sum(-1, keepdims=True)).astype(dtype)
    q = rng.random(shape)
    if q.size and rng.random() < 0.3:
        q.flat[0] = 0.0
    y = (np.log(q + 1e-3) if log_target else q).astype(dtype)
    kwargs = {
        "reduction": str(rng.choice(REDUCTIONS + ("batchmean",))),
        "log_target": log_target,
    }
    y = _bad_target(rng, y)
    return "kl_div", "KLDivLoss", [Leaf(x, True), Leaf(y, y.dtype.kind == "f")], kwargs


def draw_poisson(rng, dtype):
    shape = _shape(rng)
    log_input = bool(rng.random() < 0.5)
    x = _x(rng, shape, dtype)
    if not log_input:
        x = np.abs(x).astype(dtype) + dtype_type(dtype)(0.1)
    y = rng.poisson(2.0, size=shape).astype(dtype)
    kwargs = {
        "log_input": log_input,
        "full": bool(rng.random() < 0.5),
        "reduction": str(rng.choice(REDUCTIONS)),
    }
    if rng.random() < 0.3:
        kwargs["eps"] = float(rng.choice([1e-8, 1e-3, 0.5]))
    y = _bad_target(rng, y, FLOATS)
    return (
        "poisson_nll_loss",
        "PoissonNLLLoss",
        [Leaf(x, True), Leaf(y, y.dtype.kind == "f")],
        kwargs,
    )


def dtype_type(dtype):
    return np.dtype(dtype).type


def draw_gaussian(rng, dtype):
    n, d = _batch(rng), int(rng.integers(1, 4))
    shape = (n, d) if rng.random() < 0.8 else (d,)
    x, y = _x(rng, shape, dtype), _x(rng, shape, dtype)
    u = rng.random()
    if u < 0.4:
        vshape = shape
    elif u < 0.6:
        vshape = shape[:-1] + (1,)
    elif u < 0.75:
        vshape = shape[:-1]
    elif u < 0.85:
        vshape = (1,) + shape[1:] if len(shape) == 2 else shape
    else:
        vshape = None
    if vshape is None:
        var = float(rng.choice([0.5, 1.0, 1e-9]))
    else:
        v = rng.uniform(0.05, 2.0, vshape)
        if v.size and rng.random() < 0.15:
            v.flat[0] = float(rng.choice([0.0, 1e-9, -0.5]))
        var = Leaf(v.astype(dtype), True)
    kwargs = {"full": bool(rng.random() < 0.5), "reduction": str(rng.choice(REDUCTIONS))}
    if rng.random() < 0.3:
        kwargs["eps"] = float(rng.choice([1e-6, 1e-2, 0.5]))
    return "gaussian_nll_loss", "GaussianNLLLoss", [Leaf(x, True), Leaf(y, True), var], kwargs


def draw_ctc(rng, dtype):
    t, n, c = int(rng.integers(1, 7)), int(rng.integers(1, 4)), int(rng.integers(2, 5))
    x = _x(rng, (t, n, c), dtype, 2.0)  # logits: the call gets log_softmax(x)
    blank = int(rng.integers(0, c)) if rng.random() < 0.3 else 0
    s = int(rng.integers(0, 5))
    labels = [k for k in range(c) if k != blank]
    target_lengths = rng.integers(0, s + 1, size=n)
    input_lengths = rng.integers(0, t + 1, size=n) if rng.random() < 0.5 else np.full(n, t)
    padded = rng.choice(labels, size=(n, s)).astype(np.int64)
    if rng.random() < 0.5:
        targets = padded
    else:
        targets = np.concatenate([padded[i, : target_lengths[i]] for i in range(n)]).astype(
            np.int64
        )
    lengths_as = str(rng.choice(["list", "tensor"]))

    def lengths(v):
        return [int(i) for i in v] if lengths_as == "list" else Leaf(v.astype(np.int64))

    kwargs = {"blank": blank, "reduction": str(rng.choice(REDUCTIONS))}
    if rng.random() < 0.5:
        kwargs["zero_infinity"] = True
    # torch's gradient in log_probs is exact only through the log_softmax that makes them
    # (its kernel's shortcut; retrograd's is autodiff's, margin.ctc_loss says so): compared there
    x = Leaf(x, True, log_softmax=True)
    args = [x, Leaf(targets), lengths(input_lengths), lengths(target_lengths)]
    return "ctc_loss", "CTCLoss", args, kwargs


def _pm1(rng, shape, dtype):
    y = rng.choice([-1.0, 1.0], size=shape)
    if rng.random() < 0.1 and y.size:
        y.flat[0] = 0.0
    return y.astype(dtype)


def draw_margin_ranking(rng, dtype):
    shape = (_batch(rng),) if rng.random() < 0.8 else ()
    x1, x2 = _x(rng, shape, dtype), _x(rng, shape, dtype)
    y = _bad_target(rng, _pm1(rng, shape, dtype), FLOATS)
    kwargs = {
        "margin": float(rng.choice([0.0, 0.5, 1.0])),
        "reduction": str(rng.choice(REDUCTIONS)),
    }
    args = [Leaf(x1, True), Leaf(x2, True), Leaf(y, y.dtype.kind == "f")]
    return "margin_ranking_loss", "MarginRankingLoss", args, kwargs


def draw_hinge(rng, dtype):
    shape = _shape(rng)
    x = _x(rng, shape, dtype)
    y = _bad_target(rng, _pm1(rng, shape, dtype))
    kwargs = {
        "margin": float(rng.choice([0.0, 1.0, 2.0])),
        "reduction": str(rng.choice(REDUCTIONS)),
    }
    return "hinge_embedding_loss", "HingeEmbeddingLoss", [Leaf(x, True), Leaf(y)], kwargs


def draw_soft_margin(rng, dtype):
    shape = _shape(rng)
    x = _x(rng, shape, dtype)
    y = _bad_target(rng, _pm1(rng, shape, dtype), ANY[:4])
    kwargs = {"reduction": str(rng.choice(REDUCTIONS))}
    return "soft_margin_loss", "SoftMarginLoss", [Leaf(x, True), Leaf(y)], kwargs


def draw_multilabel_soft(rng, dtype):
    n, c = _batch(rng), int(rng.integers(1, 5))
    x = _x(rng, (n, c), dtype)
    y = rng.integers(0, 2, size=(n, c)).astype(dtype)
    kwargs = {"reduction": str(rng.choice(REDUCTIONS))}
    if rng.random() < 0.4:
        kwargs["weight"] = Leaf(rng.uniform(0.1, 2, c).astype(dtype))
    y = _bad_target(rng, y, FLOATS)
    return (
        "multilabel_soft_margin_loss",
        "MultiLabelSoftMarginLoss",
        [Leaf(x, True), Leaf(y)],
        kwargs,
    )


def _nonempty_batch(rng):
    """A batch size for ``multi_margin_loss``/``multilabel_margin_loss``: torch's value of an
    empty batch there (any reduction) is whatever its uninitialised output held, and it skips
    its target checks: nothing to compare."""
    return int(rng.integers(1, 5))


def draw_multilabel_margin(rng, dtype):
    c = int(rng.integers(1, 5))
    shape = (_nonempty_batch(rng), c) if rng.random() < 0.8 else (c,)
    x = _x(rng, shape, dtype)
    y = np.full(shape, -1, np.int64)
    for row in y.reshape(-1, c):
        k = int(rng.integers(0, c + 1))
        row[:k] = rng.permutation(c)[:k]
        if rng.random() < 0.2 and k + 1 < c:  # entries after the first -1 are read as nothing
            row[k + 1] = int(rng.integers(0, c))
    y = _bad_target(rng, y)
    kwargs = {"reduction": str(rng.choice(REDUCTIONS))}
    return "multilabel_margin_loss", "MultiLabelMarginLoss", [Leaf(x, True), Leaf(y)], kwargs


def draw_multi_margin(rng, dtype):
    c = int(rng.integers(1, 5))
    unbatched = rng.random() < 0.15
    n = _nonempty_batch(rng)
    x = _x(rng, (c,) if unbatched else (n, c), dtype)
    y = rng.integers(0, c, size=() if unbatched else (n,)).astype(np.int64)
    kwargs = {
        "p": int(rng.choice([1, 2])),
        "margin": float(rng.choice([0.5, 1.0, 2.0])),
        "reduction": str(rng.choice(REDUCTIONS)),
    }
    if rng.random() < 0.4:
        kwargs["weight"] = Leaf(rng.uniform(0.1, 2, c).astype(dtype))
    y = _bad_target(rng, y)
    return "multi_margin_loss", "MultiMarginLoss", [Leaf(x, True), Leaf(y)], kwargs


def draw_cosine(rng, dtype):
    d = int(rng.integers(1, 4))
    unbatched = rng.random() < 0.15
    n = _batch(rng)
    shape = (d,) if unbatched else (n, d)
    x1, x2 = _x(rng, shape, dtype), _x(rng, shape, dtype)
    y = _bad_target(rng, _pm1(rng, shape[:-1], dtype))
    kwargs = {
        "margin": float(rng.choice([0.0, 0.2, -0.5])),
        "reduction": str(rng.choice(REDUCTIONS)),
    }
    args = [Leaf(x1, True), Leaf(x2, True), Leaf(y)]
    return "cosine_embedding_loss", "CosineEmbeddingLoss", args, kwargs


def draw_triplet(rng, dtype):
    d = int(rng.integers(1, 4))
    shape = (_batch(rng), d) if rng.random() < 0.85 else (d,)
    a, p, n = (_x(rng, shape, dtype) for _ in range(3))
    kwargs = {
        "margin": float(rng.choice([0.5, 1.0, 2.0])),
        "swap": bool(rng.random() < 0.5),
        "reduction": str(rng.choice(REDUCTIONS)),
    }
    args = [Leaf(a, True), Leaf(p, True), Leaf(n, True)]
    if rng.random() < 0.5:
        kwargs["p"] = float(rng.choice([1.0, 2.0, 3.0]))
        if rng.random() < 0.3:
            kwargs["eps"] = float(rng.choice([0.0, 1e-3]))
        return "triplet_margin_loss", "TripletMarginLoss", args, kwargs
    distance = str(rng.choice(["default", "l1", "cosine"]))
    kwargs["distance_function"] = distance
    return "triplet_margin_with_distance_loss", "TripletMarginWithDistanceLoss", args, kwargs


def _distance(lib, name):
    if name == "default":
        return None
    if name == "l1":
        return lambda a, b: (a - b).abs().sum(-1)
    return lambda a, b: 1.0 - lib.nn.functional.cosine_similarity(a, b, dim=-1)


DRAWS = [
    draw_cross_entropy, draw_cross_entropy, draw_nll, draw_bce, draw_regression, draw_kl,
    draw_poisson, draw_gaussian, draw_ctc, draw_margin_ranking, draw_hinge, draw_soft_margin,
    draw_multilabel_soft, draw_multilabel_margin, draw_multi_margin, draw_cosine, draw_triplet,
]  # fmt: skip


# -- running one call on both ------------------------------------------------------------------
def _call(lib, name, module, args, kwargs, as_module):
    leaves: list = []
    targs = [_make(lib, a, leaves) for a in args]
    tkw = {k: _make(lib, v, []) for k, v in kwargs.items()}
    if "distance_function" in tkw:
        tkw["distance_function"] = _distance(lib, tkw["distance_function"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if as_module:
            out = getattr(lib.nn, module)(**tkw)(*targs)
        else:
            out = getattr(lib.nn.functional, name)(*targs, **tkw)
    grads = None
    if out.requires_grad and str(out.dtype).endswith("float64"):
        grads = lib.autograd.grad(out.sum(), leaves, allow_unused=True)
    return out, grads, leaves


def _np(t):
    return t.detach().numpy().astype(np.float64)


def _close(log, what, mine, theirs, tol):
    a, b = _np(mine), _np(theirs)
    if a.shape != b.shape:
        raise Mismatch(f"{log}\n{what}: shape {a.shape} vs torch's {b.shape}")
    finite = np.isfinite(b)
    if not np.array_equal(finite, np.isfinite(a)) or not np.array_equal(
        a[~finite], b[~finite], equal_nan=True
    ):
        raise Mismatch(f"{log}\n{what}: non-finite entries differ\n{a}\n{b}")
    scale = float(np.max(np.abs(b[finite]), initial=0.0)) + 1.0
    err = float(np.max(np.abs(a[finite] - b[finite]), initial=0.0))
    if err > tol * scale:
        raise Mismatch(f"{log}\n{what}: off by {err:.3g} > {tol * scale:.3g}\n{a}\n{b}")


def compare_gradients(log, names, grads, expected_grads, tol, empty_may_be_none=False):
    """Each gradient against torch's (``names`` label them): where torch's leaf went unused
    (``None``) ours is ``None`` or zeros; ``empty_may_be_none``: an empty leaf's gradient may
    be ``None`` here where torch's is empty."""
    if grads is None:
        raise Mismatch(f"{log}\nno gradient, torch has one")
    for name, g, e in zip(names, grads, expected_grads, strict=True):
        if e is None:  # torch's unused leaf: ours is None or zeros
            if g is not None and np.any(_np(g)):
                raise Mismatch(f"{log}\ngrad {name}: {g} vs torch's None")
            continue
        if g is None and empty_may_be_none and not e.numel():
            continue
        if g is None:
            raise Mismatch(f"{log}\ngrad {name}: None vs torch's {e}")
        _close(log, f"grad {name}", g, e, tol)


def check_one(rng, log_prefix=""):
    dtype = _fdtype(rng)
    draw = DRAWS[int(rng.integers(len(DRAWS)))]
    name, module, args, kwargs = draw(rng, dtype)
    as_module = bool(rng.random() < 0.3)
    log = f"{log_prefix}{module + '(...)' if as_module else name}({args}, {kwargs})"
    try:
        expected, expected_grads, _ = _call(torch, name, module, args, kwargs, as_module)
    except Exception as error:  # torch refuses: so must retrograd, with torch's class
        try:
            _call(rg, name, module, args, kwargs, as_module)
        except Exception as mine:
            if not isinstance(mine, type(error)):
                raise Mismatch(
                    f"{log}\nraised {type(mine).__name__}: {mine}\ntorch: "
                    f"{type(error).__name__}: {error}"
                ) from mine
            return
        raise Mismatch(
            f"{log}\nretrograd accepted; torch raised {type(error).__name__}: {error}"
        ) from None
    try:
        out, grads, _ = _call(rg, name, module, args, kwargs, as_module)
    except Exception as mine:
        raise Mismatch(f"{log}\nretrograd raised {type(mine).__name__}: {mine}") from mine
    if str(out.dtype).rpartition(".")[2] != str(expected.dtype).rpartition(".")[2]:
        raise Mismatch(f"{log}\ndtype {out.dtype} vs torch's {expected.dtype}")
    tol = TOL[str(expected.dtype).rpartition(".")[2]]
    if len({a.array.dtype for a in args if isinstance(a, Leaf) and a.array.dtype.kind == "f"}) > 1:
        # float32 and float64 operands: torch computes some terms in float32 before it promotes
        # (multilabel_soft_margin's log-sigmoids, poisson_nll's Stirling term of the target),
        # retrograd promotes first; measured differences are float32 roundings (<= 1.2e-7)
        tol = TOL["float32"]
    _close(log, "value", out, expected, tol)
    if expected_grads is not None:
        if grads is None:
            raise Mismatch(f"{log}\nno gradient, torch has one")
        for i, (g, e) in enumerate(zip(grads, expected_grads, strict=True)):
            if (g is None) != (e is None):
                raise Mismatch(f"{log}\ngrad {i}: {g} vs torch's {e}")
            if e is not None:
                if name == "ctc_loss" and not kwargs.get("zero_infinity"):
                    # torch's gradient of an infinite loss (an impossible alignment) is NaN;
                    # retrograd's 0 (margin.ctc_loss): compared where torch's is a number
                    keep = ~torch.isnan(e)
                    g, e = g[rg.tensor(keep.numpy())], e[keep]
                _close(log, f"grad {i}", g, e, tol)


CALLS_PER_SEED = 12


@pytest.mark.parametrize("seed", range(40))
def test_random_losses_against_torch(seed):
    rng = np.random.default_rng([69, seed])
    for i in range(CALLS_PER_SEED):
        check_one(rng, f"seed {seed} call {i}: ")
