"""``F.affine_grid`` and ``F.grid_sample`` against torch: values and gradients for the input,
the grid and ``theta`` (a spatial transformer), every mode, padding mode and corner alignment,
points inside and far outside the image; finite differences; and the errors."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import retrograd as rg
from nn_testing import check_finite_differences
from retrograd.nn import functional as F  # noqa: N812
from surface_testing import same_gradients

RNG = np.random.default_rng(37)


@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("size", [(2, 3, 4, 5), (2, 1, 2, 4, 3), (1, 2, 1, 3)])
def test_affine_grid_matches_torch(size, align_corners):
    spatial = len(size) - 2
    theta = RNG.standard_normal((size[0], spatial, spatial + 1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's notice for unit-size grids with align_corners
        same_gradients(
            lambda lib, t: lib.nn.functional.affine_grid(t, size, align_corners=align_corners),
            [theta],
        )


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
def test_grid_sample_matches_torch(mode, padding_mode, align_corners, dtype):
    image = RNG.standard_normal((2, 3, 5, 6))
    grid = RNG.uniform(-2.5, 2.5, (2, 4, 7, 2))  # many points outside [-1, 1]

    def sample(lib, x, g):
        return lib.nn.functional.grid_sample(
            x, g, mode=mode, padding_mode=padding_mode, align_corners=align_corners
        )

    if mode == "nearest":  # no gradient reaches the grid (torch's is zeros)
        same_gradients(
            lambda lib, x: sample(lib, x, lib.tensor(grid.astype(dtype))), [image], dtype
        )
    else:
        same_gradients(sample, [image, grid], dtype)


def test_a_spatial_transformer_matches_torch():
    """theta -> affine_grid -> grid_sample, differentiated in the image and in theta."""
    image = RNG.standard_normal((2, 2, 6, 6))
    theta = np.array([[[0.9, -0.2, 0.1], [0.3, 1.1, -0.2]], [[1.2, 0.1, 0.0], [-0.1, 0.8, 0.3]]])

    def transform(lib, x, t):
        grid = lib.nn.functional.affine_grid(t, (2, 2, 5, 4), align_corners=False)
        return lib.nn.functional.grid_sample(x, grid, align_corners=False)

    same_gradients(transform, [image, theta])


def test_gradients_match_finite_differences():
    image = RNG.standard_normal((1, 2, 4, 4))
    grid = RNG.uniform(-0.9, 0.9, (1, 3, 2, 2))
    check_finite_differences(
        lambda x, g: F.grid_sample(x, g, padding_mode="border", align_corners=True),
        [image, grid],
        rtol=1e-6,
        atol=1e-8,
    )


def test_errors_say_what_is_not_supported():
    image, grid = rg.ones((1, 1, 3, 3)), rg.zeros((1, 2, 2, 2))
    with pytest.raises(rg.InvalidArgumentError, match="bicubic"):  # torch's: 4-d only
        F.grid_sample(rg.ones((1, 1, 2, 3, 3)), rg.zeros((1, 2, 2, 2, 3)), mode="bicubic")
    with pytest.raises(rg.InvalidArgumentError, match="padding_mode"):
        F.grid_sample(image, grid, padding_mode="circular")
    with pytest.raises(rg.ShapeError, match="grid \\[N, D_out, H_out, W_out, 3\\]"):
        F.grid_sample(rg.ones((1, 1, 2, 3, 3)), rg.zeros((1, 2, 2, 2, 2)))
    with pytest.raises(rg.ShapeError, match="same batch size"):
        F.grid_sample(image, rg.zeros((2, 2, 2, 2)))
    with pytest.raises(rg.DTypeError, match="same dtype"):
        F.grid_sample(image, rg.zeros((1, 2, 2, 2), dtype="float64"))
    with pytest.raises(rg.ShapeError, match="Nx2x3"):
        F.affine_grid(rg.zeros((1, 3, 3)), (1, 1, 4, 4))
    reference = torch.nn.functional.grid_sample(
        torch.ones(1, 1, 3, 3), torch.zeros(1, 2, 2, 2), align_corners=False
    )
    assert F.grid_sample(image, grid).shape == tuple(reference.shape)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("align_corners", [False, True])
def test_the_identity_grid_is_torchs_to_the_bit(dtype, align_corners):
    """A spatial transformer starts at the identity, where every grid point sits on a pixel
    center: one rounding apart, a point falls on the other side of it and the bilinear
    gradient of the grid changes side. affine_grid's points are torch's exactly."""
    identity = np.array([[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]])
    for size in range(1, 30):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch's note on 1-pixel grids with align_corners
            expected = torch.nn.functional.affine_grid(
                torch.tensor(identity, dtype=getattr(torch, dtype)),
                (1, 1, size, size + 3),
                align_corners,
            )
        ours = F.affine_grid(
            rg.tensor(identity, dtype=dtype), (1, 1, size, size + 3), align_corners
        )
        np.testing.assert_array_equal(ours.numpy(), expected.numpy(), err_msg=f"size {size}")


def test_linspace_is_torchs_to_the_bit():
    for start, end in [(-1, 1), (0, 10), (-3.5, 2.25), (5, -2)]:
        for steps in range(1, 40):
            for dtype in ("float32", "float64"):
                ours = rg.linspace(start, end, steps, dtype=dtype).numpy()
                theirs = torch.linspace(start, end, steps, dtype=getattr(torch, dtype)).numpy()
                np.testing.assert_array_equal(ours, theirs, err_msg=f"{start, end, steps, dtype}")
