"""Defects found by the real ports of round 68 (``tests/test_real_ports_68b.py``, ``_68c``,
``_68d``), each checked against torch.

- ``gradient`` with ``spacing`` given as coordinates (a tuple or list of 1-d tensors, one per
  dimension: samples taken at uneven times, as a SINDy fit's trajectory is) was refused
  ("coordinate tensors are not supported"); it now computes torch's uneven-spacing differences,
  edge orders 1 and 2, in the coordinates' promoted dtype, differentiable in the values and
  the coordinates, and names the shapes when a coordinate tensor's length is not the
  dimension's.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from retrograd.errors import ShapeError

RNG = np.random.default_rng(68)


@pytest.mark.parametrize("edge_order", [1, 2])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gradient_at_uneven_coordinates_matches_torch(edge_order, dtype):
    values = RNG.standard_normal((5, 4)).astype(dtype)
    rows = np.sort(RNG.uniform(0.0, 3.0, 5)).astype(dtype)
    cols = np.sort(RNG.uniform(0.0, 3.0, 4)).astype(dtype)
    for spacing, dim in (((rows,), 0), ([rows, cols], None), ((cols,), 1), ((rows, cols), (0, 1))):
        theirs = torch.gradient(
            torch.tensor(values),
            spacing=tuple(torch.tensor(c) for c in spacing),
            dim=dim,
            edge_order=edge_order,
        )
        ours = rg.gradient(
            rg.tensor(values),
            spacing=type(spacing)(rg.tensor(c) for c in spacing),
            dim=dim,
            edge_order=edge_order,
        )
        assert len(ours) == len(theirs)
        for mine, reference in zip(ours, theirs):
            assert str(mine.dtype) == str(reference.dtype).removeprefix("torch.")
            np.testing.assert_allclose(mine.numpy(), reference.numpy(), rtol=1e-6, atol=1e-6)


def test_gradient_at_integer_coordinates_keeps_the_input_dtype():
    values = (np.arange(12.0, dtype=np.float32).reshape(4, 3)) ** 2
    coords = np.array([0, 1, 3, 4])
    theirs = torch.gradient(torch.tensor(values), spacing=(torch.tensor(coords),), dim=0)[0]
    ours = rg.gradient(rg.tensor(values), spacing=(rg.tensor(coords),), dim=0)[0]
    assert ours.dtype == "float32" and theirs.dtype == torch.float32
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


@pytest.mark.parametrize("edge_order", [1, 2])
def test_gradient_at_coordinates_differentiates_values_and_coordinates(edge_order):
    values = RNG.standard_normal((6, 3))
    coords = np.cumsum(RNG.uniform(0.2, 1.0, 6))
    weights = RNG.standard_normal((6, 3))
    grads = []
    for lib in (torch, rg):
        y = lib.tensor(values).requires_grad_(True)
        x = lib.tensor(coords).requires_grad_(True)
        out = lib.gradient(y, spacing=(x,), dim=0, edge_order=edge_order)[0]
        grads.append(lib.autograd.grad((out * lib.tensor(weights)).sum(), [y, x]))
    for theirs, ours in zip(*grads):
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-10, atol=1e-12)


def test_gradient_refuses_coordinates_of_the_wrong_length():
    with pytest.raises(ShapeError, match=r"dimension 0 of \[4, 3\].*4 values.*\[3\]"):
        rg.gradient(rg.ones(4, 3), spacing=(rg.tensor([0.0, 1.0, 2.0]),), dim=0)
