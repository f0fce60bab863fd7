"""Memory round 75: composites that a memory budget could not shrink, made single ops of the op
table (autodiff/ops.py), against torch.

``F.smooth_l1_loss`` and ``F.huber_loss`` were abs, a mask, the masked difference and its
square: 2.5 arrays of the input's size per call beside the difference (one call on 256x256
float32 held 655,360 bytes, torch's saved tensors 524,288; a chain of four such calls with
tanh 3,670,016 against torch's 2,359,296, 7 December). Each is now one op of the difference
``d = x - y`` whose rule reads ``d`` alone (torch's ``smooth_l1_backward`` /
``huber_backward``): 262,144 and 2,097,152 bytes.
"""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg
from backends import inner_backend
from retrograd.nn import functional as F  # noqa: N812

torch = pytest.importorskip("torch")
TF = torch.nn.functional

SHAPE = (64, 64)
NBYTES = 64 * 64 * 4
LOSSES = {
    "smooth_l1_0.5": ("smooth_l1_loss", {"beta": 0.5}),
    "smooth_l1_1": ("smooth_l1_loss", {"beta": 1.0}),
    "smooth_l1_0.3": ("smooth_l1_loss", {"beta": 0.3}),
    "huber_0.7": ("huber_loss", {"delta": 0.7}),
    "huber_1": ("huber_loss", {"delta": 1.0}),
    "huber_2.5": ("huber_loss", {"delta": 2.5}),
}


def _backend(strategy=None):
    return rg.Autodiff(inner_backend(), checkpointing=strategy or rg.NoCheckpointing())


def _call(lib, name, x, y, **kwargs):
    fn, params = LOSSES[name]
    return getattr(F if lib is rg else TF, fn)(x, y, **params, **kwargs)


@pytest.mark.own_checkpointing("measures NoCheckpointing's peak")
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("name", ["smooth_l1_0.5", "huber_0.7"])
def test_loss_holds_the_difference_alone(name, reduction):
    """One array of the input's size (the difference its rule reads); 2.5 before, torch 2."""
    backend = _backend()
    rng = np.random.default_rng(75)
    a, b = (rng.standard_normal((2, *SHAPE)) * 2).astype(np.float32)
    x = rg.tensor(a, backend=backend).requires_grad_()
    y = rg.tensor(b, backend=backend).requires_grad_()
    out = _call(rg, name, x * 1.0, y * 1.0, reduction=reduction)  # (leaves are not counted)
    grads = out.sum().backward()
    assert grads.peak_bytes == NBYTES, (grads.peak_bytes, NBYTES)


LINKS = 8


def _chain(strategy, name, steps):
    """``h = tanh(h + loss(h, t))`` ``LINKS`` times (elementwise losses, as a chain of
    regularizers or a loss inside a model reads them), ``steps`` steps on one backend."""
    backend = _backend(strategy)
    rng = np.random.default_rng(3)
    start = (rng.standard_normal(SHAPE) * 2).astype(np.float32)
    targets = [rng.standard_normal(SHAPE).astype(np.float32) for _ in range(LINKS)]
    out = []
    for _ in range(steps):
        x = rg.tensor(start, backend=backend).requires_grad_()
        h = x * 1.0
        for t in targets:
            target = rg.tensor(t, backend=backend).requires_grad_()  # (a leaf: not counted)
            h = (h + _call(rg, name, h, target, reduction="none")).tanh()
        grads = (h * 2.0).sum().backward()
        out.append((grads.peak_bytes, x.grad(grads).numpy()))
    return out


@pytest.mark.own_checkpointing("compares NoCheckpointing with a budget of its own")
@pytest.mark.parametrize("name", ["smooth_l1_0.5", "huber_0.7"])
def test_loss_chain_keeps_a_budget(name):
    """NoCheckpointing holds two arrays per link (the difference, tanh's output; 3.5 before,
    torch's 3), and a budget of half that holds within a tenth of it in the planned steps,
    with NoCheckpointing's gradients (the compositions held 1.125x that budget, 7 December)."""
    plain = _chain(rg.NoCheckpointing(), name, 1)
    peak = plain[0][0]
    assert peak == 2 * LINKS * NBYTES, (peak, 2 * LINKS * NBYTES)
    budget = LINKS * NBYTES
    steps = _chain(rg.BudgetCheckpointing(budget), name, 3)
    for _, found in steps:
        assert np.array_equal(found, plain[0][1])
    held = max(p for p, _ in steps[1:])
    assert held <= 1.1 * budget, (held, budget, peak)


def _sample(dtype, bound):
    """Differences across both branches, on and beside ``+-bound``, 0, infinities and NaN."""
    rng = np.random.default_rng(11)
    edges = [bound, -bound, np.nextafter(bound, 0), np.nextafter(-bound, 0), 0.0, -0.0]
    edges += [np.nextafter(bound, 9), 1e-300, 40.0, -40.0, np.inf, -np.inf, np.nan]
    d = np.concatenate([rng.standard_normal(200) * 2 * bound, edges]).astype(dtype)
    y = rng.standard_normal(d.shape).astype(dtype)
    return (d + y).astype(dtype), y  # (x - y: the differences up to a rounding)


def _both(name, a, b, reduction, weights=None, create_graph=False):
    x = rg.tensor(a, backend=_backend()).requires_grad_()
    y = rg.tensor(b, backend=x.backend).requires_grad_()
    out = _call(rg, name, x, y, reduction=reduction)
    scale = rg.tensor(weights, backend=x.backend) if weights is not None else 3.0
    gx, gy = rg.autograd.grad((out * scale).sum(), [x, y], create_graph=create_graph)
    tx, ty = torch.from_numpy(a).requires_grad_(), torch.from_numpy(b).requires_grad_()
    expected = _call(torch, name, tx, ty, reduction=reduction)
    tscale = torch.from_numpy(weights) if weights is not None else 3.0
    tgx, tgy = torch.autograd.grad((expected * tscale).sum(), [tx, ty], create_graph=create_graph)
    return (x, y, out, gx, gy), (tx, ty, expected, tgx, tgy)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("name", LOSSES)
def test_values_and_gradients_match_torch_in_float64(name, reduction):
    bound = next(iter(LOSSES[name][1].values()))
    a, b = _sample(np.float64, bound)
    weights = np.random.default_rng(2).standard_normal(a.shape) if reduction == "none" else None
    (_, _, out, gx, gy), (_, _, expected, tgx, tgy) = _both(name, a, b, reduction, weights)
    # (a mean sums 213 terms in the backend's order, torch's its own: 1e-16 apart at most)
    np.testing.assert_allclose(out.numpy(), expected.detach().numpy(), rtol=1e-14, atol=0)
    for mine, theirs in ((gx, tgx), (gy, tgy)):
        np.testing.assert_allclose(mine.numpy(), theirs.numpy(), rtol=1e-15, atol=0)


@pytest.mark.parametrize(
    ("name", "reduction"),
    [
        ("smooth_l1_0.5", "none"),
        ("smooth_l1_0.5", "sum"),
        ("smooth_l1_1", "none"),
        ("smooth_l1_1", "sum"),
        ("huber_0.7", "sum"),
        ("huber_1", "none"),
        ("huber_1", "sum"),
    ],
)
def test_float32_bits_are_torchs(name, reduction):
    """torch's bits where the compositions had them. Not with "mean" (torch multiplies
    1 / n into the difference, our mean's rule into the gradient), a beta that is no power of
    2 (torch divides by it, 0.5 / beta was a rounded factor), or delta 0.7 with per-element
    gradients (torch's -delta side rounds apart from its +delta side's)."""
    bound = next(iter(LOSSES[name][1].values()))
    a, b = _sample(np.float32, bound)
    weights = np.random.default_rng(2).standard_normal(a.shape).astype(np.float32)
    weights = weights if reduction == "none" else None
    (_, _, out, gx, gy), (_, _, expected, tgx, tgy) = _both(name, a, b, reduction, weights)
    assert np.array_equal(out.numpy(), expected.detach().numpy(), equal_nan=True)
    assert np.array_equal(gx.numpy(), tgx.numpy(), equal_nan=True)
    assert np.array_equal(gy.numpy(), tgy.numpy(), equal_nan=True)


@pytest.mark.parametrize("name", LOSSES)
def test_central_differences_and_second_derivatives(name):
    """float64 central differences of the summed loss away from the kinks, and torch's second
    derivatives (1 / beta, 1 in the quadratic branch; 0 on and beyond the bound)."""
    bound = next(iter(LOSSES[name][1].values()))
    a, b = _sample(np.float64, bound)
    keep = np.isfinite(a) & np.isfinite(b)
    a, b = a[keep], b[keep]
    weights = np.random.default_rng(4).standard_normal(a.shape)
    (x, _, _, gx, _), (tx, _, _, tgx, _) = _both(name, a, b, "none", weights, create_graph=True)
    d = a - b
    smooth = np.abs(np.abs(d) - bound) > 1e-4
    step = 1e-6

    def total(values):
        t = torch.from_numpy(values)
        return _call(torch, name, t, torch.from_numpy(b), reduction="none").numpy() * weights

    numeric = (total(a + step) - total(a - step)) / (2 * step)
    np.testing.assert_allclose(gx.numpy()[smooth], numeric[smooth], rtol=1e-6, atol=1e-8)
    (second,) = rg.autograd.grad((gx * gx).sum(), [x])
    (tsecond,) = torch.autograd.grad((tgx * tgx).sum(), [tx])
    np.testing.assert_allclose(second.numpy(), tsecond.numpy(), rtol=1e-14, atol=0)


@pytest.mark.parametrize("name", LOSSES)
def test_loss_runs_on_a_backend_without_autodiff(name):
    """The ops' kernels have defaults in the backend protocol, composing primitives."""
    bound = next(iter(LOSSES[name][1].values()))
    a, b = _sample(np.float64, bound)
    backend = inner_backend()
    out = _call(
        rg, name, rg.tensor(a, backend=backend), rg.tensor(b, backend=backend), reduction="none"
    )
    expected = _call(torch, name, torch.from_numpy(a), torch.from_numpy(b), reduction="none")
    np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-15, atol=0)


def test_errors_and_beta_zero_are_unchanged():
    x = rg.tensor(np.array([1.0, -2.0, 0.25]), backend=_backend()).requires_grad_()
    y = rg.tensor(np.array([0.0, 0.0, 0.0]), backend=x.backend)
    with pytest.raises(rg.errors.InvalidArgumentError):
        F.smooth_l1_loss(x, y, beta=-1.0)
    with pytest.raises(rg.errors.InvalidArgumentError):
        F.huber_loss(x, y, delta=0.0)
    out = F.smooth_l1_loss(x, y, beta=0.0, reduction="none")  # the L1 loss
    assert out.numpy().tolist() == [1.0, 2.0, 0.25]


# -- var and std -------------------------------------------------------------------------------
# One op of the op table (``variance``) whose rule reads x, torch's var_backward; the
# composition's square read x - mean, an array of x's size beside x (held where x is anyway,
# as where the input is a layer's output), and its mean was an untracked input that a budget
# held as a backup: one var of 256x256 float32 under a budget of half NoCheckpointing's peak
# held 2x the budget (4x in the first step), a chain of four var calls with tanh 3,154,944
# bytes against torch's 2,363,392 (7 December).
VAR_CALLS = {
    "var": lambda x: x.var(),
    "var_dim1_keepdim": lambda x: x.var(dim=1, keepdim=True),
    "var_dims_correction0": lambda x: x.var(dim=(0, 1), correction=0),
    "std_dim0": lambda x: x.std(dim=0),
    "std_dim1_correction2.5": lambda x: x.std(dim=1, correction=2.5),
    "std_unbiased_false": lambda x: x.std(-1, False),
}


@pytest.mark.own_checkpointing("measures NoCheckpointing's peak")
@pytest.mark.parametrize("name", VAR_CALLS)
def test_var_holds_its_input_alone(name):
    """x's bytes and the (small) result's, where torch saves the same; x - mean was held
    beside x."""
    backend = _backend()
    a = np.random.default_rng(5).standard_normal(SHAPE).astype(np.float32)
    h = rg.tensor(a, backend=backend).requires_grad_() * 1.0
    out = VAR_CALLS[name](h)
    grads = (out * 2.0).sum().backward()
    # (std's root reads its output, and its two masks of the zeros are a byte each)
    small = 0 if name.startswith("var") else out.numel() * 6
    assert grads.peak_bytes == NBYTES + small, (grads.peak_bytes, NBYTES + small)


def _var_steps(strategy, name, steps):
    """``var(x * 1) * (y * 1)``: NoCheckpointing holds both products."""
    backend = _backend(strategy)
    a, b = np.random.default_rng(6).standard_normal((2, *SHAPE)).astype(np.float32)
    out = []
    for _ in range(steps):
        x = rg.tensor(a, backend=backend).requires_grad_()
        y = rg.tensor(b, backend=backend).requires_grad_()
        grads = (VAR_CALLS[name](x * 1.0) * (y * 1.0)).sum().backward()
        out.append((grads.peak_bytes, x.grad(grads).numpy()))
    return out


@pytest.mark.own_checkpointing("compares NoCheckpointing with a budget of its own")
@pytest.mark.parametrize("name", ["var_dim1_keepdim", "std_dim0"])
def test_var_keeps_a_budget(name):
    """Half of NoCheckpointing's peak, held within a tenth in every step (x * 1 is recomputed
    from the leaf), with NoCheckpointing's gradients; 2x the budget before (4x in the first)."""
    plain = _var_steps(rg.NoCheckpointing(), name, 1)
    budget = plain[0][0] // 2
    steps = _var_steps(rg.BudgetCheckpointing(budget), name, 3)
    for _, found in steps:
        assert np.array_equal(found, plain[0][1])
    held = max(p for p, _ in steps)
    assert held <= 1.1 * budget, (held, budget)


def _var_sample():
    v = np.random.default_rng(9).standard_normal((5, 6, 7)) * 3
    v[0, 0, 0], v[1, 2, 3], v[4, 5, 6] = np.inf, np.nan, -np.inf
    v[3] = 1.5  # a slice of equal values: std 0, whose gradient torch masks
    return v


VAR_KWARGS = [
    {},
    {"dim": 1},
    {"dim": (0, 2), "keepdim": True},
    {"dim": -1, "correction": 0},
    {"dim": 1, "correction": 2.5},
    {"dim": 0, "unbiased": False},
]


@pytest.mark.parametrize("kwargs", VAR_KWARGS, ids=str)
@pytest.mark.parametrize("fn", ["var", "std"])
def test_var_values_and_derivatives_match_torch_in_float64(fn, kwargs):
    """Values, gradients and second derivatives, slices holding infinities and NaN included:
    the composition's second derivative cut such a slice's mean term to 0, where torch's
    (and the rule's) is NaN or infinite (4 to 34 elements apart from torch's before)."""
    v = _var_sample()
    x = rg.tensor(v, backend=_backend()).requires_grad_()
    out = getattr(x, fn)(**kwargs)
    w = np.linspace(-1.0, 2.0, out.numel()).reshape(out.shape)
    first = (out * rg.tensor(w, backend=x.backend)).sum().backward(create_graph=True)
    g = x.grad(first)
    second = x.grad((g * g).sum().backward())
    tx = torch.from_numpy(v).requires_grad_()
    expected = getattr(tx, fn)(**kwargs)
    (tg,) = torch.autograd.grad((expected * torch.from_numpy(w)).sum(), tx, create_graph=True)
    (t2,) = torch.autograd.grad((tg * tg).sum(), tx)
    np.testing.assert_allclose(out.numpy(), expected.detach().numpy(), rtol=1e-14, atol=0)
    # (sums of up to 210 terms in the backends' orders: relative errors of up to 6.4e-14
    # where a deviation is small, measured; std's second derivative cancels to ~1e-17)
    np.testing.assert_allclose(g.numpy(), tg.detach().numpy(), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(second.numpy(), t2.numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("kwargs", VAR_KWARGS[:4], ids=str)
def test_var_bits_are_the_compositions(dtype, kwargs):
    """The op's value and gradient are the bits of the composition it replaced (the mean a
    constant, then square, sum and the division), which the backends' kernels compute."""
    v = np.random.default_rng(12).standard_normal((5, 6, 7)).astype(dtype)
    x = rg.tensor(v, backend=_backend()).requires_grad_()
    out = x.var(**kwargs)
    w = np.linspace(-1.0, 2.0, out.numel()).reshape(out.shape).astype(dtype)
    (g,) = rg.autograd.grad((out * rg.tensor(w, backend=x.backend)).sum(), [x])
    dims = kwargs.get("dim", (0, 1, 2))
    dims = (dims,) if isinstance(dims, int) else dims
    scale = np.prod([v.shape[d] for d in dims]) - kwargs.get("correction", 1)
    y = rg.tensor(v, backend=_backend()).requires_grad_()
    center = y.mean(dims, keepdim=True).detach()
    composed = (y - center).square().sum(dims, keepdim=True) / float(scale)
    composed = composed.reshape(out.shape)
    (expected,) = rg.autograd.grad((composed * rg.tensor(w, backend=y.backend)).sum(), [y])
    if dtype == "float32":
        assert np.array_equal(out.numpy(), composed.numpy())
    assert np.array_equal(g.numpy(), expected.numpy())


@pytest.mark.parametrize("kwargs", VAR_KWARGS, ids=str)
def test_var_runs_on_a_backend_without_autodiff(kwargs):
    v = _var_sample()[:, :, 1:]
    out = rg.tensor(v, backend=inner_backend()).var(**kwargs)
    expected = torch.from_numpy(v).var(**kwargs).numpy()
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-14, atol=0)
