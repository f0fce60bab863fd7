"""Regression tests of the defects the real ports of round 11 (``tests/test_real_ports_54.py``,
``tests/test_real_ports_55.py``) found, each against torch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from retrograd.errors import AutodiffError, DTypeError


def _binarize(x):
    return 0 if x < 0.5 else 1


@pytest.mark.parametrize(
    "values, dtype, f",
    [
        ([[0.2, 0.7], [0.9, -1.0]], "float32", _binarize),
        ([1, 2, 3, -7], "int64", lambda x: x / 2),  # truncated into the int tensor, as torch's
        ([True, False], "bool", lambda x: not x),
        ([[0.5, 2.0]], "float64", lambda x: x**3 - 1),
        (1.25, "float32", lambda x: x * 4),
    ],
)
def test_apply_is_torchs(values, dtype, f):
    theirs = torch.tensor(values, dtype=getattr(torch, dtype))
    ours = rg.tensor(values, dtype=getattr(rg, dtype))
    assert ours.apply_(f) is ours
    theirs.apply_(f)
    assert ours.dtype == dtype
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def test_apply_writes_through_a_view_and_map_broadcasts():
    for lib in (torch, rg):
        a = lib.tensor([[1.0, 2.0], [3.0, 4.0]])
        a[0].apply_(lambda x: -x)
        a.map_(lib.tensor([10.0, 20.0]), lambda x, y: x * y + 1)
        if lib is torch:
            theirs = a.numpy()
        else:
            np.testing.assert_array_equal(a.numpy(), theirs)


def test_apply_refuses_what_torch_refuses():
    with pytest.raises(AutodiffError, match=r"apply_.*requires grad"):
        rg.ones(2, requires_grad=True).apply_(abs)
    with pytest.raises(AutodiffError, match=r"map_.*requires grad"):
        rg.ones(2).map_(rg.ones(2, requires_grad=True), max)
    with pytest.raises(DTypeError, match="apply_: the callable must return a number"):
        rg.ones(2).apply_(lambda x: "a")
    with pytest.raises(DTypeError, match="apply_: expected a callable"):
        rg.ones(2).apply_(3)
