"""Defects found by realports62 beyond the ports themselves (``test_real_ports_480.py`` ..
``_485.py``), each checked against torch 2.13."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg

LAYOUTS_TORCH_REFUSES = {
    # (a slice starting at an odd element, an odd row stride, a transposed pair)
    "odd storage offset": lambda lib: lib.arange(8.0).reshape(2, 4)[:, 1:3],
    "odd stride": lambda lib: lib.arange(6.0).reshape(2, 3)[:, :2],
    "last stride not 1": lambda lib: lib.arange(8.0).reshape(2, 4).t()[:2],
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS_TORCH_REFUSES))
def test_view_as_complex_refuses_the_layouts_torch_refuses(layout):
    # retrograd read any float tensor with a last dimension of 2 as complex; torch requires
    # each (real, imaginary) pair adjacent and starting at an even element, and raises
    # otherwise, so a program passing here failed under torch
    make = LAYOUTS_TORCH_REFUSES[layout]
    theirs = make(torch)
    assert theirs.shape[-1] == 2
    with pytest.raises(RuntimeError):
        torch.view_as_complex(theirs)
    ours = make(rg)
    assert ours.stride() == theirs.stride() and ours.storage_offset() == theirs.storage_offset()
    with pytest.raises(rg.ShapeError, match=r"view_as_complex: .*(stride|offset)"):
        rg.view_as_complex(ours)
    # the refused tensor is untouched and usable; its contiguous copy is accepted as by torch
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    np.testing.assert_array_equal(
        rg.view_as_complex(ours.contiguous()).numpy(),
        torch.view_as_complex(theirs.contiguous()).numpy(),
    )


@pytest.mark.parametrize(
    "make",
    [
        lambda lib: lib.arange(12.0).reshape(3, 4)[:, 2:],  # an even offset, an even stride
        lambda lib: lib.arange(8.0).reshape(2, 2, 2).transpose(0, 1),
        lambda lib: lib.arange(2.0).reshape(1, 2).expand(3, 2),  # a zero stride
        lambda lib: lib.arange(24.0).reshape(2, 3, 4)[:, :, 2:].reshape(2, 3, 1, 2)[:, 1:],
    ],
)
def test_view_as_complex_of_the_strided_layouts_torch_accepts_as_torch(make):
    theirs = torch.view_as_complex(make(torch))
    ours = rg.view_as_complex(make(rg))
    assert ours.dtype == rg.complex64 and ours.shape == tuple(theirs.shape)
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def test_view_as_complex_of_a_strided_slice_differentiates_as_torch():
    # (the rotary embedding of DeepSeek-V3 reads a slice of the query's last dimension)
    rng = np.random.default_rng(62)
    data = rng.standard_normal((2, 3, 6))
    angle = rng.standard_normal((3, 1))
    results = []
    for lib in (torch, rg):
        x = lib.tensor(data, requires_grad=True)
        rotation = lib.polar(lib.ones(3, 1, dtype=lib.float64), lib.tensor(angle))
        part = x[..., 2:].reshape(2, 3, 2, 2)
        out = lib.view_as_real(lib.view_as_complex(part) * rotation).flatten(2)
        loss = (out * lib.arange(4.0, dtype=lib.float64)).sum()
        if lib is torch:
            loss.backward()
            results.append((out.detach().numpy(), x.grad.numpy()))
        else:
            results.append((out.numpy(), x.grad(loss.backward()).numpy()))
    for ours, theirs in zip(results[1], results[0]):
        np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-12)
