"""torch's ``torch.nn.attention.bias``: causal masks for ``scaled_dot_product_attention``
when queries and keys differ in length.

``is_causal=True`` aligns the causal triangle at the top left (query ``i`` sees keys
``j <= i``). Decoding with a key-value cache needs it at the bottom right: the last query sees
every key (query ``i`` sees keys ``j <= i + S - L``). ``attn_mask=causal_lower_right(L, S)``
(or ``causal_upper_left``) says which, as torch's :class:`CausalBias`.

>>> import retrograd as rg
>>> from retrograd.nn.attention.bias import causal_lower_right
>>> causal_lower_right(2, 4).materialize().tolist()
[[True, True, True, False], [True, True, True, True]]
"""

from __future__ import annotations

import enum
from typing import Any

from ...errors import InvalidArgumentError
from ...tensor import Tensor, ones

__all__ = ["CausalBias", "CausalVariant", "causal_lower_right", "causal_upper_left"]


class CausalVariant(enum.IntEnum):
    """Where the causal triangle is aligned, with torch's values."""

    UPPER_LEFT = 1
    LOWER_RIGHT = 2


class CausalBias:
    """A causal mask of ``seq_len_q`` queries over ``seq_len_kv`` keys, aligned as
    ``variant`` says; ``scaled_dot_product_attention`` takes it as ``attn_mask``."""

    def __init__(self, variant: CausalVariant, seq_len_q: int, seq_len_kv: int):
        if not isinstance(variant, CausalVariant):
            raise InvalidArgumentError(
                f"CausalBias: variant must be a CausalVariant, got {variant!r}"
            )
        if variant is CausalVariant.LOWER_RIGHT and seq_len_q > seq_len_kv:
            # torch warns here; the rows above the last seq_len_kv then see no key
            pass
        self.variant, self.seq_len_q, self.seq_len_kv = variant, int(seq_len_q), int(seq_len_kv)

    def materialize(self, device: Any = None) -> Tensor:
        """The bool ``[seq_len_q, seq_len_kv]`` mask (true: the query sees the key)."""
        every = ones((self.seq_len_q, self.seq_len_kv), dtype="bool", device=device)
        if self.variant is CausalVariant.UPPER_LEFT:
            return every.tril()
        return every.tril(self.seq_len_kv - self.seq_len_q)

    _materialize = materialize  # torch's spelling

    def __repr__(self) -> str:
        return self.materialize().__repr__()


def causal_upper_left(*size: int) -> CausalBias:
    """The causal mask aligned at the top left (``is_causal=True``'s): ``(L, S)``."""
    if len(size) != 2:
        raise InvalidArgumentError(f"causal_upper_left: expected two sizes (L, S), got {size}")
    return CausalBias(CausalVariant.UPPER_LEFT, *size)


def causal_lower_right(*size: int) -> CausalBias:
    """The causal mask aligned at the bottom right (a key-value cache's): ``(L, S)``."""
    if len(size) != 2:
        raise InvalidArgumentError(f"causal_lower_right: expected two sizes (L, S), got {size}")
    return CausalBias(CausalVariant.LOWER_RIGHT, *size)
