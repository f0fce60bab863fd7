"""The tensor API: what users call.

``retrograd.tensor`` is a package, laid out as tinygrad's tensor surface is (a mixin per kind
of operation, each built on one primitive):

- :mod:`.core`: the :class:`Tensor` class (metadata, conversion, casts, autodiff) combining
- :mod:`.elementwise`, :mod:`.reduce`, :mod:`.shape`, :mod:`.indexing`: the mixins;
- :mod:`._dispatch`: ``apply``, the one way an operation reaches the backend (operand lifting,
  dtype promotion, error translation, the binary fast paths);
- :mod:`.creation`: ``tensor``, ``zeros``, ``ones``, ``full``, ``eye``, ``arange``,
  ``random``...; :func:`cat` and :func:`stack` live in :mod:`.shape`;
- :mod:`.internal`: the named internal API for library code (``nn.functional``).
"""

from ._dispatch import DTYPES, FLOAT_DTYPES
from .core import Tensor
from .creation import (
    arange,
    eye,
    full,
    ones,
    ones_like,
    random,
    seed,
    tensor,
    zeros,
    zeros_like,
)
from .shape import cat, stack

__all__ = [
    "DTYPES",
    "FLOAT_DTYPES",
    "Tensor",
    "arange",
    "cat",
    "eye",
    "full",
    "ones",
    "ones_like",
    "random",
    "seed",
    "stack",
    "tensor",
    "zeros",
    "zeros_like",
]
