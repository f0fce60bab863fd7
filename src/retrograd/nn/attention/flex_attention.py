"""torch's FlexAttention (``torch.nn.attention.flex_attention``): attention whose scores a
user function modifies (``score_mod``) and whose pattern a user function masks (``mask_mod``,
through a :class:`BlockMask`), in eager form.

torch compiles the two functions into a block-sparse kernel that skips the blocks the mask
empties. Here they run once over index tensors shaped to broadcast -- ``b`` ``[B, 1, 1, 1]``,
``h`` ``[1, H, 1, 1]``, ``q_idx`` ``[1, 1, L, 1]``, ``kv_idx`` ``[1, 1, 1, S]`` -- which
gives what torch's ``vmap`` over scalars gives for the functions torch accepts (tensor
arithmetic, comparisons, ``torch.where``, indexing a tensor by the indices). The scores are
then computed in full, as torch's eager implementation computes them (the mask's blocks say
what a compiled kernel may skip; ``mask_mod`` decides every score), and differentiated as any
composition is (torch's CPU FlexAttention has no backward).

As torch's: a query row that the mask or ``score_mod`` leaves no key gives zeros (and a
log-sum-exp of ``-inf``), where softmax attention would give NaN; ``enable_gqa`` repeats key
and value heads; ``return_lse`` also returns the natural-log sum of the exponentiated scores.

>>> import retrograd as rg
>>> from retrograd.nn.attention.flex_attention import create_block_mask, flex_attention
>>> def causal(b, h, q_idx, kv_idx):
...     return q_idx >= kv_idx
>>> mask = create_block_mask(causal, None, None, 8, 8, BLOCK_SIZE=4)
>>> mask.sparsity()
25.0
>>> q = k = v = rg.ones(1, 2, 8, 4)
>>> flex_attention(q, k, v, block_mask=mask).shape
retrograd.Size([1, 2, 8, 4])
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from typing import Any, NamedTuple

from ...errors import DTypeError, InvalidArgumentError, ShapeError
from ...tensor import Tensor, arange, full, ones, zeros
from ...tensor.functions import where
from ...tensor.shape import cat

__all__ = [
    "AuxOutput",
    "AuxRequest",
    "BlockMask",
    "and_masks",
    "create_block_mask",
    "create_mask",
    "flex_attention",
    "noop_mask",
    "or_masks",
]

#: torch's default block size (rows and columns of a mask block)
DEFAULT_BLOCK_SIZE = 128


def _index_grids(batch: int, heads: int, q_len: int, kv_len: int, device: Any) -> tuple:
    """``b, h, q_idx, kv_idx`` as int64 tensors that broadcast to ``[B, H, L, S]``."""
    return (
        arange(batch, device=device).reshape(batch, 1, 1, 1),
        arange(heads, device=device).reshape(1, heads, 1, 1),
        arange(q_len, device=device).reshape(1, 1, q_len, 1),
        arange(kv_len, device=device).reshape(1, 1, 1, kv_len),
    )


def _is_score_mod(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` is a score_mod (five parameters) rather than a mask_mod (four), as
    torch tells them apart."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    positional = [p for p in parameters if p.default is inspect.Parameter.empty
                  and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]  # fmt: skip
    return len(positional) == 5


def _as_bool_mask(value: Any, shape: tuple[int, ...], op: str) -> Tensor:
    """A mask_mod's answer as a bool tensor of ``shape`` (a mod may answer a Python bool or a
    tensor that broadcasts)."""
    if not isinstance(value, Tensor):
        if not isinstance(value, bool):
            raise DTypeError(f"{op}: a mask_mod must return a bool tensor, got {value!r}")
        return full(shape, value, dtype="bool")
    if value.dtype != "bool":
        raise DTypeError(f"{op}: a mask_mod must return a bool tensor, got {value.dtype}")
    return value.expand(*shape)


def create_mask(
    mod_fn: Callable[..., Any],
    B: int | None,  # noqa: N803 (torch's name)
    H: int | None,  # noqa: N803 (torch's name)
    Q_LEN: int,  # noqa: N803 (torch's name)
    KV_LEN: int,  # noqa: N803 (torch's name)
    device: Any = None,
) -> Tensor:
    """The ``[B, H, Q_LEN, KV_LEN]`` bool mask of a mask_mod, or of a score_mod (where its
    score of zeros is not ``-inf``), as torch's (``None`` sizes are 1)."""
    batch, heads = B or 1, H or 1
    shape = (batch, heads, Q_LEN, KV_LEN)
    b, h, q_idx, kv_idx = _index_grids(batch, heads, Q_LEN, KV_LEN, device)
    if _is_score_mod(mod_fn):
        scores = mod_fn(zeros(shape, device=device), b, h, q_idx, kv_idx)
        return scores.isneginf().logical_not().expand(*shape)
    return _as_bool_mask(mod_fn(b, h, q_idx, kv_idx), shape, "create_mask")


def noop_mask(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
    """The mask_mod that keeps every score."""
    return ones((), dtype="bool")


def _combined(mask_mods: tuple, op: str, combine: str) -> Callable[..., Tensor]:
    if not all(callable(fn) for fn in mask_mods):
        raise InvalidArgumentError(f"{op}: all inputs should be callable mask_mods: {mask_mods}")

    def combined(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        result = full((), combine == "and", dtype="bool")
        for fn in mask_mods:
            kept = fn(b, h, q_idx, kv_idx)
            result = result & kept if combine == "and" else result | kept
        return result

    return combined


def and_masks(*mask_mods: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """The mask_mod that keeps a score where every one of ``mask_mods`` keeps it."""
    return _combined(mask_mods, "and_masks", "and")


def or_masks(*mask_mods: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """The mask_mod that keeps a score where any of ``mask_mods`` keeps it."""
    return _combined(mask_mods, "or_masks", "or")


def _ordered(blocks: Tensor) -> tuple[Tensor, Tensor]:
    """torch's ``_dense_to_ordered``: per block row, the number of kept blocks and the block
    columns, kept ones first (a stable descending sort)."""
    blocks = blocks.to("int32")
    counts = blocks.sum(-1).to("int32")
    order = blocks.argsort(dim=-1, descending=True, stable=True).to("int32")
    return counts, order


class BlockMask:
    """A mask in torch's block-sparse form: per ``(batch, head)``, which
    ``BLOCK_SIZE``-square blocks of the ``[Q_LEN, KV_LEN]`` scores hold some kept score
    (*partial* blocks, where ``mask_mod`` decides each score) or only kept ones (*full*
    blocks), as ``kv_num_blocks``/``kv_indices`` and ``full_kv_num_blocks``/
    ``full_kv_indices`` (and their transposes, ``q_*``), torch's fields. Made by
    :func:`create_block_mask`."""

    def __init__(
        self,
        partial: Tensor,
        full: Tensor,
        seq_lengths: tuple[int, int],
        block_size: tuple[int, int],
        mask_mod: Callable[..., Tensor],
    ):
        self._partial, self._full = partial, full
        self.seq_lengths = seq_lengths
        self.BLOCK_SIZE = block_size
        self.mask_mod = mask_mod
        self.kv_num_blocks, self.kv_indices = _ordered(partial)
        self.full_kv_num_blocks, self.full_kv_indices = _ordered(full)
        self.q_num_blocks, self.q_indices = _ordered(partial.transpose(-1, -2))
        self.full_q_num_blocks, self.full_q_indices = _ordered(full.transpose(-1, -2))

    @classmethod
    def from_kv_blocks(
        cls,
        kv_num_blocks: Tensor,
        kv_indices: Tensor,
        full_kv_num_blocks: Tensor | None = None,
        full_kv_indices: Tensor | None = None,
        BLOCK_SIZE: int | tuple[int, int] = DEFAULT_BLOCK_SIZE,  # noqa: N803 (torch's name)
        mask_mod: Callable[..., Tensor] | None = None,
        seq_lengths: tuple[int, int] | None = None,
        compute_q_blocks: bool = True,
    ) -> BlockMask:
        """The mask of blocks given in torch's ordered form, as torch's: per ``(batch, head,
        query block)``, the first ``kv_num_blocks`` of ``kv_indices`` are the partial blocks
        (the first ``full_kv_num_blocks`` of ``full_kv_indices`` the full ones); the lengths
        default to whole blocks; ``mask_mod`` defaults to keeping every score. (A count above
        the row's width, or negative, keeps as many blocks as torch's kernels read.)"""
        op = "BlockMask.from_kv_blocks"
        if kv_indices.dim() < 2 or tuple(kv_num_blocks.shape) != tuple(kv_indices.shape[:-1]):
            raise ShapeError(
                f"{op}: kv_num_blocks {tuple(kv_num_blocks.shape)} must be kv_indices' "
                f"{tuple(kv_indices.shape)} without its last dimension"
            )
        if (full_kv_num_blocks is None) != (full_kv_indices is None):
            raise InvalidArgumentError(
                f"{op}: full_kv_num_blocks and full_kv_indices must be given together"
            )
        q_block, kv_block = (BLOCK_SIZE, BLOCK_SIZE) if isinstance(BLOCK_SIZE, int) else BLOCK_SIZE
        columns = kv_indices.shape[-1]
        if seq_lengths is None:
            seq_lengths = (kv_indices.shape[-2] * q_block, columns * kv_block)

        def dense(counts: Tensor, indices: Tensor) -> Tensor:
            slots = arange(indices.shape[-1], device=indices.device)
            listed = slots < counts.unsqueeze(-1)  # the first `counts` slots of each row
            hits = indices.unsqueeze(-1) == arange(columns, device=indices.device)
            return (hits & listed.unsqueeze(-1)).any(-2)

        partial = dense(kv_num_blocks, kv_indices)
        if full_kv_indices is None:
            full_blocks = full(partial.shape, False, dtype="bool")
        else:
            full_blocks = dense(full_kv_num_blocks, full_kv_indices)
        mask = cls(
            partial, full_blocks, tuple(seq_lengths), (q_block, kv_block), mask_mod or noop_mask
        )
        # torch keeps the lists as given (the order past each row's count included)
        mask.kv_num_blocks, mask.kv_indices = kv_num_blocks, kv_indices
        if full_kv_indices is not None:
            mask.full_kv_num_blocks, mask.full_kv_indices = full_kv_num_blocks, full_kv_indices
        return mask

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """``(B, H, Q_LEN, KV_LEN)``."""
        batch, heads = self._partial.shape[:2]
        return (batch, heads, *self.seq_lengths)

    def to_dense(self) -> Tensor:
        """The int32 ``[B, H, Q blocks, KV blocks]`` map of the blocks computed (1) or
        skipped (0)."""
        return (self._partial | self._full).to("int32")

    def sparsity(self) -> float:
        """The percentage of the scores in blocks skipped, as torch counts it (a block at
        the padded end counts whole)."""
        computed = int(self.to_dense().sum().item()) * self.BLOCK_SIZE[0] * self.BLOCK_SIZE[1]
        return 100 * (1 - computed / math.prod(self.shape))

    def to_string(self, grid_size: int | tuple[int, int] = (20, 20), limit: int = 4) -> str:
        """The block map drawn as torch draws it: ``██`` computed, ``░░`` in part, blank
        skipped, for the first ``limit`` (batch, head) pairs."""
        dense = self.to_dense()
        batch, heads, rows, cols = dense.shape
        if grid_size == -1:
            max_rows, max_cols = rows, cols
        elif isinstance(grid_size, int):
            max_rows = max_cols = grid_size
        else:
            max_rows, max_cols = grid_size
        row_step, col_step = max(1, -(-rows // max_rows)), max(1, -(-cols // max_cols))
        drawn: list[str] = []
        for index, (b, h) in enumerate((b, h) for b in range(batch) for h in range(heads)):
            if index == limit:
                drawn += [
                    "...",
                    "To print out more, set BlockMask.to_string(limit=N)",
                    "You can also index (BlockMask[batch, head]) to choose a specific batch or "
                    "head",
                ]
                break
            lines = [f"{(b, h)}\n"]
            for r in range(0, rows, row_step):
                for c in range(0, cols, col_step):
                    share = dense[b, h, r : r + row_step, c : c + col_step].float().mean().item()
                    lines.append(("█" if share == 1 else " " if share == 0 else "░") * 2)
                lines.append("\n")
            drawn.append("".join(lines))
        return "\n".join(drawn)

    def __repr__(self) -> str:
        return (
            f"BlockMask(shape={self.shape}, sparsity={self.sparsity():.2f}%, "
            f"BLOCK_SIZE={self.BLOCK_SIZE})"
        )


def create_block_mask(
    mask_mod: Callable[..., Tensor],
    B: int | None,  # noqa: N803 (torch's name)
    H: int | None,  # noqa: N803 (torch's name)
    Q_LEN: int,  # noqa: N803 (torch's name)
    KV_LEN: int,  # noqa: N803 (torch's name)
    device: Any = None,
    BLOCK_SIZE: int | tuple[int, int] = DEFAULT_BLOCK_SIZE,  # noqa: N803 (torch's name)
    _compile: bool = False,
    separate_full_blocks: bool = True,
    **options: Any,
) -> BlockMask:
    """The :class:`BlockMask` of ``mask_mod`` over ``[B, H, Q_LEN, KV_LEN]`` (``None``
    sizes are 1 and broadcast over the query's), in blocks of ``BLOCK_SIZE`` (an int, or
    ``(Q, KV)``), as torch's: the lengths padded to whole blocks with masked scores, a block
    full when it keeps every score (unless ``separate_full_blocks=False``)."""
    if _is_score_mod(mask_mod):
        raise InvalidArgumentError(
            "create_block_mask: expected a mask_mod (b, h, q_idx, kv_idx), got a score_mod "
            "(five parameters); pass it to flex_attention as score_mod"
        )
    q_block, kv_block = (BLOCK_SIZE, BLOCK_SIZE) if isinstance(BLOCK_SIZE, int) else BLOCK_SIZE
    if q_block <= 0 or kv_block <= 0:
        raise InvalidArgumentError(
            f"create_block_mask: BLOCK_SIZE must be positive, got {BLOCK_SIZE}"
        )
    mask = create_mask(mask_mod, B, H, Q_LEN, KV_LEN, device)
    q_blocks, kv_blocks = -(-Q_LEN // q_block), -(-KV_LEN // kv_block)
    batch, heads = mask.shape[:2]
    padded = mask.to("int32")  # padded to whole blocks with masked scores
    if kv_blocks * kv_block > KV_LEN:
        filler = zeros((batch, heads, Q_LEN, kv_blocks * kv_block - KV_LEN), dtype="int32")
        padded = cat([padded, filler], dim=-1)
    if q_blocks * q_block > Q_LEN:
        filler = zeros((batch, heads, q_blocks * q_block - Q_LEN, padded.shape[-1]), dtype="int32")
        padded = cat([padded, filler], dim=-2)
    sums = (
        padded.reshape(batch, heads, q_blocks, q_block, kv_blocks, kv_block)
        .permute(0, 1, 2, 4, 3, 5)
        .sum((-2, -1))
    )
    if separate_full_blocks:
        full_blocks = sums == q_block * kv_block
        partial = (sums > 0) & full_blocks.logical_not()
    else:  # no block is told apart as full
        partial, full_blocks = sums > 0, full(sums.shape, False, dtype="bool")
    return BlockMask(partial, full_blocks, (Q_LEN, KV_LEN), (q_block, kv_block), mask_mod)


def _checked(query: Tensor, key: Tensor, value: Tensor, enable_gqa: bool) -> tuple:
    op = "flex_attention"
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, Tensor) or t.ndim != 4:
            shape = tuple(t.shape) if isinstance(t, Tensor) else type(t).__name__
            raise ShapeError(f"{op}: {name} must be a 4-d tensor [B, H, L, E], got {shape}")
    if not (query.dtype == key.dtype == value.dtype) or not query.is_floating_point():
        raise DTypeError(
            f"{op}: query, key and value must have one floating dtype, got {query.dtype}, "
            f"{key.dtype} and {value.dtype}"
        )
    batch, heads, _, dim = query.shape
    if key.shape[0] != value.shape[0] or key.shape[0] not in (1, batch):
        raise ShapeError(
            f"{op}: the batch sizes must agree (key and value's may be 1): query "
            f"{tuple(query.shape)}, key {tuple(key.shape)}, value {tuple(value.shape)}"
        )
    if key.shape[-1] != dim or key.shape[1:3] != value.shape[1:3]:
        raise ShapeError(
            f"{op}: expected key [B, H_kv, S, {dim}] and value [B, H_kv, S, Ev] of one H_kv "
            f"and S, got key {tuple(key.shape)} and value {tuple(value.shape)}"
        )
    kv_heads = key.shape[1]
    if kv_heads != heads:
        if not enable_gqa or heads % kv_heads:
            raise ShapeError(
                f"{op}: query has {heads} heads and key/value {kv_heads}; different head "
                "counts need enable_gqa=True and query heads a multiple of key/value heads"
            )
        repeats = heads // kv_heads
        key = key.repeat_interleave(repeats, dim=1)
        value = value.repeat_interleave(repeats, dim=1)
    if key.shape[0] != batch:
        key, value = key.expand(batch, *key.shape[1:]), value.expand(batch, *value.shape[1:])
    return key, value


def flex_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    score_mod: Callable[..., Tensor] | None = None,
    block_mask: BlockMask | None = None,
    scale: float | None = None,
    enable_gqa: bool = False,
    return_lse: bool = False,
    kernel_options: Any = None,
    *,
    return_aux: Any = None,
) -> Any:
    """``softmax(where(mask_mod, score_mod(q k^T * scale), -inf)) v`` over ``[B, H, L, E]``
    queries and ``[B, H_kv, S, E]`` keys (see the module docstring), as torch's eager
    implementation computes it: half-precision inputs in float32, the block mask's
    ``mask_mod`` asked for every score (its blocks say what a compiled kernel may skip); with
    ``return_lse``, ``(output, lse)``."""
    key, value = _checked(query, key, value, enable_gqa)
    batch, heads, q_len, dim = query.shape
    kv_len = key.shape[2]
    scale = 1.0 / math.sqrt(dim) if scale is None else float(scale)
    working = query.dtype if query.dtype in ("float32", "float64") else "float32"
    scores = (query.to(working) @ key.to(working).transpose(-1, -2)) * scale
    b, h, q_idx, kv_idx = _index_grids(batch, heads, q_len, kv_len, query.device)
    shape = (batch, heads, q_len, kv_len)
    if score_mod is not None:
        scores = score_mod(scores, b, h, q_idx, kv_idx)
        if not isinstance(scores, Tensor):
            raise DTypeError(f"flex_attention: score_mod must return a tensor, got {scores!r}")
        scores = scores.expand(*shape)
    if block_mask is not None:
        _check_block_mask(block_mask, batch, heads, q_len, kv_len)
        kept = _as_bool_mask(block_mask.mask_mod(b, h, q_idx, kv_idx), shape, "flex_attention")
        scores = scores.masked_fill(kept.logical_not(), -math.inf)
    # a row with no key kept gives zeros (torch's safe softmax), not softmax's NaN: its scores
    # are made finite for the softmax and its weights zeroed after
    empty = scores.isneginf().all(-1, keepdim=True)
    weights = where(empty, 0.0, where(empty, 0.0, scores).softmax(-1))
    output = weights.to(query.dtype) @ value
    if not return_lse and return_aux is None:
        return output
    lse = scores.logsumexp(-1)
    if return_aux is None:
        return output, lse
    return output, _aux_output(return_aux, lse, scores)


def _check_block_mask(block_mask: Any, batch: int, heads: int, q_len: int, kv_len: int) -> None:
    if not isinstance(block_mask, BlockMask):
        raise DTypeError(
            f"flex_attention: block_mask must be a BlockMask, got {type(block_mask).__name__}"
        )
    if tuple(block_mask.seq_lengths) != (q_len, kv_len):
        raise ShapeError(
            f"flex_attention: the block mask is for sequence lengths "
            f"{tuple(block_mask.seq_lengths)}, the query and key have ({q_len}, {kv_len})"
        )
    mask_batch, mask_heads = block_mask.shape[:2]
    if mask_batch not in (1, batch) or mask_heads not in (1, heads):
        raise ShapeError(
            f"flex_attention: the block mask's batch and heads {(mask_batch, mask_heads)} must "
            f"be 1 or the query's {(batch, heads)}"
        )


class AuxRequest:
    """torch's ``AuxRequest``: which extra outputs ``flex_attention(return_aux=...)`` gives."""

    def __init__(self, lse: bool = False, max_scores: bool = False):
        self.lse, self.max_scores = lse, max_scores


class AuxOutput(NamedTuple):
    """torch's ``AuxOutput``: the extra outputs asked for (``None`` where not asked)."""

    lse: Tensor | None = None
    max_scores: Tensor | None = None


def _aux_output(request: Any, lse: Tensor, scores: Tensor) -> AuxOutput:
    return AuxOutput(
        lse=lse if getattr(request, "lse", False) else None,
        max_scores=scores.amax(-1) if getattr(request, "max_scores", False) else None,
    )
