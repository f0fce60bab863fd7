"""Loss modules over their functional forms, with PyTorch's constructor arguments:
``CrossEntropyLoss``, ``NLLLoss``, ``MSELoss``, ``BCELoss``, ``BCEWithLogitsLoss``, ``L1Loss``,
``SmoothL1Loss``, ``HuberLoss``, ``KLDivLoss``."""

from __future__ import annotations

from typing import Any

from ...tensor import Tensor
from .. import functional as F  # noqa: N812  (PyTorch's idiom)
from .module import Module

__all__ = [
    "BCELoss",
    "BCEWithLogitsLoss",
    "CrossEntropyLoss",
    "HuberLoss",
    "KLDivLoss",
    "L1Loss",
    "MSELoss",
    "NLLLoss",
    "SmoothL1Loss",
]


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


class _Loss(Module):
    """``reduction`` (or PyTorch's deprecated ``size_average``/``reduce``), kept as torch's
    ``_Loss`` keeps it."""

    def __init__(self, size_average: bool | None = None, reduce: bool | None = None,
                 reduction: str = "mean"):  # fmt: skip
        super().__init__()
        self.size_average, self.reduce, self.reduction = size_average, reduce, reduction


class BCELoss(_Loss):
    """``F.binary_cross_entropy(input, target, weight, reduction=...)``.

    >>> round(BCELoss()(rg.tensor([0.5]), rg.tensor([1.0])).item(), 6)
    0.693147
    """

    def __init__(self, weight: Tensor | None = None, size_average: bool | None = None,
                 reduce: bool | None = None, reduction: str = "mean"):  # fmt: skip
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)

    def forward(self, input: Tensor, target: Any) -> Tensor:  # noqa: A002 (PyTorch's name)
        return F.binary_cross_entropy(
            input, target, self.weight, self.size_average, self.reduce, self.reduction
        )


class BCEWithLogitsLoss(_Loss):
    """``F.binary_cross_entropy_with_logits(input, target, weight, pos_weight=...)``."""

    def __init__(self, weight: Tensor | None = None, size_average: bool | None = None,
                 reduce: bool | None = None, reduction: str = "mean",
                 pos_weight: Tensor | None = None):  # fmt: skip
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)
        self.register_buffer("pos_weight", pos_weight)

    def forward(self, input: Tensor, target: Any) -> Tensor:  # noqa: A002 (PyTorch's name)
        return F.binary_cross_entropy_with_logits(
            input, target, self.weight, self.size_average, self.reduce, self.reduction,
            self.pos_weight,
        )  # fmt: skip


class L1Loss(_Loss):
    """``F.l1_loss``: mean absolute error."""

    def forward(self, input: Tensor, target: Any) -> Tensor:  # noqa: A002 (PyTorch's name)
        return F.l1_loss(input, target, self.size_average, self.reduce, self.reduction)


class SmoothL1Loss(_Loss):
    def __init__(self, size_average: bool | None = None, reduce: bool | None = None,
                 reduction: str = "mean", beta: float = 1.0):  # fmt: skip
        super().__init__(size_average, reduce, reduction)
        self.beta = beta

    def forward(self, input: Tensor, target: Any) -> Tensor:  # noqa: A002 (PyTorch's name)
        return F.smooth_l1_loss(
            input, target, self.size_average, self.reduce, self.reduction, self.beta
        )


class HuberLoss(_Loss):
    def __init__(self, reduction: str = "mean", delta: float = 1.0):
        super().__init__(reduction=reduction)
        self.delta = delta

    def forward(self, input: Tensor, target: Any) -> Tensor:  # noqa: A002 (PyTorch's name)
        return F.huber_loss(input, target, self.reduction, self.delta)


class KLDivLoss(_Loss):
    def __init__(self, size_average: bool | None = None, reduce: bool | None = None,
                 reduction: str = "mean", log_target: bool = False):  # fmt: skip
        super().__init__(size_average, reduce, reduction)
        self.log_target = log_target

    def forward(self, input: Tensor, target: Any) -> Tensor:  # noqa: A002 (PyTorch's name)
        return F.kl_div(
            input, target, self.size_average, self.reduce, self.reduction, self.log_target
        )
