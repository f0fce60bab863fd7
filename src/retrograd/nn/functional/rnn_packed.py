"""Packed sequences, as torch's ``torch.nn.utils.rnn``: ``PackedSequence``,
``pack_padded_sequence``, ``pad_packed_sequence``, ``invert_permutation``, and the recurrence
over a packed batch that ``nn.RNN``/``nn.LSTM``/``nn.GRU`` run for one
(:func:`recurrent_packed`).

A ``PackedSequence`` holds the steps of a batch of sequences of different lengths, time-major:
``data`` ``[sum(batch_sizes), *]`` is step 0 of every sequence, then step 1 of every sequence
that long, ... (sequences sorted longest first; ``sorted_indices`` maps that order to the
batch's, ``unsorted_indices`` back). ``batch_sizes`` counts the sequences at each step, an
int64 tensor as torch's. Packing and unpacking are differentiable (slices and joins), so
gradients reach the padded input.

The recurrence runs the sequences of each length together over their true length, so the
final state of each is taken at its own last step (the first, for the reverse direction of a
bidirectional layer), as torch's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from ...errors import InvalidArgumentError, ShapeError
from ...tensor import Tensor, cat, stack, tensor
from .sampling import pad as _pad

__all__ = [
    "PackedSequence",
    "invert_permutation",
    "pack_padded_sequence",
    "pad_packed_sequence",
    "recurrent_packed",
]


class _PackedFields(NamedTuple):
    data: Tensor
    batch_sizes: Tensor
    sorted_indices: Tensor | None
    unsorted_indices: Tensor | None


class PackedSequence(_PackedFields):
    """``(data, batch_sizes, sorted_indices, unsorted_indices)``, torch's fields (the index
    tensors ``None`` for a batch packed already sorted). Made as torch's: with
    ``sorted_indices`` and no ``unsorted_indices``, these are its inverse; ``(data,
    batch_sizes)`` may come as one pair (``PackedSequence((data, sizes))``)."""

    def __new__(
        cls,
        data: Any,
        batch_sizes: Tensor | None = None,
        sorted_indices: Tensor | None = None,
        unsorted_indices: Tensor | None = None,
    ) -> PackedSequence:
        if unsorted_indices is None:
            unsorted_indices = invert_permutation(sorted_indices)
        if batch_sizes is None:
            if not (isinstance(data, tuple | list) and len(data) == 2):
                raise InvalidArgumentError(
                    "PackedSequence: expected data and batch_sizes, or a pair (data, "
                    f"batch_sizes) as data, got {type(data).__name__} and no batch_sizes"
                )
            data, batch_sizes = data
        return super().__new__(cls, data, batch_sizes, sorted_indices, unsorted_indices)

    def _with_data(self, data: Tensor) -> PackedSequence:
        """This batch with ``data`` (itself where the conversion returned the same data, as
        torch's)."""
        return self if data is self.data else self._replace(data=data)

    def to(self, *args: Any, **kwargs: Any) -> PackedSequence:
        """``data`` converted by ``Tensor.to``; the rest as it is (``self`` where nothing
        changes)."""
        return self._with_data(self.data.to(*args, **kwargs))

    # torch's conversions of a packed batch: each its data's (``packed.cpu()`` after a
    # GPU encoder, ``packed.long()`` of token ids)
    def float(self) -> PackedSequence:
        return self._with_data(self.data.float())

    def double(self) -> PackedSequence:
        return self._with_data(self.data.double())

    def half(self) -> PackedSequence:
        return self._with_data(self.data.half())

    def long(self) -> PackedSequence:
        return self._with_data(self.data.long())

    def int(self) -> PackedSequence:
        return self._with_data(self.data.int())

    def short(self) -> PackedSequence:
        return self._with_data(self.data.short())

    def char(self) -> PackedSequence:
        return self._with_data(self.data.char())

    def byte(self) -> PackedSequence:
        return self._with_data(self.data.byte())

    def cpu(self) -> PackedSequence:
        return self._with_data(self.data.cpu())

    def cuda(self, *args: Any, **kwargs: Any) -> PackedSequence:
        return self._with_data(self.data.cuda(*args, **kwargs))

    def pin_memory(self) -> PackedSequence:
        return self._replace(data=self.data.pin_memory())

    def is_pinned(self) -> bool:
        return self.data.is_pinned()

    @property
    def is_cuda(self) -> bool:
        return self.data.is_cuda


def _host_ints(values: Any, what: str) -> np.ndarray:
    array = np.asarray(values.numpy() if isinstance(values, Tensor) else values)
    if array.ndim != 1 or (array.size and array.dtype.kind not in "iu"):
        raise InvalidArgumentError(f"{what} must be a 1-d sequence of ints, got {array!r}")
    return array.astype(np.int64)


def _whole_floats_as_ints(lengths: Any) -> Any:
    """Lengths counted in floats (``mask.sum(1)`` of a float mask) as the ints they are, as
    torch's ``as_tensor(lengths, dtype=int64)`` reads them; a fractional one is refused
    (torch would cut it short silently)."""
    array = np.asarray(lengths.numpy() if isinstance(lengths, Tensor) else lengths)
    if array.dtype.kind != "f":
        return lengths
    if not np.all(np.isfinite(array) & (array == np.round(array))):
        raise InvalidArgumentError(
            f"pack_padded_sequence: lengths must be whole numbers, got {array.tolist()}"
        )
    return array.astype(np.int64)


def invert_permutation(permutation: Tensor | None) -> Tensor | None:
    """The permutation that undoes ``permutation`` (``None`` for ``None``).

    >>> import retrograd as rg
    >>> invert_permutation(rg.tensor([2, 0, 1])).tolist()
    [1, 2, 0]
    """
    if permutation is None:
        return None
    order = _host_ints(permutation, "invert_permutation: permutation")
    return tensor(np.argsort(order, kind="stable").astype(np.int64))


def _batch_sizes(lengths: np.ndarray) -> np.ndarray:
    """The number of sequences at each step, for lengths sorted longest first."""
    return np.array([(lengths > t).sum() for t in range(int(lengths[0]))], dtype=np.int64)


def pack_padded_sequence(input: Tensor, lengths: Any, batch_first: bool = False,  # noqa: A002
                         enforce_sorted: bool = True) -> PackedSequence:  # fmt: skip
    """Pack a padded batch ``[T, B, *]`` (``[B, T, *]`` with ``batch_first``) of sequences of
    ``lengths``; with ``enforce_sorted`` the lengths must be sorted longest first, else the
    batch is sorted here and ``sorted_indices`` says how.

    >>> import retrograd as rg
    >>> packed = pack_padded_sequence(rg.tensor([[1, 2, 3], [4, 5, 0]]), [3, 2], True)
    >>> packed.data.tolist(), packed.batch_sizes.tolist()
    ([1, 4, 2, 5, 3], [2, 2, 1])
    """
    lengths = _host_ints(_whole_floats_as_ints(lengths), "pack_padded_sequence: lengths")
    batch_dim = 0 if batch_first else 1
    if input.ndim < 2 or lengths.shape[0] != input.shape[batch_dim]:
        raise ShapeError(
            f"pack_padded_sequence: expected {lengths.shape[0]} sequences (one per length) "
            f"along dim {batch_dim} of the input, got input of shape {list(input.shape)}"
        )
    if lengths.size and lengths.min() <= 0:
        raise InvalidArgumentError(
            "pack_padded_sequence: Length of all samples has to be greater than 0, but found an "
            "element in 'lengths' that is <= 0"
        )
    if lengths.size and lengths.max() > input.shape[1 - batch_dim]:
        raise ShapeError(
            f"pack_padded_sequence: a length {int(lengths.max())} is longer than the input's "
            f"{input.shape[1 - batch_dim]} steps"
        )
    sorted_indices = None
    if enforce_sorted:
        if np.any(np.diff(lengths) > 0):
            raise InvalidArgumentError(
                "pack_padded_sequence: `lengths` array must be sorted in decreasing order when "
                "`enforce_sorted` is True. You can pass `enforce_sorted=False` to "
                "pack_padded_sequence and/or pack_sequence to sidestep this requirement if you "
                "do not need ONNX exportability."
            )
    else:
        order = np.argsort(-lengths, kind="stable")
        lengths = lengths[order]
        sorted_indices = tensor(order.astype(np.int64))
        input = input.index_select(batch_dim, tensor(order.astype(np.int64), device=input.device))  # noqa: A001
    steps_first = input.swap_dims(0, 1) if batch_first else input
    sizes = _batch_sizes(lengths)
    data = _pack_sorted(steps_first, sizes)
    return PackedSequence(data, tensor(sizes), sorted_indices, invert_permutation(sorted_indices))


def _padded_sorted(sequence: PackedSequence, padding_value: float, total: int) -> Tensor:
    """The packed steps as ``[total, B, *]``, sequences in the packed (sorted) order."""
    data, sizes = sequence.data, _host_ints(sequence.batch_sizes, "batch_sizes")
    batch = int(sizes[0])
    trailing = [0, 0] * (data.ndim - 1)
    steps, offset = [], 0
    for n in sizes:
        step = data.narrow(0, offset, int(n))
        offset += int(n)
        if n < batch:
            step = _pad(step, [*trailing, 0, batch - int(n)], value=padding_value)
        steps.append(step)
    padded = stack(steps, 0)
    if total > len(sizes):
        padded = _pad(padded, [*trailing, 0, 0, 0, total - len(sizes)], value=padding_value)
    return padded


def _lengths(sizes: np.ndarray) -> np.ndarray:
    """Each sequence's length (packed order) from the batch sizes."""
    return np.array([(sizes > b).sum() for b in range(int(sizes[0]))], dtype=np.int64)


def pad_packed_sequence(sequence: PackedSequence, batch_first: bool = False,
                        padding_value: float = 0.0,
                        total_length: int | None = None) -> tuple[Tensor, Tensor]:  # fmt: skip
    """``(padded, lengths)``: the inverse of :func:`pack_padded_sequence`, sequences in the
    original batch order, padded with ``padding_value`` to the longest (or ``total_length``);
    ``lengths`` an int64 tensor.

    >>> import retrograd as rg
    >>> packed = pack_padded_sequence(rg.tensor([[1, 2, 3], [4, 5, 0]]), [3, 2], True)
    >>> padded, lengths = pad_packed_sequence(packed, batch_first=True)
    >>> padded.tolist(), lengths.tolist()
    ([[1, 2, 3], [4, 5, 0]], [3, 2])
    """
    sizes = _host_ints(sequence.batch_sizes, "batch_sizes")
    steps = len(sizes)
    if total_length is not None and total_length < steps:
        raise InvalidArgumentError(
            "pad_packed_sequence: Expected total_length to be at least the length of the "
            f"longest sequence in input, but got total_length={total_length} and max sequence "
            f"length being {steps}"
        )
    total = steps if total_length is None else total_length
    padded = _padded_sorted(sequence, padding_value, total)
    lengths = _lengths(sizes)
    if batch_first:
        padded = padded.swap_dims(0, 1)
    if sequence.unsorted_indices is not None:
        # after the transpose, as torch's: the batch unsorted is a new contiguous tensor
        # (``padded.view(-1, H)`` works on it), the one packed sorted a transposed view
        unsorted = _host_ints(sequence.unsorted_indices, "unsorted_indices")
        padded = padded.index_select(
            0 if batch_first else 1, tensor(unsorted, device=padded.device)
        )
        lengths = lengths[unsorted]
    return padded, tensor(lengths)


def _pack_sorted(padded: Tensor, sizes: np.ndarray) -> Tensor:
    """``data`` of a packed batch from its padded steps ``[T, B, *]`` (sorted order)."""
    return cat([padded.narrow(0, t, 1).narrow(1, 0, int(n)).squeeze_dim(0)
                for t, n in enumerate(sizes)], 0)  # fmt: skip


def _permute_states(hx: Any, order: Tensor | None) -> Any:
    if hx is None or order is None:
        return hx
    if isinstance(hx, tuple | list):
        return type(hx)(h.index_select(1, order) for h in hx)
    return hx.index_select(1, order)


def _check_state_batch(name: str, hx: Any, batch: int) -> None:
    """Each initial state ``[layers * directions, batch, H]`` for the packed batch: the
    groups that run below take each a slice of it, so a state of another batch (or an
    unbatched one) is refused here, as torch's "Expected hidden size"."""
    if hx is None:
        return
    for k, h in enumerate(hx if isinstance(hx, tuple | list) else (hx,)):
        if isinstance(h, Tensor) and (h.ndim != 3 or h.shape[1] != batch):
            what = ("h_0", "c_0")[k] if isinstance(hx, tuple | list) else "hx"
            raise ShapeError(
                f"{name}: expected {what} of shape [num_layers * num_directions, {batch}, "
                f"hidden] for a packed batch of {batch} sequences, got {list(h.shape)}"
            )


def recurrent_packed(
    run: Any, sequence: PackedSequence, hx: Any, lstm: bool, name: str = "RNN"
) -> tuple[PackedSequence, Any]:
    """``run(x [L, n, I], hx) -> (output [L, n, D*H], states)`` over a packed batch: each
    group of sequences of one length runs over that length only; the outputs come back
    packed, the final states (``h_n``, or ``(h_n, c_n)``) in the batch's order. ``name``
    (the module's) names it in errors."""
    sizes = _host_ints(sequence.batch_sizes, "batch_sizes")
    _check_state_batch(name, hx, int(sizes[0]))
    lengths = _lengths(sizes)
    padded = _padded_sorted(sequence, 0.0, len(sizes))
    hx = _permute_states(hx, sequence.sorted_indices)
    outputs, finals = [], []
    start = 0
    for length in sorted(set(lengths.tolist()), reverse=True):
        count = int((lengths == length).sum())
        x = padded.narrow(0, 0, length).narrow(1, start, count)
        state = None
        if hx is not None:
            parts = hx if lstm else (hx,)
            narrowed = tuple(h.narrow(1, start, count) for h in parts)
            state = narrowed if lstm else narrowed[0]
        out, final = run(x, state)
        if length < len(sizes):
            out = _pad(out, [0, 0, 0, 0, 0, len(sizes) - length])
        outputs.append(out)
        finals.append(final if lstm else (final,))
        start += count
    data = _pack_sorted(cat(outputs, 1), sizes)
    states = tuple(cat([f[k] for f in finals], 1) for k in range(len(finals[0])))
    states = _permute_states(states, sequence.unsorted_indices)
    packed = PackedSequence(data, sequence.batch_sizes, sequence.sorted_indices,
                            sequence.unsorted_indices)  # fmt: skip
    return packed, (states if lstm else states[0])


def check_packed_sizes(sequences: Sequence[Tensor]) -> None:
    """Every sequence non-empty (what packing a list needs)."""
    for i, s in enumerate(sequences):
        if s.ndim == 0 or s.shape[0] == 0:
            raise ShapeError(f"pack_sequence: sequence {i} is empty (shape {list(s.shape)})")
