"""torch's ``torch.nn.utils.rnn``: ``pad_sequence``, packed sequences (``PackedSequence``,
``pack_padded_sequence``, ``pad_packed_sequence``, ``pack_sequence``, ``unpack_sequence``,
``invert_permutation``; their home is :mod:`retrograd.nn.functional.rnn_packed`, which the
recurrent modules read too) and ``unpad_sequence``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...errors import DTypeError, InvalidArgumentError, ShapeError
from ...errors import guard_namespace as _guard_namespace
from ...tensor import Tensor, stack
from ...tensor.layouts import contiguous_format
from ..functional import pad
from ..functional.rnn_packed import (
    PackedSequence,
    check_packed_sizes,
    invert_permutation,
    pack_padded_sequence,
    pad_packed_sequence,
)

__all__ = [
    "PackedSequence",
    "invert_permutation",
    "pack_padded_sequence",
    "pack_sequence",
    "pad_packed_sequence",
    "pad_sequence",
    "unpack_sequence",
    "unpad_sequence",
]


def pad_sequence(
    sequences: Sequence[Tensor],
    batch_first: bool = False,
    padding_value: float = 0.0,
    padding_side: str = "right",
) -> Tensor:
    """Tensors ``[L_i, *]`` padded with ``padding_value`` to the longest and stacked:
    ``[L, B, *]``, or ``[B, L, *]`` with ``batch_first`` (``padding_side="left"`` pads
    before), in the dtype of the first sequence, as torch's."""
    sequences = list(sequences)
    if not sequences:
        raise InvalidArgumentError("pad_sequence: received an empty list of sequences")
    if padding_side not in ("right", "left"):
        raise InvalidArgumentError(
            f"pad_sequence: padding_side must be 'left' or 'right', got {padding_side!r}"
        )
    for i, s in enumerate(sequences):
        if not isinstance(s, Tensor):
            raise DTypeError(
                f"pad_sequence: expected a tensor as sequence {i}, got {type(s).__name__}"
            )
        if s.dim() == 0:
            raise ShapeError(
                f"pad_sequence: sequence {i} is a 0-d tensor; each sequence needs a length "
                "dimension (its first)"
            )
    trailing = sequences[0].shape[1:]
    for i, s in enumerate(sequences):
        if s.shape[1:] != trailing:
            raise ShapeError(
                "pad_sequence: sequences must have the same trailing dimensions, got "
                f"{list(sequences[0].shape)} (sequence 0) and {list(s.shape)} (sequence {i})"
            )
    longest = max(s.shape[0] for s in sequences)
    # torch writes every sequence into a tensor made like the first one: its dtype wins
    dtype = sequences[0].dtype
    padded = []
    for s in sequences:
        s = s if s.dtype == dtype else s.to(dtype)
        missing = longest - s.shape[0]
        amounts: list[Any] = [0, 0] * len(trailing)
        amounts += [0, missing] if padding_side == "right" else [missing, 0]
        padded.append(pad(s, amounts, value=padding_value) if missing else s)
    return stack(padded, 0 if batch_first else 1)


def pack_sequence(sequences: Sequence[Tensor], enforce_sorted: bool = True) -> PackedSequence:
    """Pack a list of tensors ``[L_i, *]`` (longest first, unless not ``enforce_sorted``).

    >>> import retrograd as rg
    >>> pack_sequence([rg.tensor([1, 2, 3]), rg.tensor([4, 5])]).data.tolist()
    [1, 4, 2, 5, 3]
    """
    sequences = list(sequences)
    check_packed_sizes(sequences)
    lengths = [s.shape[0] for s in sequences]
    return pack_padded_sequence(pad_sequence(sequences), lengths, enforce_sorted=enforce_sorted)


def unpack_sequence(packed_sequences: PackedSequence) -> list[Tensor]:
    """The list of tensors :func:`pack_sequence` packed, in their original order."""
    padded, lengths = pad_packed_sequence(packed_sequences, batch_first=True)
    return unpad_sequence(padded, lengths, batch_first=True)


def unpad_sequence(
    padded_sequences: Tensor, lengths: Any, batch_first: bool = False
) -> list[Tensor]:
    """Each sequence of a padded batch cut to its length, a copy (as torch's, which takes it
    by a mask: writing one leaves the batch alone). Without ``batch_first`` the batch is
    transposed *in place* to ``[B, T, *]`` first, torch's side effect.

    >>> import retrograd as rg
    >>> [s.tolist() for s in unpad_sequence(rg.tensor([[1, 4], [2, 5], [3, 0]]), [3, 2])]
    [[1, 2, 3], [4, 5]]
    """
    lengths = lengths.tolist() if isinstance(lengths, Tensor) else list(lengths)
    batch = padded_sequences.shape[0 if batch_first else 1]
    if len(lengths) != batch:
        raise ShapeError(f"unpad_sequence: {len(lengths)} lengths for a batch of {batch}")
    if not batch_first:
        padded_sequences.transpose_(0, 1)
    return [
        padded_sequences[i].narrow(0, 0, int(n)).clone(memory_format=contiguous_format)
        for i, n in enumerate(lengths)
    ]


# Arguments no check foresaw (a str or None for a tensor, a str for a size) get an error of
# the hierarchy naming the function (errors.guard), as rg.* and nn.functional's do.
_guard_namespace(globals(), __all__)
