"""torch's ``torch.nn.modules.sparse`` path: ``Embedding`` (its home is :mod:`.linear`) and
``EmbeddingBag`` (sums, means or maxima of bags of rows: ``F.embedding_bag``)."""

from __future__ import annotations

from typing import Any

from ...errors import ShapeError, shape_text
from ...tensor import Tensor, random, tensor
from ...tensor.dtypes import default_float_dtype
from .. import functional as F  # noqa: N812  (PyTorch's idiom)
from ..parameter import Parameter
from .linear import Embedding, embedding_options, padding_index, pretrained_shape
from .module import Module

__all__ = ["Embedding", "EmbeddingBag"]


class EmbeddingBag(Module):
    """torch's ``nn.EmbeddingBag``: ``weight`` ``[num_embeddings, embedding_dim]`` drawn from
    N(0, 1) (the ``padding_idx`` row zero); ``forward(input, offsets=None,
    per_sample_weights=None)`` is :func:`~retrograd.nn.functional.embedding_bag`."""

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        max_norm: float | None = None,
        norm_type: float = 2.0,
        scale_grad_by_freq: bool = False,
        mode: str = "mean",
        sparse: bool = False,
        _weight: Any = None,
        include_last_offset: bool = False,
        padding_idx: int | None = None,
        device: Any = None,
        dtype: str | None = None,
        *,
        backend: Any = None,
    ):
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.max_norm, self.norm_type = max_norm, norm_type
        self.scale_grad_by_freq, self.mode, self.sparse = scale_grad_by_freq, mode, sparse
        self.include_last_offset = include_last_offset
        padding_idx = padding_index("EmbeddingBag", padding_idx, num_embeddings)
        self.padding_idx = padding_idx
        if _weight is None:
            shape = (num_embeddings, embedding_dim)
            dtype = dtype or default_float_dtype()
            values = random(shape, "normal", dtype=dtype, backend=backend,
                            device=device).numpy().copy()  # fmt: skip
            if padding_idx is not None:
                values[padding_idx] = 0.0
            # dtype given again: a bfloat16 table reads back as float32 (NumPy has no bfloat16)
            _weight = tensor(values, dtype=dtype, backend=backend, device=device)
        elif tuple(_weight.shape) != (num_embeddings, embedding_dim):
            raise ShapeError(
                f"EmbeddingBag: _weight must be [{num_embeddings}, {embedding_dim}], got "
                f"{shape_text(_weight.shape)}"
            )
        self.weight = Parameter(_weight)

    reset_parameters = Embedding.reset_parameters  # N(0, 1), the padding row zero

    @classmethod
    def from_pretrained(
        cls,
        embeddings: Tensor,
        freeze: bool = True,
        max_norm: float | None = None,
        norm_type: float = 2.0,
        scale_grad_by_freq: bool = False,
        mode: str = "mean",
        sparse: bool = False,
        include_last_offset: bool = False,
        padding_idx: int | None = None,
    ) -> EmbeddingBag:
        """torch's: a bag of ``embeddings`` ``[num, dim]`` (frozen by default)."""
        rows, dim = pretrained_shape("EmbeddingBag.from_pretrained", embeddings)
        bag = cls(rows, dim, max_norm, norm_type, scale_grad_by_freq, mode, sparse, embeddings,
                  include_last_offset, padding_idx)  # fmt: skip
        bag.weight.requires_grad = not freeze
        return bag

    def forward(
        self,
        input: Tensor,
        offsets: Tensor | None = None,
        per_sample_weights: Tensor | None = None,
    ) -> Tensor:
        return F.embedding_bag(
            input,
            self.weight,
            offsets,
            self.max_norm,
            self.norm_type,
            self.scale_grad_by_freq,
            self.mode,
            self.sparse,
            per_sample_weights,
            self.include_last_offset,
            self.padding_idx,
        )

    def extra_repr(self) -> str:
        names = ("max_norm", "norm_type", "scale_grad_by_freq", "mode", "padding_idx")
        return embedding_options(self, names, quote=True)
