"""Round 22 of the differential fuzzer against PyTorch: what rounds 10-21 draw one piece at a
time, put together. Each generator takes a ``numpy`` generator and returns a
:class:`fuzz12_cases.Trial` written once against a namespace ``lib`` (``torch`` or
``retrograd``); :func:`fuzz14_cases.check` runs it on both and raises
:class:`fuzz_cases.Mismatch` on the first difference in raising or not, dtype, shape or value
(gradients included).

- ``train``: 2-3 steps of a random small float64 model (``nn.Sequential`` or a
  ``ModuleList`` walked by hand: Linear, activations, LayerNorm, Dropout(0)) under a random
  optimizer with random settings, two parameter groups with different settings, a random
  learning-rate scheduler and gradient clipping by norm or by value: the loss, every
  parameter and the groups' learning rates after each step;
- ``reduce``: reductions and scans with tuples of dims, ``keepdim``, ``dtype=`` and
  ``correction=`` (sum, prod, mean, nansum, nanmean, logsumexp, std, var, std_mean, var_mean,
  amax, amin, aminmax, count_nonzero, cumsum, cumprod, logcumsumexp, norm) over float64,
  float32, int64 and bool inputs: values and gradients;
- ``linalg``: ``torch.linalg`` on well-conditioned random inputs (solve with ``left``,
  lstsq, cholesky with ``upper``, qr in every mode, svd/svdvals, det, slogdet, inv, pinv,
  matrix_norm of every order, eigh/eigvalsh of symmetric input with ``UPLO``, matrix_power,
  matrix_rank, cond, multi_dot, tensorsolve, cholesky_solve, triangular solve), batched or
  not: values and gradients (of quantities that do not depend on a basis's signs).

Known differences are left out of the draws and named where they are.
"""

from __future__ import annotations

import numpy as np

from fuzz12_cases import (
    OPTIMIZERS,
    SCHEDULERS,
    Trial,
    _optimizer_options,
    _pick,
    _scheduler_maker,
)
from fuzz14_cases import _grads, _weight_fn, check

__all__ = ["GENERATORS", "check"]

GENERATORS: dict = {}


def gen(name):
    def register(fn):
        GENERATORS[name] = fn
        return fn

    return register


# ---- training loops --------------------------------------------------------------------------

#: (Rprop, ASGD and Adafactor are in round 12's optimizer draws; these are the common ones)
TRAIN_OPTIMIZERS = tuple(o for o in OPTIMIZERS if o not in ("Rprop", "ASGD", "Adafactor"))
#: ReduceLROnPlateau is stepped with the loss
TRAIN_SCHEDULERS = SCHEDULERS

NORMS = ("LayerNorm", "BatchNorm1d")
ACTIVATIONS = ("Tanh", "ReLU", "Sigmoid", "GELU", "SiLU", "ELU", "Softplus", "LeakyReLU")


def _layers(rng, n_in, n_out):
    """Layer descriptions: ("Linear", i, o, bias) / ("act", name) / ("LayerNorm", n, affine)."""
    widths = [n_in] + [int(w) for w in rng.integers(2, 5, size=int(rng.integers(0, 3)))]
    widths.append(n_out)
    out = []
    for k in range(len(widths) - 1):
        out.append(("Linear", widths[k], widths[k + 1], bool(rng.random() < 0.8)))
        if k < len(widths) - 2:
            if rng.random() < 0.3:
                out.append(("LayerNorm", widths[k + 1], bool(rng.random() < 0.5)))
            elif rng.random() < 0.2:
                out.append(("BatchNorm1d", widths[k + 1], bool(rng.random() < 0.5)))
                # (no bias before it: its gradient is 0 up to rounding, which Adam's
                # normalized step turns into steps of the learning rate's size either way)
                out[-2] = out[-2][:3] + (False,)
            out.append(("act", str(_pick(rng, *ACTIVATIONS))))
            if rng.random() < 0.2:
                out.append(("Dropout",))
    return out


def _build(lib, layers):
    nn = lib.nn
    mods = []
    for d in layers:
        if d[0] == "Linear":
            mods.append(nn.Linear(d[1], d[2], bias=d[3]))
        elif d[0] == "LayerNorm":
            mods.append(nn.LayerNorm(d[1], elementwise_affine=d[2]))
        elif d[0] == "BatchNorm1d":
            mods.append(nn.BatchNorm1d(d[1], affine=d[2], momentum=0.3))
        elif d[0] == "Dropout":
            mods.append(nn.Dropout(0.0))
        else:
            mods.append(getattr(nn, d[1])())
    return mods


def _train(lib, spec):
    from fuzz_cases import _torch

    torch = _torch()
    mods = _build(lib, spec["layers"])
    if spec["container"] == "Sequential":
        model = lib.nn.Sequential(*mods)

        def forward(x):
            return model(x)
    else:
        model = lib.nn.ModuleList(mods)

        def forward(x):
            for m in model:
                x = m(x)
            return x

    model = model.double()
    state = model.state_dict()
    weight = spec["weight"]
    model.load_state_dict({k: lib.tensor(weight(tuple(v.shape))) for k, v in state.items()})
    params = list(model.parameters())
    first, rest = params[: spec["split"]], params[spec["split"] :]
    groups = [dict(params=first, **spec["overrides"])] if first else []
    groups += [dict(params=rest)] if rest else []
    opt = getattr(lib.optim, spec["optimizer"])(groups, **spec["options"])
    sched = spec["make"](lib, opt) if spec["make"] is not None else None
    x = lib.tensor(spec["x"])
    y = lib.tensor(spec["y"])
    out = []
    for k in range(spec["steps"]):
        loss = _loss(lib, spec["loss"], forward(x[k]), y[k])
        if lib is torch:
            opt.zero_grad()
            loss.backward()
            grads = None
        else:
            grads = loss.backward()
        given = [] if grads is None else [grads]
        clip = spec["clip"]
        if clip[0] == "norm":
            total = lib.nn.utils.clip_grad_norm_(*given, model.parameters(), clip[1], clip[2])
            out.append(float(total))
        elif clip[0] == "value":
            lib.nn.utils.clip_grad_value_(*given, model.parameters(), clip[1])
        if lib is torch:
            opt.step()
        else:
            opt.step(grads)
        if sched is not None:
            if spec["scheduler"] == "ReduceLROnPlateau":
                sched.step(float(loss))
            else:
                sched.step()
        out.append(float(loss))
        out.extend(p.detach() * 1 for p in params)
        out.extend(float(g["lr"]) for g in opt.param_groups)
    model.eval()
    out.append(forward(x[0]).detach() * 1)
    out.extend(b * 1 for b in model.buffers())
    return out


def _loss(lib, kind, pred, target):
    F = lib.nn.functional  # noqa: N806
    if kind == "cross_entropy":
        return F.cross_entropy(pred, (target.abs() * 10).long() % pred.shape[-1])
    if kind == "huber":
        return F.huber_loss(pred, target, delta=0.5)
    if kind == "smooth_l1":
        return F.smooth_l1_loss(pred, target, beta=0.3, reduction="sum")
    return F.mse_loss(pred, target)


@gen("train")
def _train_gen(rng):
    n_in, n_out = int(rng.integers(1, 5)), int(rng.integers(1, 4))
    layers = _layers(rng, n_in, n_out)
    name = str(_pick(rng, *TRAIN_OPTIMIZERS))
    options = _optimizer_options(rng, name)
    alternative = _optimizer_options(rng, name)
    # (as round 12: not SGD's coupled momentum/nesterov/dampening, nor Adagrad's accumulator)
    fixed = ("momentum", "nesterov", "dampening", "initial_accumulator_value", "maximize")
    overrides = {k: v for k, v in alternative.items() if k not in fixed and rng.random() < 0.5}
    options["maximize"] = False
    scheduler = str(_pick(rng, "none", *TRAIN_SCHEDULERS))
    make = None
    if scheduler != "none":
        make = _scheduler_maker(scheduler, int(rng.integers(1 << 30)))
    steps = int(rng.integers(2, 4))
    batch = int(rng.integers(2, 5))  # (BatchNorm1d trains on 2 or more)
    clip = _pick(
        rng,
        ("none",),
        ("norm", float(_pick(rng, 0.1, 1.0, 10.0)), float(_pick(rng, 2.0, 1.0, np.inf, 3.0))),
        ("value", float(_pick(rng, 0.01, 0.1, 1.0))),
    )
    n_params = sum(
        (2 if d[3] else 1) if d[0] == "Linear" else (2 if d[0] in NORMS and d[2] else 0)
        for d in layers
    )
    spec = dict(
        layers=layers,
        container=str(_pick(rng, "Sequential", "ModuleList")),
        weight=_weight_fn(rng),
        optimizer=name,
        options=options,
        overrides=overrides,
        split=int(rng.integers(0, n_params + 1)),
        scheduler=scheduler,
        make=make,
        steps=steps,
        x=rng.standard_normal((steps, batch, n_in)),
        y=rng.standard_normal((steps, batch, n_out)),
        clip=clip,
        loss=str(_pick(rng, "mse", "cross_entropy", "huber", "smooth_l1")),
    )
    desc = (
        f"train {spec['container']} {layers} {name} {options} group {overrides} "
        f"split={spec['split']} {scheduler} clip={clip} steps={steps} loss={spec['loss']}"
    )
    return Trial(desc, lambda lib: _train(lib, spec), rtol=1e-8)


# ---- reductions and scans ------------------------------------------------------------------


def _dims(rng, nd):
    """A dim argument: None, an int (maybe negative) or a tuple of distinct dims."""
    if nd == 0:
        return _pick(rng, None, 0, -1, ())
    kind = str(_pick(rng, "none", "int", "tuple", "tuple"))
    if kind == "none":
        return None
    if kind == "int":
        return int(rng.integers(-nd, nd))
    k = int(rng.integers(1, nd + 1))
    dims = [int(d) for d in rng.permutation(nd)[:k]]
    return tuple(d - nd if rng.random() < 0.3 else d for d in dims)


REDUCTIONS = (
    "sum", "prod", "mean", "nansum", "nanmean", "logsumexp", "std", "var", "std_mean",
    "var_mean", "amax", "amin", "aminmax", "count_nonzero", "cumsum", "cumprod",
    "logcumsumexp", "norm", "all", "any", "quantile", "nanquantile", "median", "nanmedian",
    "cummax", "cummin", "var_unbiased", "mean_list", "sum_dup",
)  # fmt: skip


def _reduce_call(rng, op, shape):
    """fn(lib, x) -> result(s), and a description."""
    nd = len(shape)
    dim = _dims(rng, nd)
    keepdim = bool(rng.random() < 0.5)
    one = int(rng.integers(-nd, nd)) if nd else 0
    dt = _pick(rng, None, "float64", "float32", "int64") if op in ("sum", "prod") else None
    if op in ("mean", "nanmean", "cumsum", "cumprod", "nansum") and rng.random() < 0.4:
        dt = str(_pick(rng, "float64", "float32"))

    def dtype(lib):
        return {} if dt is None else {"dtype": getattr(lib, dt)}

    if op in ("sum", "prod", "mean", "nansum", "nanmean", "amax", "amin", "logsumexp"):
        if op == "prod":  # (torch's prod takes one dim)
            dim = one if dim is not None or rng.random() < 0.5 else None
        if dim is None and op in ("logsumexp", "amax", "amin"):
            dim = tuple(range(nd))
        if dim is None:
            if op in ("amax", "amin", "logsumexp"):
                return lambda lib, x: getattr(x, op)(), f"{op}()"
            return lambda lib, x: getattr(lib, op)(x, **dtype(lib)), f"{op}(dtype={dt})"
        if op in ("amax", "amin", "logsumexp"):
            return (
                lambda lib, x: getattr(lib, op)(x, dim, keepdim=keepdim),
                f"{op}({dim}, keepdim={keepdim})",
            )
        return (
            lambda lib, x: getattr(lib, op)(x, dim, keepdim=keepdim, **dtype(lib)),
            f"{op}({dim}, keepdim={keepdim}, dtype={dt})",
        )
    if op in ("std", "var", "std_mean", "var_mean"):
        correction = _pick(rng, None, 0, 1, 2, 0.5)
        dims = (
            range(nd) if dim is None or dim == () else (dim if isinstance(dim, tuple) else (dim,))
        )
        count = int(np.prod([shape[d] for d in dims])) if nd else 1
        if correction == 2 and count <= 2:  # (N - correction < 0: torch's gradient is NaN
            correction = 1  # for some dims and shapes, -0 for others of the same math; kept out)
        kw = {} if correction is None else {"correction": correction}
        return (
            lambda lib, x: getattr(lib, op)(x, dim, keepdim=keepdim, **kw),
            f"{op}({dim}, keepdim={keepdim}, {kw})",
        )
    if op == "aminmax":
        d = {} if rng.random() < 0.3 else {"dim": one}
        return lambda lib, x: lib.aminmax(x, keepdim=keepdim, **d), f"aminmax({d}, {keepdim})"
    if op in ("quantile", "nanquantile"):
        q = _pick(rng, 0.5, 0.0, 1.0, 0.3, [0.1, 0.9], [0.25])
        interp = str(_pick(rng, "linear", "lower", "higher", "midpoint", "nearest"))
        d = _pick(rng, None, one)
        return (
            lambda lib, x: getattr(lib, op)(
                x,
                lib.tensor(q, dtype=x.dtype) if isinstance(q, list) else q,
                dim=d,
                keepdim=keepdim,
                interpolation=interp,
            ),
            f"{op}({q}, dim={d}, keepdim={keepdim}, {interp})",
        )
    if op in ("median", "nanmedian"):
        if rng.random() < 0.3:
            return lambda lib, x: getattr(x, op)(), f"{op}()"
        return (
            lambda lib, x: tuple(getattr(x, op)(one, keepdim=keepdim)),
            f"{op}({one}, keepdim={keepdim})",
        )
    if op in ("cummax", "cummin"):
        return lambda lib, x: tuple(getattr(lib, op)(x, one)), f"{op}({one})"
    if op == "var_unbiased":
        unbiased = bool(rng.random() < 0.5)
        return (
            lambda lib, x: lib.var(x, dim, unbiased, keepdim),
            f"var({dim}, {unbiased}, {keepdim})",
        )
    if op == "mean_list":
        dl = list(dim) if isinstance(dim, tuple) else [one]
        return (
            lambda lib, x: (
                lib.mean(x.double(), dl, keepdim) if x.is_floating_point() else x.sum(dl)
            ),
            f"mean({dl}, {keepdim})",
        )
    if op == "sum_dup":  # a dim named twice: refused by both
        return lambda lib, x: x.sum((one, one - nd) if nd else (0, 0)), f"sum(({one}, {one}-nd))"
    if op == "count_nonzero":
        return lambda lib, x: lib.count_nonzero(x, dim=dim), f"count_nonzero({dim})"
    if op in ("all", "any"):
        d = dim if isinstance(dim, int) else None
        if d is None:
            return lambda lib, x: getattr(x, op)(), f"{op}()"
        return lambda lib, x: getattr(x, op)(d, keepdim=keepdim), f"{op}({d}, {keepdim})"
    if op in ("cumsum", "cumprod"):
        return lambda lib, x: getattr(lib, op)(x, one, **dtype(lib)), f"{op}({one}, dtype={dt})"
    if op == "logcumsumexp":
        return lambda lib, x: lib.logcumsumexp(x, one), f"logcumsumexp({one})"
    p = _pick(rng, 2, 1, 3, float("inf"), "fro", 0.5)
    if p == "fro" and not ((isinstance(dim, tuple) and len(dim) == 2) or dim is None):
        p = 2
    return (
        lambda lib, x: lib.norm(x, p, dim, keepdim=keepdim),
        f"norm({p}, {dim}, keepdim={keepdim})",
    )


@gen("reduce")
def _reduce(rng):
    nd = int(rng.integers(0, 4))
    shape = tuple(int(n) for n in rng.integers(1, 4, size=nd))
    if rng.random() < 0.1 and nd:
        shape = shape[:-1] + (0,)
    in_dtype = str(_pick(rng, "float64", "float64", "float64", "float32", "int64", "bool"))
    op = str(_pick(rng, *REDUCTIONS))
    call, desc = _reduce_call(rng, op, shape)
    n = int(np.prod(shape)) if shape else 1
    if in_dtype == "bool":
        array = rng.random(n) < 0.5
    elif in_dtype == "int64":
        array = rng.integers(-3, 4, size=n)
    else:
        array = rng.uniform(-2, 2, size=n)
        if op in ("nansum", "nanmean") and rng.random() < 0.5:
            array[rng.random(n) < 0.3] = np.nan
        if rng.random() < 0.2:
            array[rng.random(n) < 0.3] = 0.0
    array = array.astype(in_dtype).reshape(shape)
    weight = _weight_fn(rng)

    # (torch refuses an integer dtype= of a tensor that requires grad, "Autograd not support
    # dtype"; retrograd returns the integers, without a gradient: its detach() keeps
    # requires_grad, Burn's rule, and the refusal would catch detached leaves. Not drawn)
    grad = in_dtype.startswith("float") and "dtype=int64" not in desc

    def fn(lib):
        x = lib.tensor(array, dtype=getattr(lib, in_dtype), requires_grad=grad)
        out = call(lib, x)
        outs = list(out) if isinstance(out, tuple) else [out]
        return [*outs, *_grads(lib, outs, [x] if grad else [], weight)]

    rtol = 1e-5 if "float32" in in_dtype + desc else 1e-9
    return Trial(f"{desc} of {in_dtype}{list(shape)}", fn, rtol=rtol)


# ---- linalg ----------------------------------------------------------------------------------


def _well(rng, batch, n, m=None):
    """A well-conditioned matrix (or batch): identity-dominated plus small noise."""
    m = n if m is None else m
    a = rng.uniform(-0.3, 0.3, size=batch + (n, m))
    a = a + np.eye(n, m) * float(_pick(rng, 1.5, -2.0, 3.0))
    return a


def _spd_of(lib, a):
    return a @ a.mT + lib.eye(a.shape[-1], dtype=a.dtype)


LINALG = (
    "solve", "lstsq", "cholesky", "qr", "svdvals", "svd_rec", "det", "slogdet", "inv", "pinv",
    "matrix_norm", "eigh", "eigvalsh", "matrix_power", "cond", "multi_dot", "cholesky_solve",
    "solve_triangular", "inv_ex", "cholesky_ex", "vector_norm", "tensorsolve", "matrix_exp",
    "lu_factor_solve", "norm", "logdet", "vecdot", "cross", "cholesky_inverse", "tensorinv",
    "solve_ex", "lu", "householder_product", "vander", "matrix_rank", "diagonal", "eigvals_sym",
)  # fmt: skip


def _linalg_call(rng, op, batch, n):
    """(arrays, fn(lib, *leaves) -> results, description)."""
    L = "linalg"  # noqa: N806
    if op == "solve":
        left = bool(rng.random() < 0.7)
        k = int(rng.integers(1, 4))
        vec = bool(rng.random() < 0.3) and not batch and left
        b = rng.standard_normal((n,) if vec else batch + ((n, k) if left else (k, n)))
        return (
            [_well(rng, batch, n), b],
            lambda lib, a, b: [lib.linalg.solve(a, b, left=left)],
            f"solve(left={left})",
        )
    if op == "lstsq":
        m = n + int(rng.integers(0, 3))
        k = int(rng.integers(1, 3))
        return (
            [_well(rng, batch, m, n), rng.standard_normal(batch + (m, k))],
            lambda lib, a, b: [lib.linalg.lstsq(a, b).solution],
            f"lstsq {m}x{n}",
        )
    if op in ("cholesky", "cholesky_ex"):
        upper = bool(rng.random() < 0.4)

        def f(lib, a):
            s = _spd_of(lib, a)
            if op == "cholesky_ex":
                r = lib.linalg.cholesky_ex(s, upper=upper)
                return [r.L, r.info.long()]  # (retrograd holds no int32: API.md section 9)
            return [lib.linalg.cholesky(s, upper=upper)]

        return [_well(rng, batch, n)], f, f"{op}(upper={upper})"
    if op == "qr":
        mode = str(_pick(rng, "reduced", "complete", "r"))
        m = n + int(rng.integers(0, 3))

        def f(lib, a):
            q, r = lib.linalg.qr(a, mode=mode)
            if mode == "r":
                return [q.numel(), r.abs()]
            # (the product is sign-free; the factors' signs follow LAPACK's, the same here)
            return [q, r, q @ r] if mode == "reduced" else [q[..., :, :n] @ r[..., :n, :], r]

        return [_well(rng, batch, m, n)], f, f"qr({mode}) {m}x{n}"
    if op == "svdvals":
        m = n + int(rng.integers(-1, 2))
        return (
            [_well(rng, batch, max(m, 1), n)],
            lambda lib, a: [lib.linalg.svdvals(a)],
            "svdvals",
        )
    if op == "svd_rec":  # U diag(S) Vh and U U^T: sign-free
        full = bool(rng.random() < 0.3)

        def f(lib, a):
            u, s, vh = lib.linalg.svd(a, full_matrices=full)
            k = s.shape[-1]
            return [s, (u[..., :, :k] * s[..., None, :]) @ vh[..., :k, :], u @ u.mT]

        m = n + int(rng.integers(0, 2))
        return [_well(rng, batch, m, n)], f, f"svd(full_matrices={full}) {m}x{n}"
    if op in ("det", "inv", "matrix_exp", "logdet"):
        a = _well(rng, batch, n)
        if op == "logdet":
            a = np.abs(a) + np.eye(n) * 2

        def f(lib, a):
            if op in ("det", "logdet"):
                return [getattr(lib, op)(a)]
            return [getattr(lib.linalg, op)(a)]

        return [a], f, op
    if op == "slogdet":
        return (
            [_well(rng, batch, n)],
            lambda lib, a: list(lib.linalg.slogdet(a)),
            "slogdet",
        )
    if op == "inv_ex":
        return (
            [_well(rng, batch, n)],
            lambda lib, a: [lib.linalg.inv_ex(a).inverse, lib.linalg.inv_ex(a).info.long()],
            "inv_ex",
        )
    if op == "pinv":
        m = n + int(rng.integers(0, 3))
        # (hermitian=True is refused by name: it reads one triangle; not drawn)
        herm = False

        def f(lib, a):
            if herm:
                return [lib.linalg.pinv(_spd_of(lib, a), hermitian=True)]
            return [lib.linalg.pinv(a)]

        return [_well(rng, batch, m, n)], f, f"pinv(hermitian={herm}) {m}x{n}"
    if op == "matrix_norm":
        ord_ = _pick(rng, "fro", "nuc", 1, -1, 2, -2, float("inf"), float("-inf"))
        keepdim = bool(rng.random() < 0.5)
        m = n + int(rng.integers(0, 2))
        dim = (-2, -1) if rng.random() < 0.7 else (-1, -2)
        return (
            [_well(rng, batch, m, n)],
            lambda lib, a: [lib.linalg.matrix_norm(a, ord_, dim, keepdim=keepdim)],
            f"matrix_norm({ord_}, {dim}, keepdim={keepdim}) {m}x{n}",
        )
    if op == "vector_norm":
        ord_ = _pick(rng, 2, 1, 3, 0.5, float("inf"), float("-inf"), 0)
        nd = len(batch) + 2
        dim = _pick(rng, None, -1, (0, -1) if nd > 1 else -1)
        return (
            [_well(rng, batch, n, n + 1)],
            lambda lib, a: [lib.linalg.vector_norm(a, ord_, dim)],
            f"vector_norm({ord_}, {dim})",
        )
    if op == "norm":
        ord_ = _pick(rng, None, "fro", "nuc", 2, 1)
        dim = None if ord_ is None else (-2, -1)
        return (
            [_well(rng, batch, n, n)],
            lambda lib, a: [lib.linalg.norm(a, ord_, dim)],
            f"linalg.norm({ord_}, {dim})",
        )
    if op in ("eigh", "eigvalsh"):
        uplo = str(_pick(rng, "L", "U"))
        a = rng.standard_normal(batch + (n, n))
        a = a + a.swapaxes(-1, -2) + np.diag(np.arange(n) * 3.0)  # distinct eigenvalues

        def f(lib, a):
            if op == "eigvalsh":
                return [lib.linalg.eigvalsh(a, UPLO=uplo)]
            w, v = lib.linalg.eigh(a, UPLO=uplo)
            return [w, (v * w[..., None, :]) @ v.mT, v.abs()]

        return [a], f, f"{op}(UPLO={uplo})"
    if op == "matrix_power":
        k = int(rng.integers(-3, 4))
        return (
            [_well(rng, batch, n)],
            lambda lib, a: [lib.linalg.matrix_power(a, k)],
            f"matrix_power({k})",
        )
    if op == "cond":
        p = _pick(rng, None, "fro", "nuc", 1, float("inf"), 2, -2)
        return [_well(rng, batch, n)], lambda lib, a: [lib.linalg.cond(a, p)], f"cond({p})"
    if op == "multi_dot":
        dims = [int(d) for d in rng.integers(1, 4, size=int(rng.integers(2, 5)))]
        arrays = [rng.standard_normal((dims[k], dims[k + 1])) for k in range(len(dims) - 1)]
        return arrays, lambda lib, *ms: [lib.linalg.multi_dot(list(ms))], f"multi_dot {dims}"
    if op == "cholesky_solve":
        upper = bool(rng.random() < 0.4)

        def f(lib, a, b):
            c = lib.linalg.cholesky(_spd_of(lib, a), upper=upper)
            return [lib.cholesky_solve(b, c, upper=upper)]

        return (
            [_well(rng, batch, n), rng.standard_normal(batch + (n, 2))],
            f,
            f"cholesky_solve(upper={upper})",
        )
    if op == "solve_triangular":
        upper = bool(rng.random() < 0.5)
        left = bool(rng.random() < 0.7)
        unit = bool(rng.random() < 0.3)
        b = rng.standard_normal(batch + ((n, 2) if left else (2, n)))
        return (
            [_well(rng, batch, n), b],
            lambda lib, a, b: [
                getattr(lib, L).solve_triangular(a, b, upper=upper, left=left, unitriangular=unit)
            ],
            f"solve_triangular(upper={upper}, left={left}, unitriangular={unit})",
        )
    if op == "tensorsolve":
        a = _well(rng, (), n * 2).reshape(n, 2, n, 2)
        return (
            [a, rng.standard_normal((n, 2))],
            lambda lib, a, b: [lib.linalg.tensorsolve(a, b)],
            "tensorsolve",
        )
    if op == "vecdot":
        dim = int(_pick(rng, -1, 0)) if batch else -1
        return (
            [rng.standard_normal(batch + (n,)), rng.standard_normal((n,))],
            lambda lib, a, b: [lib.linalg.vecdot(a, b, dim=dim) if dim == -1 else a.sum()],
            f"vecdot(dim={dim})",
        )
    if op == "cross":
        return (
            # (b of a's number of dims: retrograd also broadcasts one of fewer dims, which torch
            # refuses; op_cases.py's "cross_broadcast" keeps that. Not drawn)
            [rng.standard_normal(batch + (3,)), rng.standard_normal((1,) * len(batch) + (3,))],
            lambda lib, a, b: [lib.linalg.cross(a, b)],
            "cross",
        )
    if op == "cholesky_inverse":
        upper = bool(rng.random() < 0.4)

        def f(lib, a):
            c = lib.linalg.cholesky(_spd_of(lib, a), upper=upper)
            return [lib.cholesky_inverse(c, upper=upper)]

        return [_well(rng, batch, n)], f, f"cholesky_inverse(upper={upper})"
    if op == "tensorinv":
        a = _well(rng, (), n * 2).reshape(n, 2, n * 2)
        return [a], lambda lib, a: [lib.linalg.tensorinv(a, ind=2)], "tensorinv(ind=2)"
    if op == "solve_ex":
        return (
            [_well(rng, batch, n), rng.standard_normal(batch + (n, 2))],
            lambda lib, a, b: [
                lib.linalg.solve_ex(a, b).result,
                lib.linalg.solve_ex(a, b).info.long(),
            ],
            "solve_ex",
        )
    if op == "lu":
        m = n + int(rng.integers(-1, 2))
        return (
            [_well(rng, batch, max(m, 1), n)],
            lambda lib, a: list(lib.linalg.lu(a)),
            f"lu {max(m, 1)}x{n}",
        )
    if op == "householder_product":
        m = n + int(rng.integers(0, 2))
        k = int(rng.integers(1, n + 1))
        return (
            [rng.standard_normal(batch + (m, n)) * 0.5, rng.uniform(0.5, 1.5, batch + (k,))],
            lambda lib, a, t: [lib.linalg.householder_product(a, t)],
            f"householder_product {m}x{n} k={k}",
        )
    if op == "vander":
        k = _pick(rng, None, 1, 2, 4)
        return (
            [rng.standard_normal(batch + (n,))],
            lambda lib, a: [lib.linalg.vander(a, N=k)],
            f"vander(N={k})",
        )
    if op == "matrix_rank":
        m = n + int(rng.integers(0, 2))
        arr = _well(rng, batch, m, n)
        if n > 1 and rng.random() < 0.5:
            arr[..., -1] = arr[..., 0] * 2.0  # rank-deficient
        return (
            [arr],
            lambda lib, a: [lib.linalg.matrix_rank(a.detach())],
            f"matrix_rank {m}x{n}",
        )
    if op == "diagonal":
        off = int(rng.integers(-1, 2))
        return (
            [rng.standard_normal(batch + (n, n + 1))],
            lambda lib, a: [lib.linalg.diagonal(a, offset=off)],
            f"linalg.diagonal(offset={off})",
        )
    if op == "eigvals_sym":  # eigvalsh of a symmetrized input, gradient through the sum

        def f(lib, a):
            return [lib.linalg.eigvalsh(a + a.mT)]

        return [rng.standard_normal(batch + (n, n))], f, "eigvalsh(a + a.mT)"
    # lu_factor_solve
    adjoint = bool(rng.random() < 0.4)
    left = bool(rng.random() < 0.6)

    def f(lib, a, b):
        lu, piv = lib.linalg.lu_factor(a)
        return [lib.linalg.lu_solve(lu, piv, b, left=left, adjoint=adjoint)]

    return (
        [_well(rng, batch, n), rng.standard_normal(batch + ((n, 2) if left else (2, n)))],
        f,
        f"lu_factor+lu_solve(left={left}, adjoint={adjoint})",
    )


@gen("linalg")
def _linalg(rng):
    op = str(_pick(rng, *LINALG))
    batch = tuple(int(b) for b in rng.integers(1, 3, size=int(rng.integers(0, 3))))
    n = int(rng.integers(1, 4))
    arrays, call, desc = _linalg_call(rng, op, batch, n)
    weight = _weight_fn(rng)

    def fn(lib):
        leaves = [lib.tensor(a, dtype=lib.float64, requires_grad=True) for a in arrays]
        outs = call(lib, *leaves)
        outs = [lib.tensor(float(o), dtype=lib.float64) if isinstance(o, int) else o for o in outs]
        return [*outs, *_grads(lib, outs, leaves, weight)]

    shapes = [a.shape for a in arrays]
    return Trial(f"{desc} on {shapes}", fn, rtol=1e-7)
