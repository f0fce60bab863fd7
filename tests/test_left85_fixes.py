"""Leftovers found by the helpers of 7 December's morning, each against torch 2.13.

- ``linalg.vector_norm`` for ``ord`` other than 0, 2 and the infinities was a sum of ``|x|``
  or of powers: a few float32 ulps off torch's norm kernel (the 1-norm of 210 normal entries
  164.38943, torch's 164.38950); it is one op on the backend's norm kernel (torch's on the
  torch backend, a left-to-right float32 accumulation on NumPy, torch's order), its rule
  torch's ``norm_backward``; ``get_total_norm``/``clip_grad_norm_`` inherit it;
- ``scatter_reduce`` ``amax``/``amin`` gave an infinite winner no gradient (and an infinite
  self value none anywhere); torch gives it its share;
- ``F.adaptive_max_pool1d/2d/3d`` picked a window's first NaN, torch's kernel its last
  (``val > max || isnan(val)``): the index and the gradient's place differed.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import retrograd as rg
import retrograd.nn.functional as F  # noqa: N812 (torch's name)

INF = math.inf


def _normal(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _same_bits(ours: np.ndarray, theirs: np.ndarray) -> None:
    np.testing.assert_array_equal(np.asarray(ours).view(np.int32), theirs.view(np.int32))


@pytest.mark.parametrize("order", [1, 3, 0.5, -1, 1.5])
@pytest.mark.parametrize("dim", [None, 0, 1])
def test_vector_norm_is_torchs_kernel_bit_for_bit(order: float, dim: int | None) -> None:
    a = _normal((30, 7))
    ours = rg.linalg.vector_norm(rg.tensor(a), order, dim=dim).numpy()
    theirs = torch.linalg.vector_norm(torch.tensor(a), order, dim=dim).numpy()
    _same_bits(ours, theirs)


@pytest.mark.parametrize("order", [1, 3, 0.5, -1, 2.5])
def test_vector_norm_gradient_is_torchs_norm_backward(order: float) -> None:
    a = _normal((30, 7))
    a[3, 2] = 0.0  # a zero entry (p < 1: torch's masked 0) and a zero row (a zero norm)
    a[5] = 0.0
    weight = _normal((30,), seed=1)
    x = rg.tensor(a, requires_grad=True)
    grads = (rg.linalg.vector_norm(x, order, dim=1) * rg.tensor(weight)).sum().backward()
    tx = torch.tensor(a, requires_grad=True)
    (torch.linalg.vector_norm(tx, order, dim=1) * torch.tensor(weight)).sum().backward()
    # torch's pow special-cases exponents (|x|^-2 as 1 / (x x), |x|^0.5 as sqrt, ...) where
    # NumPy's pow differs by an ulp: bit for bit on the torch backend, within 2 ulps on NumPy
    np.testing.assert_allclose(x.grad(grads).numpy(), tx.grad.numpy(), rtol=2.5e-7, atol=0)


@pytest.mark.parametrize("norm_type", [1.0, 3.0])
def test_total_norm_of_gradients_is_torchs(norm_type: float) -> None:
    arrays = [_normal((40, 9), seed=2), _normal((70,), seed=3)]
    ours = rg.nn.utils.get_total_norm([rg.tensor(a) for a in arrays], norm_type).numpy()
    theirs = torch.nn.utils.get_total_norm([torch.tensor(a) for a in arrays], norm_type)
    _same_bits(ours, theirs.numpy())


@pytest.mark.parametrize("reduce", ["amax", "amin"])
@pytest.mark.parametrize("source", [0.5, INF, -INF])
@pytest.mark.parametrize("include_self", [False, True])
def test_scatter_reduce_extreme_gives_an_infinite_winner_its_share(
    reduce: str, source: float, include_self: bool
) -> None:
    fill = INF if reduce == "amax" else -INF
    x = rg.full((3, 2), fill, requires_grad=True)
    src = rg.tensor([[source]], requires_grad=True)
    out = rg.scatter_reduce(x, 0, rg.tensor([[1]]), src, reduce, include_self=include_self)
    grads = (out * rg.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])).sum().backward()
    tx = torch.full((3, 2), fill, requires_grad=True)
    tsrc = torch.tensor([[source]], requires_grad=True)
    tout = torch.scatter_reduce(tx, 0, torch.tensor([[1]]), tsrc, reduce, include_self=include_self)
    (tout * torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])).sum().backward()
    np.testing.assert_array_equal(out.numpy(), tout.detach().numpy())
    np.testing.assert_array_equal(x.grad(grads).numpy(), tx.grad.numpy())
    np.testing.assert_array_equal(src.grad(grads).numpy(), tsrc.grad.numpy())


@pytest.mark.parametrize("spatial", [1, 2, 3])
@pytest.mark.parametrize("return_indices", [False, True])
def test_adaptive_max_pool_takes_a_windows_last_nan(spatial: int, return_indices: bool) -> None:
    rng = np.random.default_rng(4)
    shape = {1: (8,), 2: (4, 6), 3: (2, 4, 4)}[spatial]
    sizes = {1: 2, 2: (2, 2), 3: (1, 2, 2)}[spatial]  # disjoint windows, several NaNs each
    a = rng.choice(np.array([np.nan, 1.0, 2.0, 2.0, np.nan], np.float32), (2, 3, *shape))
    weight = _normal((2, 3, *np.broadcast_to(sizes, (spatial,))), seed=5)
    pool = getattr(F, f"adaptive_max_pool{spatial}d")
    their_pool = getattr(torch.nn.functional, f"adaptive_max_pool{spatial}d")
    x = rg.tensor(a, requires_grad=True)
    ours = pool(x, sizes, return_indices=return_indices)
    tx = torch.tensor(a, requires_grad=True)
    theirs = their_pool(tx, sizes, return_indices=return_indices)
    if return_indices:
        np.testing.assert_array_equal(ours[1].numpy(), theirs[1].numpy())
        ours, theirs = ours[0], theirs[0]
    grads = (ours * rg.tensor(weight)).sum().backward()
    (theirs * torch.tensor(weight)).sum().backward()
    np.testing.assert_array_equal(ours.numpy(), theirs.detach().numpy())
    np.testing.assert_array_equal(x.grad(grads).numpy(), tx.grad.numpy())
