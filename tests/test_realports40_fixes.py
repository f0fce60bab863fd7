"""Regression tests for the defects the ports of ``tests/test_real_ports_231.py`` ..
``_239.py`` exposed (video, 3-D and detection models)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import retrograd as rg


@pytest.mark.parametrize("dtype", ["float64", "float32", "int64"])
def test_type_of_the_tensor_class_casts_to_the_default_dtype_as_torch(dtype):
    # ssd.pytorch: ``self.priors.type(type(x.data))``
    values = np.array([1.5, -2.0, 3.0])
    ours = rg.tensor(values, dtype=getattr(rg, dtype))
    theirs = torch.tensor(values, dtype=getattr(torch, dtype))
    cast, expected = ours.type(type(ours.data)), theirs.type(type(theirs.data))
    assert cast.dtype == rg.float32 and expected.dtype == torch.float32
    np.testing.assert_array_equal(cast.numpy(), expected.numpy())
    assert ours.type(rg.Tensor).dtype == rg.float32


def test_type_of_the_tensor_class_follows_the_default_dtype():
    saved = rg.get_default_dtype()
    rg.set_default_dtype(rg.float64)
    try:
        assert rg.tensor([1, 2]).type(rg.Tensor).dtype == rg.float64
    finally:
        rg.set_default_dtype(saved)


def test_type_of_a_tensor_subclass_is_refused():
    x = rg.tensor([1.0])
    with pytest.raises(rg.DTypeError, match="type"):
        x.type(rg.nn.Parameter)  # torch: "invalid type: 'Parameter'"
    assert x.type(rg.Tensor).tolist() == [1.0]  # still usable


def _warnings_of(call):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = call()
    return result, [str(w.message) for w in caught if issubclass(w.category, UserWarning)]


@pytest.mark.parametrize("size", [(2, 1, 3, 4), (2, 1, 2, 3, 4)], ids=["2d", "3d"])
def test_affine_grid_and_grid_sample_warn_of_the_changed_default_corners_as_torch(size):
    # Faster R-CNN's RoI pooling by a spatial transformer leaves align_corners out
    rng = np.random.default_rng(40)
    spatial = len(size) - 2
    theta = rng.standard_normal((2, spatial, spatial + 1)) * 0.5
    image = rng.standard_normal((2, 1, *size[2:]))
    outputs = []
    for lib in (torch, rg):
        grid, grid_warnings = _warnings_of(
            lambda lib=lib: lib.nn.functional.affine_grid(lib.tensor(theta), size)
        )
        out, sample_warnings = _warnings_of(
            lambda lib=lib, grid=grid: lib.nn.functional.grid_sample(lib.tensor(image), grid)
        )
        assert len(grid_warnings) == 1 and len(sample_warnings) == 1, lib.__name__
        assert "align_corners=False since 1.3.0" in grid_warnings[0]
        assert grid_warnings[0] == sample_warnings[0]
        outputs.append((grid.numpy(), out.numpy(), grid_warnings[0]))
    np.testing.assert_allclose(outputs[1][0], outputs[0][0], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(outputs[1][1], outputs[0][1], rtol=1e-12, atol=1e-14)
    assert outputs[1][2] == outputs[0][2]


@pytest.mark.parametrize("align_corners", [False, True])
def test_affine_grid_and_grid_sample_given_the_corners_do_not_warn(align_corners):
    theta = rg.tensor([[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]])
    functional = rg.nn.functional
    grid, grid_warnings = _warnings_of(
        lambda: functional.affine_grid(theta, (1, 1, 2, 2), align_corners=align_corners)
    )
    _, sample_warnings = _warnings_of(
        lambda: functional.grid_sample(rg.ones(1, 1, 2, 2), grid, align_corners=align_corners)
    )
    assert grid_warnings == [] and sample_warnings == []
