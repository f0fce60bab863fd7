"""torch's ``torch.testing``: ``assert_close`` (and the deprecated ``assert_allclose``).

>>> import retrograd as rg
>>> rg.testing.assert_close(rg.tensor([1.0, 2.0]), rg.tensor([1.0, 2.0 + 1e-7]))
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .tensor import Tensor

__all__ = ["assert_allclose", "assert_close"]

#: torch's default tolerances by dtype (``rtol``, ``atol``)
_TOLERANCES = {
    "float16": (1e-3, 1e-5),
    "bfloat16": (1.6e-2, 1e-5),
    "float32": (1.3e-6, 1e-5),
    "float64": (1e-7, 1e-7),
}


def _values(x: Any) -> tuple[np.ndarray, str]:
    if isinstance(x, Tensor):
        return x.numpy(), str(x.dtype)
    array = np.asarray(x)
    return array, str(array.dtype)


def assert_close(
    actual: Any,
    expected: Any,
    *,
    rtol: float | None = None,
    atol: float | None = None,
    equal_nan: bool = False,
    check_dtype: bool = True,
    msg: str | None = None,
    **_: Any,
) -> None:
    """Raise ``AssertionError`` unless ``actual`` and ``expected`` have the same shape (and
    dtype, with ``check_dtype``) and ``|actual - expected| <= atol + rtol * |expected|``
    elementwise, torch's default tolerances chosen by dtype (exact for integers)."""
    a, a_dtype = _values(actual)
    e, e_dtype = _values(expected)
    if a.shape != e.shape:
        raise AssertionError(
            msg or f"The values for attribute 'shape' do not match: {a.shape} != {e.shape}."
        )
    if check_dtype and a_dtype != e_dtype:
        raise AssertionError(
            msg or f"The values for attribute 'dtype' do not match: {a_dtype} != {e_dtype}."
        )
    default = _TOLERANCES.get(a_dtype, (0.0, 0.0))
    rtol = default[0] if rtol is None else rtol
    atol = default[1] if atol is None else atol
    if not np.allclose(a, e, rtol=rtol, atol=atol, equal_nan=equal_nan):
        worst = float(np.max(np.abs(a.astype(np.float64) - e.astype(np.float64))))
        raise AssertionError(
            msg
            or f"Tensor-likes are not close! Greatest absolute difference: {worst} "
            f"(up to {atol} allowed, rtol {rtol})"
        )


def assert_allclose(
    actual: Any,
    expected: Any,
    rtol: float | None = None,
    atol: float | None = None,
    equal_nan: bool = True,
    msg: str = "",
) -> None:
    """torch's deprecated form of :func:`assert_close` (no dtype check)."""
    assert_close(
        actual, expected, rtol=rtol, atol=atol, equal_nan=equal_nan, check_dtype=False,
        msg=msg or None,
    )  # fmt: skip
