"""torch's ``torch.nn.utils.rnn`` helpers that need no recurrent module: ``pad_sequence``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...errors import InvalidArgumentError, ShapeError
from ...tensor import Tensor, stack
from ..functional import pad

__all__ = ["pad_sequence"]


def pad_sequence(
    sequences: Sequence[Tensor],
    batch_first: bool = False,
    padding_value: float = 0.0,
    padding_side: str = "right",
) -> Tensor:
    """Tensors ``[L_i, *]`` padded with ``padding_value`` to the longest and stacked:
    ``[L, B, *]``, or ``[B, L, *]`` with ``batch_first`` (``padding_side="left"`` pads
    before)."""
    sequences = list(sequences)
    if not sequences:
        raise InvalidArgumentError("pad_sequence: received an empty list of sequences")
    if padding_side not in ("right", "left"):
        raise InvalidArgumentError(
            f"pad_sequence: padding_side must be 'left' or 'right', got {padding_side!r}"
        )
    trailing = sequences[0].shape[1:]
    if any(s.shape[1:] != trailing for s in sequences):
        raise ShapeError("pad_sequence: sequences must have the same trailing dimensions")
    longest = max(s.shape[0] for s in sequences)
    padded = []
    for s in sequences:
        missing = longest - s.shape[0]
        amounts: list[Any] = [0, 0] * len(trailing)
        amounts += [0, missing] if padding_side == "right" else [missing, 0]
        padded.append(pad(s, amounts, value=padding_value) if missing else s)
    return stack(padded, 0 if batch_first else 1)
