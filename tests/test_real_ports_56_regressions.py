"""Defects found by the real ports 56-57 (``tests/test_real_ports_56.py``, ``_57.py``), each
checked against torch; each fails on the code before the fix."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg


def test_legacy_constructor_takes_one_element_integer_tensors_as_sizes():
    # Tacotron 2's TextMelCollate: torch.LongTensor(len(batch), max_input_len), where
    # max_input_len is input_lengths[0] of a sorted tensor
    for lib in (torch, rg):
        made = lib.LongTensor(2, lib.tensor([7, 5])[0])
        assert tuple(made.shape) == (2, 7) and made.dtype == lib.int64
        assert tuple(lib.FloatTensor(lib.tensor([3]), 2).shape) == (3, 2)
    with pytest.raises(rg.errors.DTypeError, match="FloatTensor"):
        rg.FloatTensor(2, rg.tensor(3.0))  # torch refuses a float size too


@pytest.mark.parametrize("name", ["zeros", "ones", "empty", "randn", "rand"])
def test_creation_takes_one_element_integer_tensors_as_sizes(name):
    for lib in (torch, rg):
        made = getattr(lib, name)(2, lib.tensor(3))
        assert tuple(made.shape) == (2, 3)
        assert tuple(getattr(lib, name)(lib.tensor([4]), 1).shape) == (4, 1)


def test_arange_writes_out():
    # Tacotron 2's get_mask_from_lengths: torch.arange(0, max_len, out=torch.LongTensor(max_len))
    results = []
    for lib in (torch, rg):
        out = lib.LongTensor(5)
        made = lib.arange(0, 5, out=out)
        assert made is out
        floats = lib.FloatTensor(4)
        lib.arange(1, 3, 0.5, out=floats)  # in out's dtype
        assert floats.dtype == lib.float32
        grown = lib.zeros(0, dtype=lib.int64)
        lib.arange(3, out=grown)  # an empty out is resized, as torch resizes it
        results.append([out.tolist(), floats.tolist()[:4], grown.tolist()])
    assert results[1] == results[0]
    with pytest.raises(rg.errors.DTypeError, match="arange: out"):
        rg.arange(3, out=np.zeros(3))
