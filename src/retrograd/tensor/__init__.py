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
    multinomial,
    ones,
    ones_like,
    rand,
    randn,
    random,
    seed,
    tensor,
    zeros,
    zeros_like,
)
from .indexing import tril, triu
from .reduce import topk
from .shape import cat, flatten, stack

__all__ = [
    "DTYPES",
    "FLOAT_DTYPES",
    "Tensor",
    "arange",
    "cat",
    "eye",
    "flatten",
    "full",
    "multinomial",
    "ones",
    "ones_like",
    "rand",
    "randn",
    "random",
    "seed",
    "stack",
    "tensor",
    "topk",
    "tril",
    "triu",
    "zeros",
    "zeros_like",
]
