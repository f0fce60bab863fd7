"""Shared checks for the tests of nn.functional and of random programs: finite differences,
PyTorch comparisons, gradients under both checkpointing strategies.

Expected values never come from the code under test: gradients are checked against central
finite differences of the forward (run on the plain NumPy backend, no autodiff) and against
PyTorch's autograd.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

import retrograd as rg
from backends import inner_backend

STRATEGIES = {"none": rg.NoCheckpointing, "balanced": rg.BalancedCheckpointing}


def autodiff(strategy: str) -> rg.Autodiff:
    return rg.Autodiff(inner_backend(), checkpointing=STRATEGIES[strategy]())


def is_float(array: np.ndarray) -> bool:
    return np.asarray(array).dtype.kind == "f"


def analytic_gradients(
    fn: Callable, arrays: Sequence[np.ndarray], seed: np.ndarray | None, strategy: str
) -> tuple[np.ndarray, list[np.ndarray | None]]:
    """Output of ``fn`` and the gradients of ``sum(seed * fn(...))`` for the float inputs.

    ``seed`` (random weights on the output, so every output element matters) may be ``None``
    for a 0-d output.
    """
    with rg.use_backend(autodiff(strategy)):
        tensors = [rg.tensor(a).require_grad() if is_float(a) else rg.tensor(a) for a in arrays]
        out = fn(*tensors)
        loss = out if seed is None else (out * rg.tensor(seed)).sum()
        grads = loss.backward()
        result = [t.grad(grads) if is_float(a) else None for t, a in zip(tensors, arrays)]
        return out.numpy(), [None if g is None else g.numpy() for g in result]


def forward_value(fn: Callable, arrays: Sequence[np.ndarray], seed: np.ndarray | None) -> float:
    """``sum(seed * fn(...))`` on the plain NumPy backend (no graph)."""
    with rg.use_backend(inner_backend()):
        out = fn(*[rg.tensor(a) for a in arrays]).numpy()
    return float(out if seed is None else np.sum(out * seed))


def numeric_gradient(fn, arrays, seed, index: int, eps: float = 1e-6) -> np.ndarray:
    """Central differences of ``sum(seed * fn(...))`` with respect to ``arrays[index]``."""
    arrays = [np.array(a, copy=True) for a in arrays]
    target = arrays[index]
    grad = np.zeros_like(target)
    for position in np.ndindex(target.shape):
        original = target[position]
        target[position] = original + eps
        plus = forward_value(fn, arrays, seed)
        target[position] = original - eps
        minus = forward_value(fn, arrays, seed)
        target[position] = original
        grad[position] = (plus - minus) / (2 * eps)
    return grad


def check_finite_differences(fn, arrays, *, rtol=1e-5, atol=1e-6, seed_output=True):
    """Gradients of ``fn`` (float64 inputs) match central differences, and are bit-identical
    under NoCheckpointing and BalancedCheckpointing."""
    arrays = [np.asarray(a) for a in arrays]
    rng = np.random.default_rng(1234)
    with rg.use_backend(inner_backend()):
        shape = fn(*[rg.tensor(a) for a in arrays]).shape
    seed = rng.standard_normal(shape) if seed_output and shape else None
    out, grads = analytic_gradients(fn, arrays, seed, "none")
    _, balanced = analytic_gradients(fn, arrays, seed, "balanced")
    for i, array in enumerate(arrays):
        if not is_float(array):
            continue
        assert grads[i] is not None, f"input {i} got no gradient"
        assert np.array_equal(grads[i], balanced[i]), f"input {i}: strategies differ"
        expected = numeric_gradient(fn, arrays, seed, i)
        np.testing.assert_allclose(
            grads[i], expected, rtol=rtol, atol=atol, err_msg=f"gradient of input {i}"
        )
    return out


TOLERANCES = {"float32": {"rtol": 2e-4, "atol": 2e-5}, "float64": {"rtol": 1e-9, "atol": 1e-10}}


def compare_with_torch(rfn, tfn, arrays, dtype: str, *, scale_atol: float = 1.0) -> None:
    """Values and gradients of ``rfn`` (retrograd) and ``tfn`` (torch) agree on ``arrays``
    (float arrays cast to ``dtype``; others passed as they are)."""
    import torch

    arrays = [np.asarray(a).astype(dtype) if is_float(a) else np.asarray(a) for a in arrays]
    tol = dict(TOLERANCES[dtype])
    tol["atol"] *= scale_atol
    t_inputs = [torch.tensor(a, requires_grad=is_float(a)) for a in arrays]
    t_out = tfn(*t_inputs)
    seed = np.random.default_rng(99).standard_normal(tuple(t_out.shape)).astype(dtype)
    (t_out * torch.tensor(seed)).sum().backward()
    out, grads = analytic_gradients(rfn, arrays, seed, "none")
    assert out.dtype == np.dtype(dtype)
    np.testing.assert_allclose(out, t_out.detach().numpy(), **tol, err_msg="values")
    for i, (g, t) in enumerate(zip(grads, t_inputs)):
        if t.requires_grad:
            np.testing.assert_allclose(g, t.grad.numpy(), **tol, err_msg=f"gradient {i}")


def assert_strategies_identical(plain: Sequence, balanced: Sequence) -> None:
    """Gradients (``None`` where none) under NoCheckpointing and BalancedCheckpointing are
    the same, bit for bit."""
    for a, b in zip(plain, balanced):
        assert (a is None and b is None) or np.array_equal(a, b)


def assert_leaf_gradients_match(ours: Sequence, torch_leaves: Sequence, rtol, atol) -> None:
    """Our gradient of each leaf equals ``leaf.grad`` of the PyTorch leaf; where PyTorch has
    none, ours is absent or zero."""
    for mine, leaf in zip(ours, torch_leaves):
        if leaf.grad is None:
            assert mine is None or not mine.any()
        else:
            assert mine is not None
            np.testing.assert_allclose(mine, leaf.grad.numpy(), rtol=rtol, atol=atol)
