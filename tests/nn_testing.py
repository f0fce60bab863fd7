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


def _flatten(value) -> list:
    """The tensors of a (nested) result, in order, ``None`` left out."""
    if value is None:
        return []
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in _flatten(item)]
    return [value]


MODULE_TOLERANCES = {"float64": dict(rtol=1e-9, atol=1e-11), "float32": dict(rtol=3e-4, atol=3e-5)}


def compare_module_with_torch(theirs, ours, inputs, dtype, call=None, constants=()):
    """``call(module, *inputs, *constants)`` (default ``module(*inputs)``) on a PyTorch module
    and on ours: every output (nested tuples flattened), and, for a random weighting of them,
    the gradients of the float ``inputs`` and of every parameter (by PyTorch's names) agree.
    ``constants`` (masks...) go in untracked, float ones cast to ``dtype``."""
    import torch

    call = call or (lambda module, *args: module(*args))
    theirs.zero_grad()
    cast = getattr(torch, dtype)
    constants = [c if c is None or c.dtype.kind != "f" else c.astype(dtype) for c in constants]
    t_inputs = [torch.tensor(a, dtype=cast, requires_grad=True) for a in inputs]
    r_inputs = [rg.tensor(a, dtype=dtype).require_grad() for a in inputs]
    t_out = _flatten(
        call(theirs, *t_inputs, *[None if c is None else torch.tensor(c) for c in constants])
    )
    r_out = _flatten(
        call(ours, *r_inputs, *[None if c is None else rg.tensor(c) for c in constants])
    )
    assert len(t_out) == len(r_out)
    rng = np.random.default_rng(31)
    seeds = [rng.standard_normal(tuple(o.shape)) for o in t_out]
    sum((o * torch.tensor(s, dtype=cast)).sum() for o, s in zip(t_out, seeds)).backward()
    loss = None
    for o, s in zip(r_out, seeds):
        term = (o * rg.tensor(s, dtype=dtype)).sum()
        loss = term if loss is None else loss + term
    grads = loss.backward()
    tol = MODULE_TOLERANCES[dtype]
    for k, (r, t) in enumerate(zip(r_out, t_out)):
        assert r.shape == tuple(t.shape) and r.dtype == dtype
        np.testing.assert_allclose(r.numpy(), t.detach().numpy(), **tol, err_msg=f"output {k}")
    named = [(f"input {k}", r, t.grad) for k, (r, t) in enumerate(zip(r_inputs, t_inputs))]
    named += [(name, ours.get_parameter(name), p.grad) for name, p in theirs.named_parameters()]
    for name, r, expected in named:
        got = r.grad(grads)
        got = np.zeros(r.shape) if got is None else got.numpy()
        expected = np.zeros(r.shape) if expected is None else expected.numpy()
        np.testing.assert_allclose(got, expected, **tol, err_msg=name)


def assert_second_derivatives_match_torch(ours, theirs, arrays, rtol=1e-8, atol=1e-10):
    """The gradient of ``sum(direction * d loss / d input)`` over every input, through
    ``backward(create_graph=True)``, equals PyTorch's double backward (float64; ``loss`` a
    random weighting of the output)."""
    import torch

    rng = np.random.default_rng(41)
    t_inputs = [torch.tensor(a, requires_grad=True) for a in arrays]
    t_out = theirs(*t_inputs)
    seed = rng.standard_normal(tuple(t_out.shape))
    directions = [rng.standard_normal(a.shape) for a in arrays]
    first = torch.autograd.grad((t_out * torch.tensor(seed)).sum(), t_inputs, create_graph=True)
    inner = sum((g * torch.tensor(d)).sum() for g, d in zip(first, directions))
    expected = torch.autograd.grad(inner, t_inputs, allow_unused=True)
    tensors = [rg.tensor(a).require_grad() for a in arrays]
    grads = (ours(*tensors) * rg.tensor(seed)).sum().backward(create_graph=True)
    total = None
    for t, d in zip(tensors, directions):
        term = (t.grad(grads) * rg.tensor(d)).sum()
        total = term if total is None else total + term
    second = total.backward()
    for t, e in zip(tensors, expected):
        got = t.grad(second)
        got = np.zeros(t.shape) if got is None else got.numpy()
        e = np.zeros(t.shape) if e is None else e.numpy()
        np.testing.assert_allclose(got, e, rtol=rtol, atol=atol)
