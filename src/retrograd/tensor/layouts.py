"""torch's memory formats: ``rg.contiguous_format``, ``rg.channels_last``,
``rg.channels_last_3d``, ``rg.preserve_format`` (instances of ``rg.memory_format``); and its
layouts (``rg.strided``, the layout of every retrograd tensor, ``rg.sparse_coo``,
``rg.jagged``: instances of ``rg.layout``).

In torch a memory format picks the strides of a 4-d or 5-d tensor; the values never change.
retrograd's tensors are values whose layout is the kernels' choice (the NumPy convolutions run
channels-last whatever the input), so ``t.to(memory_format=...)`` and
``t.contiguous(memory_format=...)`` check the format against the rank as torch does and return
the same values; ``stride()`` keeps reporting row-major strides. Asking which format a tensor
has (``is_contiguous(memory_format=rg.channels_last)``) has no honest answer here and raises.

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

from ..errors import InvalidArgumentError, ShapeError

__all__ = [
    "SPARSE_ADMISSION",
    "SPARSE_CLASSES",
    "channels_last",
    "channels_last_3d",
    "check_memory_format",
    "contiguous_format",
    "jagged",
    "layout",
    "memory_format",
    "preserve_format",
    "sparse_coo",
    "strided",
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


def refuse_format_query(op: str, fmt: Any, ndim: int) -> None:
    """``is_contiguous(memory_format=)`` for any format other than contiguous_format."""
    check_memory_format(op, fmt, ndim)
    if fmt is not None and fmt is not contiguous_format:
        raise InvalidArgumentError(
            f"{op}: retrograd tensors carry no memory format (the kernels choose the layout, "
            f"the values are the same); is_contiguous(memory_format={fmt!r}) has no answer"
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
