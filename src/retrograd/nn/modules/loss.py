"""Loss modules over their functional forms, with PyTorch's constructor arguments:
``CrossEntropyLoss``, ``NLLLoss``, ``MSELoss``, ``BCELoss``, ``BCEWithLogitsLoss``, ``L1Loss``,
``SmoothL1Loss``, ``HuberLoss``, ``KLDivLoss``, the margin, ranking and embedding losses
(``TripletMarginLoss``, ``MarginRankingLoss``, ``HingeEmbeddingLoss``, ``CosineEmbeddingLoss``,
``MultiMarginLoss``...), ``PoissonNLLLoss`` and ``GaussianNLLLoss``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...errors import DTypeError, InvalidArgumentError
from ...tensor import Tensor
from .. import functional as F  # noqa: N812  (PyTorch's idiom)
from ..functional.loss import _reduction
from .distance import PairwiseDistance
from .module import Module

__all__ = [
    "BCELoss",
    "BCEWithLogitsLoss",
    "CTCLoss",
    "CosineEmbeddingLoss",
    "CrossEntropyLoss",
    "GaussianNLLLoss",
    "HingeEmbeddingLoss",
    "HuberLoss",
    "KLDivLoss",
    "L1Loss",
    "MSELoss",
    "MarginRankingLoss",
    "MultiLabelMarginLoss",
    "MultiLabelSoftMarginLoss",
    "MultiMarginLoss",
    "NLLLoss",
    "NLLLoss2d",
    "PoissonNLLLoss",
    "SmoothL1Loss",
    "SoftMarginLoss",
    "TripletMarginLoss",
    "TripletMarginWithDistanceLoss",
]


def _read_once(module: Module, size_average: Any, reduce: Any, reduction: str) -> None:
    """Set ``module.reduction`` as torch's ``_Loss.__init__`` does: the deprecated
    ``size_average``/``reduce`` are read once, into ``reduction`` (``size_average=False`` is
    ``"sum"``, ``reduce=False`` is ``"none"``), and are not consulted again, so
    ``module.reduction`` says what the module computes and a later ``module.reduction = ...``
    is what counts."""
    if size_average is not None or reduce is not None:
        reduction = _reduction(type(module).__name__, reduction, size_average, reduce)
    module.size_average = module.reduce = None  # read: the forward passes reduction alone
    module.reduction = reduction


class _Loss(Module):
    """``reduction`` (or PyTorch's deprecated ``size_average``/``reduce``, read into it), kept
    as torch's ``_Loss`` keeps it: the base of the losses, and of custom ones."""

    def __init__(self, size_average: bool | None = None, reduce: bool | None = None,
                 reduction: str = "mean"):  # fmt: skip
        super().__init__()
        _read_once(self, size_average, reduce, reduction)


class _WeightedLoss(_Loss):
    """A :class:`_Loss` with per-class ``weight`` (a buffer, ``None`` without), as torch's
    ``_WeightedLoss``."""

    def __init__(self, weight: Tensor | None = None, size_average: bool | None = None,
                 reduce: bool | None = None, reduction: str = "mean"):  # fmt: skip
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)


class CrossEntropyLoss(_WeightedLoss):
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
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index = ignore_index
        self.label_smoothing = label_smoothing

    def forward(self, input: Tensor, target: Any) -> Tensor:
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


class NLLLoss(_WeightedLoss):
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
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index = ignore_index

    def forward(self, input: Tensor, target: Any) -> Tensor:
        return F.nll_loss(
            input,
            target,
            self.weight,
            self.size_average,
            self.ignore_index,
            self.reduce,
            self.reduction,
        )


class MSELoss(_Loss):
    """``F.mse_loss(input, target, reduction=...)``.

    >>> MSELoss()(rg.tensor([1.0, 3.0]), rg.tensor([0.0, 0.0])).item()
    5.0
    """

    def forward(self, input: Tensor, target: Any) -> Tensor:
        return F.mse_loss(input, target, self.size_average, self.reduce, self.reduction)


class BCELoss(_WeightedLoss):
    """``F.binary_cross_entropy(input, target, weight, reduction=...)``.

    >>> round(BCELoss()(rg.tensor([0.5]), rg.tensor([1.0])).item(), 6)
    0.693147
    """

    def forward(self, input: Tensor, target: Any) -> Tensor:
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

    def forward(self, input: Tensor, target: Any) -> Tensor:
        return F.binary_cross_entropy_with_logits(
            input, target, self.weight, self.size_average, self.reduce, self.reduction,
            self.pos_weight,
        )  # fmt: skip


class L1Loss(_Loss):
    """``F.l1_loss``: mean absolute error."""

    def forward(self, input: Tensor, target: Any) -> Tensor:
        return F.l1_loss(input, target, self.size_average, self.reduce, self.reduction)


class SmoothL1Loss(_Loss):
    def __init__(self, size_average: bool | None = None, reduce: bool | None = None,
                 reduction: str = "mean", beta: float = 1.0):  # fmt: skip
        super().__init__(size_average, reduce, reduction)
        self.beta = beta

    def forward(self, input: Tensor, target: Any) -> Tensor:
        return F.smooth_l1_loss(
            input, target, self.size_average, self.reduce, self.reduction, self.beta
        )


class HuberLoss(_Loss):
    def __init__(self, reduction: str = "mean", delta: float = 1.0):
        if not isinstance(delta, (float, int)):  # torch's constructor checks it
            raise DTypeError(f"HuberLoss: delta must be a float or int, got {delta!r}")
        super().__init__(reduction=reduction)
        self.delta = delta

    def forward(self, input: Tensor, target: Any) -> Tensor:
        return F.huber_loss(input, target, self.reduction, self.delta)


class KLDivLoss(_Loss):
    def __init__(self, size_average: bool | None = None, reduce: bool | None = None,
                 reduction: str = "mean", log_target: bool = False):  # fmt: skip
        super().__init__(size_average, reduce, reduction)
        self.log_target = log_target

    def forward(self, input: Tensor, target: Any) -> Tensor:
        return F.kl_div(
            input, target, self.size_average, self.reduce, self.reduction, self.log_target
        )


class NLLLoss2d(NLLLoss):
    """torch's deprecated name for :class:`NLLLoss` over ``[N, C, H, W]`` inputs."""


class _MarginLoss(_Loss):
    """A loss with a ``margin``, its functional form called as
    ``fn(*inputs, margin, size_average, reduce, reduction)``."""

    _fn: Any = None

    def __init__(self, margin: float = 0.0, size_average: bool | None = None,
                 reduce: bool | None = None, reduction: str = "mean"):  # fmt: skip
        super().__init__(size_average, reduce, reduction)
        self.margin = margin

    def forward(self, *inputs: Any) -> Tensor:
        return type(self)._fn(*inputs, self.margin, self.size_average, self.reduce,
                              self.reduction)  # fmt: skip


class MarginRankingLoss(_MarginLoss):
    """``F.margin_ranking_loss(input1, input2, target, margin)``."""

    _fn = staticmethod(F.margin_ranking_loss)

    def forward(self, input1: Tensor, input2: Tensor, target: Any) -> Tensor:
        """torch's parameter names (``loss(a, b, target=torch.ones(n))``)."""
        return super().forward(input1, input2, target)


class CosineEmbeddingLoss(_MarginLoss):
    """``F.cosine_embedding_loss(input1, input2, target, margin)``."""

    _fn = staticmethod(F.cosine_embedding_loss)

    def forward(self, input1: Tensor, input2: Tensor, target: Any) -> Tensor:
        """torch's parameter names (``loss(a, b, target=torch.ones(n))``)."""
        return super().forward(input1, input2, target)


class HingeEmbeddingLoss(_MarginLoss):
    """``F.hinge_embedding_loss(input, target, margin)`` (margin 1 by default)."""

    _fn = staticmethod(F.hinge_embedding_loss)

    def forward(self, input: Tensor, target: Any) -> Tensor:
        return super().forward(input, target)

    def __init__(self, margin: float = 1.0, size_average: bool | None = None,
                 reduce: bool | None = None, reduction: str = "mean"):  # fmt: skip
        super().__init__(margin, size_average, reduce, reduction)


class SoftMarginLoss(_Loss):
    """``F.soft_margin_loss``: the logistic loss of targets 1 and -1."""

    def forward(self, input: Tensor, target: Any) -> Tensor:
        return F.soft_margin_loss(input, target, self.size_average, self.reduce, self.reduction)


class MultiLabelMarginLoss(_Loss):
    """``F.multilabel_margin_loss``: int64 class targets, ended by -1."""

    def forward(self, input: Tensor, target: Any) -> Tensor:
        return F.multilabel_margin_loss(
            input, target, self.size_average, self.reduce, self.reduction
        )


class MultiLabelSoftMarginLoss(_WeightedLoss):
    """``F.multilabel_soft_margin_loss(input, target, weight)``; ``weight`` is a buffer."""

    def forward(self, input: Tensor, target: Any) -> Tensor:
        return F.multilabel_soft_margin_loss(
            input, target, self.weight, self.size_average, self.reduce, self.reduction
        )


class MultiMarginLoss(_WeightedLoss):
    """``F.multi_margin_loss(input, target, p, margin, weight)``; ``weight`` is a buffer."""

    def __init__(self, p: int = 1, margin: float = 1.0, weight: Tensor | None = None,
                 size_average: bool | None = None, reduce: bool | None = None,
                 reduction: str = "mean"):  # fmt: skip
        if p not in (1, 2):
            raise InvalidArgumentError(
                f"MultiMarginLoss: only p == 1 and p == 2 supported, got {p!r}"
            )
        super().__init__(weight, size_average, reduce, reduction)
        self.p, self.margin = p, margin

    def forward(self, input: Tensor, target: Any) -> Tensor:
        return F.multi_margin_loss(
            input, target, self.p, self.margin, self.weight, self.size_average, self.reduce,
            self.reduction,
        )  # fmt: skip


class TripletMarginLoss(_Loss):
    """``F.triplet_margin_loss(anchor, positive, negative, margin, p, eps, swap)``.

    >>> a, b = rg.tensor([[0.0, 0.0]]), rg.tensor([[3.0, 4.0]])
    >>> round(TripletMarginLoss(margin=6.0, eps=0.0)(a, a, b).item(), 6)
    1.0
    """

    def __init__(self, margin: float = 1.0, p: float = 2.0, eps: float = 1e-6,
                 swap: bool = False, size_average: bool | None = None,
                 reduce: bool | None = None, reduction: str = "mean"):  # fmt: skip
        super().__init__(size_average, reduce, reduction)
        if margin <= 0:
            raise InvalidArgumentError(
                f"TripletMarginLoss: expected margin to be greater than 0, got {margin}"
            )
        self.margin, self.p, self.eps, self.swap = margin, p, eps, swap

    def forward(self, anchor: Tensor, positive: Tensor, negative: Tensor) -> Tensor:
        return F.triplet_margin_loss(
            anchor, positive, negative, self.margin, self.p, self.eps, self.swap,
            self.size_average, self.reduce, self.reduction,
        )  # fmt: skip


class TripletMarginWithDistanceLoss(_Loss):
    """``F.triplet_margin_with_distance_loss`` with any ``distance_function``; by default a
    ``PairwiseDistance()`` held as a child module, as torch's (its repr and ``modules()``
    show it)."""

    def __init__(self, *, distance_function: Callable[[Tensor, Tensor], Tensor] | None = None,
                 margin: float = 1.0, swap: bool = False, reduction: str = "mean"):  # fmt: skip
        super().__init__(reduction=reduction)
        if margin <= 0:
            raise InvalidArgumentError(
                f"TripletMarginWithDistanceLoss: expected margin to be greater than 0, got {margin}"
            )
        if distance_function is None:
            distance_function = PairwiseDistance()
        self.distance_function, self.margin, self.swap = distance_function, margin, swap

    def forward(self, anchor: Tensor, positive: Tensor, negative: Tensor) -> Tensor:
        return F.triplet_margin_with_distance_loss(
            anchor, positive, negative, distance_function=self.distance_function,
            margin=self.margin, swap=self.swap, reduction=self.reduction,
        )  # fmt: skip


class PoissonNLLLoss(_Loss):
    """``F.poisson_nll_loss(input, target, log_input, full, eps=eps)``."""

    def __init__(self, log_input: bool = True, full: bool = False,
                 size_average: bool | None = None, eps: float = 1e-8,
                 reduce: bool | None = None, reduction: str = "mean"):  # fmt: skip
        super().__init__(size_average, reduce, reduction)
        self.log_input, self.full, self.eps = log_input, full, eps

    def forward(self, log_input: Tensor, target: Any) -> Tensor:
        return F.poisson_nll_loss(
            log_input, target, self.log_input, self.full, self.size_average, self.eps,
            self.reduce, self.reduction,
        )  # fmt: skip


class GaussianNLLLoss(_Loss):
    """``F.gaussian_nll_loss(input, target, var, full, eps)``."""

    def __init__(self, *, full: bool = False, eps: float = 1e-6, reduction: str = "mean"):
        super().__init__(reduction=reduction)
        self.full, self.eps = full, eps

    def forward(self, input: Tensor, target: Any, var: Any) -> Tensor:
        return F.gaussian_nll_loss(input, target, var, self.full, self.eps, self.reduction)


class CTCLoss(_Loss):
    """``F.ctc_loss(log_probs, targets, input_lengths, target_lengths, blank, reduction,
    zero_infinity)``."""

    def __init__(self, blank: int = 0, reduction: str = "mean", zero_infinity: bool = False):
        super().__init__(reduction=reduction)
        self.blank, self.zero_infinity = blank, zero_infinity

    def forward(self, log_probs: Tensor, targets: Any, input_lengths: Any,
                target_lengths: Any) -> Tensor:  # fmt: skip
        return F.ctc_loss(
            log_probs, targets, input_lengths, target_lengths, self.blank, self.reduction,
            self.zero_infinity,
        )  # fmt: skip
