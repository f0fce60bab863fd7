"""torch's ``torch.optim.swa_utils``: a running average of a model's weights (stochastic
weight averaging, or the exponential moving average modern training scripts keep), the
``SWALR`` schedule that anneals to a constant learning rate, and ``update_bn`` that recomputes
batch norm's running statistics for the averaged weights.

:class:`AveragedModel` holds a deep copy of the model; each ``update_parameters(model)``
writes the new averages into the copy's parameters in place (the objects stay, as after an
optimizer step), outside the graph::

    ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.999))
    for x, y in loader:
        optimizer.step(loss_fn(model(x), y).backward())
        ema.update_parameters(model)
    update_bn(loader, ema)
"""

from __future__ import annotations

import copy
import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from ..autodiff.grad_mode import no_grad
from ..errors import DTypeError, InvalidArgumentError, ShapeError, shape_text
from ..nn.modules.module import Module
from ..nn.modules.norm import _BatchNorm
from ..tensor import Tensor, tensor
from ..tensor.inplace import assign
from .schedules import LRScheduler

__all__ = [
    "SWALR",
    "AveragedModel",
    "get_ema_avg_fn",
    "get_ema_multi_avg_fn",
    "get_swa_avg_fn",
    "get_swa_multi_avg_fn",
    "update_bn",
]

AvgFn = Callable[[Tensor, Tensor, Any], Tensor]
MultiAvgFn = Callable[[Sequence[Tensor], Sequence[Tensor], Any], None]


def _count(num_averaged: Any) -> int:
    return int(num_averaged.item()) if isinstance(num_averaged, Tensor) else int(num_averaged)


def _check_decay(op: str, decay: float) -> None:
    if not 0.0 <= decay <= 1.0:
        raise InvalidArgumentError(
            f"{op}: invalid decay value {decay} provided; please provide a value in [0,1] range"
        )


def get_ema_multi_avg_fn(decay: float = 0.999) -> MultiAvgFn:
    """The update ``W_ema <- decay W_ema + (1 - decay) W_model`` of a list of averaged
    tensors, in place (torch's ``_foreach_lerp_`` with weight ``1 - decay``)."""
    _check_decay("get_ema_multi_avg_fn", decay)

    def ema_update(
        ema_param_list: Sequence[Tensor], current_param_list: Sequence[Tensor], _: Any
    ) -> None:
        with no_grad():
            for ema, current in zip(ema_param_list, current_param_list, strict=True):
                if ema.dtype.startswith("float"):
                    new = ema + (current - ema) * (1.0 - decay)
                else:  # int buffers: torch's float result written back (truncated)
                    new = ema * decay + current * (1.0 - decay)
                assign(ema, new, "ema_update")

    return ema_update


def get_swa_multi_avg_fn() -> MultiAvgFn:
    """The equal-weight average of a list of averaged tensors with the model's, in place:
    ``W_avg <- W_avg + (W_model - W_avg) / (n + 1)``."""

    def swa_update(
        averaged_param_list: Sequence[Tensor],
        current_param_list: Sequence[Tensor],
        num_averaged: Any,
    ) -> None:
        weight = 1.0 / (_count(num_averaged) + 1)
        with no_grad():
            for averaged, current in zip(averaged_param_list, current_param_list, strict=True):
                assign(averaged, averaged + (current - averaged) * weight, "swa_update")

    return swa_update


def get_ema_avg_fn(decay: float = 0.999) -> AvgFn:
    """``(W_ema, W_model, n) -> decay W_ema + (1 - decay) W_model``, one tensor at a time."""
    _check_decay("get_ema_avg_fn", decay)

    def ema_update(ema_param: Tensor, current_param: Tensor, num_averaged: Any) -> Tensor:
        with no_grad():
            return ema_param * decay + current_param * (1.0 - decay)

    return ema_update


def get_swa_avg_fn() -> AvgFn:
    """``(W_avg, W_model, n) -> W_avg + (W_model - W_avg) / (n + 1)``, one tensor at a
    time."""

    def swa_update(averaged_param: Tensor, current_param: Tensor, num_averaged: Any) -> Tensor:
        with no_grad():
            return averaged_param + (current_param - averaged_param) / (_count(num_averaged) + 1)

    return swa_update


class AveragedModel(Module):
    """A running average of ``model``'s parameters (and buffers, with ``use_buffers=True``)
    in a deep copy of it, ``self.module``, which ``forward`` calls.

    ``avg_fn(averaged, current, n_averaged)`` returns one tensor's new average;
    ``multi_avg_fn(averaged_list, current_list, n_averaged)`` updates a list in place (the
    averaged model's own tensors, under ``no_grad``); neither: the equal-weight (SWA) average.
    The first update copies the model's values; ``n_averaged`` (a buffer, in the state dict)
    counts the updates. Without ``use_buffers`` the buffers are copied from ``model`` at each
    update, as torch's.
    """

    def __init__(
        self,
        model: Module,
        device: Any = None,
        avg_fn: AvgFn | None = None,
        multi_avg_fn: MultiAvgFn | None = None,
        use_buffers: bool = False,
    ):
        super().__init__()
        if avg_fn is not None and multi_avg_fn is not None:
            raise InvalidArgumentError(
                "AveragedModel: only one of avg_fn and multi_avg_fn should be provided"
            )
        if not isinstance(model, Module):
            raise InvalidArgumentError(
                f"AveragedModel: expected an nn.Module, got {type(model).__name__}"
            )
        self.module = copy.deepcopy(model)
        if device is not None:
            self.module = self.module.to(device)
        first = next(itertools.chain(self.module.parameters(), self.module.buffers()), None)
        self.register_buffer(
            "n_averaged",
            tensor(
                np.array(0, dtype=np.int64),
                backend=None if first is None else first.backend,
                device=device if first is None else first.device,
            ),
        )
        self.avg_fn = avg_fn
        self.multi_avg_fn = multi_avg_fn
        self.use_buffers = use_buffers

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.module(*args, **kwargs)

    def _pairs(self, model: Module) -> list[tuple[Tensor, Tensor]]:
        if not isinstance(model, Module):
            raise DTypeError(
                f"AveragedModel.update_parameters: expected an nn.Module, got "
                f"{type(model).__name__}"
            )
        if self.use_buffers:
            mine = itertools.chain(self.module.parameters(), self.module.buffers())
            theirs = itertools.chain(model.parameters(), model.buffers())
        else:
            mine, theirs = self.module.parameters(), model.parameters()
        # torch zips without strict here: a model with more tensors updates the first ones
        pairs = [
            (averaged, current.detach().to(averaged.device))
            for averaged, current in zip(mine, theirs)
        ]
        for averaged, current in pairs:  # before any write: a model of another shape changes
            if averaged.shape != current.shape:  # nothing (not the first tensors only)
                raise ShapeError(
                    f"AveragedModel.update_parameters: the averaged model has a tensor of shape "
                    f"{shape_text(averaged.shape)} where the model given has "
                    f"{shape_text(current.shape)}"
                )
        return pairs

    def update_parameters(self, model: Module) -> None:
        """Average ``model``'s current values into the copy's (copy them, the first time)."""
        pairs = self._pairs(model)
        count = self.n_averaged
        with no_grad():
            if _count(count) == 0:
                for averaged, current in pairs:
                    assign(averaged, current, "AveragedModel.update_parameters")
            elif self.avg_fn is not None:
                for averaged, current in pairs:
                    new = self.avg_fn(averaged, current, count)
                    assign(averaged, new, "AveragedModel.update_parameters")
            else:
                multi = self.multi_avg_fn
                if multi is None:
                    # torch's CPU path: one tensor at a time (int buffers: true division,
                    # written back truncated)
                    single = get_swa_avg_fn()
                    for averaged, current in pairs:
                        new = single(averaged, current, count)
                        assign(averaged, new, "AveragedModel.update_parameters")
                else:
                    # as torch's, one call per (device, dtype) group
                    groups: dict[tuple[Any, str], list[tuple[Tensor, Tensor]]] = {}
                    for averaged, current in pairs:
                        key = (averaged.device, averaged.dtype)
                        groups.setdefault(key, []).append((averaged, current))
                    for group in groups.values():
                        multi([a for a, _ in group], [c for _, c in group], count)
            if not self.use_buffers:
                for mine, theirs in zip(self.module.buffers(), model.buffers(), strict=True):
                    assign(mine, theirs.detach(), "AveragedModel.update_parameters")
            assign(count, count + 1, "AveragedModel.update_parameters")


def update_bn(loader: Iterable[Any], model: Module, device: Any = None) -> None:
    """Recompute the running statistics of ``model``'s batch norm layers over one pass of
    ``loader`` (batches: tensors, or lists/tuples whose first item is the input): each layer's
    statistics are reset and accumulated as a cumulative average (``momentum=None``), its
    momentum restored after; the model's training mode too."""
    momenta = {}
    for module in model.modules():
        if isinstance(module, _BatchNorm):
            module.reset_running_stats()
            momenta[module] = module.momentum
    if not momenta:
        return
    was_training = model.training
    model.train()
    for module in momenta:
        module.momentum = None
    try:
        with no_grad():
            for batch in loader:
                if isinstance(batch, list | tuple):
                    batch = batch[0]
                if device is not None:
                    batch = batch.to(device)
                model(batch)
    finally:
        for module, momentum in momenta.items():
            module.momentum = momentum
        model.train(was_training)


def _cosine_anneal(t: float) -> float:
    return (1 - math.cos(math.pi * t)) / 2


def _linear_anneal(t: float) -> float:
    return t


class SWALR(LRScheduler):
    """Anneal each group's learning rate to ``swa_lr`` (a float, or one per group) over
    ``anneal_epochs`` steps, cosine (``"cos"``) or linear, then hold it, as torch's.

    As torch's, each step starts from the group's current learning rate (another schedule
    may have moved it): the rate the annealing started from is recovered from it, then moved
    one step on.

    >>> from retrograd import nn, optim
    >>> schedule = SWALR(optim.SGD(nn.Linear(1, 1), lr=1.0), swa_lr=0.5, anneal_epochs=2,
    ...                  anneal_strategy="linear")
    >>> [schedule.step() for _ in range(3)]
    [0.75, 0.5, 0.5]
    """

    def __init__(
        self,
        optimizer: Any,
        swa_lr: float | Sequence[float],
        anneal_epochs: int = 10,
        anneal_strategy: str = "cos",
        last_epoch: int = -1,
    ):
        groups = optimizer.param_groups
        if isinstance(swa_lr, list | tuple):
            if len(swa_lr) != len(groups):
                raise InvalidArgumentError(
                    f"SWALR: expected {len(groups)} values for swa_lr, got {len(swa_lr)}"
                )
            swa_lrs = list(swa_lr)
        else:
            swa_lrs = [swa_lr] * len(groups)
        for value, group in zip(swa_lrs, groups):
            group["swa_lr"] = value
        if anneal_strategy not in ("cos", "linear"):
            raise InvalidArgumentError(
                "SWALR: anneal_strategy must be one of 'cos' or 'linear', instead got "
                f"{anneal_strategy!r}"
            )
        if isinstance(anneal_epochs, bool) or not isinstance(anneal_epochs, int):
            raise InvalidArgumentError(
                f"SWALR: anneal_epochs must be an int, got {type(anneal_epochs).__name__}"
            )
        if anneal_epochs < 0:
            raise InvalidArgumentError(
                f"SWALR: anneal_epochs must be equal or greater than 0, got {anneal_epochs}"
            )
        self.anneal_epochs = anneal_epochs
        self._anneal_strategy = anneal_strategy
        # torch counts SWALR's steps from its construction, whatever ``last_epoch`` says
        self._first_epoch = last_epoch + 1
        super().__init__(optimizer, last_epoch)

    def _alpha(self, step: int) -> float:
        t = max(0.0, min(1.0, step / max(1, self.anneal_epochs)))
        return _cosine_anneal(t) if self._anneal_strategy == "cos" else _linear_anneal(t)

    def _step(self, epoch: int) -> int:
        step = epoch - self._first_epoch
        return max(1, step) if self.anneal_epochs == 0 else step

    def lr_at(self, epoch: int, base_lr: float | None = None) -> float:
        """The closed form, for a group left to this schedule from ``base_lr``."""
        base = self.base_lr if base_lr is None else base_lr
        alpha = self._alpha(self._step(epoch))
        return self.optimizer.param_groups[0]["swa_lr"] * alpha + base * (1 - alpha)

    def chained_lr(self, epoch: int, index: int, current: float) -> float:
        step = self._step(epoch)
        swa_lr = self.optimizer.param_groups[index]["swa_lr"]
        previous = self._alpha(step - 1)
        start = swa_lr if previous == 1 else (current - previous * swa_lr) / (1 - previous)
        alpha = self._alpha(step)
        return swa_lr * alpha + start * (1 - alpha)

    def _apply(self, epoch: int) -> None:
        for index, group in enumerate(self.optimizer.param_groups):
            group["lr"] = self.chained_lr(epoch, index, group["lr"])
