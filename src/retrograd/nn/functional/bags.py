"""``embedding_bag``: sums, means or maxima of bags of embedding rows, as torch's.

The bags (rows of a 2-d ``input``, or the runs of a 1-d ``input`` that ``offsets`` start) are
one padded ``[bags, longest]`` index matrix with a mask (a 2-d ``input`` as it is, on its
device; the runs laid out from the offsets, read on the host since their lengths make the
shape, and the entries gathered on the device), the rows gathered by
:func:`embedding`, and the reduction done with tensor ops over the mask: entries equal to
``padding_idx`` are left out of sums, means (their counts too) and maxima; an empty bag gives
zeros. Gradients reach ``weight`` (never its ``padding_idx`` row) and ``per_sample_weights``.
A tracked float32/float64 weight's sums and means (no per-sample weights, no frequency
scaling) are one op of the op table (``embedding_bag_sum``) whose rule reads the entries'
indices and the bags' ends, as torch's reads its indices and offsets, not the padded matrix.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import (
    InvalidArgumentError,
    KernelArgumentError,
    KernelDTypeError,
    KernelIndexError,
    MixedDTypeError,
    ShapeError,
    UnsupportedModeError,
    check_bool,
)
from ...tensor import Tensor, arange, ones, tensor, zeros_like
from ...tensor.functions import once_differentiable_inputs, where
from ...tensor.internal import check_indices, result_dtype, shape_text
from .linear import _renorm_rows, embedding

__all__ = ["embedding_bag"]

_MODES = ("sum", "mean", "max")


def _max_positions(looked_up: Tensor, keep: Tensor) -> Tensor:
    """``[bags, dim]``: the entry of each bag whose value torch's CPU ``max`` mode keeps, as
    its loop picks it: the bag's first entry, replaced only by a later one strictly greater
    (so a NaN first stays, a NaN later never wins, and ties keep the earliest); the
    gradient goes to that entry's row alone."""
    nan = looked_up.isnan()
    candidates = looked_up.masked_fill(nan | keep.logical_not().unsqueeze(-1), float("-inf"))
    best = candidates.argmax(1)
    first = keep.to("int64").argmax(1).unsqueeze(-1).expand(best.shape)
    first_is_nan = nan.gather(1, first.unsqueeze(1)).squeeze(1)
    # (every candidate -inf: the kept ones are -inf, and the first of them stays)
    return where(first_is_nan | (candidates.amax(1) == float("-inf")), first, best)


def _frequency_divisors(flat: Tensor, count: int, dtype: str) -> Tensor:
    """``[count]``: what ``scale_grad_by_freq`` divides each row's gradient by, as torch's CPU
    kernel computes it: the k-th smallest distinct index takes the frequency of the k-th
    entry of the sorted indices (``counts[indices[i]]`` read at the distinct run ``i``, not at
    the run's start), so a row's divisor is its own frequency only while the smaller indices
    occur once each. 1 for indices that do not occur."""
    ones = flat.new_ones(flat.shape, dtype=dtype)
    counts = flat.new_zeros((count,), dtype=dtype).index_add(0, flat, ones)
    distinct = flat.unique()
    runs = flat.sort().values[: distinct.shape[0]]
    return flat.new_ones((count,), dtype=dtype).index_put((distinct,), counts[runs])


def _index_dtype(input: Tensor, offsets: Any) -> str:  # noqa: A002 (torch's name)
    """The dtype torch's kernel reads ``input`` in: promoted with an offsets tensor's (an int8
    input with int64 offsets is taken; with int8 offsets it is not)."""
    if isinstance(offsets, Tensor) and input.ndim == 1:
        return result_dtype(input.dtype, offsets.dtype)
    return input.dtype


def _bags(fn: str, input: Tensor, offsets: Any, include_last_offset: bool):  # noqa: A002
    """The padded index matrix ``[bags, longest]``, its mask, the flat position in ``input``
    of each entry (for ``per_sample_weights``), and for the sums' op where each bag's entries
    end in the flat ``input`` (``[bags]``) and the entries the bags hold (the flat ``input``,
    short of those past the last offset ``include_last_offset`` gives), as tensors on
    ``input``'s device.
    A 2-d ``input`` is that matrix already (no host read: on an accelerator one would stall
    every step); the runs of a 1-d one are laid out from its offsets on the host (their
    lengths are data, the shape) and its entries gathered on the device."""
    made = dict(backend=input.backend, device=input.device)
    if input.ndim == 2:
        if offsets is not None:
            raise InvalidArgumentError(f"{fn}: if input is 2-d, then offsets has to be None")
        bags, length = input.shape
        if not length:  # (torch's RuntimeError: its offsets, a range of step 0)
            raise KernelArgumentError(
                f"{fn}: a 2-d input of empty bags is refused, as torch's; got "
                f"{shape_text(input.shape)}"
            )
        positions = arange(bags * length, dtype="int64", **made).reshape((bags, length))
        ends = arange(1, bags + 1, dtype="int64", **made) * length
        return input, ones(input.shape, dtype="bool", **made), positions, ends, input.reshape(-1)
    if input.ndim != 1:
        raise ShapeError(f"{fn}: input has to be 1-d or 2-d, got {shape_text(input.shape)}")
    if offsets is None:
        raise InvalidArgumentError(f"{fn}: offsets has to be a 1-d tensor but got None")
    starts = np.asarray(offsets.numpy() if isinstance(offsets, Tensor) else offsets, np.int64)
    if starts.ndim != 1:
        raise ShapeError(f"{fn}: offsets has to be a 1-d tensor, got shape {list(starts.shape)}")
    n = input.shape[0]
    # torch checks the offsets as given, the last included: an input with no entries and
    # offsets past zero, or offsets [2] with include_last_offset (no bag), are refused too
    if starts.size and (starts[0] != 0 or np.any(np.diff(starts) < 0) or starts[-1] > n):
        raise KernelArgumentError(  # (torch's RuntimeError)
            f"{fn}: offsets must start at 0, not decrease and stay within the input's "
            f"{n} entries, got {starts.tolist()}"
        )
    if include_last_offset:
        if not starts.size:
            raise KernelArgumentError(  # (torch's RuntimeError)
                f"{fn}: include_last_offset: number of offsets should be at least 1, got none"
            )
        starts, ends = starts[:-1], starts[1:]
    else:
        ends = np.append(starts[1:], n)
    lengths = ends - starts
    longest = max(int(lengths.max()) if lengths.size else 0, 1)
    steps = np.arange(longest)
    mask = steps[None, :] < lengths[:, None]
    positions = np.where(mask, starts[:, None] + steps[None, :], 0)
    # the entries gathered on input's device: only the offsets (the layout) are read here
    mask, positions = tensor(mask, **made), tensor(positions, dtype="int64", **made)
    held = input.narrow(0, 0, int(ends[-1]) if ends.size else 0)
    ends = tensor(ends, dtype="int64", **made)
    if not n:
        return zeros_like(positions), mask, positions, ends, held
    padded = input[positions.reshape(-1)].reshape(positions.shape)
    return where(mask, padded, zeros_like(padded)), mask, positions, ends, held


def _check_rows(fn: str, input: Tensor, weight: Tensor) -> None:  # noqa: A002
    """Refuse an index of ``input`` that names no row of ``weight`` (before ``max_norm``'s
    renormalization reads the rows), as torch's kernel does: a ``RuntimeError``."""
    if not isinstance(weight, Tensor) or weight.ndim != 2:
        return
    count = weight.shape[0]

    def out_of_range(bad: int | None) -> KernelIndexError:
        index = "an index" if bad is None else f"index {bad}"
        return KernelIndexError(  # (torch's RuntimeError: "Expected idx >= 0 && ...")
            f"{fn}: {index} is out of range for {count} embeddings; input "
            f"{shape_text(input.shape)}, weight {shape_text(weight.shape)}"
        )

    check_indices(input, count, out_of_range)


def embedding_bag(
    input: Tensor,  # noqa: A002 (torch's name)
    weight: Tensor,
    offsets: Tensor | None = None,
    max_norm: float | None = None,
    norm_type: float = 2.0,
    scale_grad_by_freq: bool = False,
    mode: str = "mean",
    sparse: bool = False,
    per_sample_weights: Tensor | None = None,
    include_last_offset: bool = False,
    padding_idx: int | None = None,
) -> Tensor:
    """``[bags, dim]``: each bag's rows of ``weight`` reduced by ``mode`` (module docstring),
    as ``torch.nn.functional.embedding_bag``."""
    fn = "embedding_bag"
    if mode not in _MODES:
        raise InvalidArgumentError(f"{fn}: mode has to be one of sum, mean or max, got {mode!r}")
    # (sparse=True gives the dense gradient, as embedding's does)
    scale_grad_by_freq = check_bool(fn, scale_grad_by_freq, "scale_grad_by_freq")
    sparse = check_bool(fn, sparse, "sparse")
    if scale_grad_by_freq and mode == "max":
        raise InvalidArgumentError(
            f"{fn}: max mode does not support scaling the gradient by the frequency"
        )
    if isinstance(input, Tensor) and _index_dtype(input, offsets) in ("int64", "int32"):
        input = input.long()  # noqa: A001 (torch's name)
    if not isinstance(input, Tensor) or input.dtype != "int64":
        raise KernelDTypeError(  # (torch's RuntimeError)
            f"{fn}: input (promoted with offsets, as torch's) must be an int64 or int32 tensor"
        )
    if padding_idx is not None and isinstance(weight, Tensor) and weight.ndim == 2:
        count = weight.shape[0]
        if not -count <= padding_idx < count:
            raise KernelIndexError(  # (torch's RuntimeError)
                f"{fn}: padding_idx must be within the number of embeddings, {-count} "
                f"through {count - 1}, but got {padding_idx}"
            )
    if max_norm is not None and per_sample_weights is not None:
        # (torch renormalizes the rows looked up before it checks the mode: an index out of
        # range is refused first there)
        _check_rows(fn, input, weight)
    if per_sample_weights is not None and mode != "sum":
        raise UnsupportedModeError(  # (torch's NotImplementedError)
            f"{fn}: per_sample_weights was not None. per_sample_weights is only supported for "
            f"mode='sum' (got mode='{mode}'). Please open a feature request on GitHub."
        )
    if per_sample_weights is not None and per_sample_weights.shape != input.shape:
        raise ShapeError(
            f"{fn}: per_sample_weights {shape_text(per_sample_weights.shape)} must have the "
            f"shape of input {shape_text(input.shape)}"
        )
    if per_sample_weights is not None and per_sample_weights.dtype != weight.dtype:
        raise MixedDTypeError(  # (torch's RuntimeError: the weights are not promoted)
            f"{fn}: per_sample_weights ({per_sample_weights.dtype}) must have weight's dtype "
            f"({weight.dtype})"
        )
    indices, keep, positions, ends, entries = _bags(fn, input, offsets, include_last_offset)
    if max_norm is None or per_sample_weights is None:
        _check_rows(fn, input, weight)
    if max_norm is not None:  # the rows ``input`` looks up, renormalized in place as torch's
        _renorm_rows(weight, input.reshape(-1), float(max_norm), norm_type)
    if padding_idx is not None:
        keep = keep & (indices != padding_idx % weight.shape[0])
    # (torch's backward of embedding_bag has no derivative: a second one through it raises)
    # (nor does it take the weight: a constant gradient stays one)
    (looked_up,) = once_differentiable_inputs(fn, weight, read=False)
    if (
        mode != "max"
        and per_sample_weights is None
        and not scale_grad_by_freq
        and looked_up.requires_grad
        and looked_up.dtype in ("float32", "float64")
    ):
        # one op of the op table whose rule reads the entries' indices and the bags' ends, as
        # torch's saves its indices and offsets: the composite below held the padded indices
        # and the mask's scale (1.77x torch's bytes; 7 December). Its values are the
        # composite's bits.
        padding = -1 if padding_idx is None else padding_idx % weight.shape[0]
        total = looked_up._apply(
            "embedding_bag_sum",
            (looked_up, indices, keep, entries, ends),
            (padding,),
        )
        if mode == "mean":
            counts = keep.to("int64").sum(1)
            return total / counts.clamp(min=1).to(weight.dtype).unsqueeze(-1)
        return total
    rows = embedding(indices, looked_up)  # [bags, longest, dim]
    if scale_grad_by_freq:  # the value unchanged (``rows - held`` is exactly 0)
        held = rows.detach()
        divisors = _frequency_divisors(input.reshape(-1), weight.shape[0], held.dtype)
        rows = held + (rows - held) / divisors[indices].unsqueeze(-1)
    counts = keep.to("int64").sum(1)
    if mode == "max":
        top = rows.gather(1, _max_positions(rows.detach(), keep).unsqueeze(1)).squeeze(1)
        return where((counts > 0).unsqueeze(-1), top, zeros_like(top.detach()))
    scale = keep.to(weight.dtype)
    if per_sample_weights is not None:
        flat = per_sample_weights.reshape(-1)
        if flat.shape[0]:
            scale = scale * flat[positions]
        else:  # no entries, every bag empty: nothing to gather (its sum, 0, keeps it in the graph)
            scale = scale * flat.sum()
    total = (rows * scale.unsqueeze(-1)).sum(1)
    if mode == "mean":
        return total / counts.clamp(min=1).to(weight.dtype).unsqueeze(-1)
    return total
