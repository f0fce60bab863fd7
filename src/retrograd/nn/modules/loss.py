"""Loss modules: ``CrossEntropyLoss``, ``NLLLoss`` and ``MSELoss`` over ``F.cross_entropy``,
``F.nll_loss`` and ``F.mse_loss``, with PyTorch's constructor arguments."""

from __future__ import annotations

from typing import Any

from ...tensor import Tensor
from .. import functional as F  # noqa: N812  (PyTorch's idiom)
from .module import Module

__all__ = ["CrossEntropyLoss", "MSELoss", "NLLLoss"]


class CrossEntropyLoss(Module):
    """``F.cross_entropy(input, target, weight, ignore_index, reduction, label_smoothing)``.

    >>> loss = CrossEntropyLoss()(rg.zeros((2, 4)), rg.tensor([1, 3], dtype="int64"))
    >>> round(loss.item(), 5)
    1.38629
    """

    def __init__(
        self,
        weight: Tensor | None = None,
        size_average: bool | None = None,
        ignore_index: int = -100,
        reduce: bool | None = None,
        reduction: str = "mean",
        label_smoothing: float = 0.0,
    ):
        super().__init__()
        self.register_buffer("weight", weight)
        self.size_average, self.reduce = size_average, reduce
        self.ignore_index, self.reduction = ignore_index, reduction
        self.label_smoothing = label_smoothing

    def forward(self, input: Tensor, target: Any) -> Tensor:  # noqa: A002 (PyTorch's name)
        return F.cross_entropy(
            input,
            target,
            self.weight,
            self.size_average,
            self.ignore_index,
            self.reduce,
            self.reduction,
            self.label_smoothing,
        )


class NLLLoss(Module):
    """``F.nll_loss(input, target, weight, ignore_index, reduction)``: the loss of models that
    end in ``log_softmax``.

    >>> NLLLoss()(rg.tensor([[-1.0, -2.0], [-3.0, -4.0]]), rg.tensor([1, 0], dtype="int64")).item()
    2.5
    """

    def __init__(
        self,
        weight: Tensor | None = None,
        size_average: bool | None = None,
        ignore_index: int = -100,
        reduce: bool | None = None,
        reduction: str = "mean",
    ):
        super().__init__()
        self.register_buffer("weight", weight)
        self.size_average, self.reduce = size_average, reduce
        self.ignore_index, self.reduction = ignore_index, reduction

    def forward(self, input: Tensor, target: Any) -> Tensor:  # noqa: A002 (PyTorch's name)
        return F.nll_loss(
            input,
            target,
            self.weight,
            self.size_average,
            self.ignore_index,
            self.reduce,
            self.reduction,
        )


class MSELoss(Module):
    """``F.mse_loss(input, target, reduction=...)``.

    >>> MSELoss()(rg.tensor([1.0, 3.0]), rg.tensor([0.0, 0.0])).item()
    5.0
    """

    def __init__(
        self, size_average: bool | None = None, reduce: bool | None = None, reduction: str = "mean"
    ):
        super().__init__()
        self.size_average, self.reduce, self.reduction = size_average, reduce, reduction

    def forward(self, input: Tensor, target: Any) -> Tensor:  # noqa: A002 (PyTorch's name)
        return F.mse_loss(input, target, self.size_average, self.reduce, self.reduction)
