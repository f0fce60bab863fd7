"""torch's memory formats: ``rg.contiguous_format``, ``rg.channels_last``,
``rg.channels_last_3d``, ``rg.preserve_format`` (instances of ``rg.memory_format``); and its
layouts (``rg.strided``, the layout of every retrograd tensor, ``rg.sparse_coo``,
``rg.jagged``: instances of ``rg.layout``).

In torch a memory format picks the strides of a 4-d or 5-d tensor; the values never change.
retrograd's values are laid out as the kernels choose, but the strides torch's tensor would
have are modelled (:mod:`.strides`): ``t.contiguous(memory_format=rg.channels_last)``,
``t.to(memory_format=...)``, ``clone``/``*_like`` with a format and ``Module.to(memory_format=)``
give the result torch's channels-last strides, elementwise ops and ``preserve_format`` copies
follow them, and ``is_contiguous(memory_format=...)`` answers as torch does
(:func:`format_contiguous`, :func:`suggested_format`).

>>> import retrograd as rg
>>> rg.channels_last
retrograd.channels_last
>>> rg.ones((2, 3, 4, 5)).to(memory_format=rg.channels_last).shape
retrograd.Size([2, 3, 4, 5])
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from ..errors import ArgumentTypeError, InvalidArgumentError, ShapeError

__all__ = [
    "SPARSE_ADMISSION",
    "SPARSE_CLASSES",
    "channels_last",
    "channels_last_3d",
    "check_memory_format",
    "contiguous_format",
    "format_contiguous",
    "format_strides",
    "jagged",
    "layout",
    "memory_format",
    "preserve_format",
    "sparse_coo",
    "strided",
    "suggested_format",
]


class _Named:
    """A constant known by its name, printed as ``retrograd.<name>``, pickled as that name."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"retrograd.{self.name}"

    def __reduce__(self) -> str:
        return self.name


class memory_format(_Named):  # noqa: N801 (torch's name)
    """One of torch's memory formats, by name; the four instances are module constants."""

    __slots__ = ()


contiguous_format = memory_format("contiguous_format")
channels_last = memory_format("channels_last")
channels_last_3d = memory_format("channels_last_3d")
preserve_format = memory_format("preserve_format")
_RANKS = {channels_last: 4, channels_last_3d: 5}
#: the dimensions of each channels-last format, fastest-moving first
_CHANNELS_LAST_ORDER = {channels_last: (1, 3, 2, 0), channels_last_3d: (1, 4, 3, 2, 0)}


def check_memory_format(op: str, fmt: Any, ndim: int) -> None:
    """A format ``op`` can take for a tensor of rank ``ndim`` (``None`` is none given), as
    torch checks it: channels_last needs a 4-d tensor, channels_last_3d a 5-d one."""
    if fmt is None:
        return
    if not isinstance(fmt, memory_format):
        raise InvalidArgumentError(
            f"{op}: memory_format must be an rg.memory_format (rg.contiguous_format, "
            f"rg.channels_last, ...), got {fmt!r}"
        )
    rank = _RANKS.get(fmt)
    if rank is not None and ndim != rank:
        raise ShapeError(f"{op}: required rank {rank} tensor to use {fmt.name} format, got {ndim}")


def format_strides(fmt: memory_format, shape: tuple[int, ...]) -> tuple[int, ...]:
    """torch's strides for a tensor of ``shape`` laid out in ``fmt`` (channels_last: C
    fastest, then W, H, N; channels_last_3d: C, W, H, D, N); row-major for any other."""
    order = _CHANNELS_LAST_ORDER.get(fmt)
    if order is None or len(shape) != len(order):
        strides, step = [], 1
        for n in reversed(shape):
            strides.append(step)
            step *= max(n, 1)
        return tuple(reversed(strides))
    strides = [0] * len(shape)
    step = 1
    for d in order:  # (torch's get_channels_last_strides: sizes as they are, 0 included)
        strides[d] = step
        step *= shape[d]
    return tuple(strides)


def format_contiguous(fmt: Any, shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """torch's ``is_contiguous(memory_format=fmt)`` for a tensor of ``shape`` and ``strides``
    that is not row-major contiguous by another test (the caller's): dense in ``fmt``'s order,
    size-1 dimensions not counting (an N1HW or NC11 tensor is both); a tensor of another rank
    is not channels-last contiguous (no error, as torch's)."""
    order = _CHANNELS_LAST_ORDER.get(fmt)
    if order is None or len(shape) != len(order):
        return False
    expected = 1
    for d in order:
        if shape[d] != 1:
            if strides[d] != expected:
                return False
            expected *= shape[d]
    return True


def suggested_format(shape: tuple[int, ...], strides: tuple[int, ...]) -> memory_format:
    """torch's ``suggest_memory_format``: channels_last(_3d) where the strides order the
    dimensions as that format does (``is_channels_last_strides_2d``/``_3d``: ambiguous cases,
    a zero channel stride or an empty dimension, are ``contiguous_format``)."""
    fmt = {4: channels_last, 5: channels_last_3d}.get(len(shape))
    if fmt is None or strides[1] == 0:
        return contiguous_format
    low = 0
    for d in _CHANNELS_LAST_ORDER[fmt]:
        if shape[d] == 0 or strides[d] < low:
            return contiguous_format
        if d == 0 and low == strides[1]:  # N111-like: torch falls back to NCHW
            return contiguous_format
        low = strides[d] * (shape[d] if shape[d] > 1 else 1)
    return fmt


def check_format_query(op: str, fmt: Any) -> None:
    """``is_contiguous(memory_format=)``'s argument: any format, of any rank (torch answers
    False where the rank does not fit)."""
    if fmt is not None and not isinstance(fmt, memory_format):
        raise ArgumentTypeError(  # (torch's TypeError)
            f"{op}: memory_format must be an rg.memory_format (rg.contiguous_format, "
            f"rg.channels_last, ...), got {fmt!r}"
        )


class layout(_Named):  # noqa: N801 (torch's name)
    """One of torch's tensor layouts, by name. retrograd's tensors are ``strided`` (dense) but
    for the sparse COO tensors of :mod:`.sparse_coo` (``sparse_coo``); ``jagged`` exists so
    that code naming it reads, and the functions that would make such tensors raise
    (:mod:`retrograd.unsupported`)."""

    __slots__ = ()


strided = layout("strided")
sparse_coo = layout("sparse_coo")

#: the classes of sparse tensors (``SparseTensor``, which registers itself), which
#: ``isinstance(s, rg.Tensor)`` admits as torch's does, though no dense tensor's subclass
SPARSE_CLASSES: set[type] = set()
#: what makes ``isinstance(s, rg.Tensor)`` admit sparse tensors, called as the first is made
#: (``core.admit_sparse_instances``, set by that module, which imports the sparse one)
SPARSE_ADMISSION: list[Callable[[], None] | None] = [None]
jagged = layout("jagged")


def check_factory_layout(op: str, given: Any) -> None:
    """A factory's ``layout=``: ``None`` or ``strided`` (what every factory makes here)."""
    if given is None or given is strided:
        return
    if not isinstance(given, layout):
        raise InvalidArgumentError(f"{op}: layout must be an rg.layout (rg.strided), got {given!r}")
    raise InvalidArgumentError(
        f"{op}: layout={given!r} is not supported: retrograd's factories make strided tensors "
        "(build a sparse one with rg.sparse_coo_tensor or .to_sparse())"
    )


def factory_options(op: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A factory given torch's keywords ``layout`` (checked: :func:`check_factory_layout`)
    and ``pin_memory`` (accepted as ``Tensor.pin_memory()`` is: no tensor is page-locked
    here) where it lacks them; its signature shows both."""

    def decorate(function: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(function)
        takes_pin_memory = "pin_memory" in signature.parameters

        @functools.wraps(function)
        def with_options(*args: Any, layout: Any = None, **kwargs: Any) -> Any:
            check_factory_layout(op, layout)
            if not takes_pin_memory:
                pin_memory = kwargs.pop("pin_memory", None)
                if pin_memory is not None and not isinstance(pin_memory, bool):
                    raise InvalidArgumentError(
                        f"{op}: pin_memory must be a bool, got {pin_memory!r}"
                    )
            return function(*args, **kwargs)

        parameters = list(signature.parameters.values())
        tail = [p for p in parameters if p.kind is p.VAR_KEYWORD]
        added = [inspect.Parameter("layout", inspect.Parameter.KEYWORD_ONLY, default=None)]
        if not takes_pin_memory:
            added.append(
                inspect.Parameter("pin_memory", inspect.Parameter.KEYWORD_ONLY, default=None)
            )
        body = [p for p in parameters if p.kind is not p.VAR_KEYWORD]
        with_options.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=[*body, *added, *tail]
        )
        return with_options

    return decorate
