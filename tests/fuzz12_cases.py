"""Round 12 of the differential fuzzer against PyTorch: what rounds 1-11 (``fuzz_cases.py``,
``fuzz11_cases.py``) do not draw. Each generator takes a ``numpy`` generator and returns a
:class:`Trial`: a function written once against a namespace ``lib`` (``torch`` or
``retrograd``) that returns a list of results; :func:`check` runs it on both and raises
:class:`fuzz_cases.Mismatch` on the first difference in raising or not, dtype, shape or value.

- ``higher_order``: third derivatives (``autograd.grad(create_graph=True)`` three times) of
  random compositions of elementwise, reduction, product, indexing, normalization, softmax,
  convolution, pooling, loss and linalg ops;
- ``functional``: ``autograd.functional`` and ``func`` transforms and their compositions;
- ``optimizer``: trajectories of every ``torch.optim`` optimizer on random option grids, with
  parameter groups overriding options, ``add_param_group`` mid-run and a ``state_dict``
  round trip into a fresh optimizer;
- ``scheduler``: learning-rate (and momentum) trajectories of every scheduler on random
  settings, with a ``state_dict`` round trip into a scheduler made over the running optimizer;
- ``module``: ``nn`` modules on argument grids (transposed convolutions with ``output_size``,
  ``padding="same"`` and padding modes, pooling with indices and unpooling, adaptive pools,
  ``EmbeddingBag``, ``interpolate``, losses, recurrent layers with packed sequences), outputs
  and float64 gradients of input and parameters;
- ``creation``: ``arange`` with float bounds and steps under every dtype, ``linspace`` /
  ``logspace``, ``full``/``*_like`` dtypes, zero-size tensors through reductions and products.

Known differences are left out of the draws and named where they are.
"""

from __future__ import annotations

import copy
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

import retrograd as rg
from fuzz_cases import Mismatch, _torch


@dataclass
class Trial:
    name: str
    fn: Callable  # fn(lib) -> list of results (tensors, numbers, strings)
    rtol: float = 1e-9


def _plain(lib, x):
    """A result as (kind, dtype, shape, array) or a plain value, for either library."""
    torch = _torch()
    if isinstance(x, torch.Tensor):
        if x._is_zerotensor():
            x = torch.zeros(x.shape, dtype=x.dtype)
        return ("tensor", str(x.dtype).replace("torch.", ""), tuple(x.shape), x.detach().numpy())
    if isinstance(x, rg.Tensor):
        return ("tensor", str(x.dtype).replace("retrograd.", ""), tuple(x.shape), x.numpy())
    if x is None:
        return None
    if isinstance(x, (float, np.floating)):
        return float(x)
    return str(x)


def _compare(k, got, want, rtol):
    if want is None or got is None:
        if (want is None) != (got is None):
            # an unused input: torch's None against retrograd's zeros (or the reverse)
            other = want if got is None else got
            if isinstance(other, tuple) and not np.asarray(other[3]).any():
                return
            raise Mismatch(f"result {k}: {got!r} != torch's {want!r}")
        return
    if isinstance(want, float):
        if not (isinstance(got, float) and math.isclose(got, want, rel_tol=rtol, abs_tol=rtol)):
            raise Mismatch(f"result {k}: {got!r} != torch's {want!r}")
        return
    if not isinstance(want, tuple):
        if got != want:
            raise Mismatch(f"result {k}: {got!r} != torch's {want!r}")
        return
    if not isinstance(got, tuple):
        raise Mismatch(f"result {k}: {got!r} != torch's tensor")
    if got[1] != want[1]:
        raise Mismatch(f"result {k}: dtype {got[1]} != torch's {want[1]}")
    if got[2] != want[2]:
        raise Mismatch(f"result {k}: shape {got[2]} != torch's {want[2]}")
    a, b = np.asarray(got[3]), np.asarray(want[3])
    if b.dtype.kind == "f":
        tol = rtol if b.dtype == np.float64 else max(rtol, 2e-5)
        if not np.allclose(a, b, rtol=tol, atol=tol, equal_nan=True):
            raise Mismatch(f"result {k}: values\n{a}\n!= torch's\n{b}")
    elif not np.array_equal(a, b):
        raise Mismatch(f"result {k}: values\n{a}\n!= torch's\n{b}")


def _run(lib, trial: Trial):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return [_plain(lib, x) for x in trial.fn(lib)], None
        except Exception as e:  # either library's error is a result here
            return None, e


def check(trial: Trial) -> None:
    torch = _torch()
    want, t_err = _run(torch, trial)
    got, r_err = _run(rg, trial)
    if t_err is not None:
        if r_err is None:
            raise Mismatch(f"torch raises {type(t_err).__name__}: {t_err}; retrograd returns")
        if not isinstance(r_err, rg.RetrogradError):
            raise Mismatch(f"bare error {type(r_err).__name__}: {r_err}")
        return
    if r_err is not None:
        raise Mismatch(f"retrograd raises {type(r_err).__name__}: {r_err}") from r_err
    if len(got) != len(want):
        raise Mismatch(f"{len(got)} results != torch's {len(want)}")
    for k, (g, w) in enumerate(zip(got, want)):
        _compare(k, g, w, trial.rtol)


def _pick(rng, *values):
    return values[int(rng.integers(len(values)))]


GENERATORS: dict[str, Callable] = {}


def gen(name):
    def register(fn):
        GENERATORS[name] = fn
        return fn

    return register


# ---- third derivatives -------------------------------------------------------------------

_EYE = "eye"


def _spd(lib, a):
    return a[:, :3] @ a[:, :3].T + 2.0 * lib.eye(3, dtype=lib.float64)


#: scalar functions of two (3, 4) float64 tensors. Left out, torch being wrong at third
#: order (checked against finite differences of its second derivatives): layer_norm and
#: batch_norm (their double-backward formulas are not differentiated correctly) and
#: logcumsumexp (NaN); left out, torch having no third derivative: cdist, multi_margin_loss.
COMPOSITIONS = {
    "sin_mul": lambda lib, x, y: (x.sin() * y).sum(),
    "matmul_tanh": lambda lib, x, y: (x @ y.transpose(-1, -2)).tanh().sum(),
    "softmax": lambda lib, x, y: (lib.softmax(x, -1) * y).sum(),
    "log_softmax": lambda lib, x, y: lib.log_softmax(x * y, 0).pow(2).sum(),
    "logsumexp": lambda lib, x, y: (x * y).logsumexp(-1).sum(),
    "vector_norm": lambda lib, x, y: lib.linalg.vector_norm(x * y + 0.1, dim=-1).pow(3).sum(),
    "matrix_norm": lambda lib, x, y: lib.linalg.matrix_norm(x @ y.transpose(-1, -2)),
    "gather": lambda lib, x, y: (
        x.gather(1, lib.tensor([[0, 2, 1, 0], [3, 3, 0, 1], [1, 0, 2, 2]])) ** 3 * y
    ).sum(),
    "scatter_add": lambda lib, x, y: (
        lib.zeros(3, 4, dtype=lib.float64)
        .scatter_add(1, lib.tensor([[0, 2, 1, 0], [3, 3, 0, 1], [1, 0, 2, 2]]), x * y)
        .pow(3)
        .sum()
    ),
    "index_select": lambda lib, x, y: (x.index_select(0, lib.tensor([2, 0, 2])) * y).exp().sum(),
    "cumprod": lambda lib, x, y: (x.cumprod(1) * y).sum(),
    "prod": lambda lib, x, y: (x.prod(1) * y.sum(1)).sum(),
    "var": lambda lib, x, y: (x * y).var(1).pow(2).sum(),
    "std": lambda lib, x, y: (x + y).std(0).sum(),
    "group_norm": lambda lib, x, y: (
        (lib.nn.functional.group_norm(x.reshape(1, 3, 4), 3) * y.reshape(1, 3, 4)).pow(2).sum()
    ),
    "conv1d": lambda lib, x, y: (
        lib.nn.functional.conv1d(
            x.reshape(1, 3, 4), y.reshape(3, 1, 4)[:, :, :2], padding=1, groups=3
        )
        .pow(3)
        .sum()
    ),
    "conv2d": lambda lib, x, y: (
        lib.nn.functional.conv2d(
            x.reshape(1, 1, 3, 4), y.reshape(1, 1, 3, 4)[..., :2, :2], padding=1
        )
        .pow(3)
        .sum()
    ),
    "max_pool": lambda lib, x, y: (
        lib.nn.functional.max_pool1d((x * y).reshape(1, 3, 4), 2).pow(3).sum()
    ),
    "avg_pool": lambda lib, x, y: (
        lib.nn.functional.avg_pool2d((x * y).reshape(1, 1, 3, 4), 2, ceil_mode=True).pow(3).sum()
    ),
    "mse": lambda lib, x, y: lib.nn.functional.mse_loss(x.sin(), y),
    "huber": lambda lib, x, y: lib.nn.functional.huber_loss(x**3, y, delta=0.5),
    "smooth_l1": lambda lib, x, y: lib.nn.functional.smooth_l1_loss(x**3, y, beta=0.5),
    "cross_entropy": lambda lib, x, y: lib.nn.functional.cross_entropy(
        x * y, lib.tensor([0, 3, 1]), label_smoothing=0.2
    ),
    "cross_entropy_probs": lambda lib, x, y: lib.nn.functional.cross_entropy(x, lib.softmax(y, 1)),
    "bce_logits": lambda lib, x, y: lib.nn.functional.binary_cross_entropy_with_logits(
        x * y, lib.sigmoid(y), pos_weight=lib.tensor([1.0, 2.0, 0.5, 3.0], dtype=lib.float64)
    ),
    "kl_div": lambda lib, x, y: lib.nn.functional.kl_div(
        lib.log_softmax(x, 1), lib.softmax(y, 1), reduction="batchmean"
    ),
    "einsum": lambda lib, x, y: lib.einsum("ij,kj->ik", x.tanh(), y).pow(3).sum(),
    "bmm": lambda lib, x, y: lib.bmm(x.reshape(1, 3, 4), y.reshape(1, 4, 3)).pow(3).sum(),
    "det": lambda lib, x, y: lib.linalg.det(
        x[:, :3] @ y[:, :3].T + 3 * lib.eye(3, dtype=lib.float64)
    ),
    "inv": lambda lib, x, y: lib.linalg.inv(
        x[:, :3] @ y[:, :3].T + 3 * lib.eye(3, dtype=lib.float64)
    ).sum(),
    "solve": lambda lib, x, y: (
        lib.linalg.solve(x[:, :3] + 3 * lib.eye(3, dtype=lib.float64), y).pow(2).sum()
    ),
    "cholesky": lambda lib, x, y: lib.linalg.cholesky(_spd(lib, x)).sum() * y.sum(),
    "eigvalsh": lambda lib, x, y: (
        lib.linalg.eigvalsh(_spd(lib, x) + y[:, :3] @ y[:, :3].T).pow(3).sum()
    ),
    "gelu_tanh": lambda lib, x, y: lib.nn.functional.gelu(x * y, approximate="tanh").sum(),
    "elu": lambda lib, x, y: lib.nn.functional.elu(x * y).pow(2).sum(),
    "softplus": lambda lib, x, y: lib.nn.functional.softplus(x * y, beta=2.0).pow(2).sum(),
    "mish": lambda lib, x, y: lib.nn.functional.mish(x * y).sum(),
    "atan2": lambda lib, x, y: lib.atan2(x, y + 3).pow(2).sum(),
    "pow": lambda lib, x, y: (x.abs() + 0.5).pow(y).sum(),
    "where": lambda lib, x, y: lib.where(x > 0, x * y, y**3).pow(2).sum(),
    "normalize": lambda lib, x, y: (lib.nn.functional.normalize(x, dim=1) * y).pow(2).sum(),
    "sdpa": lambda lib, x, y: (
        lib.nn.functional.scaled_dot_product_attention(
            x.reshape(1, 3, 4), y.reshape(1, 3, 4), x.reshape(1, 3, 4)
        )
        .pow(2)
        .sum()
    ),
    "bicubic": lambda lib, x, y: (
        lib.nn.functional.interpolate(
            (x * y).reshape(1, 1, 3, 4), scale_factor=1.5, mode="bicubic", align_corners=True
        )
        .pow(3)
        .sum()
    ),
    "sort": lambda lib, x, y: (x.sort(1)[0] * y).pow(3).sum(),
    "pad_reflect": lambda lib, x, y: (
        lib.nn.functional.pad((x * y).reshape(1, 3, 4), (2, 1), mode="reflect").pow(3).sum()
    ),
    "unfold": lambda lib, x, y: (
        lib.nn.functional.unfold((x * y).reshape(1, 1, 3, 4), 2).pow(3).sum()
    ),
    "svdvals": lambda lib, x, y: lib.linalg.svdvals(x + 0.1 * y).pow(3).sum(),
    "matrix_exp": lambda lib, x, y: lib.linalg.matrix_exp(0.3 * x[:, :3] + 0.2 * y[:, :3]).sum(),
    "xlogy": lambda lib, x, y: lib.xlogy(x, y.abs() + 0.5).pow(2).sum(),
    "digamma": lambda lib, x, y: (x.abs() + 0.5 + y.abs()).digamma().sum(),
    "erfinv": lambda lib, x, y: (x.tanh() * 0.9).erfinv().mul(y).sum(),
    "sinc": lambda lib, x, y: (x * y + 0.1).sinc().sum(),
    "logaddexp": lambda lib, x, y: lib.logaddexp(x, y).pow(3).sum(),
    "glu": lambda lib, x, y: (lib.nn.functional.glu(x, 1) * y[:, :2]).sum(),
    "triplet": lambda lib, x, y: lib.nn.functional.triplet_margin_loss(x, y, x.flip(0), margin=2.0),
}


def _derivatives(lib, f, xa, ya, order: int, seed: int) -> list:
    """f and its first ``order`` derivatives: each the gradient of a random weighting of
    the one before it, ``create_graph=True``."""
    x = lib.tensor(xa, requires_grad=True)
    y = lib.tensor(ya, requires_grad=True)
    current = f(lib, x, y)
    results = [current]
    rng = np.random.default_rng(seed)
    for _ in range(order):
        grads = lib.autograd.grad(current, (x, y), create_graph=True, allow_unused=True)
        results.extend(grads)
        terms = [
            (g * lib.tensor(rng.standard_normal(tuple(g.shape)))).sum()
            for g in grads
            if g is not None and g.requires_grad
        ]
        if not terms:
            break
        current = terms[0] if len(terms) == 1 else terms[0] + terms[1]
    return results


@gen("higher_order")
def _higher_order(rng):
    name = str(_pick(rng, *sorted(COMPOSITIONS)))
    xa, ya = rng.uniform(-1.3, 1.3, (3, 4)), rng.uniform(-1.3, 1.3, (3, 4))
    seed = int(rng.integers(1 << 30))
    return Trial(
        f"third derivative of {name}",
        lambda lib: _derivatives(lib, COMPOSITIONS[name], xa, ya, 3, seed),
        rtol=1e-6,
    )


# ---- functional transforms ---------------------------------------------------------------


@gen("functional")
def _functional(rng):
    xa, ya, va = (rng.standard_normal(3) for _ in range(3))
    ma = rng.standard_normal((3, 3))

    def scalar(lib):
        return lambda x: (x.sin() * x.cumsum(0)).sum()

    def vector(lib):
        return lambda x: lib.softmax(x, 0) * x.exp()

    def pair(lib):
        return lambda x, y: (x * y.sum(), x.pow(2))

    forms = {
        "jacobian": lambda lib, make: lib.autograd.functional.jacobian(vector(lib), make(xa)),
        "jacobian_pair": lambda lib, make: lib.autograd.functional.jacobian(
            pair(lib), (make(xa), make(ya))
        ),
        "jacobian_vectorize": lambda lib, make: lib.autograd.functional.jacobian(
            vector(lib), make(xa), vectorize=True, create_graph=True
        ),
        "hessian": lambda lib, make: lib.autograd.functional.hessian(scalar(lib), make(xa)),
        "hessian_pair": lambda lib, make: lib.autograd.functional.hessian(
            lambda a, b: (a @ b).tanh().sum(), (make(ma), make(ma.T.copy()))
        ),
        "hvp": lambda lib, make: lib.autograd.functional.hvp(scalar(lib), make(xa), make(va)),
        "vhp": lambda lib, make: lib.autograd.functional.vhp(scalar(lib), make(xa), make(va)),
        "vjp": lambda lib, make: lib.autograd.functional.vjp(
            pair(lib), (make(xa), make(ya)), (make(va), make(va))
        ),
        "jvp": lambda lib, make: lib.autograd.functional.jvp(
            pair(lib), (make(xa), make(ya)), (make(va), make(ya))
        ),
        "grad_grad": lambda lib, make: lib.func.grad(
            lambda x: lib.func.grad(scalar(lib))(x).pow(2).sum()
        )(make(xa)),
        "jacrev": lambda lib, make: lib.func.jacrev(pair(lib), argnums=(0, 1))(make(xa), make(ya)),
        "jacfwd_jacrev": lambda lib, make: lib.func.jacfwd(lib.func.jacrev(scalar(lib)))(make(xa)),
        "hessian_func": lambda lib, make: lib.func.hessian(scalar(lib))(make(xa)),
        "vmap_grad": lambda lib, make: lib.func.vmap(lib.func.grad(scalar(lib)))(make(ma)),
        "vmap_in_dims": lambda lib, make: lib.func.vmap(
            lambda a, b: (a * b).sum(), in_dims=(0, None)
        )(make(ma), make(ya)),
        "vmap_jacrev": lambda lib, make: lib.func.vmap(lib.func.jacrev(vector(lib)))(make(ma)),
        "grad_and_value": lambda lib, make: lib.func.grad_and_value(
            lambda a, b: (a @ b).tanh().sum(), argnums=1
        )(make(ma), make(xa)),
        "vjp_func": lambda lib, make: lib.func.vjp(vector(lib), make(xa))[1](make(va)),
        "jvp_func": lambda lib, make: lib.func.jvp(vector(lib), (make(xa),), (make(va),)),
        "aux": lambda lib, make: lib.func.grad(lambda x: (scalar(lib)(x), x.cos()), has_aux=True)(
            make(xa)
        ),
        "dict_input": lambda lib, make: lib.func.jacrev(lambda d: (d["a"] * d["b"]).sum())(
            {"a": make(xa), "b": make(ya)}
        ),
    }
    name = str(_pick(rng, *sorted(forms)))

    def fn(lib):
        out = forms[name](lib, lib.tensor)
        return _leaves(out)

    return Trial(f"functional {name}", fn)


def _leaves(out) -> list:
    if isinstance(out, dict):
        return [x for k in sorted(out) for x in _leaves(out[k])]
    if isinstance(out, (tuple, list)):
        return [x for item in out for x in _leaves(item)]
    return [out]


# ---- optimizers --------------------------------------------------------------------------


def _optimizer_options(rng, name):
    def betas():
        return (float(_pick(rng, 0.9, 0.5, 0.0)), float(_pick(rng, 0.999, 0.9, 0.5)))

    def decay():
        return float(_pick(rng, 0.0, 0.01, 0.3))

    maximize = bool(rng.random() < 0.3)
    if name == "SGD":
        momentum = float(_pick(rng, 0.0, 0.9, 0.5))
        nesterov = bool(momentum > 0 and rng.random() < 0.4)
        dampening = 0.0 if nesterov else float(_pick(rng, 0.0, 0.1))
        return dict(
            lr=float(_pick(rng, 0.1, 0.01)),
            momentum=momentum,
            dampening=dampening,
            nesterov=nesterov,
            weight_decay=decay(),
            maximize=maximize,
        )
    if name in ("Adam", "AdamW"):
        return dict(
            lr=0.05,
            betas=betas(),
            eps=float(_pick(rng, 1e-8, 0.1)),
            weight_decay=decay(),
            amsgrad=bool(rng.random() < 0.5),
            maximize=maximize,
        )
    if name == "Adamax":
        return dict(
            lr=0.05,
            betas=betas(),
            eps=float(_pick(rng, 1e-8, 0.1)),
            weight_decay=decay(),
            maximize=maximize,
        )
    if name == "NAdam":
        return dict(
            lr=0.05,
            betas=betas(),
            weight_decay=decay(),
            momentum_decay=float(_pick(rng, 4e-3, 0.1)),
            decoupled_weight_decay=bool(rng.random() < 0.5),
            maximize=maximize,
        )
    if name == "RAdam":
        return dict(
            lr=0.05,
            betas=betas(),
            weight_decay=decay(),
            decoupled_weight_decay=bool(rng.random() < 0.5),
            maximize=maximize,
        )
    if name == "Adagrad":
        return dict(
            lr=0.1,
            lr_decay=float(_pick(rng, 0.0, 0.1)),
            weight_decay=decay(),
            initial_accumulator_value=float(_pick(rng, 0.0, 0.5)),
            eps=float(_pick(rng, 1e-10, 0.1)),
            maximize=maximize,
        )
    if name == "Adadelta":
        return dict(
            lr=float(_pick(rng, 1.0, 0.5)),
            rho=float(_pick(rng, 0.9, 0.5)),
            eps=float(_pick(rng, 1e-6, 0.1)),
            weight_decay=decay(),
            maximize=maximize,
        )
    if name == "RMSprop":
        return dict(
            lr=0.01,
            alpha=float(_pick(rng, 0.99, 0.5)),
            eps=float(_pick(rng, 1e-8, 0.1)),
            weight_decay=decay(),
            momentum=float(_pick(rng, 0.0, 0.9)),
            centered=bool(rng.random() < 0.5),
            maximize=maximize,
        )
    if name == "Rprop":
        return dict(
            lr=0.05,
            etas=(float(_pick(rng, 0.5, 0.3)), float(_pick(rng, 1.2, 2.0))),
            step_sizes=(float(_pick(rng, 1e-6, 0.01)), float(_pick(rng, 50.0, 0.1))),
            maximize=maximize,
        )
    if name == "ASGD":
        return dict(
            lr=0.05,
            lambd=float(_pick(rng, 1e-4, 0.1)),
            alpha=float(_pick(rng, 0.75, 0.5)),
            t0=float(_pick(rng, 1e6, 2.0)),
            weight_decay=decay(),
            maximize=maximize,
        )
    # Adafactor
    return dict(
        lr=0.05,
        beta2_decay=float(_pick(rng, -0.8, -0.5)),
        d=float(_pick(rng, 1.0, 0.5)),
        weight_decay=decay(),
        maximize=maximize,
    )


OPTIMIZERS = (
    "SGD",
    "Adam",
    "AdamW",
    "Adamax",
    "NAdam",
    "RAdam",
    "Adagrad",
    "Adadelta",
    "RMSprop",
    "Rprop",
    "ASGD",
    "Adafactor",
)


def _objective(ps, k):
    total = 0
    for i, p in enumerate(ps):
        total = total + ((p - 0.3 * (i + 1)).sin() * p).sum() * (1 + 0.1 * k) + (p**2).sum() * 0.05
    return total


def _optimize(lib, name, options, overrides, inits, steps, reload_at, add_at):
    """Parameters after each step: groups ``[params 0-1 with overrides]``, parameter 2 added
    as a group of its own at step ``add_at``, the optimizer rebuilt from its state dict after
    step ``reload_at``."""
    torch = _torch()
    ps = [lib.nn.Parameter(lib.tensor(a)) for a in inits]

    def build():
        return getattr(lib.optim, name)([dict(params=ps[:2], **overrides)], **options)

    opt, history = build(), []
    for k in range(steps):
        if k == add_at:
            opt.add_param_group(dict(params=[ps[2]], lr=0.02))
        loss = _objective(ps if k >= add_at else ps[:2], k)
        if lib is torch:
            opt.zero_grad(set_to_none=bool(k % 2))
            loss.backward()
            opt.step()
        else:
            opt.step(loss.backward())
        history.extend(p.detach() * 1 for p in ps)
        if k == reload_at:
            state = copy.deepcopy(opt.state_dict())
            opt = build()
            if k >= add_at:
                opt.add_param_group(dict(params=[ps[2]], lr=0.02))
            opt.load_state_dict(state)
    return history


@gen("optimizer")
def _optimizer(rng):
    name = str(_pick(rng, *OPTIMIZERS))
    options = _optimizer_options(rng, name)
    alternative = _optimizer_options(rng, name)
    # a group overriding some options (not SGD's coupled momentum/nesterov/dampening, nor
    # Adagrad's initial_accumulator_value: torch fills the accumulators of the constructor's
    # groups from the constructor's argument, not the group's; see the round-12 notes)
    fixed = ("momentum", "nesterov", "dampening", "initial_accumulator_value")
    overrides = {k: v for k, v in alternative.items() if k not in fixed and rng.random() < 0.3}
    dtype = str(_pick(rng, "float64", "float32"))
    inits = [rng.standard_normal(s).astype(dtype) for s in ((3,), (2, 2), (2,))]
    reload_at, add_at = int(rng.integers(0, 6)), int(rng.integers(0, 8))
    return Trial(
        f"{name} {options} group {overrides} reload@{reload_at} add@{add_at} {dtype}",
        lambda lib: _optimize(lib, name, options, overrides, inits, 6, reload_at, add_at),
        rtol=1e-9 if dtype == "float64" else 1e-4,
    )


# ---- learning-rate schedulers ------------------------------------------------------------


def _scheduler_maker(name, seed):
    """``make(lib, optimizer)`` for scheduler ``name``, its settings drawn from ``seed`` (the
    same on every call, so that a rebuilt scheduler has the same settings)."""

    def make(lib, o):
        rng = np.random.default_rng(seed)
        S = lib.optim.lr_scheduler  # noqa: N806

        def c(*values):
            return _pick(rng, *values)

        if name == "StepLR":
            return S.StepLR(o, step_size=c(1, 2, 3), gamma=c(0.5, 0.1))
        if name == "MultiStepLR":
            return S.MultiStepLR(o, milestones=c([2, 4], [1, 1, 3], [5]), gamma=c(0.5, 0.1))
        if name == "ExponentialLR":
            return S.ExponentialLR(o, gamma=c(0.9, 0.5))
        if name == "CosineAnnealingLR":
            return S.CosineAnnealingLR(o, T_max=c(3, 5, 10), eta_min=c(0.0, 0.001))
        if name == "PolynomialLR":
            return S.PolynomialLR(o, total_iters=c(4, 6), power=c(1.0, 2.0, 0.5))
        if name == "OneCycleLR":
            return S.OneCycleLR(
                o,
                max_lr=c(0.1, [0.1, 0.2]),
                total_steps=16,
                pct_start=c(0.3, 0.5),
                anneal_strategy=c("cos", "linear"),
                cycle_momentum=c(True, False),
                div_factor=c(25.0, 5.0),
                final_div_factor=c(1e4, 10.0),
                three_phase=c(False, True),
            )
        if name == "CyclicLR":
            return S.CyclicLR(
                o,
                base_lr=c(0.01, [0.01, 0.02]),
                max_lr=c(0.1, 0.3),
                step_size_up=c(2, 3),
                step_size_down=c(None, 1, 4),
                mode=c("triangular", "triangular2", "exp_range"),
                gamma=c(1.0, 0.9),
                cycle_momentum=c(True, False),
                base_momentum=0.8,
                max_momentum=0.9,
            )
        if name == "CosineAnnealingWarmRestarts":
            return S.CosineAnnealingWarmRestarts(
                o, T_0=c(1, 2, 3), T_mult=c(1, 2), eta_min=c(0.0, 0.001)
            )
        if name == "ChainedScheduler":
            return S.ChainedScheduler(
                [
                    S.ConstantLR(o, factor=0.5, total_iters=3),
                    S.ExponentialLR(o, gamma=0.9),
                    S.MultiStepLR(o, [2, 5], 0.3),
                ]
            )
        if name == "ReduceLROnPlateau":
            return S.ReduceLROnPlateau(
                o,
                mode=c("min", "max"),
                factor=c(0.5, 0.1),
                patience=c(0, 1, 2),
                threshold=c(1e-4, 0.1),
                threshold_mode=c("rel", "abs"),
                cooldown=c(0, 1),
                min_lr=c(0.0, [0.001, 0.02]),
                eps=c(1e-8, 1e-3),
            )
        # the ones rebuilt mid-run only from the start: torch's recursive forms re-apply their
        # epoch-0 factor on a rebuilt LinearLR/ConstantLR and SequentialLR resets the rates,
        # so torch's resumed run leaves its own uninterrupted one (retrograd's keeps to it)
        if name == "LinearLR":
            return S.LinearLR(
                o, start_factor=c(0.25, 1 / 3, 1.0), end_factor=c(1.0, 0.5), total_iters=c(2, 4, 5)
            )
        if name == "ConstantLR":
            return S.ConstantLR(o, factor=c(0.5, 0.25), total_iters=c(2, 3))
        if name == "LambdaLR":
            return S.LambdaLR(o, lr_lambda=[lambda e: 0.9**e, lambda e: 1 / (e + 1)])
        if name == "MultiplicativeLR":
            return S.MultiplicativeLR(o, lr_lambda=lambda e: 0.95 if e % 2 else 0.8)
        return S.SequentialLR(
            o,
            [
                S.LinearLR(o, start_factor=0.5, total_iters=3),
                S.ExponentialLR(o, gamma=0.9),
                S.StepLR(o, 2, 0.5),
            ],
            milestones=c([2, 5], [3, 4], [1, 6]),
        )

    return make


RESUMABLE = (
    "StepLR",
    "MultiStepLR",
    "ExponentialLR",
    "CosineAnnealingLR",
    "PolynomialLR",
    "OneCycleLR",
    "CyclicLR",
    "CosineAnnealingWarmRestarts",
    "ChainedScheduler",
    "ReduceLROnPlateau",
)
SCHEDULERS = RESUMABLE + ("LinearLR", "ConstantLR", "LambdaLR", "MultiplicativeLR", "SequentialLR")


def _schedule(lib, name, make, optimizer, metrics, reload_at):
    p = lib.nn.Parameter(lib.tensor([1.0, 2.0]))
    q = lib.nn.Parameter(lib.tensor([0.5]))
    extra = {} if optimizer == "Adam" else {"momentum": 0.9}
    o = getattr(lib.optim, optimizer)(
        [dict(params=[p]), dict(params=[q], lr=0.05)], lr=0.1, **extra
    )
    s = make(lib, o)
    out = []

    def note():
        for g in o.param_groups:
            out.append(float(g["lr"]))
            out.append(float(g["momentum"] if "momentum" in g else g["betas"][0]))

    note()
    for k in range(len(metrics)):
        s.step(float(metrics[k])) if name == "ReduceLROnPlateau" else s.step()
        note()
        if k == reload_at:
            state = copy.deepcopy(s.state_dict())
            s = make(lib, o)
            s.load_state_dict(state)
            note()
    if name != "ReduceLROnPlateau":
        out.extend(float(v) for v in s.get_last_lr())
    return out


@gen("scheduler")
def _scheduler(rng):
    name = str(_pick(rng, *SCHEDULERS))
    make = _scheduler_maker(name, int(rng.integers(1 << 30)))
    optimizer = str(_pick(rng, "SGD", "Adam", "RMSprop"))
    metrics = rng.choice([1.0, 0.9, 0.95, 0.99, 1.1], 14)
    reload_at = int(rng.integers(0, 14)) if name in RESUMABLE else -1
    return Trial(
        f"{name} over {optimizer} reload@{reload_at}",
        lambda lib: _schedule(lib, name, make, optimizer, metrics, reload_at),
        rtol=1e-12,
    )


# ---- nn modules on argument grids --------------------------------------------------------


def _module_trial(rng, kind: str):
    """(description, input shape, build(nn), call(lib, module, x))."""
    c = lambda *v: _pick(rng, *v)  # noqa: E731
    if kind == "conv_transpose":
        dim, groups = c(1, 2, 3), c(1, 2)
        cin, cout = 2 * groups, c(1, 2) * groups
        stride, dilation, k, pad = c(1, 2, 3), c(1, 2), c(1, 2, 3), c(0, 1, 2)
        args = dict(
            stride=stride,
            padding=pad,
            groups=groups,
            bias=c(True, False),
            dilation=dilation,
            output_padding=int(rng.integers(0, max(stride, dilation))),
        )
        shape = (c(1, 2), cin) + (c(1, 3, 4),) * dim
        grow = [int(rng.integers(0, stride + 1)) for _ in range(dim)]
        full = bool(rng.random() < 0.5)

        def call(lib, m, x):
            if rng_output:  # torch's output_size (the module's output_padding then unused)
                size = [
                    (n - 1) * stride - 2 * pad + dilation * (k - 1) + 1 + g
                    for n, g in zip(x.shape[2:], grow)
                ]
                return m(x, output_size=list(x.shape[:2]) + size if full else size)
            return m(x)

        rng_output = bool(rng.random() < 0.6)
        return (
            f"ConvTranspose{dim}d {args} k={k} output_size={rng_output} grow={grow}",
            shape,
            lambda nn: getattr(nn, f"ConvTranspose{dim}d")(cin, cout, k, **args),
            call,
        )
    if kind == "conv":
        dim, groups = c(1, 2, 3), c(1, 2)
        cin, cout = 2 * groups, c(1, 2) * groups
        pad = c("same", "valid", 0, 1, 2)
        args = dict(
            padding=pad,
            padding_mode=c("zeros", "reflect", "replicate", "circular"),
            dilation=c(1, 2),
            groups=groups,
            stride=1 if pad == "same" else c(1, 2),
            bias=c(True, False),
        )
        k = c(1, 2, 3, 4)
        shape = (c(1, 2), cin) + (c(3, 4, 5),) * dim
        return (
            f"Conv{dim}d {args} k={k}",
            shape,
            lambda nn: getattr(nn, f"Conv{dim}d")(cin, cout, k, **args),
            lambda lib, m, x: m(x),
        )
    if kind == "max_unpool":
        dim, k = c(1, 2, 3), c(2, 3)
        stride, pad = c(None, 1, 2, 3), int(rng.integers(0, k // 2 + 1))
        args = dict(
            kernel_size=k, stride=stride, padding=pad, ceil_mode=c(True, False), dilation=c(1, 2)
        )
        sized = bool(rng.random() < 0.5)

        def call(lib, m, x):
            out, idx = m(x)
            unpool = getattr(lib.nn, f"MaxUnpool{dim}d")(k, stride, pad)
            return (
                out,
                idx,
                unpool(out, idx, output_size=x.shape[2:]) if sized else unpool(out, idx),
            )

        return (
            f"MaxPool{dim}d {args} + MaxUnpool (sized={sized})",
            (1, 2) + (c(4, 5, 7),) * dim,
            lambda nn: getattr(nn, f"MaxPool{dim}d")(return_indices=True, **args),
            call,
        )
    if kind == "avg_pool":
        dim, k = c(1, 2, 3), c(2, 3)
        args = dict(
            kernel_size=k,
            stride=c(None, 1, 2, 3),
            padding=int(rng.integers(0, k // 2 + 1)),
            ceil_mode=c(True, False),
            count_include_pad=c(True, False),
        )
        if dim > 1 and rng.random() < 0.4:
            args["divisor_override"] = c(1, 3)
        return (
            f"AvgPool{dim}d {args}",
            (1, 2) + (c(4, 5, 7),) * dim,
            lambda nn: getattr(nn, f"AvgPool{dim}d")(**args),
            lambda lib, m, x: m(x),
        )
    if kind == "lp_pool":
        dim = c(1, 2)
        args = dict(
            norm_type=c(1, 2, 3.0),
            kernel_size=c(2, 3),
            stride=c(None, 1, 2),
            ceil_mode=c(True, False),
        )
        return (
            f"LPPool{dim}d {args}",
            (1, 2) + (c(4, 5, 7),) * dim,
            lambda nn: getattr(nn, f"LPPool{dim}d")(**args),
            lambda lib, m, x: m(x.abs() + 0.1),
        )
    if kind == "adaptive":
        dim, which = c(1, 2, 3), c("Max", "Avg")
        size = c(1, 2, 3, 5) if dim == 1 else tuple(c(1, 2, 3, 5, None) for _ in range(dim))
        extra = {"return_indices": True} if which == "Max" else {}
        return (
            f"Adaptive{which}Pool{dim}d {size}",
            (1, 2) + (c(4, 5, 7),) * dim,
            lambda nn: getattr(nn, f"Adaptive{which}Pool{dim}d")(size, **extra),
            lambda lib, m, x: m(x),
        )
    if kind == "embedding_bag":
        mode = c("sum", "mean", "max")
        weighted = mode == "sum" and rng.random() < 0.5
        pad, last = c(None, 0, 2), c(True, False)
        idx = rng.integers(0, 5, 7)
        offsets = [0, 2, 2, 5, 7] if last else [0, 2, 2, 5]

        def call(lib, m, x):
            w = x.reshape(-1)[:7] if weighted else None
            return m(lib.tensor(idx), lib.tensor(offsets), per_sample_weights=w)

        return (
            f"EmbeddingBag mode={mode} weighted={weighted} pad={pad} last={last}",
            (7,),
            lambda nn: nn.EmbeddingBag(5, 3, mode=mode, padding_idx=pad, include_last_offset=last),
            call,
        )
    if kind == "interpolate":
        dim = c(1, 2, 3)
        modes = {
            1: ("nearest", "linear", "nearest-exact"),
            2: ("nearest", "bilinear", "bicubic", "nearest-exact", "area"),
            3: ("nearest", "trilinear", "nearest-exact"),
        }[dim]
        mode = c(*modes)
        corners = c(None, True, False) if mode not in ("nearest", "nearest-exact", "area") else None
        factor = c(None, 1.5, 0.7, 2, 2.3)
        # (antialias=True is refused: see the round-12 notes)
        args = dict(
            size=None if factor is not None else tuple(c(1, 3, 4, 7) for _ in range(dim)),
            scale_factor=factor,
            mode=mode,
            align_corners=corners,
            recompute_scale_factor=c(None, True, False) if factor is not None else None,
        )
        return (
            f"interpolate {args}",
            (1, 2) + (c(2, 3, 5),) * dim,
            lambda nn: nn.Identity(),
            lambda lib, m, x: lib.nn.functional.interpolate(x, **args),
        )
    if kind == "loss":
        return _loss_trial(rng)
    # recurrent (no proj_size drawn: LSTM projections are checked in test_realports9_fixes.py)
    typ, layers, both, first = c("LSTM", "GRU", "RNN"), c(1, 2), c(True, False), c(True, False)
    bias, packed = c(True, False), bool(rng.random() < 0.4)
    args = dict(num_layers=layers, bidirectional=both, batch_first=first, bias=bias)

    def call(lib, m, x):
        if not packed:
            return m(x)
        lengths = lib.tensor([3, 2]) if first else lib.tensor([2, 2, 1])
        seq = lib.nn.utils.rnn.pack_padded_sequence(
            x, lengths, batch_first=first, enforce_sorted=False
        )
        out, h = m(seq)
        return lib.nn.utils.rnn.pad_packed_sequence(out, batch_first=first), h

    return (
        f"{typ} {args} packed={packed}",
        (2, 3, 3),
        lambda nn: getattr(nn, typ)(3, 3, **args),
        call,
    )


LOSSES = (
    "CrossEntropyLoss",
    "NLLLoss",
    "BCEWithLogitsLoss",
    "HuberLoss",
    "SmoothL1Loss",
    "MultiLabelSoftMarginLoss",
    "MultiMarginLoss",
    "SoftMarginLoss",
    "HingeEmbeddingLoss",
    "CosineEmbeddingLoss",
    "PoissonNLLLoss",
    "GaussianNLLLoss",
    "KLDivLoss",
    "MultiLabelMarginLoss",
    "TripletMarginLoss",
    "MarginRankingLoss",
    "L1Loss",
    "BCELoss",
)


def _loss_trial(rng):
    c = lambda *v: _pick(rng, *v)  # noqa: E731
    name = str(c(*LOSSES))
    kw: dict = {"reduction": c("mean", "sum", "none")}
    n, classes = c(1, 3), 4
    if name in ("CrossEntropyLoss", "NLLLoss"):
        kw["ignore_index"] = c(-100, 1)
        if name == "CrossEntropyLoss":
            kw["label_smoothing"] = c(0.0, 0.2)
    weighted = ("CrossEntropyLoss", "NLLLoss", "BCEWithLogitsLoss", "MultiMarginLoss")
    if name in weighted and rng.random() < 0.5:
        kw["weight"] = [0.5, 1.0, 2.0, 0.1]
    if name == "BCEWithLogitsLoss" and rng.random() < 0.5:
        kw["pos_weight"] = [0.5, 1.0, 2.0, 3.0]
    if name == "HuberLoss":
        kw["delta"] = c(0.5, 1.0, 2.0)
    if name == "SmoothL1Loss":
        kw["beta"] = c(0.0, 0.5, 1.0)
    if name == "MultiMarginLoss":
        kw.update(p=c(1, 2), margin=c(1.0, 0.5))
    if name in (
        "HingeEmbeddingLoss",
        "CosineEmbeddingLoss",
        "MarginRankingLoss",
        "TripletMarginLoss",
    ):
        kw["margin"] = c(0.0, 0.5, 1.0)
    if name == "TripletMarginLoss":
        kw.update(p=c(1, 2), swap=c(True, False))
    if name == "PoissonNLLLoss":
        kw.update(log_input=c(True, False), full=c(True, False))
    if name == "GaussianNLLLoss":
        kw.update(full=c(True, False), eps=c(1e-6, 0.1))
    if name == "KLDivLoss":
        kw.update(log_target=c(True, False), reduction=c("mean", "sum", "none", "batchmean"))
    classes_drawn = np.where(rng.random(n) < 0.3, 1, rng.integers(0, classes, n))
    ya = rng.standard_normal((n, classes))

    def build(nn):
        lib = _torch() if nn is _torch().nn else rg
        args = {
            k: lib.tensor(v, dtype=lib.float64) if isinstance(v, list) else v for k, v in kw.items()
        }
        return getattr(nn, name)(**args)

    def call(lib, m, x):
        t, y = lib.tensor(classes_drawn), lib.tensor(ya)
        if name in ("CrossEntropyLoss", "MultiMarginLoss"):
            return m(x, t)
        if name == "NLLLoss":
            return m(x.log_softmax(1), t)
        if name in ("BCEWithLogitsLoss", "MultiLabelSoftMarginLoss"):
            return m(x, y.sigmoid())
        if name == "BCELoss":
            return m(x.sigmoid(), y.sigmoid())
        if name in ("SoftMarginLoss", "HingeEmbeddingLoss"):
            return m(x, y.sign())
        if name == "CosineEmbeddingLoss":
            return m(x, y, y[:, 0].sign())
        if name == "MarginRankingLoss":
            return m(x[:, 0], y[:, 0], y[:, 1].sign())
        if name == "TripletMarginLoss":
            return m(x, y, y.flip(0) * 0.5)
        if name == "PoissonNLLLoss":
            return m(x, y.abs())
        if name == "GaussianNLLLoss":
            return m(x, y, (x * 0.3).exp())
        if name == "KLDivLoss":
            return m(x.log_softmax(1), y.log_softmax(1) if kw["log_target"] else y.softmax(1))
        if name == "MultiLabelMarginLoss":
            return m(x, lib.tensor(np.array([[3, 0, -1, 1]] * n)))
        return m(x, y)

    return f"{name} {kw}", (n, classes), build, call


MODULE_KINDS = (
    "conv_transpose",
    "conv",
    "max_unpool",
    "avg_pool",
    "lp_pool",
    "adaptive",
    "embedding_bag",
    "interpolate",
    "loss",
    "recurrent",
)


def _run_module(lib, build, call, xa, state):
    """Outputs, then the float64 gradients of the input and of every parameter (the module's
    parameters loaded from torch's, ``state`` a dict filled by the torch run)."""
    torch = _torch()
    if lib is torch:
        torch.manual_seed(0)
    m = build(lib.nn).double()
    if lib is torch:
        state.update({k: v.detach().numpy().copy() for k, v in m.state_dict().items()})
    else:
        m.load_state_dict({k: rg.tensor(v) for k, v in state.items()})
    x = lib.tensor(xa, requires_grad=True)
    outs = _leaves(call(lib, m, x))
    tracked = [o for o in outs if o.dtype == lib.float64 and o.requires_grad]
    if not tracked:
        return outs
    rng = np.random.default_rng(1)
    loss = sum((o * lib.tensor(rng.standard_normal(tuple(o.shape)))).sum() for o in tracked)
    leaves = [x, *m.parameters()]
    if lib is torch:
        grads = torch.autograd.grad(loss, leaves, allow_unused=True)
    else:
        got = loss.backward()
        grads = [leaf.grad(got) for leaf in leaves]
    return outs + list(grads)


@gen("module")
def _module(rng):
    kind = str(_pick(rng, *MODULE_KINDS))
    description, shape, build, call = _module_trial(rng, kind)
    xa = rng.standard_normal(shape)
    state: dict = {}
    return Trial(description, lambda lib: _run_module(lib, build, call, xa, state), rtol=1e-7)


# ---- creation and zero-size tensors ------------------------------------------------------


@gen("creation")
def _creation(rng):
    c = lambda *v: _pick(rng, *v)  # noqa: E731
    kind = c("arange", "linspace", "logspace", "full", "like", "empty_reduction", "empty_product")
    dt = c(None, "float64", "float32", "int64")

    def kw(lib):
        return {} if dt is None else {"dtype": getattr(lib, dt)}

    if kind == "arange":
        args = c(
            (5,),
            (2.9,),
            (0.2,),
            (1, 4),
            (0, 3, 0.5),
            (1, 2.5, 0.5),
            (0.1, 1.0, 0.3),
            (-3, 3, 2),
            (-0.5, 3, 1),
            (0, 5, 1.5),
            (0, 5, 2.9),
            (1.0, 0.0, -0.25),
            (0, -5, -1.5),
            (1.9, 5.5, 2),
            (3, 3),
            (0, 3, -1),
            (0, 2.1),
        )
        return Trial(f"arange{args} {dt}", lambda lib: [lib.arange(*args, **kw(lib))])
    if kind in ("linspace", "logspace"):
        args = c((0, 1, 5), (1, 0, 1), (-2.5, 3, 4), (0, 10, 0), (2, 2, 3), (0, 5, 6))
        extra = {"base": 2.0} if kind == "logspace" and rng.random() < 0.5 else {}
        return Trial(
            f"{kind}{args} {dt} {extra}",
            lambda lib: [getattr(lib, kind)(*args, **kw(lib), **extra)],
            rtol=1e-6,
        )
    if kind == "full":
        value = c(3, 2.5, True, -1)
        return Trial(f"full {value!r} {dt}", lambda lib: [lib.full((2,), value, **kw(lib))])
    if kind == "like":
        fn = c("zeros_like", "ones_like", "full_like")
        source = c([1, 2], [1.0, 2.0], [True, False])
        extra = (c(3, 2.5, True),) if fn == "full_like" else ()
        return Trial(
            f"{fn}({source}, {extra}) {dt}",
            lambda lib: [getattr(lib, fn)(lib.tensor(source), *extra, **kw(lib))],
        )
    if kind == "empty_reduction":
        op = c(
            "sum",
            "mean",
            "prod",
            "amax",
            "amin",
            "max",
            "min",
            "argmax",
            "argmin",
            "std",
            "var",
            "logsumexp",
            "norm",
            "all",
            "any",
            "nansum",
            "count_nonzero",
            "cumsum",
            "cumprod",
            "softmax",
            "log_softmax",
            "aminmax",
            "nanmean",
            "median",
        )
        shape, dim = c(
            ((0,), None),
            ((0,), 0),
            ((2, 0), 1),
            ((2, 0), 0),
            ((0, 3), 0),
            ((0, 3), 1),
            ((0, 3), None),
            ((2, 0), -1),
        )
        # (median of an empty int64 or bool tensor: torch returns INT64_MIN, or True)
        source = "float64" if op == "median" else c("float64", "int64", "bool")

        def reduce(lib):
            t = lib.zeros(*shape, dtype=getattr(lib, source))
            if op in ("softmax", "log_softmax", "cumsum", "cumprod", "logsumexp"):
                return _leaves(getattr(t, op)(0 if dim is None else dim))
            return _leaves(getattr(t, op)() if dim is None else getattr(t, op)(dim))

        return Trial(f"{op} of zeros{shape} {source} dim={dim}", reduce)
    pairs = c(
        ((0, 3), (3, 2)),
        ((2, 0), (0, 3)),
        ((3,), (3, 0)),
        ((0,), (0,)),
        ((2, 0, 3), (3, 4)),
        ((1, 2, 0), (4, 0, 3)),
        ((2, 3), (0, 3)),
    )
    source = c("float64", "int64")
    op = c("matmul", "cat", "stack", "einsum")

    def product(lib):
        a = lib.zeros(*pairs[0], dtype=getattr(lib, source))
        b = lib.ones(*pairs[1], dtype=getattr(lib, source))
        if op == "matmul":
            return [a @ b]
        if op == "cat":
            return [lib.cat([a, b], 0)]
        if op == "stack":
            return [lib.stack([a, a], -1)]
        return [lib.einsum("...ij,jk->...ik", a, b)]

    return Trial(f"{op} of {pairs} {source}", product)
