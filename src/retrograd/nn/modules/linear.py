"""Linear layers and their companions: ``Identity``, ``Linear``, ``Bilinear``, ``Embedding``,
``Flatten``, ``Unflatten`` (PyTorch's constructor signatures, defaults, weight layouts and
initializations), and ``NonDynamicallyQuantizableLinear`` (the type of
``MultiheadAttention.out_proj``, as torch's); ``Dropout`` lives in :mod:`.dropout`.
"""

from __future__ import annotations

import numbers
from typing import Any

from ...errors import (
    ArgumentTypeError,
    InvalidArgumentError,
    PaddingIndexError,
    ShapeError,
    shape_text,
)
from ...tensor import Tensor, random, tensor
from ...tensor.dtypes import default_float_dtype
from .. import functional as F  # noqa: N812  (PyTorch's idiom)
from ..parameter import Parameter
from .dropout import Dropout  # its home is .dropout, as torch's; kept importable from here
from .module import Module, _fan_in_bound, _redraw, _redraw_fan_in, _uniform

__all__ = [
    "Bilinear",
    "Dropout",
    "Embedding",
    "Flatten",
    "Identity",
    "Linear",
    "NonDynamicallyQuantizableLinear",
    "Unflatten",
]


class Identity(Module):
    """Returns its input; takes (and ignores) any arguments, as PyTorch's.

    >>> Identity(54, unused="argument")(rg.ones((2,))).tolist()
    [1.0, 1.0]
    """

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__()

    def forward(self, input: Any) -> Any:
        return input


class Linear(Module):
    """``y = x @ weight.T + bias``, weight ``[out_features, in_features]``.

    Initialized as PyTorch's ``nn.Linear``: U(-k, k), k = 1/sqrt(in_features). With
    ``bias=False`` the ``bias`` attribute is ``None``.

    >>> Linear(3, 2)(rg.ones((5, 3))).shape
    retrograd.Size([5, 2])
    >>> Linear(3, 2, bias=False).bias is None
    True
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        device: Any = None,
        dtype: str | None = None,
        *,
        backend: Any = None,
    ):
        super().__init__()
        dtype = dtype or default_float_dtype()
        self.in_features, self.out_features = in_features, out_features
        bound = _fan_in_bound(in_features)
        shape = (out_features, in_features)
        self.weight = Parameter(_uniform(shape, bound, backend, device, dtype))
        if bias:
            self.bias = Parameter(_uniform((out_features,), bound, backend, device, dtype))
        else:
            self.register_parameter("bias", None)

    def reset_parameters(self) -> None:
        """Draw weight and bias again as the constructor does (torch's ``kaiming_uniform_(a=
        sqrt(5))``: U(-k, k), k = 1/sqrt(in_features)), in place."""
        _redraw_fan_in(self)

    def forward(self, input: Tensor) -> Tensor:
        return F.linear(input, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, " + (
            f"bias={self.bias is not None}"
        )


class Bilinear(Module):
    """``y = x1 @ weight[o] @ x2 + bias[o]``, weight ``[out_features, in1_features,
    in2_features]``, initialized as torch's ``nn.Bilinear``: U(-k, k), k = 1/sqrt(in1_features).

    >>> Bilinear(3, 4, 5)(rg.ones((2, 3)), rg.ones((2, 4))).shape
    retrograd.Size([2, 5])
    """

    def __init__(
        self,
        in1_features: int,
        in2_features: int,
        out_features: int,
        bias: bool = True,
        device: Any = None,
        dtype: str | None = None,
        *,
        backend: Any = None,
    ):
        super().__init__()
        # (torch's check: the weights' bound divides by it; a size of the wrong type is
        # refused where the weight is allocated)
        if isinstance(in1_features, numbers.Integral) and in1_features <= 0:
            raise InvalidArgumentError(
                f"Bilinear: in1_features must be > 0, but got (in1_features={in1_features})"
            )
        dtype = dtype or default_float_dtype()
        self.in1_features, self.in2_features = in1_features, in2_features
        self.out_features = out_features
        bound = _fan_in_bound(in1_features)
        shape = (out_features, in1_features, in2_features)
        self.weight = Parameter(_uniform(shape, bound, backend, device, dtype))
        if bias:
            self.bias = Parameter(_uniform((out_features,), bound, backend, device, dtype))
        else:
            self.register_parameter("bias", None)

    def reset_parameters(self) -> None:
        """Draw weight and bias again from U(-k, k), k = 1/sqrt(in1_features), in place."""
        _redraw_fan_in(self)

    def forward(self, input1: Tensor, input2: Tensor) -> Tensor:
        return F.bilinear(input1, input2, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (
            f"in1_features={self.in1_features}, in2_features={self.in2_features}, "
            f"out_features={self.out_features}, bias={self.bias is not None}"
        )


class NonDynamicallyQuantizableLinear(Linear):
    """A :class:`Linear` under torch's name for ``MultiheadAttention.out_proj`` (torch uses the
    subclass to keep dynamic quantization off that layer; retrograd quantizes nothing, so it is
    a ``Linear`` in every respect: arguments, layout, initialization, state-dict keys)."""


def padding_index(op: str, padding_idx: Any, num_embeddings: int) -> int | None:
    """``padding_idx`` as a row of the table (a negative one counted from its end), refused
    where it names no row: ``-5`` of 3 rows was kept as ``-2``, another row than any given."""
    if padding_idx is None:
        return None
    if not -num_embeddings <= padding_idx < num_embeddings:
        raise PaddingIndexError(  # (torch's AssertionError)
            f"{op}: padding_idx must be within num_embeddings ({num_embeddings}), got {padding_idx}"
        )
    return padding_idx + num_embeddings if padding_idx < 0 else padding_idx


def pretrained_shape(op: str, embeddings: Tensor) -> tuple[int, int]:
    """The ``[num, dim]`` of a table given to ``from_pretrained`` (Embedding's, EmbeddingBag's),
    which must be 2-d."""
    if embeddings.ndim != 2:
        raise ShapeError(f"{op}: embeddings must be 2-d, got {shape_text(embeddings.shape)}")
    return embeddings.shape


class Embedding(Module):
    """A lookup table ``weight`` ``[num_embeddings, embedding_dim]``, rows drawn from N(0, 1)
    (the ``padding_idx`` row zero), as PyTorch's.

    >>> Embedding(10, 3)(rg.tensor([[1, 2], [3, 4]], dtype="int64")).shape
    retrograd.Size([2, 2, 3])
    """

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        padding_idx: int | None = None,
        max_norm: float | None = None,
        norm_type: float = 2.0,
        scale_grad_by_freq: bool = False,
        sparse: bool = False,
        _weight: Tensor | None = None,
        _freeze: bool = False,
        device: Any = None,
        dtype: str | None = None,
        *,
        backend: Any = None,
    ):
        super().__init__()
        dtype = dtype or default_float_dtype()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        padding_idx = padding_index("Embedding", padding_idx, num_embeddings)
        self.padding_idx = padding_idx
        self.max_norm, self.norm_type = max_norm, norm_type
        self.scale_grad_by_freq, self.sparse = scale_grad_by_freq, sparse
        if _weight is not None:  # torch's: the table as given, padding row included
            if tuple(_weight.shape) != (num_embeddings, embedding_dim):
                raise ShapeError(
                    f"Embedding: _weight must be [{num_embeddings}, {embedding_dim}], got "
                    f"{shape_text(_weight.shape)}"
                )
            self.weight = Parameter(_weight, requires_grad=not _freeze)
            return
        values = random(
            (num_embeddings, embedding_dim), "normal", dtype=dtype, backend=backend, device=device
        ).numpy()
        if padding_idx is not None:
            values = values.copy()
            values[padding_idx] = 0.0
        # dtype given again: a bfloat16 table reads back as float32 (NumPy has no bfloat16)
        self.weight = Parameter(
            tensor(values, dtype=dtype, backend=backend, device=device), not _freeze
        )

    def reset_parameters(self) -> None:
        """Draw the table again from N(0, 1), the ``padding_idx`` row zero, in place."""
        padding_idx = self.padding_idx

        def table(shape: tuple[int, ...], device: Any, dtype: str) -> Tensor:
            values = random(shape, "normal", dtype=dtype, device=device).numpy().copy()
            if padding_idx is not None:
                values[padding_idx] = 0.0
            return tensor(values, dtype=dtype, device=device)

        _redraw(self.weight, table)

    @classmethod
    def from_pretrained(
        cls,
        embeddings: Tensor,
        freeze: bool = True,
        padding_idx: int | None = None,
        max_norm: float | None = None,
        norm_type: float = 2.0,
        scale_grad_by_freq: bool = False,
        sparse: bool = False,
    ) -> Embedding:
        """torch's: an embedding holding ``embeddings`` ``[num, dim]`` (frozen by default)."""
        rows, dim = pretrained_shape("Embedding.from_pretrained", embeddings)
        return cls(rows, dim, padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse,
                   embeddings, freeze)  # fmt: skip

    def forward(self, input: Tensor) -> Tensor:
        return F.embedding(
            input, self.weight, self.padding_idx, self.max_norm, self.norm_type,
            self.scale_grad_by_freq, self.sparse,
        )  # fmt: skip

    def extra_repr(self) -> str:
        """torch's: the sizes, then each option that is not its default."""
        names = ("padding_idx", "max_norm", "norm_type", "scale_grad_by_freq", "sparse")
        return embedding_options(self, names)


def embedding_options(module: Module, names: tuple[str, ...], quote: bool = False) -> str:
    """``Embedding``'s and ``EmbeddingBag``'s ``extra_repr`` as torch writes them: the sizes,
    then ``name=value`` for each of ``names`` not at its default (``mode`` always; ``quote``:
    the values by ``repr``, as ``EmbeddingBag``'s)."""
    text = f"{module.num_embeddings}, {module.embedding_dim}"
    for name in names:
        value = getattr(module, name)
        if name == "norm_type":
            skip = value == 2
        elif name in ("scale_grad_by_freq", "sparse"):
            skip = value is False
        else:
            skip = value is None
        if not skip:
            text += f", {name}={value!r}" if quote else f", {name}={value}"
    return text


class Unflatten(Module):
    """Split dimension ``dim`` into ``unflattened_size``.

    >>> Unflatten(1, (2, 3))(rg.ones((4, 6))).shape
    retrograd.Size([4, 2, 3])
    """

    def __init__(self, dim: int, unflattened_size: Any):
        super().__init__()
        # torch's checks: a tuple (or list) of ints, or of (name, size) pairs for a named dim
        if not isinstance(unflattened_size, (tuple, list)) or not all(
            isinstance(n, numbers.Integral | tuple | list) for n in unflattened_size
        ):
            raise ArgumentTypeError(
                f"Unflatten: unflattened_size must be a tuple of ints, got {unflattened_size!r}"
            )
        self.dim, self.unflattened_size = dim, tuple(unflattened_size)

    def forward(self, input: Tensor) -> Tensor:
        return input.unflatten(self.dim, self.unflattened_size)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"


class Flatten(Module):
    """Flatten dims ``start_dim`` to ``end_dim`` into one (by default all but the batch dim).

    >>> Flatten()(rg.ones((2, 3, 4))).shape
    retrograd.Size([2, 12])
    """

    def __init__(self, start_dim: int = 1, end_dim: int = -1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, input: Tensor) -> Tensor:
        return input.flatten(self.start_dim, self.end_dim)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"
