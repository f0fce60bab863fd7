"""Gradient rules written as torch writes them, so that they round as torch's do.

A rule that is the right derivative but computed in another order (``g / sqrt(1 - x*x)`` for
torch's ``g * rsqrt(1 - x*x)``) is one ulp off torch's gradient in a third to a half of the
elements. Where a rule reads only arithmetic of its inputs (no exp or log of the NumPy
backend's C library, which rounds otherwise than torch's kernels), its gradient is here
compared bit for bit with torch's, on both inner backends. Where it reads the forward's value,
it is fed torch's own backward kernel with retrograd's value.

Also: ``log2``, ``log10`` and ``exp2`` are the backends' own kernels (until 7 December
``log(x) / ln 2`` and ``exp(x ln 2)``: ``log2(2**-14)`` was not -14, nor ``exp2(-8)``
``2**-8``), and on the torch backend ``logaddexp``/``logaddexp2`` are torch's kernels.
"""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg
from backends import INNER, inner_backend

torch = pytest.importorskip("torch")

N = 4096
RNG = np.random.default_rng(7)


def _gradient(lib, name, arrays, upstream):
    leaves = [lib.tensor(a, requires_grad=True) for a in arrays]
    out = getattr(lib, name)(*leaves)
    grads = lib.autograd.grad(out, leaves, lib.tensor(upstream))
    return out.detach().numpy(), [g.numpy() for g in grads]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    ("name", "draw"),
    [
        ("asin", lambda n: RNG.uniform(-0.95, 0.95, n)),
        ("acos", lambda n: RNG.uniform(-0.95, 0.95, n)),
        ("asinh", lambda n: RNG.standard_normal(n) * 3),
        ("acosh", lambda n: RNG.uniform(1.05, 4.0, n)),
        ("log2", lambda n: RNG.uniform(0.1, 3.0, n)),
        ("log10", lambda n: RNG.uniform(0.1, 3.0, n)),
    ],
)
def test_rules_of_the_input_alone_are_torchs_to_the_bit(name, draw, dtype):
    x, g = draw(N).astype(dtype), RNG.standard_normal(N).astype(dtype)
    with rg.use_backend(rg.Autodiff(inner_backend())):
        _, (ours,) = _gradient(rg, name, [x], g)
    _, (theirs,) = _gradient(torch, name, [x], g)
    np.testing.assert_array_equal(ours, theirs)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sigmoids_rule_is_torchs_kernel_of_its_value(dtype):
    x, g = (RNG.standard_normal(N) * 3).astype(dtype), RNG.standard_normal(N).astype(dtype)
    with rg.use_backend(rg.Autodiff(inner_backend())):
        out, (ours,) = _gradient(rg, "sigmoid", [x], g)
    theirs = torch.ops.aten.sigmoid_backward(torch.tensor(g), torch.tensor(out)).numpy()
    np.testing.assert_array_equal(ours, theirs)


def test_exp2_log2_log10_are_exact_at_powers():
    ints = np.arange(-30.0, 60.0)
    with rg.use_backend(rg.Autodiff(inner_backend())):
        for dtype in ("float32", "float64"):
            assert rg.tensor(ints, dtype=dtype).exp2().numpy().tolist() == (2.0**ints).tolist()
            twos = rg.tensor(2.0**ints, dtype=dtype)
            assert twos.log2().numpy().tolist() == ints.tolist()
            tens = rg.tensor(10.0 ** np.arange(0.0, 11.0), dtype=dtype)  # (exact in float32)
            assert tens.log10().numpy().tolist() == np.arange(0.0, 11.0).tolist()
        # integers are computed in the default float dtype, as torch's
        assert rg.tensor([8, 1024]).log2().numpy().tolist() == [3.0, 10.0]
        x = rg.tensor([1.0, 2.0, 8.0], requires_grad=True)
        assert x.log2().grad_fn.name() == "Log2Backward0"
        assert x.exp2().grad_fn.name() == "Exp2Backward0"


def test_exp2_and_the_logs_second_derivatives_match_torch():
    x = RNG.uniform(0.5, 2.0, 6)
    v = RNG.standard_normal(6)
    for name in ("exp2", "log2", "log10"):
        results = []
        for lib in (torch, rg):
            t = lib.tensor(x, requires_grad=True)
            (g,) = lib.autograd.grad(getattr(t, name)().sum(), t, create_graph=True)
            (h,) = lib.autograd.grad((g * lib.tensor(v)).sum(), t)
            results.append((g.detach().numpy(), h.numpy()))
        for ours, theirs in zip(results[1], results[0]):
            np.testing.assert_allclose(ours, theirs, rtol=1e-14, err_msg=name)


@pytest.mark.skipif(INNER == "numpy", reason="torch's kernels: the torch inner backend's bits")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_on_the_torch_backend_values_and_gradients_are_torchs(dtype):
    a, b = (RNG.standard_normal((2, N)) * 3).astype(dtype)
    g = RNG.standard_normal(N).astype(dtype)
    with rg.use_backend(rg.Autodiff(inner_backend())):
        cases = [("exp2", [a]), ("logaddexp", [a, b]), ("logaddexp2", [a, b]), ("tanh", [a])]
        for name, arrays in cases:
            ours = _gradient(rg, name, arrays, g)
            theirs = _gradient(torch, name, arrays, g)
            np.testing.assert_array_equal(ours[0], theirs[0], err_msg=name)
            for mine, torchs in zip(ours[1], theirs[1]):
                np.testing.assert_array_equal(mine, torchs, err_msg=name)


@pytest.mark.skipif(INNER == "numpy", reason="torch's kernels: the torch inner backend's bits")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_on_the_torch_backend_silu_mish_elu_gradients_are_torchs_kernels(dtype):
    x = (RNG.standard_normal(N) * 3).astype(dtype)
    g = RNG.standard_normal(N).astype(dtype)
    with rg.use_backend(rg.Autodiff(inner_backend())):
        for name in ("silu", "mish", "elu"):
            leaf = rg.tensor(x, requires_grad=True)
            (ours,) = rg.autograd.grad(getattr(rg.nn.functional, name)(leaf), leaf, rg.tensor(g))
            if name == "elu":  # (alpha 1, scale 1, input scale 1, read from x)
                theirs = torch.ops.aten.elu_backward(
                    torch.tensor(g), 1.0, 1.0, 1.0, False, torch.tensor(x)
                )
            else:
                kernel = getattr(torch.ops.aten, f"{name}_backward")
                theirs = kernel(torch.tensor(g), torch.tensor(x))
            np.testing.assert_array_equal(ours.numpy(), theirs.numpy(), err_msg=name)


def _loss_gradients(lib, name, x, t, reduction, scale):
    leaf, target = lib.tensor(x, requires_grad=True), lib.tensor(t, requires_grad=True)
    loss = getattr(lib.nn.functional, name)(leaf, target, reduction=reduction)
    upstream = lib.tensor(np.full(tuple(loss.shape), scale, dtype=x.dtype))
    return [g.numpy() for g in lib.autograd.grad(loss, (leaf, target), upstream)]


@pytest.mark.parametrize("name", ["mse_loss", "smooth_l1_loss", "huber_loss"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_regression_loss_gradients_are_torchs_kernels_to_the_bit(dtype, reduction, name):
    # torch's mse_loss_backward, (2 / n * (x - t)) * g, and smooth_l1/huber_backward,
    # 1 / n * d * g (/ beta) and 1 / n * g (* delta), with the mean's 1 / n inside: the mean's
    # rule dividing g first was an ulp off in 20-90% of the elements for a g other than 1
    x, t = RNG.standard_normal((2, 50, 40)).astype(dtype)
    for scale in (1.0, 0.37):
        with rg.use_backend(rg.Autodiff(inner_backend())):
            ours = _loss_gradients(rg, name, x, t, reduction, scale)
        theirs = _loss_gradients(torch, name, x, t, reduction, scale)
        for mine, torchs in zip(ours, theirs):
            np.testing.assert_array_equal(mine, torchs)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_bce_with_logits_gradients_are_torchs_formula(dtype, reduction):
    # torch's binary_cross_entropy_with_logits_backward, ((sigmoid(x) - y) * g) / n, and its
    # target's, -(x * g) / n: the composite's rules, (1 - y) g - sigmoid(-x) g, were an ulp off
    # in 60-75% of the elements. The sigmoid is the backend's (NumPy's rounds otherwise than
    # torch's), so on NumPy it is compared with the formula over retrograd's own sigmoid
    x = (RNG.standard_normal((50, 40)) * 3).astype(dtype)
    t = RNG.uniform(0.0, 1.0, (50, 40)).astype(dtype)
    with rg.use_backend(rg.Autodiff(inner_backend())):
        ours = _loss_gradients(rg, "binary_cross_entropy_with_logits", x, t, reduction, 0.37)
        sigmoid = torch.tensor(rg.tensor(x).sigmoid().numpy())
    g = torch.tensor(np.asarray(0.37, dtype=dtype))
    if reduction == "none":
        g = g.expand(50, 40)
    wanted_x, wanted_t = (sigmoid - torch.tensor(t)) * g, -(torch.tensor(x) * g)
    if reduction == "mean":
        wanted_x, wanted_t = wanted_x / x.size, wanted_t / x.size
    np.testing.assert_array_equal(ours[0], wanted_x.numpy())
    np.testing.assert_array_equal(ours[1], wanted_t.numpy())
    theirs = _loss_gradients(torch, "binary_cross_entropy_with_logits", x, t, reduction, 0.37)
    for mine, torchs in zip(ours, theirs):
        # (sigmoid(x) - y cancels where they are near: an absolute bound of the sigmoid's ulp)
        tolerance = (1e-5, 1e-7) if dtype == np.float32 else (1e-13, 1e-16)
        np.testing.assert_allclose(mine, torchs, rtol=tolerance[0], atol=tolerance[1])


@pytest.mark.parametrize(
    "name", ["mse_loss", "binary_cross_entropy_with_logits", "smooth_l1_loss", "huber_loss"]
)
def test_the_loss_ops_second_derivatives_match_torch(name):
    x = RNG.standard_normal((4, 5))
    t = RNG.uniform(0.0, 1.0, (4, 5))
    v = RNG.standard_normal((4, 5))
    results = []
    for lib in (torch, rg):
        leaf, target = lib.tensor(x, requires_grad=True), lib.tensor(t, requires_grad=True)
        loss = getattr(lib.nn.functional, name)(leaf, target) * 1.3
        gx, gt = lib.autograd.grad(loss, (leaf, target), create_graph=True)
        second = lib.autograd.grad((gx * lib.tensor(v)).sum() + gt.sum(), (leaf, target))
        results.append([a.detach().numpy() for a in (loss, gx, gt, *second)])
    for ours, theirs in zip(results[1], results[0]):
        np.testing.assert_allclose(ours, theirs, rtol=1e-13, atol=1e-15)
