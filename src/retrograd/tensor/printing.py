"""How tensors print: torch's ``_tensor_str`` rules over a tensor's values, and the options
``rg.set_printoptions`` sets (torch's keywords and profiles).

A tensor prints as torch's does: ``tensor([1., 2.])``; its dtype named only where torch names
it (not the default float dtype, its complex counterpart, int64 or bool; always for an empty
tensor of another dtype than the default), as its ``repr`` (``dtype=retrograd.float64``: torch's
``torch.float64`` under this library's name); ``grad_fn=<mulBackward>`` for a result in the
graph, ``requires_grad=True`` for a leaf that requires grad.

>>> import retrograd as rg
>>> rg.set_printoptions(precision=2)
>>> rg.tensor([1 / 3])
tensor([0.33])
>>> rg.set_printoptions(profile="default")
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import InvalidArgumentError

__all__ = ["get_printoptions", "set_printoptions", "sparse_text", "tensor_text"]


@dataclasses.dataclass
class _PrintOptions:
    precision: int = 4
    threshold: float = 1000
    edgeitems: int = 3
    linewidth: int = 80
    sci_mode: bool | None = None


_PROFILES = {
    "default": {"precision": 4, "threshold": 1000, "edgeitems": 3, "linewidth": 80},
    "short": {"precision": 2, "threshold": 1000, "edgeitems": 2, "linewidth": 80},
    "full": {"precision": 4, "threshold": math.inf, "edgeitems": 3, "linewidth": 80},
}
_OPTIONS = _PrintOptions()
#: the dtypes whose values print as floats (torch's ``is_floating_point``)
_FLOATS = ("float16", "bfloat16", "float32", "float64")


def set_printoptions(
    precision: int | None = None,
    threshold: float | None = None,
    edgeitems: int | None = None,
    linewidth: int | None = None,
    profile: str | None = None,
    sci_mode: bool | None = None,
) -> None:
    """torch's ``set_printoptions``: a ``profile`` (``"default"``, ``"short"``, ``"full"``)
    first, then the keywords given; ``sci_mode`` True or False forces or forbids scientific
    notation, None (what every call not naming it sets, as torch's) leaves it to the values.
    Values of another kind are refused before any is set (torch stores them, and its next
    print fails)."""
    for name, value in (
        ("precision", precision),
        ("edgeitems", edgeitems),
        ("linewidth", linewidth),
    ):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 0
        ):
            raise InvalidArgumentError(
                f"set_printoptions: {name} must be a non-negative int, got {value!r}"
            )
    if threshold is not None and (
        isinstance(threshold, bool) or not isinstance(threshold, int | float) or threshold < 0
    ):
        raise InvalidArgumentError(
            f"set_printoptions: threshold must be a non-negative number, got {threshold!r}"
        )
    if sci_mode is not None and not isinstance(sci_mode, bool):
        raise InvalidArgumentError(
            f"set_printoptions: sci_mode must be a bool or None, got {sci_mode!r}"
        )
    if profile is not None:
        if profile not in _PROFILES:
            raise InvalidArgumentError(
                f"set_printoptions: profile must be one of {list(_PROFILES)}, got {profile!r}"
            )
        for name, value in _PROFILES[profile].items():
            setattr(_OPTIONS, name, value)
    given = {
        "precision": precision,
        "threshold": threshold,
        "edgeitems": edgeitems,
        "linewidth": linewidth,
    }
    for name, value in given.items():
        if value is not None:
            setattr(_OPTIONS, name, value)
    _OPTIONS.sci_mode = sci_mode


def get_printoptions() -> dict[str, Any]:
    """torch's options as they stand, as keywords ``set_printoptions`` takes back."""
    return dataclasses.asdict(_OPTIONS)


class _Formatter:
    """torch's ``_Formatter``: one width and one notation for all the values printed."""

    def __init__(self, values: np.ndarray, floating: bool) -> None:
        self.floating = floating
        self.int_mode = True
        self.sci_mode = False
        self.max_width = 1
        flat = values.reshape(-1)
        if not floating:
            for value in flat.tolist():
                self.max_width = max(self.max_width, len(f"{value}"))
            return
        flat = flat.astype(np.float64)
        finite = flat[np.isfinite(flat) & (flat != 0)]
        if finite.size == 0:
            return
        magnitudes = np.abs(finite)
        smallest, largest = float(magnitudes.min()), float(magnitudes.max())
        self.int_mode = bool(np.all(finite == np.ceil(finite)))
        precision = _OPTIONS.precision
        self.sci_mode = (
            largest / smallest > 1000.0 or largest > 1.0e8 or smallest < 1.0e-4
            if _OPTIONS.sci_mode is None
            else _OPTIONS.sci_mode
        )
        for value in finite.tolist():
            if self.sci_mode:
                width = len(f"{value:.{precision}e}")
            elif self.int_mode:
                width = len(f"{value:.0f}") + 1  # the "." that marks a float
            else:
                width = len(f"{value:.{precision}f}")
            self.max_width = max(self.max_width, width)

    def width(self) -> int:
        return self.max_width

    def format(self, value: Any) -> str:
        if self.floating:
            precision = _OPTIONS.precision
            if self.sci_mode:
                text = f"{value:{self.max_width}.{precision}e}"
            elif self.int_mode:
                text = f"{value:.0f}"
                if not (math.isinf(value) or math.isnan(value)):
                    text += "."
            else:
                text = f"{value:.{precision}f}"
        else:
            text = f"{value}"
        return (self.max_width - len(text)) * " " + text


def _complex_text(value: complex, real: _Formatter, imag: _Formatter) -> str:
    real_text = real.format(value.real)
    imag_text = (imag.format(value.imag) + "j").lstrip()
    if imag_text[0] in "+-":  # a negative part, -0.0
        return real_text + imag_text
    return real_text + "+" + imag_text


def _value_text(value: Any, formatters: Sequence[_Formatter]) -> str:
    if len(formatters) == 2:
        return _complex_text(complex(value), *formatters)
    return formatters[0].format(value)


def _vector_text(
    values: np.ndarray, indent: int, summarize: bool, formatters: Sequence[_Formatter]
) -> str:
    element_length = formatters[0].width() + 2
    if len(formatters) == 2:
        element_length += formatters[1].width() + 1  # the imaginary part and its "j"
    per_line = max(1, math.floor((_OPTIONS.linewidth - indent) / element_length))
    edge = _OPTIONS.edgeitems
    if summarize and not edge:
        data = ["..."]
    elif summarize and values.shape[0] > 2 * edge:
        data = (
            [_value_text(v, formatters) for v in values[:edge].tolist()]
            + [" ..."]
            + [_value_text(v, formatters) for v in values[-edge:].tolist()]
        )
    else:
        data = [_value_text(v, formatters) for v in values.tolist()]
    lines = [", ".join(data[i : i + per_line]) for i in range(0, len(data), per_line)]
    return "[" + (",\n" + " " * (indent + 1)).join(lines) + "]"


def _nested_text(
    values: np.ndarray, indent: int, summarize: bool, formatters: Sequence[_Formatter]
) -> str:
    if values.ndim == 0:
        return _value_text(values.item(), formatters)
    if values.ndim == 1:
        return _vector_text(values, indent, summarize, formatters)
    edge = _OPTIONS.edgeitems
    rows = len(values)
    if summarize and rows > 2 * edge:
        shown = [*range(edge), None, *range(rows - edge, rows)]
    else:
        shown = list(range(rows))
    slices = [
        "..." if i is None else _nested_text(values[i], indent + 1, summarize, formatters)
        for i in shown
    ]
    return "[" + ("," + "\n" * (values.ndim - 1) + " " * (indent + 1)).join(slices) + "]"


def _summarized(values: np.ndarray) -> np.ndarray:
    """torch's ``get_summarized_data``: the values a summarized print shows."""
    edge = _OPTIONS.edgeitems
    if values.ndim == 0:
        return values
    if values.ndim == 1:
        if values.shape[0] > 2 * edge:
            return np.concatenate((values[:edge], values[-edge:]))  # [-0:] is all, as torch's
        return values
    if not edge:
        return np.empty((0,) * values.ndim, values.dtype)
    rows = len(values)
    kept = [*range(edge), *range(rows - edge, rows)] if rows > 2 * edge else range(rows)
    return np.stack([_summarized(values[i]) for i in kept])


def _values_text(values: np.ndarray, indent: int, floating: bool) -> str:
    """torch's ``_tensor_str``."""
    if values.size == 0:
        return "[]"
    summarize = values.size > _OPTIONS.threshold
    shown = _summarized(values) if summarize else values
    if np.iscomplexobj(values):
        formatters = (_Formatter(shown.real, True), _Formatter(shown.imag, True))
    else:
        formatters = (_Formatter(shown, floating),)
    return _nested_text(values, indent, summarize, formatters)


def _with_suffixes(text: str, suffixes: list[str], indent: int, force_newline: bool = False) -> str:
    """torch's ``_add_suffixes``: each suffix after a comma, on a line of its own where the
    line would pass the line width."""
    parts = [text]
    last_line_length = len(text) - text.rfind("\n") + 1
    for suffix in suffixes:
        # measured as torch's own suffix (``dtype=torch.float64``, 4 characters shorter), so
        # that the lines break where torch's do and a log compares line for line with torch's
        length = len(suffix.replace("retrograd.", "torch."))
        if force_newline or last_line_length + length + 2 > _OPTIONS.linewidth:
            parts.append(",\n" + " " * indent + suffix)
            last_line_length = indent + length
            force_newline = False
        else:
            parts.append(", " + suffix)
            last_line_length += length + 2
    parts.append(")")
    return "".join(parts)


def tensor_text(
    values: np.ndarray | None,
    dtype: Any,
    default_dtype: Any,
    *,
    device_text: str | None = None,
    shape: tuple[int, ...] = (),
    grad_fn_name: str | None = None,
    requires_grad: bool = False,
    prefix: str = "tensor(",
) -> str:
    """torch's ``_str_intern`` for a strided tensor of ``values`` (host values in a NumPy
    dtype that holds them exactly) whose dtype is ``dtype`` (an ``rg`` dtype: its ``repr``
    names it); ``device_text`` is the device to name (None: the default kind, unnamed).
    ``values`` None is a tensor with no values (a meta tensor) of ``shape``."""
    indent = len(prefix)
    suffixes = []
    if device_text is not None:
        suffixes.append(f"device='{device_text}'")
    if values is None:
        suffixes.append(f"size={shape}")
        if dtype != default_dtype:
            suffixes.append(f"dtype={dtype!r}")
        text = "..."
    elif values.size == 0:
        if values.ndim != 1:
            suffixes.append(f"size={tuple(values.shape)}")
        if dtype != default_dtype:
            suffixes.append(f"dtype={dtype!r}")
        text = "[]"
    else:
        if not _OPTIONS.edgeitems:
            suffixes.append(f"size={tuple(values.shape)}")
        if _named_dtype(dtype, default_dtype):
            suffixes.append(f"dtype={dtype!r}")
        text = _values_text(values, indent, dtype in _FLOATS)
    if grad_fn_name is not None:
        suffixes.append(f"grad_fn=<{grad_fn_name}>")
    elif requires_grad:
        suffixes.append("requires_grad=True")
    return _with_suffixes(prefix + text, suffixes, indent)


def _named_dtype(dtype: Any, default_dtype: Any) -> bool:
    """Whether torch names ``dtype`` after a tensor's values (not the default float dtype,
    its complex counterpart, int64 or bool: the dtypes a literal of the values takes)."""
    default_complex = "complex128" if default_dtype == "float64" else "complex64"
    return dtype not in (default_dtype, default_complex, "int64", "bool")


def sparse_text(
    indices: np.ndarray,
    values: np.ndarray,
    size: tuple[int, ...],
    nnz: int,
    dtype: Any,
    default_dtype: Any,
    layout: Any,
    *,
    requires_grad: bool = False,
) -> str:
    """torch's ``_str_intern`` for a sparse COO tensor: its ``indices`` (int64) and
    ``values`` each as a tensor's values, then the size, the number of values, the dtype
    where torch names it and the layout (its ``repr``), on lines of their own."""
    indent = len("tensor(")
    suffixes = [f"size={tuple(size)}", f"nnz={nnz}"]
    if _named_dtype(dtype, default_dtype):
        suffixes.append(f"dtype={dtype!r}")
    parts = []
    for name, part, floating in (
        ("indices", indices, False),
        ("values", values, dtype in _FLOATS),
    ):
        prefix = f"{name}=tensor("
        text = _values_text(part, indent + len(prefix), floating)
        if part.size == 0:
            text += f", size={tuple(part.shape)}"
        parts.append(prefix + text + ")")
    suffixes.append(f"layout={layout!r}")
    if requires_grad:
        suffixes.append("requires_grad=True")
    text = "tensor(" + (",\n" + " " * indent).join(parts)
    return _with_suffixes(text, suffixes, indent, force_newline=True)
