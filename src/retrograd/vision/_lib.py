"""The tensor functions vision calls, from their homes below the public namespace (vision sits
under ``retrograd/__init__``'s layer, so it does not import ``retrograd`` itself)."""

from __future__ import annotations

from ..runtime_settings import get_default_dtype
from ..tensor import as_tensor, empty, from_numpy, randint, randperm
from ..tensor.creation import ones, rand, randn, tensor, zeros
from ..tensor.dtypes import DTYPE_OBJECTS
from ..tensor.functions import where
from ..tensor.generator import Generator
from ..tensor.selection import multinomial
from ..tensor.shape import cat, stack

float32 = DTYPE_OBJECTS["float32"]
float64 = DTYPE_OBJECTS["float64"]
int64 = DTYPE_OBJECTS["int64"]
uint8 = DTYPE_OBJECTS["uint8"]

__all__ = [
    "Generator",
    "as_tensor",
    "cat",
    "empty",
    "float32",
    "float64",
    "from_numpy",
    "get_default_dtype",
    "int64",
    "multinomial",
    "ones",
    "rand",
    "randint",
    "randn",
    "randperm",
    "stack",
    "tensor",
    "uint8",
    "where",
    "zeros",
]
