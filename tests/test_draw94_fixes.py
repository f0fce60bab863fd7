"""Fixes found by fresh draws of the random-program generators after round 94 (helper draw94).

``index_put_`` (and ``t[index] = v`` with index tensors) into an expanded view, whose rows
share one memory location: torch takes it (with a deprecation warning) and writes each value
in turn into the memory its index names, so the location keeps the value written last, or
with ``accumulate=True`` the sum of every value put through any of its positions. retrograd
wrote the view's new value back link by link, so the view's last position holding the
location gave the value (``e[tensor([1, 0])] = v`` left ``v[0]``, torch's ``v[1]``) and an
accumulating put kept one of the values (``2`` where torch has ``1 + 2``). Found by
``test_random_programs_42.py`` with ``derandomize=False``. Expected values come from torch.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import retrograd as rg
from retrograd.errors import MemoryLayoutError

VALUES = np.arange(1.0, 13.0).reshape(3, 4)


def _expanded_write(lib, write):
    """A (3, 4) base whose row 1, expanded to (3, 4), is written by ``write``: the base and
    the view after, as NumPy."""
    base = lib.tensor(np.zeros((3, 4)), dtype=lib.float64)
    view = base.narrow(0, 1, 1).expand(3, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # (torch's deprecation warning)
        write(lib, view, lib.tensor(VALUES, dtype=lib.float64))
    return [np.asarray(t.tolist()) for t in (base, view)]


WRITES = {
    "index_put_ reversed": lambda lib, v, val: v.index_put_((lib.tensor([2, 0, 1]),), val),
    "index_put_ in order": lambda lib, v, val: v.index_put_((lib.tensor([0, 1, 2]),), val),
    "index_put_ repeated": lambda lib, v, val: v.index_put_((lib.tensor([1, 1, 0]),), val),
    "index_put_ accumulate": lambda lib, v, val: v.index_put_(
        (lib.tensor([2, 0, 1]),), val, accumulate=True
    ),
    "index_put_ accumulate some rows": lambda lib, v, val: v.index_put_(
        (lib.tensor([2, 2]),), val[:2], accumulate=True
    ),
    "index_put_ two indices": lambda lib, v, val: v.index_put_(
        (lib.tensor([2, 0]), lib.tensor([3, 3])), val[:2, 0]
    ),
    "setitem": lambda lib, v, val: v.__setitem__(lib.tensor([2, 0, 1]), val),
    "setitem two indices": lambda lib, v, val: v.__setitem__(
        (lib.tensor([1, 0]), lib.tensor([0, 0])), val[:2, 1]
    ),
}


@pytest.mark.parametrize("case", sorted(WRITES))
def test_put_into_an_expanded_view_as_torch(case):
    expected = _expanded_write(torch, WRITES[case])
    got = _expanded_write(rg, WRITES[case])
    for e, g in zip(expected, got):
        np.testing.assert_array_equal(g, e)


def test_recorded_put_into_an_expanded_view_refuses_backward_as_torch():
    """Values requiring grad, put into an expanded view: both write, and both refuse the
    backward that would write the gradient back through the shared memory."""
    refused = []
    for lib, error in ((torch, RuntimeError), (rg, MemoryLayoutError)):
        x = lib.tensor(np.zeros((2, 2)), dtype=lib.float64, requires_grad=True)
        w = lib.tensor(VALUES[:2, :2], dtype=lib.float64, requires_grad=True)
        base = x.clone()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            base[:1].expand(2, 2).index_put_((lib.tensor([1, 0]),), w * 1.0)
        refused.append(np.asarray(base.tolist()))
        with pytest.raises(error, match="single memory location"):
            (base * base).sum().backward()
    np.testing.assert_array_equal(refused[1], refused[0])
