"""The tensor API: what users call.

``retrograd.tensor`` is a package, laid out as tinygrad's tensor surface is (a mixin per kind
of operation, each built on one primitive):

- :mod:`.core`: the :class:`Tensor` class (metadata, conversion, casts, autodiff) combining
- :mod:`.elementwise`, :mod:`.reduce`, :mod:`.shape`, :mod:`.indexing`: the mixins;
- :mod:`._dispatch`: ``apply``, the one way an operation reaches the backend (operand lifting,
  dtype promotion, error translation, the binary fast paths);
- :mod:`.inplace`: the in-place mixin (``add_``..., ``t[i] = v``, ``+=``) and ``assign``;
  :mod:`.views`: which tensors alias which, so in-place updates reach views and bases;
  :mod:`.advanced`: index tensors and masks in ``t[...]``;
- :mod:`.creation`: ``tensor``, ``zeros``, ``ones``, ``full``, ``eye``, ``arange``,
  ``random``...; :func:`cat` and :func:`stack` live in :mod:`.shape`;
- :mod:`.functions`: torch's function forms (``rg.exp(x)``, ``rg.where``, ``rg.einsum``
  (:mod:`.einsum`)...); :mod:`.dtypes` and :mod:`.legacy`: ``rg.float32``..., ``rg.finfo``,
  ``rg.FloatTensor``...;
- :mod:`.internal`: the named internal API for library code (``nn.functional``).
"""

from ._dispatch import COMPLEX_DTYPES, DTYPES, FLOAT_DTYPES, GRAD_DTYPES
from .core import Tensor
from .creation import (
    arange,
    as_tensor,
    asarray,
    empty,
    empty_like,
    eye,
    from_numpy,
    full,
    full_like,
    linspace,
    logspace,
    manual_seed,
    multinomial,
    normal,
    ones,
    ones_like,
    poisson,
    rand,
    rand_like,
    randint,
    randint_like,
    randn,
    randn_like,
    random,
    randperm,
    scalar_tensor,
    seed,
    tensor,
    zeros,
    zeros_like,
)
from .functions import accepts_out
from .indexing import tril, triu
from .reduce import topk
from .shape import cat as _cat
from .shape import flatten
from .shape import stack as _stack

#: torch's function forms, which take ``out=`` (the tensor methods of the same ops do not)
cat = accepts_out("cat")(_cat)
stack = accepts_out("stack")(_stack)

__all__ = [
    "COMPLEX_DTYPES",
    "DTYPES",
    "FLOAT_DTYPES",
    "GRAD_DTYPES",
    "Tensor",
    "arange",
    "as_tensor",
    "asarray",
    "cat",
    "empty",
    "empty_like",
    "eye",
    "flatten",
    "from_numpy",
    "full",
    "full_like",
    "linspace",
    "logspace",
    "manual_seed",
    "multinomial",
    "normal",
    "ones",
    "ones_like",
    "poisson",
    "rand",
    "rand_like",
    "randint",
    "randint_like",
    "randn",
    "randn_like",
    "random",
    "randperm",
    "scalar_tensor",
    "seed",
    "stack",
    "tensor",
    "topk",
    "tril",
    "triu",
    "zeros",
    "zeros_like",
]
