"""Oracle checks for torch's surface: one function written once, ``fn(lib, *tensors)``, run
with ``lib = retrograd`` and ``lib = torch`` on the same inputs; values, dtypes and (for float
outputs) gradients must agree. What a port does is exactly this: the same code, another
import."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

import retrograd as rg
from nn_testing import compare_with_torch, is_float

TOL = {"float32": {"rtol": 2e-5, "atol": 2e-6}, "float64": {"rtol": 1e-9, "atol": 1e-10}}


def dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.").removeprefix("retrograd.")


def same_gradients(
    fn: Callable[..., Any],
    arrays: Sequence[np.ndarray],
    dtype: str = "float64",
    *,
    pick: Callable[[Any], Any] = lambda out: out,
    scale_atol: float = 1.0,
) -> None:
    """Values and gradients of ``pick(fn(lib, *xs))`` agree between retrograd and torch
    (float arrays cast to ``dtype`` and differentiated)."""
    compare_with_torch(
        lambda *xs: pick(fn(rg, *xs)),
        lambda *xs: pick(fn(torch, *xs)),
        list(arrays),
        dtype,
        scale_atol=scale_atol,
    )


def _flatten(out: Any) -> list[Any]:
    if isinstance(out, tuple | list):
        return [leaf for item in out for leaf in _flatten(item)]
    return [out]


def same_values(
    fn: Callable[..., Any], arrays: Sequence[np.ndarray], dtype: str = "float64", **tol: float
) -> None:
    """``fn(lib, *xs)`` (a tensor, a number, or tuples of them) gives the same values, shapes
    and dtypes with retrograd as with torch (no gradients)."""
    arrays = [np.asarray(a).astype(dtype) if is_float(a) else np.asarray(a) for a in arrays]
    ours = _flatten(fn(rg, *[rg.tensor(a) for a in arrays]))
    theirs = _flatten(fn(torch, *[torch.tensor(a) for a in arrays]))
    assert len(ours) == len(theirs)
    tolerance = {**TOL[dtype], **tol}
    for mine, reference in zip(ours, theirs):
        if isinstance(reference, torch.Tensor):
            assert isinstance(mine, rg.Tensor), f"expected a tensor, got {type(mine).__name__}"
            assert dtype_name(mine.dtype) == dtype_name(reference.dtype)
            assert mine.shape == tuple(reference.shape)
            expected = reference.detach().numpy()
            if expected.dtype.kind == "f":
                np.testing.assert_allclose(mine.numpy(), expected, **tolerance)
            else:
                np.testing.assert_array_equal(mine.numpy(), expected)
        else:
            assert type(mine) is type(reference) or isinstance(reference, int | float | bool)
            assert mine == reference or np.isclose(mine, reference, **tolerance)
