"""Regressions found by the round-54 random programs over ``nn.functional`` with edge
parameters (tests/test_random_functional_54.py), each against torch 2.13."""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg

torch = pytest.importorskip("torch")
F = rg.nn.functional


def _grad(out: rg.Tensor, leaf: rg.Tensor) -> np.ndarray:
    return leaf.grad(out.sum().backward()).numpy()


@pytest.mark.parametrize(
    ("shape", "window"),
    [
        # width 1, padding 1, dilation 2: every window's columns are -1 and 1, padding alone
        ((1, 1, 5, 1), dict(kernel_size=2, stride=3, padding=1, dilation=(1, 2), ceil_mode=True)),
        ((2, 2, 6, 1), dict(kernel_size=(2, 2), padding=1, dilation=2)),
        ((1, 2, 2, 5, 1), dict(kernel_size=2, stride=(1, 3, 3), padding=1, dilation=(1, 1, 2))),
    ],
)
def test_max_pool_window_over_padding_alone_points_where_torch_does(shape, window):
    """A window that covers only padding has maximum -inf; torch's index for it is the
    window's first position at or after zero along every axis, not clipped to the axis (in
    2-d it runs into the next row), and its gradient goes there. Ours clipped every axis.
    (The cases keep torch's indices inside the input: past it, torch's backward writes
    outside its buffer.)"""
    x = np.random.default_rng(0).standard_normal(shape)
    name = f"max_pool{len(shape) - 2}d"
    expected = torch.tensor(x, requires_grad=True)
    values, indices = getattr(torch.nn.functional, name)(expected, return_indices=True, **window)
    values.sum().backward()
    ours = rg.tensor(x).requires_grad_(True)
    got_values, got_indices = getattr(F, name)(ours, return_indices=True, **window)
    np.testing.assert_array_equal(got_values.numpy(), values.detach().numpy())
    np.testing.assert_array_equal(got_indices.numpy(), indices.numpy())
    np.testing.assert_allclose(_grad(got_values, ours), expected.grad.numpy())


def test_max_pool_compiled_kernels_place_padding_only_windows_as_torch():
    """The compiled kernels (large inputs, channels-first planes and channels-last) follow the
    same rule; torch's index past the last cell is kept at the last cell (torch's own points
    outside the input, and its backward drops it)."""
    x = np.random.default_rng(1).standard_normal((1, 4096, 16, 1))
    window = dict(kernel_size=2, stride=2, padding=1, dilation=(1, 2))
    expected = torch.nn.functional.max_pool2d(torch.tensor(x), return_indices=True, **window)[1]
    expected = np.minimum(expected.numpy(), 15)
    for layout in (rg.contiguous_format, rg.channels_last):
        ours = rg.tensor(x).contiguous(memory_format=layout)
        got = F.max_pool2d(ours, return_indices=True, **window)[1]
        np.testing.assert_array_equal(got.numpy(), expected)


@pytest.mark.parametrize(
    ("indices", "offsets", "include_last_offset"),
    [
        ([], [0, 1, 3], False),  # offsets past an empty input
        ([1, 2], [2], True),  # first offset not 0, no bag at all
        ([1, 2], [], True),  # no offsets where the last is included
    ],
)
def test_embedding_bag_refuses_offsets_torch_refuses(indices, offsets, include_last_offset):
    """torch checks the offsets as given (the last one too); ours checked only the bags'
    starts, and returned bags for offsets torch refuses."""
    weight = np.random.default_rng(2).standard_normal((4, 2))
    with pytest.raises(RuntimeError):
        torch.nn.functional.embedding_bag(
            torch.tensor(indices, dtype=torch.int64),
            torch.tensor(weight),
            torch.tensor(offsets, dtype=torch.int64),
            include_last_offset=include_last_offset,
        )
    ours = rg.tensor(weight).requires_grad_(True)
    with pytest.raises(rg.InvalidArgumentError, match="embedding_bag"):
        F.embedding_bag(
            rg.tensor(indices, dtype=rg.int64),
            ours,
            rg.tensor(offsets, dtype=rg.int64),
            include_last_offset=include_last_offset,
        )
    # the weight stays usable
    bags = F.embedding_bag(rg.tensor([[0, 1]]), ours, mode="sum")
    np.testing.assert_allclose(_grad(bags, ours)[:2], np.ones((2, 2)))
