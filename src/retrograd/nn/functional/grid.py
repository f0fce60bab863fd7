"""Spatial transformers: ``affine_grid`` and ``grid_sample``, torch's: each one op of the op
table where something is tracked (``grid_sample`` always: the backend protocol's
``grid_sample``, composed of primitives in ``backend/protocol_grid.py``, whose backward reads
the input and the grid alone, as torch's).

``grid_sample`` reads ``input`` ``[N, C, H, W]`` at the points of ``grid`` ``[N, Ho, Wo, 2]``
(``x``, ``y`` in [-1, 1]) as torch's does: each point unnormalized to pixel coordinates
(``align_corners`` says whether -1 and 1 are the centers or the outer edges of the corner
pixels), then moved by ``padding_mode`` (``zeros``: left where it is, reading zeros outside;
``border``: clipped to the image; ``reflection``: reflected at the border, then clipped),
then read by ``mode``: ``bilinear`` weights the four pixels around it (each outside the image
reads zero), ``nearest`` reads the one nearest (rounding half to even), ``bicubic`` (4-d only,
as torch's) weights the 4 x 4 pixels around the unmoved point with the cubic convolution
(A = -0.75), each pixel's position moved by ``padding_mode``. The gradient of the grid is that
of the weights, zero where a coordinate was clipped (torch's ``clip_coordinates_set_grad``)
and for ``nearest`` (zeros there, not none, as torch's). The volumetric form reads ``input``
``[N, C, D, H, W]`` at ``grid`` ``[N, Do, Ho, Wo, 3]`` (``x``, ``y``, ``z``): ``bilinear`` is
then trilinear (eight voxels).

At a point exactly on a pixel center (every point of an identity transform, where spatial
transformers start) the bilinear gradient of the grid is one-sided, and the side is decided by
the last bit of the unnormalized coordinate. ``affine_grid``'s points are torch's to the bit;
torch's CPU kernels then unnormalize with fused multiply-adds whose rounding differs between
its forward and backward kernels, so there the grid's gradient may take the other side than
torch's (the input's gradient and the output agree).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np

from ...errors import (
    DTypeError,
    InvalidArgumentError,
    ShapeError,
    SizeMismatchError,
    UnsupportedModeError,
)
from ...tensor import Tensor, stack
from ...tensor._dispatch import host_constant
from ...tensor.autocasting import autocast_op
from ...tensor.internal import FLOAT_DTYPES, shape_text
from ...tensor.spacing import torch_linspace

__all__ = ["affine_grid", "grid_sample"]


# -- affine_grid ----------------------------------------------------------------------------------
_DEFAULT_CORNERS_CHANGED = (
    "Default grid_sample and affine_grid behavior has changed to align_corners=False since "
    "1.3.0. Please specify align_corners=True if the old behavior is desired. See the "
    "documentation of grid_sample for details."
)


def _corners(align_corners: bool | None) -> bool:
    """``align_corners`` as given, or ``False`` with torch's warning when it was left out:
    code written before torch 1.3 (Faster R-CNN's RoI pooling by a spatial transformer)
    meant the old default, and torch tells it so."""
    if align_corners is None:
        warnings.warn(_DEFAULT_CORNERS_CHANGED, UserWarning, stacklevel=3)
        return False
    return bool(align_corners)


def _base_coordinates(theta: Tensor, steps: int, align_corners: bool) -> Tensor:
    """torch's ``linspace_from_neg_one``: ``steps`` points over [-1, 1] (``linspace``'s, torch's
    to the bit), times ``steps - 1`` over ``steps`` without ``align_corners`` (pixel centers);
    one step is the point 0. The points depend on ``steps`` alone: copied to the device once
    and kept (a copy each call would be a host round trip)."""
    precision = np.float64 if theta.dtype == "float64" else np.float32
    host = torch_linspace(-1.0, 1.0, steps, precision) if steps > 1 else np.zeros(1, precision)
    points = host_constant(type(theta)._result, host, theta.backend, theta.device)
    points = points.to(theta.dtype)
    if steps <= 1:
        return points
    return points if align_corners else points * float(steps - 1) / float(steps)


def affine_grid(theta: Tensor, size: Sequence[int], align_corners: bool | None = None) -> Tensor:
    """The sampling grid of the affine maps ``theta`` (``[N, 2, 3]`` for a 4-d ``size``
    ``(N, C, H, W)``, giving ``[N, H, W, 2]``; ``[N, 3, 4]`` for a 5-d one, giving
    ``[N, D, H, W, 3]``), for :func:`grid_sample`, as torch's. Differentiable in ``theta``."""
    fn = "affine_grid"
    align = _corners(align_corners)
    size = tuple(int(n) for n in size)
    if not isinstance(theta, Tensor) or theta.dtype not in FLOAT_DTYPES:
        raise DTypeError(f"{fn}: expected theta to be a floating point tensor")
    if len(size) not in (4, 5):
        raise UnsupportedModeError(
            f"{fn}: only 2D and 3D affine grids are supported, got size {list(size)}"
        )
    spatial = len(size) - 2
    if theta.shape != (size[0], spatial, spatial + 1):
        raise ShapeError(  # (torch's ValueError)
            f"{fn}: expected a batch of {spatial}D affine matrices of shape Nx{spatial}x"
            f"{spatial + 1} for size {list(size)}, got {shape_text(theta.shape)}"
        )
    # (an empty batch too, as torch's, unless align_corners with a size of 1, where it warns
    # instead: its check is the other branch of that warning)
    if min(size[2:]) <= 0 or (size[0] <= 0 and not (align and min(size[2:]) == 1)):
        raise ShapeError(f"{fn}: expected non-zero, positive output size, got {list(size)}")
    if theta.dtype in ("float32", "float64") and theta.requires_grad and size[0] > 0:
        # one op of the op table (autodiff/ops.py) whose rule rebuilds the base grid from the
        # axes' points (a constant kept on the device): the composite below held the base
        # grid for the matmul's rule, 1.5x the grid's bytes where torch holds nothing
        precision = np.float64 if theta.dtype == "float64" else np.float32
        host = np.concatenate(
            [
                torch_linspace(-1.0, 1.0, n, precision) if n > 1 else np.zeros(1, precision)
                for n in reversed(size[2:])
            ]
        )
        axes = host_constant(type(theta)._result, host, theta.backend, theta.device)
        return theta._apply("affine_grid", (theta, axes), (size, align))
    # the base grid, last axis (x, y[, z], 1), x varying fastest (torch's order)
    axes = [_base_coordinates(theta, n, align) for n in reversed(size[2:])]
    shape = size[2:]
    columns = []
    for k, coords in enumerate(axes):  # k = 0 is x (the last dim), 1 is y, 2 is z
        dim = len(shape) - 1 - k
        view = [1] * len(shape)
        view[dim] = shape[dim]
        columns.append(coords.reshape(view).expand(shape))
    columns.append(columns[0] * 0.0 + 1.0)
    base = stack(columns, dim=-1).reshape(1, -1, spatial + 1)
    grid = base.matmul(theta.transpose(1, 2))  # [N, points, spatial]
    return grid.reshape(size[0], *shape, spatial)


# -- grid_sample ----------------------------------------------------------------------------------
_MODES = ("bilinear", "nearest", "bicubic")
_PADDINGS = ("zeros", "border", "reflection")


@autocast_op("grid_sample")
def grid_sample(
    input: Tensor,  # noqa: A002 (torch's name)
    grid: Tensor,
    mode: str = "bilinear",
    padding_mode: str = "zeros",
    align_corners: bool | None = None,
) -> Tensor:
    """``input`` ``[N, C, H, W]`` read at the points of ``grid`` ``[N, Ho, Wo, 2]``:
    ``[N, C, Ho, Wo]`` (or 5-d: ``[N, C, D, H, W]`` at ``[N, Do, Ho, Wo, 3]``), as torch's (see
    the module docstring)."""
    fn = "grid_sample"
    if mode not in _MODES:
        supported = " or ".join(repr(m) for m in _MODES)
        raise InvalidArgumentError(f"{fn}: mode must be {supported}, got {mode!r}")
    if padding_mode not in _PADDINGS:
        raise InvalidArgumentError(
            f"{fn}: padding_mode must be one of {', '.join(_PADDINGS)}, got {padding_mode!r}"
        )
    for name, t in (("input", input), ("grid", grid)):
        if not isinstance(t, Tensor) or t.dtype not in FLOAT_DTYPES:
            raise DTypeError(f"{fn}: expected {name} to be a floating point tensor")
    if input.dtype != grid.dtype:
        raise DTypeError(
            f"{fn}: expected input and grid to have the same dtype, but input has "
            f"{input.dtype} and grid has {grid.dtype}"
        )
    spatial = input.ndim - 2
    if spatial not in (2, 3) or grid.ndim != input.ndim or grid.shape[-1] != spatial:
        raise SizeMismatchError(
            f"{fn}: expected 4-d input [N, C, H, W] and grid [N, H_out, W_out, 2], or 5-d "
            f"input [N, C, D, H, W] and grid [N, D_out, H_out, W_out, 3], got "
            f"{shape_text(input.shape)} and {shape_text(grid.shape)}"
        )
    if mode == "bicubic" and spatial == 3:
        # (torch's RuntimeError; an InvalidArgumentError of the hierarchy too)
        raise UnsupportedModeError(f"{fn}: bicubic interpolation only supports 4-d input")
    if input.shape[0] != grid.shape[0]:
        raise SizeMismatchError(
            f"{fn}: expected grid and input to have same batch size, but got input with sizes "
            f"{shape_text(input.shape)} and grid with sizes {shape_text(grid.shape)}"
        )
    sizes = input.shape[2:]
    if 0 in sizes:
        raise SizeMismatchError(f"{fn}: expected a non-empty image, got {shape_text(input.shape)}")
    align = _corners(align_corners)
    # the protocol's primitive (backend/protocol_grid.py), tracked or not and in every float
    # dtype: one op of the op table whose rule reads the input and the grid, as torch's
    # grid_sampler_2d_backward (a composite of tensor ops held each corner's values, weights
    # and masks: 7x torch's bytes bilinear, 29x bicubic; 7 December)
    return input._apply("grid_sample", (input, grid), (mode, padding_mode, align))
